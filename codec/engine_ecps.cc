// The ecps-* engines: own GEMM kernels (gf_kernels_*.cc) behind runtime CPU dispatch.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "codec/engine.h"
#include "codec/gf_kernels.h"

namespace ecps::codec::internal {
namespace {

class EcpsMatrix final : public PreparedMatrix {
 public:
  EcpsMatrix(const uint8_t* coef, int rows, int cols) : rows_(rows), cols_(cols) {
    coefs_.reserve(static_cast<size_t>(rows) * cols);
    all_ones_ = true;
    for (int i = 0; i < rows * cols; ++i) {
      coefs_.push_back(PrepareCoef(coef[i]));
      all_ones_ = all_ones_ && coef[i] == 1;
    }
  }
  MatrixView Full() const { return {coefs_.data(), rows_, cols_, cols_, 1, all_ones_}; }
  const PreparedCoef* at(int row, int col) const {
    return coefs_.data() + static_cast<size_t>(row) * cols_ + col;
  }
  int cols() const { return cols_; }

 private:
  int rows_;
  int cols_;
  bool all_ones_;
  std::vector<PreparedCoef> coefs_;
};

class EcpsEngine final : public Engine {
 public:
  EcpsEngine(std::string name, ApplyFn apply, AccumulateFn accumulate)
      : name_(std::move(name)), apply_(apply), accumulate_(accumulate) {}
  std::string_view name() const override { return name_; }
  std::unique_ptr<PreparedMatrix> Prepare(const uint8_t* coef, int rows, int cols) const override {
    return std::make_unique<EcpsMatrix>(coef, rows, cols);
  }
  absl::Status Apply(const PreparedMatrix& m, const uint8_t* const* src, uint8_t* const* dst,
                     size_t len) const override {
    apply_(static_cast<const EcpsMatrix&>(m).Full(), src, dst, len, /*accumulate=*/false);
    return absl::OkStatus();
  }
  absl::Status AccumulateColumn(const PreparedMatrix& m, int col, int row0, int rows,
                                const uint8_t* src, uint8_t* const* dst,
                                size_t len) const override {
    const auto& em = static_cast<const EcpsMatrix&>(m);
    accumulate_(em.at(row0, col), em.cols(), rows, src, dst, len);
    return absl::OkStatus();
  }

 private:
  std::string name_;
  ApplyFn apply_;
  AccumulateFn accumulate_;
};

#ifdef ECPS_CODEC_X86
bool HasAvx2() { return __builtin_cpu_supports("avx2"); }
bool HasGfni() { return __builtin_cpu_supports("gfni"); }
bool HasAvx512() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl");
}
#endif

}  // namespace

std::string_view BestEcpsKernel() {
#ifdef ECPS_CODEC_X86
  if (HasAvx512() && HasGfni()) return "ecps-avx512-gfni";
  if (HasAvx2() && HasGfni()) return "ecps-avx2-gfni";
  if (HasAvx2()) return "ecps-avx2";
#endif
  return "ecps-portable";
}

absl::StatusOr<std::unique_ptr<Engine>> MakeEcpsEngine(std::string_view name) {
  ApplyFn fn = nullptr;
  AccumulateFn acc = nullptr;
  bool supported = false;
  if (name == "ecps-portable") {
    fn = &ApplyPortable;
    acc = &AccumulatePortable;
    supported = true;
  }
#ifdef ECPS_CODEC_X86
  if (name == "ecps-avx2") {
    fn = &ApplyAvx2;
    acc = &AccumulateAvx2;
    supported = HasAvx2();
  } else if (name == "ecps-avx2-gfni") {
    fn = &ApplyAvx2Gfni;
    acc = &AccumulateAvx2Gfni;
    supported = HasAvx2() && HasGfni();
  } else if (name == "ecps-avx512-gfni") {
    fn = &ApplyAvx512Gfni;
    acc = &AccumulateAvx512Gfni;
    supported = HasAvx512() && HasGfni();
  }
#endif
  if (fn == nullptr) {
    return absl::InvalidArgumentError("unknown ecps kernel: " + std::string(name));
  }
  if (!supported) {
    return absl::UnavailableError("this CPU cannot run " + std::string(name));
  }
  return std::make_unique<EcpsEngine>(std::string(name), fn, acc);
}

}  // namespace ecps::codec::internal
