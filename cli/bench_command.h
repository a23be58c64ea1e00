// `ecps bench throughput SPEC`: the same job trained in-process with no servers (the
// reference LocalTrainer) and under `ecps run` (real processes, gRPC), one after the other
// in one invocation; prints both samples/s figures and their ratio and writes bench.json
// into the job's output folder.
#ifndef ECPS_CLI_BENCH_COMMAND_H_
#define ECPS_CLI_BENCH_COMMAND_H_

#include <string>

namespace ecps {

// Returns 0 on success, 1 when a run failed, 2 for a bad spec.
int RunThroughputBench(const std::string& spec_path, const std::string& output_dir);

}  // namespace ecps

#endif  // ECPS_CLI_BENCH_COMMAND_H_
