#include "worker/step.h"

#include <algorithm>


namespace ecps {

int64_t UniqueIds::total_rows() const {
  int64_t n = 0;
  for (const auto& r : rows) n += static_cast<int64_t>(r.size());
  return n;
}

namespace {

// Sorts keys[0..n) with a least-significant-digit radix sort over their low `bits` bits,
// using tmp (n keys) as the other buffer. Digits whose value is the same in every key are
// skipped. Returns the buffer that holds the result.
uint64_t* RadixSort(uint64_t* keys, uint64_t* tmp, size_t n, int bits) {
  constexpr int kDigit = 11;
  constexpr size_t kBuckets = size_t{1} << kDigit;
  uint32_t count[kBuckets];
  for (int shift = 0; shift < bits; shift += kDigit) {
    std::fill(count, count + kBuckets, 0);
    for (size_t i = 0; i < n; ++i) ++count[(keys[i] >> shift) & (kBuckets - 1)];
    if (count[(keys[0] >> shift) & (kBuckets - 1)] == n) continue;  // one value: nothing moves
    uint32_t sum = 0;
    for (uint32_t& c : count) {
      const uint32_t here = c;
      c = sum;
      sum += here;
    }
    for (size_t i = 0; i < n; ++i) tmp[count[(keys[i] >> shift) & (kBuckets - 1)]++] = keys[i];
    std::swap(keys, tmp);
  }
  return keys;
}

int BitWidth(uint64_t v) { return v == 0 ? 0 : 64 - __builtin_clzll(v); }

}  // namespace

// Each table's ids are sorted together with their sample numbers, packed into one word as
// (id << sample_bits | sample), by a radix sort: a batch's ids are small integers, and this
// is about four times cheaper than a comparison sort of (id, sample) pairs (BM_Dedupe). Ids
// too wide to pack fall back to std::sort; a negative id (which no table has) sets the top
// bit, so it is too wide whenever the batch has two samples to order.
void Dedupe(const Batch& b, int num_sparse, UniqueIds* out) {
  const int batch = b.size;
  out->rows.resize(num_sparse);
  out->index.resize(static_cast<size_t>(batch) * num_sparse);
  const int sample_bits = batch > 1 ? BitWidth(static_cast<uint64_t>(batch - 1)) : 0;
  const uint64_t sample_mask = (uint64_t{1} << sample_bits) - 1;
  out->scratch[0].resize(batch);
  out->scratch[1].resize(batch);
  for (int t = 0; t < num_sparse; ++t) {
    auto& rows = out->rows[t];
    rows.clear();
    // Called in id order, once per sample.
    auto emit = [&](int64_t id, uint64_t sample) {
      if (rows.empty() || rows.back() != id) rows.push_back(id);
      out->index[sample * num_sparse + t] = static_cast<int32_t>(rows.size() - 1);
    };
    uint64_t* keys = out->scratch[0].data();
    uint64_t any = 0;
    for (int s = 0; s < batch; ++s) {
      const int64_t id = b.sparse[static_cast<size_t>(s) * num_sparse + t];
      any |= static_cast<uint64_t>(id);
      keys[s] = static_cast<uint64_t>(id) << sample_bits | static_cast<uint64_t>(s);
    }
    if (BitWidth(any) + sample_bits <= 64) {
      keys = RadixSort(keys, out->scratch[1].data(), batch, BitWidth(any) + sample_bits);
      for (int i = 0; i < batch; ++i) {
        emit(static_cast<int64_t>(keys[i] >> sample_bits), keys[i] & sample_mask);
      }
    } else {
      std::vector<std::pair<int64_t, uint64_t>> pairs(batch);
      for (int s = 0; s < batch; ++s) {
        pairs[s] = {b.sparse[static_cast<size_t>(s) * num_sparse + t], s};
      }
      std::sort(pairs.begin(), pairs.end());
      for (const auto& [id, sample] : pairs) emit(id, sample);
    }
  }
}

void PoolEmbeddings(const UniqueIds& u, const std::vector<const float*>& rows_data, int batch,
                    int num_sparse, int dim, float* pooled, ParallelRunner* runner) {
  PoolEmbeddings(u.index.data(), rows_data, batch, num_sparse, dim, pooled, runner);
}

void AggregateRowGrads(const UniqueIds& u, const float* d_pooled, int batch, int num_sparse,
                       int dim, std::vector<std::vector<float>>* grads, ParallelRunner* runner) {
  grads->resize(num_sparse);
  std::vector<int64_t> row_count(num_sparse);
  std::vector<float*> out(num_sparse);
  for (int t = 0; t < num_sparse; ++t) {
    row_count[t] = static_cast<int64_t>(u.rows[t].size());
    (*grads)[t].resize(row_count[t] * dim);
    out[t] = (*grads)[t].data();
  }
  AggregateRowGrads(u.index.data(), row_count, d_pooled, batch, num_sparse, dim, out, runner);
}

}  // namespace ecps
