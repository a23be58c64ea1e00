// The "isal" engine: Intel ISA-L's table-driven ec_encode_data / ec_encode_data_update.
#include <isa-l/erasure_code.h>

#include <algorithm>
#include <climits>
#include <vector>

#include "codec/engine.h"

namespace ecps::codec::internal {
namespace {

// ISA-L takes int lengths; longer calls are split.
constexpr size_t kMaxChunk = size_t{1} << 30;

class IsalMatrix final : public PreparedMatrix {
 public:
  IsalMatrix(const uint8_t* coef, int rows, int cols)
      : rows_(rows), cols_(cols), tables_(static_cast<size_t>(32) * rows * cols) {
    std::vector<uint8_t> a(coef, coef + static_cast<size_t>(rows) * cols);
    ec_init_tables(cols, rows, a.data(), tables_.data());
  }
  int rows() const { return rows_; }
  int cols() const { return cols_; }
  // ISA-L never writes through the table pointer; its API is just not const-correct.
  uint8_t* tables(int row0) const {
    return const_cast<uint8_t*>(tables_.data()) + static_cast<size_t>(32) * row0 * cols_;
  }

 private:
  int rows_;
  int cols_;
  std::vector<uint8_t> tables_;
};

class IsalEngine final : public Engine {
 public:
  std::string_view name() const override { return "isal"; }
  std::unique_ptr<PreparedMatrix> Prepare(const uint8_t* coef, int rows, int cols) const override {
    return std::make_unique<IsalMatrix>(coef, rows, cols);
  }
  absl::Status Apply(const PreparedMatrix& pm, const uint8_t* const* src, uint8_t* const* dst,
                     size_t len) const override {
    const auto& m = static_cast<const IsalMatrix&>(pm);
    std::vector<uint8_t*> s(m.cols()), d(m.rows());
    for (size_t off = 0; off < len; off += kMaxChunk) {
      const size_t n = std::min(kMaxChunk, len - off);
      for (int j = 0; j < m.cols(); ++j) s[j] = const_cast<uint8_t*>(src[j]) + off;
      for (int q = 0; q < m.rows(); ++q) d[q] = dst[q] + off;
      ec_encode_data(static_cast<int>(n), m.cols(), m.rows(), m.tables(0), s.data(), d.data());
    }
    return absl::OkStatus();
  }
  absl::Status AccumulateColumn(const PreparedMatrix& pm, int col, int row0, int rows,
                                const uint8_t* src, uint8_t* const* dst,
                                size_t len) const override {
    const auto& m = static_cast<const IsalMatrix&>(pm);
    uint8_t* d[256];
    for (size_t off = 0; off < len; off += kMaxChunk) {
      const size_t n = std::min(kMaxChunk, len - off);
      for (int q = 0; q < rows; ++q) d[q] = dst[q] + off;
      ec_encode_data_update(static_cast<int>(n), m.cols(), rows, col, m.tables(row0),
                            const_cast<uint8_t*>(src) + off, d);
    }
    return absl::OkStatus();
  }
};

}  // namespace

std::unique_ptr<Engine> MakeIsalEngine() { return std::make_unique<IsalEngine>(); }

}  // namespace ecps::codec::internal
