#include "kernels/pooling.h"

#include <algorithm>
#include <cstring>

#include "kernels/dense_ops.h"

namespace ecps {

void PoolEmbeddings(const int32_t* index, const std::vector<const float*>& rows_data, int batch,
                    int num_sparse, int dim, float* pooled, ParallelRunner* runner) {
  auto pool = [&](int64_t s0, int64_t s1) {
    for (int64_t s = s0; s < s1; ++s) {
      for (int t = 0; t < num_sparse; ++t) {
        const size_t slot = static_cast<size_t>(s) * num_sparse + t;
        std::memcpy(pooled + slot * dim, rows_data[t] + static_cast<size_t>(index[slot]) * dim,
                    sizeof(float) * dim);
      }
    }
  };
  if (runner == nullptr || runner->threads() == 1) return pool(0, batch);
  const int parts = runner->threads();
  runner->Run(parts, [&](int part) {
    pool(ParallelRunner::PartBegin(batch, parts, part),
         ParallelRunner::PartBegin(batch, parts, part + 1));
  });
}

void AggregateRowGrads(const int32_t* index, const std::vector<int64_t>& row_count,
                       const float* d_pooled, int batch, int num_sparse, int dim,
                       const std::vector<float*>& grads, ParallelRunner* runner) {
  auto table = [&](int t) {
    float* out = grads[t];
    std::fill(out, out + row_count[t] * dim, 0.0f);
    ScatterAddRows(batch, index + t, num_sparse, d_pooled + static_cast<int64_t>(t) * dim,
                   static_cast<int64_t>(num_sparse) * dim, dim, out);
  };
  if (runner == nullptr || runner->threads() == 1) {
    for (int t = 0; t < num_sparse; ++t) table(t);
    return;
  }
  runner->Run(num_sparse, table);
}

}  // namespace ecps
