// coordinator_scale_bench: one coordinator at the scale of issue 40, 1,000 servers and 10,000
// workers, as in-process fakes that call the CoordinatorService directly (docs/recovery.md,
// "Scale"). Calling the service isolates its own CPU from the fakes'; the gRPC layer is
// measured apart, over a real server.
//
//   BM_HeartbeatRound      one heartbeat interval's work: every node's heartbeat once, then the
//                          ticks of one interval. CPU time of the calling thread per round;
//                          counters: us_per_heartbeat, cores (CPU per second of wall time at
//                          cluster.heartbeat_interval_ms). Arg 1: with the state log's saver
//                          (its once-a-second save of the progress included).
//   BM_HeartbeatPaced      the same nodes heartbeating in real time, every node once per
//                          interval from 4 driver threads, a tick thread at the coordinator's
//                          tick period, for 5 s; counter cores = CPU of those threads / wall
//                          (the drivers' own work is a field update per heartbeat), and
//                          heartbeats_per_s (kept up: 55,000).
//   BM_GrpcHeartbeat       what gRPC adds: the same cluster behind a real GrpcServer, heartbeats
//                          from 4 clients in a child process (so the process CPU measured is the
//                          server's alone); counters: us_per_heartbeat (server process CPU,
//                          handler and gRPC), grpc_us_per_heartbeat (less the handler's own cost
//                          measured here, over the same requests, by direct calls).
//   BM_GrpcIdle            a GrpcServer with the coordinator's polling threads and no traffic:
//                          CPU per wall second, and start_s (starting it). Arg 0: one thread per
//                          node (11,000); 1: ServingThreads (coordinator_process.h).
//   BM_ClusterMap          the cluster map at that size: GetClusterMap and its serialization;
//                          counter map_bytes.
//   BM_MapPublication/W    W watchers in WatchClusterMap (each serializes what it is sent, as
//                          gRPC's Write does): from a server's failure report (its process gone)
//                          to the last watcher holding the map of the new epoch. Counters:
//                          median, min and max latency in ms.
//   BM_RegisterWithLog     one registration at full size with the state log's saver (each is a
//                          whole save, fsynced, and a response holding the whole map).
//   BM_StateSave           one whole save of the CoordinatorState at that size through
//                          SetStateSaver. Arg 0: build and serialize only; 1: into a StateLog
//                          (WriteSnapshot, fsynced). Counter snapshot_bytes.
//   BM_Takeover            a coordinator process taking the job over from a StateLog holding
//                          that state (CoordinatorProcess::Create: open, load, parse, restore,
//                          save; then Start: serving) and every node's first heartbeat to it.
//                          Counters: ready_s, first_round_s (median of the iterations).
//
// Files go under ECPS_BENCH_DIR when set (the file system the job's state log will use), else
// /tmp. Run: build/bench/coordinator_scale_bench --benchmark_repetitions=5
#include <fcntl.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "benchmark/benchmark.h"
#include "runtime/clock.h"
#include "coordinator/coordinator_main.h"
#include "coordinator/coordinator_process.h"
#include "coordinator/coordinator_service.h"
#include "coordinator/grpc_coordinator.h"
#include "coordinator/state_log.h"
#include "grpcpp/grpcpp.h"
#include "proto/coordinator_state.pb.h"
#include "proto/ecps.grpc.pb.h"
#include "proto/ecps.pb.h"
#include "runtime/rpc.h"
#include "runtime/security.h"
#include "runtime/spec.h"
#include "spdlog/spdlog.h"

extern char** environ;

namespace ecps {
namespace {

constexpr int kServers = 1000;
constexpr int kWorkers = 10000;
constexpr char kSecret[] = "scale-bench-secret";

// The job: erasure coded (k = 4, r = 2) over 26 tables of a million rows, the spec's default
// heartbeat interval (200 ms) and timeout (1.5 s).
JobSpec ScaleSpec() {
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

absl::Duration Interval() { return absl::Milliseconds(ScaleSpec().cluster.heartbeat_interval_ms); }

// The coordinator process's tick period (no --tick-ms).
absl::Duration TickPeriodOf(const JobSpec& spec) {
  CoordinatorOptions options;
  options.spec = spec;
  return TickPeriod(options);
}

std::string BenchDir(const std::string& what) {
  const char* base = std::getenv("ECPS_BENCH_DIR");
  return absl::StrCat(base != nullptr ? base : "/tmp", "/coordinator-scale-", what, "-", getpid());
}

double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double ProcessCpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& tv) {
    return static_cast<double>(tv.tv_sec) + 1e-6 * static_cast<double>(tv.tv_usec);
  };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

double Median(std::vector<double> v) {
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

void BM_HeartbeatRound(benchmark::State& state) {
  RealClock clock;
  ScaleCoordinator c;
  SKIP_UNLESS_OK(c.Init(&clock, state.range(0) == 1));
  const uint64_t epoch = c.service->epoch();
  const int ticks = static_cast<int>(Interval() / TickPeriodOf(ScaleSpec()));
  const double cpu_start = ThreadCpuSeconds();
  for (auto _ : state) {
    SKIP_UNLESS_OK(c.nodes->BeatAll(*c.service));
    for (int t = 0; t < ticks; ++t) c.service->Tick();
  }
  const double cpu = ThreadCpuSeconds() - cpu_start;
  if (c.service->epoch() != epoch || c.service->phase() != v1::JOB_RUNNING) {
    state.SkipWithError("a node was declared dead: the rounds ran slower than the timeout");
  }
  const double rounds = static_cast<double>(state.iterations());
  state.counters["us_per_heartbeat"] = 1e6 * cpu / (rounds * FakeNodes::size());
  state.counters["cores"] = cpu / (rounds * absl::ToDoubleSeconds(Interval()));
}
BENCHMARK(BM_HeartbeatRound)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

void BM_HeartbeatPaced(benchmark::State& state) {
  RealClock clock;
  ScaleCoordinator c;
  SKIP_UNLESS_OK(c.Init(&clock, /*with_log=*/true));
  constexpr int kDrivers = 4;
  constexpr int kSlices = 20;  // each driver spreads its nodes over the interval in 20 slices
  const absl::Duration run = absl::Seconds(5);
  const absl::Duration interval = Interval();
  const absl::Duration tick = TickPeriodOf(ScaleSpec());
  const uint64_t epoch = c.service->epoch();
  for (auto _ : state) {
    std::atomic<int64_t> sent{0};
    std::atomic<bool> failed{false};
    absl::Mutex cpu_mu;
    double cpu = 0;
    const absl::Time start = absl::Now();
    const absl::Time end = start + run;
    std::vector<std::thread> threads;
    for (int d = 0; d < kDrivers; ++d) {
      threads.emplace_back([&, d] {
        const double cpu0 = ThreadCpuSeconds();
        v1::HeartbeatResponse response;
        for (int64_t slot = 0;; ++slot) {
          const absl::Time at = start + interval * slot / kSlices;
          if (at >= end) break;
          absl::SleepFor(at - absl::Now());
          const int slice = static_cast<int>(slot % kSlices);
          for (int i = d + kDrivers * slice; i < FakeNodes::size(); i += kDrivers * kSlices) {
            c.nodes->Advance(i);
            if (!c.service->Heartbeat(c.nodes->beat(i), &response).ok() || response.fenced()) {
              failed = true;
            }
            sent.fetch_add(1, std::memory_order_relaxed);
          }
        }
        absl::MutexLock lock(&cpu_mu);
        cpu += ThreadCpuSeconds() - cpu0;
      });
    }
    threads.emplace_back([&] {
      const double cpu0 = ThreadCpuSeconds();
      for (absl::Time at = start; at < end; at += tick) {
        absl::SleepFor(at - absl::Now());
        c.service->Tick();
      }
      absl::MutexLock lock(&cpu_mu);
      cpu += ThreadCpuSeconds() - cpu0;
    });
    for (std::thread& t : threads) t.join();
    const double wall = absl::ToDoubleSeconds(absl::Now() - start);
    if (failed || c.service->epoch() != epoch) {
      state.SkipWithError("a heartbeat failed or a node was declared dead");
      return;
    }
    state.SetIterationTime(wall);
    state.counters["cores"] = cpu / wall;
    state.counters["heartbeats_per_s"] = static_cast<double>(sent.load()) / wall;
  }
}
BENCHMARK(BM_HeartbeatPaced)->Iterations(1)->UseManualTime()->Unit(benchmark::kSecond);

// ---- gRPC: the child process's clients -----------------------------------------------------

constexpr char kClientFlag[] = "--scale_client=";
constexpr int kGrpcClients = 4;
constexpr int kGrpcBeatsPerClient = 5000;

// Child: `clients` threads, each with its own channel, heartbeat as nodes c, c + clients, ...;
// prints "ready" after one heartbeat each (connections up), "done" after `per_client` each.
int RunClients(const std::string& address, const std::string& secret, int clients,
               int per_client) {
  Gatekeeper gatekeeper(secret);
  std::vector<v1::HeartbeatRequest> beats;
  for (int i = 0; i < FakeNodes::size(); ++i) beats.push_back(FakeNodes::Heartbeat(gatekeeper, i));
  std::vector<std::unique_ptr<v1::Coordinator::Stub>> stubs;
  for (int c = 0; c < clients; ++c) {
    grpc::ChannelArguments args;
    args.SetInt("grpc.use_local_subchannel_pool", 1);  // a connection per client, as per node
    stubs.push_back(v1::Coordinator::NewStub(
        grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args)));
  }
  auto beat = [&](int c, int i) {
    grpc::ClientContext context;
    v1::HeartbeatResponse response;
    return stubs[static_cast<size_t>(c)]
        ->Heartbeat(&context, beats[static_cast<size_t>(i)], &response)
        .ok();
  };
  for (int c = 0; c < clients; ++c) {
    if (!beat(c, c)) return 2;
  }
  std::printf("ready\n");
  std::fflush(stdout);
  std::vector<std::thread> threads;
  std::atomic<bool> failed{false};
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      int i = c;
      for (int n = 0; n < per_client; ++n) {
        if (!beat(c, i)) failed = true;
        i = (i + clients) % FakeNodes::size();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  std::printf("done\n");
  std::fflush(stdout);
  return failed ? 3 : 0;
}

// Reads lines from `fd` until one equals `want`; false at EOF.
bool WaitForLine(int fd, const std::string& want) {
  std::string line;
  char ch;
  while (read(fd, &ch, 1) == 1) {
    if (ch != '\n') {
      line.push_back(ch);
      continue;
    }
    if (line == want) return true;
    line.clear();
  }
  return false;
}

void BM_GrpcHeartbeat(benchmark::State& state) {
  RealClock clock;
  ScaleCoordinator c;
  SKIP_UNLESS_OK(c.Init(&clock, /*with_log=*/false));
  // The handler's own CPU per heartbeat over the same mix of requests, by direct calls.
  const double direct0 = ThreadCpuSeconds();
  SKIP_UNLESS_OK(c.nodes->BeatAll(*c.service));
  const double direct = (ThreadCpuSeconds() - direct0) / FakeNodes::size();

  GrpcCoordinator glue(c.service.get());
  auto server = StartGrpcServer("127.0.0.1", 0, {glue.grpc_service()}, kGrpcClients);
  SKIP_UNLESS_OK(server.status());
  // The nodes' heartbeats every 200 ms keep the detector quiet while the clients run.
  for (auto _ : state) {
    int out[2];
    if (pipe(out) != 0) {
      state.SkipWithError("pipe");
      break;
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
    posix_spawn_file_actions_addclose(&actions, out[0]);
    std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
    std::string flag = absl::StrCat(kClientFlag, server->address, ",", kSecret, ",",
                                    kGrpcClients, ",", kGrpcBeatsPerClient);
    char* argv[] = {self.data(), flag.data(), nullptr};
    pid_t child = 0;
    const int spawned = posix_spawn(&child, self.c_str(), &actions, nullptr, argv, environ);
    posix_spawn_file_actions_destroy(&actions);
    close(out[1]);
    if (spawned != 0) {
      close(out[0]);
      state.SkipWithError("posix_spawn");
      break;
    }
    const bool ready = WaitForLine(out[0], "ready");
    const double cpu0 = ProcessCpuSeconds();
    const absl::Time t0 = absl::Now();
    const bool done = ready && WaitForLine(out[0], "done");
    const double cpu = ProcessCpuSeconds() - cpu0;
    const double wall = absl::ToDoubleSeconds(absl::Now() - t0);
    close(out[0]);
    int status = 0;
    waitpid(child, &status, 0);
    if (!done || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      state.SkipWithError("the client process failed");
      break;
    }
    const double beats = static_cast<double>(kGrpcClients) * kGrpcBeatsPerClient;
    state.SetIterationTime(wall);
    state.counters["us_per_heartbeat"] = 1e6 * cpu / beats;
    state.counters["handler_us_per_heartbeat"] = 1e6 * direct;
    state.counters["grpc_us_per_heartbeat"] = 1e6 * (cpu / beats - direct);
    state.counters["heartbeats_per_s"] = beats / wall;
  }
  c.service->Shutdown();
  server->server->Shutdown();
}
BENCHMARK(BM_GrpcHeartbeat)->Iterations(1)->UseManualTime()->Unit(benchmark::kSecond);

void BM_GrpcIdle(benchmark::State& state) {
  RealClock clock;
  auto created = CoordinatorService::Create(ScaleSpec(), kSecret, &clock);
  SKIP_UNLESS_OK(created.status());
  GrpcCoordinator glue(created->get());
  // The coordinator process's polling threads (Arg 1), or one per node as before (Arg 0).
  const int threads = state.range(0) == 1 ? ServingThreads(ScaleSpec()) : kServers + kWorkers;
  const absl::Time s0 = absl::Now();
  auto server = StartGrpcServer("127.0.0.1", 0, {glue.grpc_service()}, threads);
  SKIP_UNLESS_OK(server.status());
  const double start_s = absl::ToDoubleSeconds(absl::Now() - s0);
  absl::SleepFor(absl::Seconds(1));  // let it settle
  for (auto _ : state) {
    const double cpu0 = ProcessCpuSeconds();
    const absl::Time t0 = absl::Now();
    absl::SleepFor(absl::Seconds(3));
    const double wall = absl::ToDoubleSeconds(absl::Now() - t0);
    state.SetIterationTime(wall);
    state.counters["cores"] = (ProcessCpuSeconds() - cpu0) / wall;
  }
  state.counters["start_s"] = start_s;
  (*created)->Shutdown();
  server->server->Shutdown();
}
BENCHMARK(BM_GrpcIdle)->Arg(0)->Arg(1)->Iterations(1)->UseManualTime()->Unit(benchmark::kSecond);

void BM_ClusterMap(benchmark::State& state) {
  FakeClock clock;
  ScaleCoordinator c;
  SKIP_UNLESS_OK(c.Init(&clock, /*with_log=*/false));
  size_t bytes = 0;
  for (auto _ : state) {
    v1::ClusterMap map;
    c.service->GetClusterMap(&map);
    std::string wire = map.SerializeAsString();
    bytes = wire.size();
    benchmark::DoNotOptimize(wire);
  }
  state.counters["map_bytes"] = static_cast<double>(bytes);
}
BENCHMARK(BM_ClusterMap)->Unit(benchmark::kMillisecond);

void BM_MapPublication(benchmark::State& state) {
  FakeClock clock;  // still: nobody times out while the watchers start
  CoordinatorServiceOptions options;
  options.process_gone = [](const std::string&) { return true; };  // a killed process
  ScaleCoordinator c;
  SKIP_UNLESS_OK(c.Init(&clock, /*with_log=*/true, options));
  const int watchers = static_cast<int>(state.range(0));

  absl::Mutex mu;
  uint64_t want_epoch = 0;   // the epoch the current iteration waits for
  int have = 0;              // watchers holding it
  absl::Time last_received;  // when the last of them got it
  absl::CondVar received;
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  const v1::ClusterMap first = [&] {
    v1::ClusterMap map;
    c.service->GetClusterMap(&map);
    return map;
  }();
  for (int w = 0; w < watchers; ++w) {
    threads.emplace_back([&, w] {
      const int i = w % FakeNodes::size();
      v1::WatchClusterMapRequest request;
      FillHeader(request.mutable_header(),
                 c.service->gatekeeper().token(FakeNodes::IsServer(i) ? Role::kServer
                                                                      : Role::kWorker),
                 first.epoch(), absl::StrCat("node-", i));
      request.set_known_epoch(first.epoch());
      request.set_known_version(first.version());
      uint64_t held = 0;
      c.service
          ->WatchClusterMap(
              request, [&] { return stop.load(); },
              [&](const v1::ClusterMap& map) {
                std::string wire = map.SerializeAsString();  // what gRPC's Write does
                benchmark::DoNotOptimize(wire);
                const absl::Time now = absl::Now();
                absl::MutexLock lock(&mu);
                if (map.epoch() >= want_epoch && held < want_epoch) {
                  held = want_epoch;
                  ++have;
                  last_received = now;
                  received.Signal();
                }
                return true;
              })
          .IgnoreError();
    });
  }
  std::vector<double> latencies_ms;
  int server = 0;
  for (auto _ : state) {
    // Servers 0, 10, 20 ... : 9 healthy ones between two dead, so no stripe loses data.
    const int id = server;
    server += 10;
    v1::ReportFailureRequest report;
    FillHeader(report.mutable_header(), c.service->gatekeeper().token(Role::kWorker), 0,
               "worker-0");
    report.set_role(v1::ROLE_SERVER);
    report.set_id(id);
    report.set_reason("Pull: connection refused");
    {
      absl::MutexLock lock(&mu);
      want_epoch = c.service->epoch() + 1;
      have = 0;
    }
    const absl::Time t0 = absl::Now();
    v1::ReportFailureResponse response;
    SKIP_UNLESS_OK(c.service->ReportFailure(report, &response));
    if (c.service->epoch() < want_epoch) {
      state.SkipWithError("the server was not declared dead");
      break;
    }
    absl::MutexLock lock(&mu);
    while (have < watchers) received.Wait(&mu);
    latencies_ms.push_back(absl::ToDoubleMilliseconds(last_received - t0));
    state.SetIterationTime(absl::ToDoubleSeconds(last_received - t0));
  }
  stop = true;
  for (std::thread& t : threads) t.join();
  if (latencies_ms.empty()) return;
  state.counters["median_ms"] = Median(latencies_ms);
  state.counters["min_ms"] = *std::min_element(latencies_ms.begin(), latencies_ms.end());
  state.counters["max_ms"] = *std::max_element(latencies_ms.begin(), latencies_ms.end());
}
BENCHMARK(BM_MapPublication)
    ->Arg(1)
    ->Arg(100)
    ->Arg(kServers + kWorkers)
    ->Iterations(10)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

// One registration at full size with the state log's saver: 10,900 nodes joined, the saver set,
// then the last 100 register, one per iteration. Wall time (the save's fsync) per registration.
void BM_RegisterWithLog(benchmark::State& state) {
  FakeClock clock;
  auto created = CoordinatorService::Create(ScaleSpec(), kSecret, &clock);
  SKIP_UNLESS_OK(created.status());
  std::unique_ptr<CoordinatorService> service = std::move(created).value();
  const Gatekeeper& gatekeeper = service->gatekeeper();
  const int last = 100;
  v1::RegisterResponse response;
  for (int i = 0; i < FakeNodes::size() - last; ++i) {
    SKIP_UNLESS_OK(service->Register(FakeNodes::Registration(gatekeeper, i), &response));
  }
  const std::string dir = BenchDir("register");
  std::filesystem::remove_all(dir);
  auto opened = StateLog::Open(dir);
  SKIP_UNLESS_OK(opened.status());
  std::unique_ptr<StateLog> log = std::move(opened).value();
  StateLog* state_log = log.get();
  SKIP_UNLESS_OK(service->SetStateSaver([state_log](const v1::CoordinatorState& saved) {
    return state_log->WriteSnapshot(saved.SerializeAsString());
  }));
  int i = FakeNodes::size() - last;
  for (auto _ : state) {
    SKIP_UNLESS_OK(service->Register(FakeNodes::Registration(gatekeeper, i++), &response));
  }
  state.counters["response_bytes"] = static_cast<double>(response.ByteSizeLong());
  service.reset();
  log.reset();
  std::filesystem::remove_all(dir);
}
BENCHMARK(BM_RegisterWithLog)->Iterations(100)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_StateSave(benchmark::State& state) {
  FakeClock clock;
  ScaleCoordinator c;
  SKIP_UNLESS_OK(c.Init(&clock, /*with_log=*/false));
  SKIP_UNLESS_OK(c.nodes->BeatAll(*c.service));
  std::unique_ptr<StateLog> log;
  const std::string dir = BenchDir("save");
  if (state.range(0) == 1) {
    std::filesystem::remove_all(dir);
    auto opened = StateLog::Open(dir);
    SKIP_UNLESS_OK(opened.status());
    log = std::move(opened).value();
  }
  size_t bytes = 0;
  StateLog* state_log = log.get();
  for (auto _ : state) {
    SKIP_UNLESS_OK(c.service->SetStateSaver([&](const v1::CoordinatorState& saved) {
      std::string wire = saved.SerializeAsString();
      bytes = wire.size();
      return state_log != nullptr ? state_log->WriteSnapshot(wire) : absl::OkStatus();
    }));
  }
  state.counters["snapshot_bytes"] = static_cast<double>(bytes);
  log.reset();
  std::filesystem::remove_all(dir);
}
BENCHMARK(BM_StateSave)->Arg(0)->Arg(1)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_Takeover(benchmark::State& state) {
  const std::string dir = BenchDir("takeover");
  std::filesystem::remove_all(dir);
  {
    // The first coordinator: every node joined, a round of stats and progress, saved.
    RealClock clock;
    auto opened = StateLog::Open(dir);
    SKIP_UNLESS_OK(opened.status());
    std::unique_ptr<StateLog> log = std::move(opened).value();
    auto created = CoordinatorService::Create(ScaleSpec(), kSecret, &clock);
    SKIP_UNLESS_OK(created.status());
    std::unique_ptr<CoordinatorService> service = std::move(created).value();
    FakeNodes nodes(service->gatekeeper());
    SKIP_UNLESS_OK(nodes.Join(*service, service->gatekeeper()));
    SKIP_UNLESS_OK(nodes.BeatAll(*service));
    StateLog* state_log = log.get();
    SKIP_UNLESS_OK(service->SetStateSaver([state_log](const v1::CoordinatorState& saved) {
      return state_log->WriteSnapshot(saved.SerializeAsString());
    }));
    service->Shutdown();
  }
  CoordinatorOptions options;
  options.spec = ScaleSpec();
  options.token = kSecret;
  options.state_dir = dir;
  std::vector<double> ready_s;
  std::vector<double> first_round_s;
  for (auto _ : state) {
    const absl::Time t0 = absl::Now();
    auto process = CoordinatorProcess::Create(options);
    SKIP_UNLESS_OK(process.status());
    SKIP_UNLESS_OK((*process)->Start());
    const absl::Time ready = absl::Now();
    FakeNodes nodes((*process)->service()->gatekeeper());
    const absl::Time t1 = absl::Now();
    SKIP_UNLESS_OK(nodes.BeatAll(*(*process)->service()));
    const absl::Time all = absl::Now();
    state.SetIterationTime(absl::ToDoubleSeconds(ready - t0));
    ready_s.push_back(absl::ToDoubleSeconds(ready - t0));
    first_round_s.push_back(absl::ToDoubleSeconds(all - t1));
    state.PauseTiming();
    process->reset();  // stops serving; the next iteration takes over from its saves
    state.ResumeTiming();
  }
  std::filesystem::remove_all(dir);
  if (ready_s.empty()) return;
  state.counters["ready_s"] = Median(ready_s);
  state.counters["ready_max_s"] = *std::max_element(ready_s.begin(), ready_s.end());
  state.counters["first_round_s"] = Median(first_round_s);
}
BENCHMARK(BM_Takeover)->Iterations(3)->UseManualTime()->Unit(benchmark::kSecond);

}  // namespace
}  // namespace ecps

int main(int argc, char** argv) {
  if (argc == 2 && std::strncmp(argv[1], ecps::kClientFlag, std::strlen(ecps::kClientFlag)) == 0) {
    // The gRPC benchmark's client process: ADDRESS,SECRET,CLIENTS,PER_CLIENT.
    std::vector<std::string> parts =
        absl::StrSplit(argv[1] + std::strlen(ecps::kClientFlag), ',');
    int clients = 0;
    int per_client = 0;
    if (parts.size() != 4 || !absl::SimpleAtoi(parts[2], &clients) ||
        !absl::SimpleAtoi(parts[3], &per_client)) {
      return 1;
    }
    return ecps::RunClients(parts[0], parts[1], clients, per_client);
  }
  spdlog::set_level(spdlog::level::warn);  // no line per registration
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
