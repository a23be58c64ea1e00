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
//
// The shared fixture (the fake nodes, ScaleCoordinator) is coordinator_scale_fixture.h; the
// gRPC benchmarks are coordinator_scale_grpc_bench.cc.
#include <algorithm>
#include <atomic>
#include <chrono>
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
#include "bench/coordinator_scale_fixture.h"
#include "benchmark/benchmark.h"
#include "coordinator/coordinator_main.h"
#include "coordinator/coordinator_process.h"
#include "coordinator/coordinator_service.h"
#include "coordinator/state_log.h"
#include "proto/coordinator_state.pb.h"
#include "proto/ecps.pb.h"
#include "runtime/clock.h"
#include "runtime/rpc.h"
#include "runtime/spec.h"
#include "spdlog/spdlog.h"

namespace ecps {
namespace scale_bench {

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

// What the watchers of BM_MapPublication share: the epoch the current iteration waits for,
// how many watchers hold it, and when the last of them got it.
struct MapWatchers {
  absl::Mutex mu;
  uint64_t want_epoch ABSL_GUARDED_BY(mu) = 0;
  int have ABSL_GUARDED_BY(mu) = 0;
  absl::Time last_received ABSL_GUARDED_BY(mu);
  absl::CondVar received;
  std::atomic<bool> stop{false};

  // Watcher w's WatchClusterMap, from `first` until `stop`: each map serialized (what gRPC's
  // Write does), and counted once it holds the epoch waited for.
  void Watch(CoordinatorService& service, int w, const v1::ClusterMap& first) {
    const int i = w % FakeNodes::size();
    v1::WatchClusterMapRequest request;
    FillHeader(request.mutable_header(),
               service.gatekeeper().token(FakeNodes::IsServer(i) ? Role::kServer : Role::kWorker),
               first.epoch(), absl::StrCat("node-", i));
    request.set_known_epoch(first.epoch());
    request.set_known_version(first.version());
    uint64_t held = 0;
    service
        .WatchClusterMap(
            request, [&] { return stop.load(); },
            [&](const v1::ClusterMap& map) {
              std::string wire = map.SerializeAsString();
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
  }
};

// A worker's report that server `id` is gone (its process is: options.process_gone).
v1::ReportFailureRequest ServerFailure(const CoordinatorService& service, int id) {
  v1::ReportFailureRequest report;
  FillHeader(report.mutable_header(), service.gatekeeper().token(Role::kWorker), 0, "worker-0");
  report.set_role(v1::ROLE_SERVER);
  report.set_id(id);
  report.set_reason("Pull: connection refused");
  return report;
}

void BM_MapPublication(benchmark::State& state) {
  FakeClock clock;  // still: nobody times out while the watchers start
  CoordinatorServiceOptions options;
  options.process_gone = [](const std::string&) { return true; };  // a killed process
  ScaleCoordinator c;
  SKIP_UNLESS_OK(c.Init(&clock, /*with_log=*/true, options));
  const int watchers = static_cast<int>(state.range(0));
  MapWatchers w;
  v1::ClusterMap first;
  c.service->GetClusterMap(&first);
  std::vector<std::thread> threads;
  for (int i = 0; i < watchers; ++i) {
    threads.emplace_back([&w, &c, &first, i] { w.Watch(*c.service, i, first); });
  }
  std::vector<double> latencies_ms;
  int server = 0;
  for (auto _ : state) {
    // Servers 0, 10, 20 ... : 9 healthy ones between two dead, so no stripe loses data.
    const v1::ReportFailureRequest report = ServerFailure(*c.service, server);
    server += 10;
    uint64_t want_epoch = 0;
    {
      absl::MutexLock lock(&w.mu);
      want_epoch = w.want_epoch = c.service->epoch() + 1;
      w.have = 0;
    }
    const absl::Time t0 = absl::Now();
    v1::ReportFailureResponse response;
    SKIP_UNLESS_OK(c.service->ReportFailure(report, &response));
    if (c.service->epoch() < want_epoch) {
      state.SkipWithError("the server was not declared dead");
      break;
    }
    absl::MutexLock lock(&w.mu);
    while (w.have < watchers) w.received.Wait(&w.mu);
    latencies_ms.push_back(absl::ToDoubleMilliseconds(w.last_received - t0));
    state.SetIterationTime(absl::ToDoubleSeconds(w.last_received - t0));
  }
  w.stop = true;
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

}  // namespace scale_bench
}  // namespace ecps

int main(int argc, char** argv) {
  const char* const client_flag = ecps::scale_bench::kClientFlag;
  if (argc == 2 && std::strncmp(argv[1], client_flag, std::strlen(client_flag)) == 0) {
    // The gRPC benchmark's client process: ADDRESS,SECRET,CLIENTS,PER_CLIENT.
    std::vector<std::string> parts = absl::StrSplit(argv[1] + std::strlen(client_flag), ',');
    int clients = 0;
    int per_client = 0;
    if (parts.size() != 4 || !absl::SimpleAtoi(parts[2], &clients) ||
        !absl::SimpleAtoi(parts[3], &per_client)) {
      return 1;
    }
    return ecps::scale_bench::RunClients(parts[0], parts[1], clients, per_client);
  }
  spdlog::set_level(spdlog::level::warn);  // no line per registration
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
