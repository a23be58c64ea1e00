// Pooling the pulled embedding rows into a batch, and its gradient summed back per row: the
// step's sparse side, shared by the CPU DenseMath (kernels/cpu_dense_math.h), the worker's
// step (worker/step.h, which finds the rows: Dedupe) and the in-process trainer.
//
// Pooling: one id per feature per sample (Criteo layout), so sum and mean pooling coincide.
#ifndef ECPS_KERNELS_POOLING_H_
#define ECPS_KERNELS_POOLING_H_

#include <cstdint>
#include <vector>

#include "kernels/parallel.h"

namespace ecps {

// rows_data[t] = the unique rows' weights of table t, contiguous (row_count[t]*dim). Writes
// pooled = batch*num_sparse*dim (sample-major, then feature) from the row indices (index:
// batch*num_sparse, the unique row of each sample's feature). With a runner, its threads take
// equal ranges of samples.
void PoolEmbeddings(const int32_t* index, const std::vector<const float*>& rows_data, int batch,
                    int num_sparse, int dim, float* pooled, ParallelRunner* runner = nullptr);

// Sums d_pooled (batch*num_sparse*dim) back per unique row into grads[t] (row_count[t]*dim
// floats each). Sums run in sample order, so the result is deterministic. Since d_pooled is
// the gradient of the MEAN loss, so are these. With a runner, its threads take whole tables
// (each table's sums still in sample order: the same bits).
void AggregateRowGrads(const int32_t* index, const std::vector<int64_t>& row_count,
                       const float* d_pooled, int batch, int num_sparse, int dim,
                       const std::vector<float*>& grads, ParallelRunner* runner = nullptr);

}  // namespace ecps

#endif  // ECPS_KERNELS_POOLING_H_
