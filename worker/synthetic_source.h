// The synthetic data source, behind MakeDataSource (worker/data.h), which validates the
// sections first: these functions take validated input.
#ifndef ECPS_WORKER_SYNTHETIC_SOURCE_H_
#define ECPS_WORKER_SYNTHETIC_SOURCE_H_

#include <cstdint>
#include <memory>

#include "runtime/spec.h"
#include "worker/data.h"

namespace ecps {

// Partition `partition` of `num_partitions` of the train (or, with `eval`, the held-out)
// stream; at most `max_samples` samples when positive.
std::unique_ptr<DataSource> MakeSyntheticSource(const DataSection& data,
                                                const ModelSection& model, uint64_t seed,
                                                int partition, int num_partitions, bool eval,
                                                int64_t max_samples);

// The AUC of the hidden model's own probabilities on `samples` held-out samples: the ceiling
// any trained model can reach (SyntheticCeilingAuc).
double SyntheticAucOfItsOwnProbabilities(const DataSection& data, const ModelSection& model,
                                         uint64_t seed, int64_t samples);

}  // namespace ecps

#endif  // ECPS_WORKER_SYNTHETIC_SOURCE_H_
