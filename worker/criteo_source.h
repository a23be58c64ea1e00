// The Criteo readers (criteo_tsv, criteo_csv) behind MakeDataSource (worker/data.h), which
// validates the sections and checks every file first: this takes validated input.
#ifndef ECPS_WORKER_CRITEO_SOURCE_H_
#define ECPS_WORKER_CRITEO_SOURCE_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "runtime/spec.h"
#include "worker/data.h"

namespace ecps {

// Partition `partition` of `num_partitions` of the training split (with `eval`: the held-out
// split, read once in file order whatever data.epochs and data.shuffle say); at most
// `max_samples` lines when positive. With data.shuffle the files are read once here to index
// their blocks (worker/criteo_blocks.h). UNAVAILABLE or NOT_FOUND naming a file that cannot
// be opened or read.
absl::StatusOr<std::unique_ptr<DataSource>> MakeCriteoSource(const DataSection& data,
                                                             const ModelSection& model,
                                                             uint64_t seed, int partition,
                                                             int num_partitions, bool eval,
                                                             int64_t max_samples);

}  // namespace ecps

#endif  // ECPS_WORKER_CRITEO_SOURCE_H_
