// The synthetic data source (data.source: synthetic): Zipf-distributed row ids and a label
// drawn from a hidden logistic model of the features, every sample a pure function of
// (seed, stream, global index), so any partition of any worker count sees the same samples.
#include "worker/synthetic_source.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/hash_rng.h"
#include "worker/metrics.h"

namespace ecps {
namespace {

// ---------------------------------------------------------------------------------------
// Zipf(s) over ranks 1..n by rejection-inversion (Hormann & Derflinger 1996), as in Apache
// Commons RNG: O(1) expected time per sample, no tables. Uniforms come from a caller hash.
class ZipfSampler {
 public:
  ZipfSampler(int64_t n, double s) : n_(static_cast<double>(n)), s_(s) {
    h_x1_ = HIntegral(1.5) - 1.0;
    h_n_ = HIntegral(n_ + 0.5);
    sc_ = 2.0 - HIntegralInverse(HIntegral(2.5) - H(2.0));
  }
  // Rank in [1, n]; `h` seeds the uniform draws (attempt a uses Mix64(h + a)).
  int64_t Sample(uint64_t h) const {
    for (uint64_t attempt = 0;; ++attempt) {
      const double u = h_n_ + UnitDouble(Mix64(h + attempt)) * (h_x1_ - h_n_);
      const double x = HIntegralInverse(u);
      double k = std::floor(x + 0.5);
      if (k < 1) k = 1;
      if (k > n_) k = n_;
      if (k - x <= sc_ || u >= HIntegral(k + 0.5) - H(k)) return static_cast<int64_t>(k);
    }
  }

 private:
  static double Helper1(double x) {  // log1p(x) / x
    return std::fabs(x) > 1e-8 ? std::log1p(x) / x : 1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x));
  }
  static double Helper2(double x) {  // expm1(x) / x
    return std::fabs(x) > 1e-8 ? std::expm1(x) / x
                               : 1.0 + x * 0.5 * (1.0 + x / 3.0 * (1.0 + 0.25 * x));
  }
  double H(double x) const { return std::exp(-s_ * std::log(x)); }
  double HIntegral(double x) const {
    const double lx = std::log(x);
    return Helper2((1.0 - s_) * lx) * lx;
  }
  double HIntegralInverse(double x) const {
    double t = x * (1.0 - s_);
    if (t < -1.0) t = -1.0;
    return std::exp(Helper1(t) * x);
  }
  double n_, s_, h_x1_, h_n_, sc_;
};

// Uniform with unit variance: U(-sqrt(3), sqrt(3)).
inline double UnitVarUniform(uint64_t h) {
  return (2.0 * UnitDouble(h) - 1.0) * 1.7320508075688772;
}

// ---------------------------------------------------------------------------------------
// The synthetic generator: sample (stream, g) is a pure function of (seed, stream, g).
//
// Dense feature j: z_j ~ N(0,1), raw_j = max(0, floor(exp(mu_j + sigma_j z_j) - 1)) (a
// Criteo-like heavy-tailed count), x_j = log(1 + raw_j).
// Sparse feature t: rank ~ Zipf(zipf_s) over [1, rows_t], id = (rank-1)*A_t + B_t mod rows_t
// (a fixed bijection that scatters hot ids over the table).
// Label: logit = bias + sum_j w_j z_j                      (dense, first order)
//              + sum_t a_t(id_t)                           (per-id effects, every table)
//              + sum_{(t,u) in pairs} <v_t(id_t), v_u(id_u)> (sparse x sparse)
//              + sum_{(j,t) in cross} z_j * c_t(id_t)        (dense x sparse)
// p = (1 - label_noise) * sigmoid(logit) + label_noise / 2, label ~ Bernoulli(p).
// Hidden values (w, a, v, c) are hashes of (hidden_seed, table, id): nothing is stored.
class SyntheticGenerator {
 public:
  static constexpr double kBias = -0.6;
  static constexpr double kDenseWeight = 0.3;  // std of w_j
  static constexpr double kIdEffect = 0.35;    // std of a_t(id)
  static constexpr int kPairDim = 4;
  static constexpr double kPairStd = 0.55;  // std of each v component
  static constexpr double kCrossStd = 0.4;  // std of c_t(id)
  static constexpr int kPairs = 6;
  static constexpr int kCross = 4;

  SyntheticGenerator(const DataSection& data, const ModelSection& model, uint64_t seed)
      : num_dense_(model.num_dense),
        num_sparse_(model.num_sparse),
        seed_(seed),
        hidden_(data.synthetic.hidden_seed),
        noise_(data.synthetic.label_noise),
        rows_(model.table_rows) {
    for (int j = 0; j < num_dense_; ++j) {
      mu_.push_back(0.5 + 2.5 * UnitDouble(HashOf(hidden_, 11, j)));
      sigma_.push_back(0.6 + 0.8 * UnitDouble(HashOf(hidden_, 12, j)));
      w_.push_back(kDenseWeight * UnitVarUniform(HashOf(hidden_, 13, j)));
    }
    for (int t = 0; t < num_sparse_; ++t) {
      const int64_t n = rows_[t];
      zipf_.emplace_back(n, data.synthetic.zipf_s);
      uint64_t a = (HashOf(hidden_, 21, t) % static_cast<uint64_t>(n)) | 1;
      while (std::gcd(a, static_cast<uint64_t>(n)) != 1) a += 2;
      mult_.push_back(a % static_cast<uint64_t>(n));
      add_.push_back(HashOf(hidden_, 22, t) % static_cast<uint64_t>(n));
    }
    for (int i = 0; i < kPairs && num_sparse_ >= 2; ++i) {
      const int t = static_cast<int>(HashOf(hidden_, 31, i) % num_sparse_);
      int u = static_cast<int>(HashOf(hidden_, 32, i) % (num_sparse_ - 1));
      if (u >= t) ++u;
      pairs_.push_back({t, u});
    }
    for (int i = 0; i < kCross; ++i) {
      cross_.push_back({static_cast<int>(HashOf(hidden_, 41, i) % num_dense_),
                        static_cast<int>(HashOf(hidden_, 42, i) % num_sparse_)});
    }
  }

  // Writes one sample; returns the true label probability.
  double Sample(uint64_t stream, int64_t g, float* dense, int64_t* sparse, float* label) const {
    const uint64_t base = HashOf(seed_, stream, static_cast<uint64_t>(g));
    double logit = kBias;
    zbuf_.resize(num_dense_);
    for (int j = 0; j < num_dense_; ++j) {
      const double z = NormalFromHash(Mix64(base ^ (0x100 + j)));
      zbuf_[j] = z;
      const double raw = std::max(0.0, std::floor(std::exp(mu_[j] + sigma_[j] * z) - 1.0));
      dense[j] = static_cast<float>(std::log1p(raw));
      logit += w_[j] * z;
    }
    for (int t = 0; t < num_sparse_; ++t) {
      const int64_t rank = zipf_[t].Sample(Mix64(base ^ (0x10000ull * (t + 1))));
      const uint64_t n = static_cast<uint64_t>(rows_[t]);
      const int64_t id =
          static_cast<int64_t>((static_cast<unsigned __int128>(rank - 1) * mult_[t] + add_[t]) % n);
      sparse[t] = id;
      logit += kIdEffect * UnitVarUniform(HashOf(hidden_, 51, t, id));
    }
    for (const auto& [t, u] : pairs_) {
      double dot = 0;
      for (int k = 0; k < kPairDim; ++k) {
        dot += UnitVarUniform(HashOf(hidden_, 61, t, sparse[t], k)) *
               UnitVarUniform(HashOf(hidden_, 61, u, sparse[u], k));
      }
      logit += kPairStd * kPairStd * dot;
    }
    for (const auto& [j, t] : cross_) {
      logit += zbuf_[j] * kCrossStd * UnitVarUniform(HashOf(hidden_, 71, t, sparse[t]));
    }
    const double p = (1.0 - noise_) / (1.0 + std::exp(-logit)) + noise_ * 0.5;
    *label = UnitDouble(Mix64(base ^ 0xABCDEF)) < p ? 1.0f : 0.0f;
    return p;
  }

 private:
  int num_dense_, num_sparse_;
  uint64_t seed_, hidden_;
  double noise_;
  std::vector<int64_t> rows_;
  std::vector<double> mu_, sigma_, w_;
  std::vector<ZipfSampler> zipf_;
  std::vector<uint64_t> mult_, add_;
  std::vector<std::pair<int, int>> pairs_, cross_;
  mutable std::vector<double> zbuf_;  // scratch (the generator is not thread-safe)
};

constexpr uint64_t kTrainStream = 0x7124A1;
constexpr uint64_t kEvalStream = 0xE7A1;

class SyntheticSource : public DataSource {
 public:
  SyntheticSource(const DataSection& data, const ModelSection& model, uint64_t seed, int partition,
                  int num_partitions, bool eval, int64_t max_samples)
      : gen_(data, model, seed),
        num_dense_(model.num_dense),
        num_sparse_(model.num_sparse),
        stream_(eval ? kEvalStream : kTrainStream),
        partition_(partition),
        num_partitions_(num_partitions) {
    const int64_t global = eval ? 0 : data.synthetic.num_samples;
    limit_ = -1;
    if (global > 0) {
      limit_ = global > partition ? (global - partition + num_partitions - 1) / num_partitions : 0;
    }
    if (max_samples > 0) limit_ = limit_ < 0 ? max_samples : std::min(limit_, max_samples);
  }

  absl::StatusOr<bool> Next(int batch_size, Batch* out) override {
    int n = std::max(batch_size, 0);
    bool more = true;
    if (limit_ >= 0 && position_ + n >= limit_) {
      n = static_cast<int>(std::max<int64_t>(0, limit_ - position_));
      more = false;
    }
    out->size = n;
    out->dense.resize(static_cast<size_t>(n) * num_dense_);
    out->sparse.resize(static_cast<size_t>(n) * num_sparse_);
    out->labels.resize(n);
    for (int i = 0; i < n; ++i) {
      const int64_t g = (position_ + i) * num_partitions_ + partition_;
      gen_.Sample(stream_, g, out->dense.data() + static_cast<size_t>(i) * num_dense_,
                  out->sparse.data() + static_cast<size_t>(i) * num_sparse_, &out->labels[i]);
    }
    position_ += n;
    return more;
  }
  int64_t position() const override { return position_; }
  absl::Status Seek(int64_t position) override {
    if (position < 0 || (limit_ >= 0 && position > limit_)) {
      return absl::OutOfRangeError(
          absl::StrCat("seek to ", position, " outside [0, ", limit_, "]"));
    }
    position_ = position;
    return absl::OkStatus();
  }
  int64_t bad_lines() const override { return 0; }
  std::vector<std::string> bad_line_examples() const override { return {}; }

 private:
  SyntheticGenerator gen_;
  int num_dense_, num_sparse_;
  uint64_t stream_;
  int partition_, num_partitions_;
  int64_t limit_ = -1;  // samples in this partition; -1: endless
  int64_t position_ = 0;
};

}  // namespace

std::unique_ptr<DataSource> MakeSyntheticSource(const DataSection& data,
                                                const ModelSection& model, uint64_t seed,
                                                int partition, int num_partitions, bool eval,
                                                int64_t max_samples) {
  return std::make_unique<SyntheticSource>(data, model, seed, partition, num_partitions, eval,
                                           max_samples);
}

double SyntheticAucOfItsOwnProbabilities(const DataSection& data, const ModelSection& model,
                                         uint64_t seed, int64_t samples) {
  SyntheticGenerator gen(data, model, seed);
  std::vector<float> probs(samples), labels(samples), dense(model.num_dense);
  std::vector<int64_t> sparse(model.num_sparse);
  for (int64_t g = 0; g < samples; ++g) {
    probs[g] =
        static_cast<float>(gen.Sample(kEvalStream, g, dense.data(), sparse.data(), &labels[g]));
  }
  return Auc(probs, labels);
}

}  // namespace ecps
