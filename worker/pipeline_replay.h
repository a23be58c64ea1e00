// How a pipelined worker makes up for the one update its pulls miss.
//
// Pipelined, the pulls for step i + 1 run while step i computes, before step i's push: the
// rows and dense tensors come back without step i's update. Of this worker's own updates that
// is the only one they miss (step i - 1's push is acknowledged before they are sent). So the
// worker pulls, for the rows step i also updates, their optimizer state along with their
// weights (and the dense tensors' state and versions), and once step i's gradients are known
// applies step i's update to them itself, with the servers' own kernels
// (kernels/optimizers.h) on the very payloads the servers held, before step i + 1 computes.
// That is bit for bit what a server holds after step i's push, when no other worker changed
// those rows in between: a one-worker pipelined job trains exactly as its synchronous job.
// Other workers' updates stay asynchronous (docs/design.md, "Pipelined steps").
//
// Pure functions, thread-compatible.
#ifndef ECPS_WORKER_PIPELINE_REPLAY_H_
#define ECPS_WORKER_PIPELINE_REPLAY_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "kernels/optimizers.h"
#include "worker/step.h"

namespace ecps {

// The rows a batch shares with the batch of the step before it, per table.
struct SharedRows {
  std::vector<std::vector<int32_t>> positions;  // in this batch's ids.rows[t], ascending
  std::vector<std::vector<int32_t>> previous;   // the same rows' positions in the previous one
  // As pulled: per table positions[t].size() * payload_floats floats (weights, then state).
  std::vector<std::vector<float>> payloads;
  int payload_floats = 0;
  int64_t count() const;  // rows over all tables
};

// Fills *out's positions with the rows of each table that both `previous` and `next` hold
// (both as Dedupe leaves them: per table sorted, unique). Reuses out's capacity.
void FindSharedRows(const UniqueIds& previous, const UniqueIds& next, SharedRows* out);

// Applies the previous step's sparse update to the shared rows' payloads as a server applies
// it (ApplySparseUpdate with the row's summed gradient, previous_grads[t] holding one per row
// of the previous batch's ids.rows[t]), and writes the rows' new weights into rows[t] (dim
// floats per row of this batch). INTERNAL when the payloads are not the optimizer's size
// (the servers run another optimizer than `opt`).
absl::Status ReplaySparse(const SparseOptimizerConfig& opt, int dim,
                          const std::vector<std::vector<float>>& previous_grads, SharedRows* shared,
                          std::vector<std::vector<float>>* rows);

// Dense tensors as pulled with their optimizer state and versions (updates applied).
struct PulledDense {
  std::vector<std::vector<float>> tensors;
  std::vector<std::vector<float>> states;
  std::vector<int64_t> versions;
  // 1 for a tensor its server still held at the version asked for (PsClient::PullDense):
  // tensors[i] and states[i] are stale and must come from the worker's own copy.
  std::vector<char> as_held;
};

// Applies the previous step's dense update (one gradient per tensor) to every tensor as its
// primary applies it: ApplyDenseUpdate at the next version, which it then counts. INTERNAL
// when a size does not match.
absl::Status ReplayDense(const DenseOptimizerConfig& opt,
                         const std::vector<std::vector<float>>& grads, PulledDense* dense);

}  // namespace ecps

#endif  // ECPS_WORKER_PIPELINE_REPLAY_H_
