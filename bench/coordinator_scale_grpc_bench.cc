// The gRPC benchmarks of coordinator_scale_bench (see coordinator_scale_bench.cc for what each
// measures): BM_GrpcHeartbeat, with its clients in a child process, and BM_GrpcIdle.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "bench/coordinator_scale_fixture.h"
#include "benchmark/benchmark.h"
#include "coordinator/coordinator_process.h"
#include "coordinator/grpc_coordinator.h"
#include "grpcpp/grpcpp.h"
#include "proto/ecps.grpc.pb.h"
#include "proto/ecps.pb.h"
#include "runtime/rpc.h"

extern char** environ;

namespace ecps {
namespace scale_bench {

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

}  // namespace scale_bench
}  // namespace ecps
