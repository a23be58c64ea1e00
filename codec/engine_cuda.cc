// The "cuda" engine: wraps the absl-free CUDA library (codec/cuda) in the Engine interface.
#include <string>
#include <vector>

#include "codec/engine.h"

#ifdef ECPS_CODEC_HAVE_CUDA
#include "codec/cuda/gf_cuda.h"
#endif

namespace ecps::codec::internal {

#ifdef ECPS_CODEC_HAVE_CUDA
namespace {

class CudaMatrix final : public PreparedMatrix {
 public:
  CudaMatrix(const uint8_t* coef, int rows, int cols)
      : rows_(rows), cols_(cols), coef_(coef, coef + static_cast<size_t>(rows) * cols) {}
  int rows() const { return rows_; }
  int cols() const { return cols_; }
  const uint8_t* coef() const { return coef_.data(); }

 private:
  int rows_;
  int cols_;
  std::vector<uint8_t> coef_;
};

absl::Status ToStatus(cuda::Error e) {
  switch (e) {
    case cuda::Error::kOk:
      return absl::OkStatus();
    case cuda::Error::kNoDevice:
      return absl::UnavailableError("cuda: no CUDA device");
    case cuda::Error::kInvalidArgument:
      return absl::InvalidArgumentError("cuda: invalid argument");
    case cuda::Error::kCuda:
      break;
  }
  return absl::InternalError(std::string("cuda: ") + cuda::ErrorName(e));
}

class CudaEngine final : public Engine {
 public:
  explicit CudaEngine(std::unique_ptr<cuda::HostStagedCoder> coder) : coder_(std::move(coder)) {}
  std::string_view name() const override { return "cuda"; }
  std::unique_ptr<PreparedMatrix> Prepare(const uint8_t* coef, int rows, int cols) const override {
    return std::make_unique<CudaMatrix>(coef, rows, cols);
  }
  absl::Status Apply(const PreparedMatrix& pm, const uint8_t* const* src, uint8_t* const* dst,
                     size_t len) const override {
    const auto& m = static_cast<const CudaMatrix&>(pm);
    return ToStatus(coder_->Apply(m.coef(), m.rows(), m.cols(), src, dst, len, false));
  }
  absl::Status AccumulateColumn(const PreparedMatrix& pm, int col, int row0, int rows,
                                const uint8_t* src, uint8_t* const* dst,
                                size_t len) const override {
    const auto& m = static_cast<const CudaMatrix&>(pm);
    std::vector<uint8_t> column(rows);
    for (int q = 0; q < rows; ++q) column[q] = m.coef()[(row0 + q) * m.cols() + col];
    return ToStatus(coder_->Apply(column.data(), rows, 1, &src, dst, len, true));
  }

 private:
  std::unique_ptr<cuda::HostStagedCoder> coder_;  // internally locked
};

}  // namespace

bool CudaAvailable() { return cuda::DeviceCount() > 0; }

absl::StatusOr<std::unique_ptr<Engine>> MakeCudaEngine() {
  std::unique_ptr<cuda::HostStagedCoder> coder;
  if (cuda::Error e = cuda::HostStagedCoder::Create(&coder); e != cuda::Error::kOk) {
    return ToStatus(e);
  }
  return std::make_unique<CudaEngine>(std::move(coder));
}

#else  // !ECPS_CODEC_HAVE_CUDA

bool CudaAvailable() { return false; }

absl::StatusOr<std::unique_ptr<Engine>> MakeCudaEngine() {
  return absl::UnavailableError("cuda: ecps was built without CUDA");
}

#endif

}  // namespace ecps::codec::internal
