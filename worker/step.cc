#include "worker/step.h"

#include <algorithm>
#include <cstring>

namespace ecps {

int64_t UniqueIds::total_rows() const {
  int64_t n = 0;
  for (const auto& r : rows) n += static_cast<int64_t>(r.size());
  return n;
}

void Dedupe(const Batch& b, int num_sparse, UniqueIds* out) {
  const int batch = b.size;
  out->rows.resize(num_sparse);
  out->index.resize(static_cast<size_t>(batch) * num_sparse);
  auto& pairs = out->scratch;
  for (int t = 0; t < num_sparse; ++t) {
    pairs.resize(batch);
    for (int s = 0; s < batch; ++s)
      pairs[s] = {b.sparse[static_cast<size_t>(s) * num_sparse + t], s};
    std::sort(pairs.begin(), pairs.end());
    auto& rows = out->rows[t];
    rows.clear();
    for (int i = 0; i < batch; ++i) {
      if (i == 0 || pairs[i].first != pairs[i - 1].first) rows.push_back(pairs[i].first);
      out->index[static_cast<size_t>(pairs[i].second) * num_sparse + t] =
          static_cast<int32_t>(rows.size() - 1);
    }
  }
}

void PoolEmbeddings(const UniqueIds& u, const std::vector<const float*>& rows_data, int batch,
                    int num_sparse, int dim, float* pooled) {
  for (int s = 0; s < batch; ++s) {
    for (int t = 0; t < num_sparse; ++t) {
      const size_t slot = static_cast<size_t>(s) * num_sparse + t;
      std::memcpy(pooled + slot * dim, rows_data[t] + static_cast<size_t>(u.index[slot]) * dim,
                  sizeof(float) * dim);
    }
  }
}

void AggregateRowGrads(const UniqueIds& u, const float* d_pooled, int batch, int num_sparse,
                       int dim, std::vector<std::vector<float>>* grads) {
  grads->resize(num_sparse);
  for (int t = 0; t < num_sparse; ++t) (*grads)[t].assign(u.rows[t].size() * dim, 0.0f);
  for (int s = 0; s < batch; ++s) {
    for (int t = 0; t < num_sparse; ++t) {
      const size_t slot = static_cast<size_t>(s) * num_sparse + t;
      float* g = (*grads)[t].data() + static_cast<size_t>(u.index[slot]) * dim;
      const float* d = d_pooled + slot * dim;
      for (int k = 0; k < dim; ++k) g[k] += d[k];
    }
  }
}

}  // namespace ecps
