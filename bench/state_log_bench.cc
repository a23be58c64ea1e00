// state_log_bench: what one durable write to the coordinator's state log costs
// (coordinator/state_log.h; docs/recovery.md, "The coordinator's state log").
//
//   BM_StateLogAppend    Append of a record of range(0) bytes: one pwrite and one fsync
//   BM_StateLogSnapshot  WriteSnapshot of range(0) bytes: a new segment and SNAPSHOT, each
//                        written to a .tmp, fsynced and renamed, with fsyncs of the folder
//
// The folder is ECPS_BENCH_DIR when set (point it at the file system the job will use: an fsync
// on NFS or a PersistentVolume costs what that storage charges), else one under /tmp. Time is
// per operation; the log is reopened empty for each benchmark.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "coordinator/state_log.h"

namespace ecps {
namespace {

std::string BenchDir() {
  const char* base = std::getenv("ECPS_BENCH_DIR");
  return absl::StrCat(base != nullptr ? base : "/tmp", "/state-log-bench-", getpid());
}

// Runs `op` on a fresh log in BenchDir until the benchmark has its time.
template <typename Op>
void RunOnFreshLog(benchmark::State& state, Op op) {
  const std::string dir = BenchDir();
  std::filesystem::remove_all(dir);
  {
    absl::StatusOr<std::unique_ptr<StateLog>> log = StateLog::Open(dir);
    if (!log.ok()) {
      state.SkipWithError(log.status().ToString().c_str());
      return;
    }
    const std::string bytes(static_cast<size_t>(state.range(0)), 'x');
    for (auto _ : state) {
      absl::Status s = op(**log, bytes);
      if (!s.ok()) {
        state.SkipWithError(s.ToString().c_str());
        break;
      }
    }
    state.SetBytesProcessed(state.iterations() * state.range(0));
  }
  std::filesystem::remove_all(dir);
}

void BM_StateLogAppend(benchmark::State& state) {
  RunOnFreshLog(state,
                [](StateLog& log, const std::string& bytes) { return log.Append(bytes).status(); });
}
BENCHMARK(BM_StateLogAppend)->Arg(64)->Arg(1 << 10)->Arg(64 << 10)->UseRealTime();

void BM_StateLogSnapshot(benchmark::State& state) {
  RunOnFreshLog(state,
                [](StateLog& log, const std::string& bytes) { return log.WriteSnapshot(bytes); });
}
BENCHMARK(BM_StateLogSnapshot)->Arg(64 << 10)->Arg(4 << 20)->UseRealTime();

}  // namespace
}  // namespace ecps

BENCHMARK_MAIN();
