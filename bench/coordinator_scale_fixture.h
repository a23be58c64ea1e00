// What the benchmarks of coordinator_scale_bench share (coordinator_scale_bench.cc,
// coordinator_scale_grpc_bench.cc): the job at the scale of issue 40, its 11,000 nodes as
// in-process fakes, a coordinator service with every node joined, and the clocks they read.
#ifndef ECPS_BENCH_COORDINATOR_SCALE_FIXTURE_H_
#define ECPS_BENCH_COORDINATOR_SCALE_FIXTURE_H_

#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "coordinator/coordinator_main.h"
#include "coordinator/coordinator_process.h"
#include "coordinator/coordinator_service.h"
#include "coordinator/state_log.h"
#include "proto/coordinator_state.pb.h"
#include "proto/ecps.pb.h"
#include "runtime/clock.h"
#include "runtime/rpc.h"
#include "runtime/security.h"
#include "runtime/spec.h"

namespace ecps {
namespace scale_bench {

constexpr int kServers = 1000;
constexpr int kWorkers = 10000;
constexpr char kSecret[] = "scale-bench-secret";

// The job: erasure coded (k = 4, r = 2) over 26 tables of a million rows, the spec's default
// heartbeat interval (200 ms) and timeout (1.5 s).
inline JobSpec ScaleSpec() {
  JobSpec spec;
  spec.job.name = "scale";
  spec.job.steps = 100'000'000;
  spec.cluster.servers = kServers;
  spec.cluster.workers = kWorkers;
  spec.fault_tolerance.mode = FaultToleranceMode::kErasureCode;
  spec.fault_tolerance.k = 4;
  spec.fault_tolerance.r = 2;
  spec.model.table_rows.assign(static_cast<size_t>(spec.model.num_sparse), 1'000'000);
  spec.monitoring.metrics_port = -1;
  return spec;
}

inline absl::Duration Interval() {
  return absl::Milliseconds(ScaleSpec().cluster.heartbeat_interval_ms);
}

// The coordinator process's tick period (no --tick-ms).
inline absl::Duration TickPeriodOf(const JobSpec& spec) {
  CoordinatorOptions options;
  options.spec = spec;
  return TickPeriod(options);
}

inline std::string BenchDir(const std::string& what) {
  const char* base = std::getenv("ECPS_BENCH_DIR");
  return absl::StrCat(base != nullptr ? base : "/tmp", "/coordinator-scale-", what, "-", getpid());
}

inline double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

inline double ProcessCpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& tv) {
    return static_cast<double>(tv.tv_sec) + 1e-6 * static_cast<double>(tv.tv_usec);
  };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

inline double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// The 11,000 nodes: their registrations and heartbeats as real processes fill them (role
// tokens, instance "pid@host:start-ns", stats and progress in every heartbeat). Node i < kServers
// is server i, the rest are workers.
class FakeNodes {
 public:
  explicit FakeNodes(const Gatekeeper& gatekeeper) {
    beats_.reserve(kServers + kWorkers);
    for (int i = 0; i < kServers + kWorkers; ++i) beats_.push_back(Heartbeat(gatekeeper, i));
  }

  static int size() { return kServers + kWorkers; }
  static bool IsServer(int i) { return i < kServers; }
  static int IdOf(int i) { return IsServer(i) ? i : i - kServers; }
  static std::string Instance(int i) {
    return absl::StrCat(40'000 + i, "@node-", i / 8, ".ecps.cluster.local:1714000000",
                        123'456'789 + i);
  }
  static std::string Address(int i) {
    return absl::StrCat("10.", i / 65536, ".", (i / 256) % 256, ".", i % 256, ":", 7000);
  }

  static v1::RegisterRequest Registration(const Gatekeeper& gatekeeper, int i) {
    const Role role = IsServer(i) ? Role::kServer : Role::kWorker;
    v1::RegisterRequest request;
    FillHeader(request.mutable_header(), gatekeeper.token(role), 0, Sender(i));
    request.set_role(IsServer(i) ? v1::ROLE_SERVER : v1::ROLE_WORKER);
    request.set_address(Address(i));
    request.set_metrics_address(absl::StrCat(Address(i), "1"));
    request.set_requested_id(IdOf(i));
    request.set_instance(Instance(i));
    request.set_pid(40'000 + i);
    return request;
  }

  // Registers every node and has each heartbeat once (servers ACTIVE: the job runs).
  absl::Status Join(CoordinatorService& service, const Gatekeeper& gatekeeper) {
    for (int i = 0; i < size(); ++i) {
      v1::RegisterResponse response;
      absl::Status s = service.Register(Registration(gatekeeper, i), &response);
      if (!s.ok()) return s;
    }
    return BeatAll(service);
  }

  // One interval's progress: a worker trains 10 steps of 4,096 samples, a server's counters move.
  void Advance(int i) {
    v1::HeartbeatRequest& beat = beats_[static_cast<size_t>(i)];
    if (IsServer(i)) {
      v1::ServerStats* s = beat.mutable_server();
      s->set_pulls(s->pulls() + 40'000);
      s->set_pushes(s->pushes() + 40'000);
      s->set_delta_bytes_sent(s->delta_bytes_sent() + 2'000'000);
      s->set_delta_batches_sent(s->delta_batches_sent() + 50);
    } else {
      v1::WorkerProgress* p = beat.mutable_worker();
      p->set_step(p->step() + 10);
      p->set_samples(p->samples() + 40'960);
      p->set_reader_position(p->samples());
    }
  }

  const v1::HeartbeatRequest& beat(int i) const { return beats_[static_cast<size_t>(i)]; }

  // Every node's heartbeat once, advanced. OK when none was fenced.
  absl::Status BeatAll(CoordinatorService& service) {
    v1::HeartbeatResponse response;
    for (int i = 0; i < size(); ++i) {
      Advance(i);
      absl::Status s = service.Heartbeat(beat(i), &response);
      if (!s.ok()) return s;
      if (response.fenced()) return absl::InternalError(absl::StrCat("node ", i, " fenced"));
    }
    return absl::OkStatus();
  }

  static v1::HeartbeatRequest Heartbeat(const Gatekeeper& gatekeeper, int i) {
    const Role role = IsServer(i) ? Role::kServer : Role::kWorker;
    v1::HeartbeatRequest request;
    FillHeader(request.mutable_header(), gatekeeper.token(role), 1, Sender(i));
    request.set_role(IsServer(i) ? v1::ROLE_SERVER : v1::ROLE_WORKER);
    request.set_id(IdOf(i));
    request.set_instance(Instance(i));
    request.set_state(v1::NODE_ACTIVE);
    if (IsServer(i)) {
      v1::ServerStats* s = request.mutable_server();
      s->set_data_rows(26'000'000 / kServers);
      s->set_parity_rows(13'000'000 / kServers);
      s->set_bytes(int64_t{3} << 30);
      s->set_pulls(1'000'000'000);
      s->set_pushes(900'000'000);
      s->set_dense_tensors(2);
      s->set_unacked_deltas(17);
      s->set_delta_bytes_per_s(9.5e6);
      s->set_delta_bytes_sent(int64_t{50} << 30);
      s->set_delta_batches_sent(1'200'000);
    } else {
      v1::WorkerProgress* p = request.mutable_worker();
      p->set_step(100'000);
      p->set_samples(409'600'000);
      p->set_samples_per_s(204'800);
      p->set_loss(0.4467);
      p->set_eval_auc(0.7931);
      p->set_eval_logloss(0.4512);
      p->set_eval_step(99'000);
      p->set_reader_position(409'600'000);
      p->set_bad_lines(3);
      p->set_samples_age_s(0.012);
    }
    return request;
  }

 private:
  static std::string Sender(int i) {
    return absl::StrCat(IsServer(i) ? "server-" : "worker-", IdOf(i));
  }

  std::vector<v1::HeartbeatRequest> beats_;
};

// A coordinator service of ScaleSpec on `clock` with every node joined, a ServerDeadHandler that
// takes charge (the slot waits for a replacement) and, optionally, a StateLog's saver (set once
// every node joined).
struct ScaleCoordinator {
  std::unique_ptr<StateLog> log;  // before service: its saver writes into it
  std::unique_ptr<CoordinatorService> service;
  std::unique_ptr<FakeNodes> nodes;
  std::string dir;

  absl::Status Init(const Clock* clock, bool with_log, CoordinatorServiceOptions options = {}) {
    auto created = CoordinatorService::Create(ScaleSpec(), kSecret, clock, std::move(options));
    if (!created.ok()) return created.status();
    service = std::move(created).value();
    service->SetServerDeadHandler([](int) { return true; });
    nodes = std::make_unique<FakeNodes>(service->gatekeeper());
    absl::Status joined = nodes->Join(*service, service->gatekeeper());
    if (!joined.ok()) return joined;
    // The saver after the join: with it, each of the 11,000 registrations is a whole save
    // (BM_RegisterWithLog measures one).
    if (with_log) {
      dir = BenchDir("log");
      std::filesystem::remove_all(dir);
      auto opened = StateLog::Open(dir);
      if (!opened.ok()) return opened.status();
      log = std::move(opened).value();
      StateLog* state_log = log.get();
      absl::Status s = service->SetStateSaver([state_log](const v1::CoordinatorState& state) {
        return state_log->WriteSnapshot(state.SerializeAsString());
      });
      if (!s.ok()) return s;
    }
    if (service->phase() != v1::JOB_RUNNING) return absl::InternalError("the job is not running");
    return absl::OkStatus();
  }

  ~ScaleCoordinator() {
    if (service != nullptr) service->Shutdown();
    service.reset();
    log.reset();
    if (!dir.empty()) std::filesystem::remove_all(dir);
  }
};

#define SKIP_UNLESS_OK(expr)                              \
  if (absl::Status s_ = (expr); !s_.ok()) {               \
    state.SkipWithError(s_.ToString().c_str());           \
    return;                                               \
  }

// The child process of BM_GrpcHeartbeat is this binary with kClientFlag "ADDRESS,SECRET,
// CLIENTS,PER_CLIENT" (coordinator_scale_grpc_bench.cc).
inline constexpr char kClientFlag[] = "--scale_client=";
// Child: `clients` threads, each with its own channel, heartbeat as nodes c, c + clients, ...;
// prints "ready" after one heartbeat each (connections up), "done" after `per_client` each.
int RunClients(const std::string& address, const std::string& secret, int clients,
               int per_client);

}  // namespace scale_bench
}  // namespace ecps

#endif  // ECPS_BENCH_COORDINATOR_SCALE_FIXTURE_H_
