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
// rows[t] order. Writes pooled = batch*num_sparse*dim (sample-major, then feature). With a
// runner, its threads take equal ranges of samples.
void PoolEmbeddings(const UniqueIds& u, const std::vector<const float*>& rows_data, int batch,
                    int num_sparse, int dim, float* pooled, ParallelRunner* runner = nullptr);

// The same from the row indices alone (index: batch*num_sparse, as UniqueIds::index).
void PoolEmbeddings(const int32_t* index, const std::vector<const float*>& rows_data, int batch,
                    int num_sparse, int dim, float* pooled, ParallelRunner* runner = nullptr);

// Sums d_pooled (batch*num_sparse*dim) back per unique row: (*grads)[t] is resized to
// rows[t].size()*dim. Sums run in sample order, so the result is deterministic. Since
// d_pooled is the gradient of the MEAN loss, so are these. With a runner, its threads take
// whole tables (each table's sums still in sample order: the same bits).
void AggregateRowGrads(const UniqueIds& u, const float* d_pooled, int batch, int num_sparse,
                       int dim, std::vector<std::vector<float>>* grads,
                       ParallelRunner* runner = nullptr);

// The same from the row indices alone, into grads[t] (row_count[t]*dim floats each).
void AggregateRowGrads(const int32_t* index, const std::vector<int64_t>& row_count,
                       const float* d_pooled, int batch, int num_sparse, int dim,
                       const std::vector<float*>& grads, ParallelRunner* runner = nullptr);

}  // namespace ecps

#endif  // ECPS_WORKER_STEP_H_
