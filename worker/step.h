// The pieces of one training step shared by the in-process LocalTrainer and the distributed
// worker, so both compute bit-identical results: dedupe the batch's sparse ids, pool the
// pulled rows, and sum the pooled gradients back per unique row.
//
// Pooling: one id per feature per sample (Criteo layout), so sum and mean pooling coincide.
#ifndef ECPS_WORKER_STEP_H_
#define ECPS_WORKER_STEP_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/parallel.h"
#include "kernels/pooling.h"
#include "worker/data.h"

namespace ecps {

struct UniqueIds {
  std::vector<std::vector<int64_t>> rows;  // per table, sorted unique row ids in the batch
  std::vector<int32_t> index;              // batch*num_sparse -> index into rows[table]
  std::vector<uint64_t> scratch[2];         // reused between calls; no meaning
  int64_t total_rows() const;                        // sum of rows[t].size()
};

// Fills *out from b.sparse (b.size * num_sparse ids, sample-major). Reuses out's capacity.
void Dedupe(const Batch& b, int num_sparse, UniqueIds* out);

// rows_data[t] = the unique rows' weights of table t, contiguous (rows[t].size()*dim), in
// rows[t] order. PoolEmbeddings (kernels/pooling.h) from u.index.
void PoolEmbeddings(const UniqueIds& u, const std::vector<const float*>& rows_data, int batch,
                    int num_sparse, int dim, float* pooled, ParallelRunner* runner = nullptr);

// AggregateRowGrads (kernels/pooling.h) from u: (*grads)[t] is resized to rows[t].size()*dim.
void AggregateRowGrads(const UniqueIds& u, const float* d_pooled, int batch, int num_sparse,
                       int dim, std::vector<std::vector<float>>* grads,
                       ParallelRunner* runner = nullptr);

}  // namespace ecps

#endif  // ECPS_WORKER_STEP_H_
