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

// `ecps bench recovery SPEC`: the same job, with the same server failure at the same step,
// under erasure_code, replication and checkpoint (two intervals), plus none without the
// failure as the steady-state reference, one after the other; then a report (report.md and
// timelines.png in the output folder, by deploy/recovery_report.py): steady-state throughput
// relative to none, time lost to the failure, time to full recovery, throughput during
// recovery and memory per server. The failure is the spec's first kill_server drill, or
// server 1 at 40% of the steps. Returns 0 when every run finished, 1 otherwise, 2 for a bad
// spec.
int RunRecoveryBench(const std::string& spec_path, const std::string& output_dir);

}  // namespace ecps

#endif  // ECPS_CLI_BENCH_COMMAND_H_
