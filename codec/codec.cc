#include "codec/codec.h"

#include <array>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "codec/engine.h"
#include "codec/gf256.h"

namespace ecps::codec {
namespace {

using internal::Engine;
using internal::PreparedMatrix;

// Decode patterns kept per code; the cache is dropped wholesale when it grows past this.
constexpr size_t kMaxCachedPatterns = 4096;

struct DecodePlan {
  std::vector<int> survivors;              // k member ids, ascending
  std::unique_ptr<PreparedMatrix> matrix;  // wanted x k
};

absl::Status InvalidArg(std::string_view what) {
  return absl::InvalidArgumentError(std::string(what));
}

class MatrixErasureCode final : public ErasureCode {
 public:
  MatrixErasureCode(int k, int r, std::vector<uint8_t> coef, std::unique_ptr<Engine> engine)
      : ErasureCode(k, r, std::move(coef)), engine_(std::move(engine)) {
    encode_ = engine_->Prepare(coefficients().data(), r, k);
  }

  std::string_view backend() const override { return engine_->name(); }

  absl::Status Encode(absl::Span<const uint8_t* const> data, absl::Span<uint8_t* const> parity,
                      size_t len) const override {
    if (data.size() != static_cast<size_t>(k())) {
      return InvalidArg(absl::StrCat("Encode: ", data.size(), " data blocks, want k=", k()));
    }
    if (parity.size() != static_cast<size_t>(r())) {
      return InvalidArg(absl::StrCat("Encode: ", parity.size(), " parity blocks, want r=", r()));
    }
    for (const uint8_t* p : data) {
      if (p == nullptr) return InvalidArg("Encode: null data pointer");
    }
    for (const uint8_t* p : parity) {
      if (p == nullptr) return InvalidArg("Encode: null parity pointer");
    }
    if (len == 0) return absl::OkStatus();
    return engine_->Apply(*encode_, data.data(), parity.data(), len);
  }

  absl::Status UpdateParity(int q, int j, const uint8_t* delta, uint8_t* parity,
                            size_t len) const override {
    if (q < 0 || q >= r() || j < 0 || j >= k()) {
      return InvalidArg(
          absl::StrCat("UpdateParity: (q=", q, ", j=", j, ") outside r=", r(), ", k=", k()));
    }
    if (delta == nullptr || parity == nullptr) return InvalidArg("UpdateParity: null pointer");
    if (len == 0) return absl::OkStatus();
    return engine_->AccumulateColumn(*encode_, j, q, 1, delta, &parity, len);
  }

  absl::Status Update(int j, const uint8_t* delta, absl::Span<uint8_t* const> parity,
                      size_t len) const override {
    if (j < 0 || j >= k()) return InvalidArg(absl::StrCat("Update: j=", j, " outside k=", k()));
    if (parity.size() != static_cast<size_t>(r())) {
      return InvalidArg(absl::StrCat("Update: ", parity.size(), " parity blocks, want r=", r()));
    }
    if (delta == nullptr) return InvalidArg("Update: null delta");
    for (const uint8_t* p : parity) {
      if (p == nullptr) return InvalidArg("Update: null parity pointer");
    }
    if (len == 0) return absl::OkStatus();
    return engine_->AccumulateColumn(*encode_, j, 0, r(), delta, parity.data(), len);
  }

  absl::Status Decode(absl::Span<const int> available_ids,
                      absl::Span<const uint8_t* const> available, absl::Span<const int> wanted_ids,
                      absl::Span<uint8_t* const> out, size_t len) const override {
    const int n = k() + r();
    if (available_ids.size() != available.size()) {
      return InvalidArg(absl::StrCat("Decode: ", available_ids.size(), " available ids but ",
                                     available.size(), " buffers"));
    }
    if (wanted_ids.size() != out.size()) {
      return InvalidArg(
          absl::StrCat("Decode: ", wanted_ids.size(), " wanted ids but ", out.size(), " buffers"));
    }
    std::array<int, 256> slot;  // member id -> index into `available`, or -1
    slot.fill(-1);
    for (size_t i = 0; i < available_ids.size(); ++i) {
      const int id = available_ids[i];
      if (id < 0 || id >= n) {
        return InvalidArg(absl::StrCat("Decode: available id ", id, " outside [0, ", n, ")"));
      }
      if (slot[id] != -1) return InvalidArg(absl::StrCat("Decode: duplicate available id ", id));
      if (available[i] == nullptr) return InvalidArg("Decode: null available pointer");
      slot[id] = static_cast<int>(i);
    }
    if (available_ids.size() < static_cast<size_t>(k())) {
      return InvalidArg(
          absl::StrCat("Decode: ", available_ids.size(), " members available, need k=", k()));
    }
    std::array<bool, 256> seen{};
    for (size_t i = 0; i < wanted_ids.size(); ++i) {
      const int id = wanted_ids[i];
      if (id < 0 || id >= n) {
        return InvalidArg(absl::StrCat("Decode: wanted id ", id, " outside [0, ", n, ")"));
      }
      if (seen[id]) return InvalidArg(absl::StrCat("Decode: duplicate wanted id ", id));
      if (out[i] == nullptr) return InvalidArg("Decode: null output pointer");
      seen[id] = true;
    }
    if (wanted_ids.empty() || len == 0) return absl::OkStatus();

    // Survivors: the k lowest available ids (data first, so typically fewer parity rows).
    std::string key;
    key.reserve(k() + wanted_ids.size() + 1);
    std::vector<const uint8_t*> src;
    src.reserve(k());
    for (int id = 0; id < n && static_cast<int>(src.size()) < k(); ++id) {
      if (slot[id] < 0) continue;
      key.push_back(static_cast<char>(id));
      src.push_back(available[slot[id]]);
    }
    key.push_back(static_cast<char>(0xff));
    for (int id : wanted_ids) key.push_back(static_cast<char>(id));

    std::shared_ptr<const DecodePlan> plan;
    {
      absl::MutexLock lock(&mu_);
      auto it = plan_cache_.find(key);
      if (it != plan_cache_.end()) plan = it->second;
    }
    if (plan == nullptr) {
      auto built = BuildPlan(key, wanted_ids);
      if (!built.ok()) return built.status();
      plan = *std::move(built);
      absl::MutexLock lock(&mu_);
      if (plan_cache_.size() >= kMaxCachedPatterns) plan_cache_.clear();
      plan_cache_.emplace(key, plan);
    }
    return engine_->Apply(*plan->matrix, src.data(), out.data(), len);
  }

 private:
  // key = survivor ids, 0xff, wanted ids (as built by Decode).
  absl::StatusOr<std::shared_ptr<const DecodePlan>> BuildPlan(
      const std::string& key, absl::Span<const int> wanted_ids) const {
    const int kk = k();
    auto plan = std::make_shared<DecodePlan>();
    for (int i = 0; i < kk; ++i) plan->survivors.push_back(static_cast<uint8_t>(key[i]));
    // Rows of the generator [I; C] for the survivors, inverted: data = inv * survivors.
    std::vector<uint8_t> inv(static_cast<size_t>(kk) * kk, 0);
    for (int i = 0; i < kk; ++i) {
      const int id = plan->survivors[i];
      for (int j = 0; j < kk; ++j) {
        inv[static_cast<size_t>(i) * kk + j] =
            id < kk ? (id == j ? 1 : 0) : coefficient(id - kk, j);
      }
    }
    if (!gf::Invert(inv, kk)) {
      return absl::InternalError("Decode: survivor matrix is singular (not an MDS code?)");
    }
    std::vector<uint8_t> rows(wanted_ids.size() * kk, 0);
    for (size_t w = 0; w < wanted_ids.size(); ++w) {
      const int id = wanted_ids[w];
      uint8_t* row = &rows[w * kk];
      if (id < kk) {
        for (int j = 0; j < kk; ++j) row[j] = inv[static_cast<size_t>(id) * kk + j];
      } else {
        // parity = C[q] * data = (C[q] * inv) * survivors
        for (int t = 0; t < kk; ++t) {
          const uint8_t c = coefficient(id - kk, t);
          for (int j = 0; j < kk; ++j) row[j] ^= gf::Mul(c, inv[static_cast<size_t>(t) * kk + j]);
        }
      }
    }
    plan->matrix = engine_->Prepare(rows.data(), static_cast<int>(wanted_ids.size()), kk);
    return std::shared_ptr<const DecodePlan>(std::move(plan));
  }

  std::unique_ptr<Engine> engine_;
  std::unique_ptr<PreparedMatrix> encode_;
  mutable absl::Mutex mu_;
  mutable absl::flat_hash_map<std::string, std::shared_ptr<const DecodePlan>> plan_cache_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace

ErasureCode::ErasureCode(int k, int r, std::vector<uint8_t> coefficients)
    : k_(k), r_(r), coefficients_(std::move(coefficients)) {}

ErasureCode::~ErasureCode() = default;

uint8_t ErasureCode::coefficient(int q, int j) const {
  if (q < 0 || q >= r_ || j < 0 || j >= k_) return 0;
  return coefficients_[static_cast<size_t>(q) * k_ + j];
}

std::string ErasureCode::AutoBackend() {
  // Measured (docs/codec.md): on x86 with AVX2 the own kernels beat ISA-L's tables; without
  // AVX2, ISA-L's SSE/AVX assembly beats the portable SWAR kernel.
  const std::string_view best = internal::BestEcpsKernel();
  if (best == "ecps-portable") return "isal";
  return std::string(best);
}

std::vector<std::string> ErasureCode::AvailableBackends() {
  std::vector<std::string> names;
  for (const char* name : {"ecps-avx512-gfni", "ecps-avx2-gfni", "ecps-avx2", "ecps-portable"}) {
    if (internal::MakeEcpsEngine(name).ok()) names.emplace_back(name);
  }
  names.emplace_back("isal");
  if (internal::CudaAvailable()) names.emplace_back("cuda");
  return names;
}

absl::StatusOr<std::unique_ptr<ErasureCode>> ErasureCode::Create(int k, int r,
                                                                 std::string_view backend) {
  if (k < 1 || r < 1 || k + r > 255) {
    return absl::InvalidArgumentError(
        absl::StrCat("ErasureCode: need 1 <= k, 1 <= r, k + r <= 255; got k=", k, ", r=", r));
  }
  std::string name(backend);
  if (name == "auto") name = AutoBackend();
  if (name == "ecps") name = std::string(internal::BestEcpsKernel());
  std::unique_ptr<Engine> engine;
  if (name == "isal") {
    engine = internal::MakeIsalEngine();
  } else if (name == "cuda") {
    auto e = internal::MakeCudaEngine();
    if (!e.ok()) return e.status();
    engine = *std::move(e);
  } else if (name.rfind("ecps-", 0) == 0) {
    auto e = internal::MakeEcpsEngine(name);
    if (!e.ok()) return e.status();
    engine = *std::move(e);
  } else {
    return absl::InvalidArgumentError(absl::StrCat("ErasureCode: unknown backend '", name, "'"));
  }
  return std::unique_ptr<ErasureCode>(
      new MatrixErasureCode(k, r, gf::ParityMatrix(k, r), std::move(engine)));
}

}  // namespace ecps::codec
