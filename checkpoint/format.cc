#include "checkpoint/format.h"

#include <bit>
#include <climits>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/hash.h"

namespace ecps {

static_assert(std::endian::native == std::endian::little,
              "the checkpoint format is little-endian; add byte swapping for this host");
static_assert(sizeof(float) == 4);

std::string CheckpointDirName(int64_t step) { return absl::StrFormat("step-%09d", step); }
std::string TableFileName(int table) { return absl::StrFormat("table-%03d.rows", table); }
std::string DenseFileName(int tensor) { return absl::StrFormat("dense-%03d.bin", tensor); }

int64_t TableFileBytes(const CheckpointLayout& layout, int table) {
  return layout.table_rows[table] * layout.payload_floats * 4;
}
int64_t DenseFileBytes(const CheckpointLayout& layout, int tensor) {
  return kDenseHeaderBytes + (layout.dense_sizes[tensor] + layout.dense_state_floats[tensor]) * 4;
}

absl::Status ValidateLayout(const CheckpointLayout& l) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max() / 8;
  if (l.step < 0) return absl::InvalidArgumentError(absl::StrCat("step is ", l.step, " < 0"));
  if (l.dim < 1) return absl::InvalidArgumentError(absl::StrCat("embedding_dim is ", l.dim));
  if (l.payload_floats < l.dim) {
    return absl::InvalidArgumentError(
        absl::StrCat("payload_floats is ", l.payload_floats, ", less than embedding_dim ", l.dim));
  }
  if (l.table_rows.size() > INT_MAX || l.dense_sizes.size() > INT_MAX) {
    return absl::InvalidArgumentError("too many tables or dense tensors");
  }
  for (size_t t = 0; t < l.table_rows.size(); ++t) {
    if (l.table_rows[t] < 1 || l.table_rows[t] > kMax / l.payload_floats) {
      return absl::InvalidArgumentError(
          absl::StrCat("table ", t, " has ", l.table_rows[t], " rows"));
    }
  }
  if (l.dense_state_floats.size() != l.dense_sizes.size()) {
    return absl::InvalidArgumentError(absl::StrCat(l.dense_sizes.size(), " dense tensors but ",
                                                   l.dense_state_floats.size(),
                                                   " optimizer-state sizes"));
  }
  for (size_t d = 0; d < l.dense_sizes.size(); ++d) {
    if (l.dense_sizes[d] < 1 || l.dense_sizes[d] > kMax || l.dense_state_floats[d] < 0 ||
        l.dense_state_floats[d] > kMax - l.dense_sizes[d]) {
      return absl::InvalidArgumentError(absl::StrCat("dense tensor ", d, " has size ",
                                                     l.dense_sizes[d], " and state_floats ",
                                                     l.dense_state_floats[d]));
    }
  }
  return absl::OkStatus();
}

uint64_t RowChecksum(int64_t row, const float* payload, int payload_floats) {
  return Hash64(payload, static_cast<size_t>(payload_floats) * 4, static_cast<uint64_t>(row));
}

uint64_t CombineChecksums(const std::vector<uint64_t>& partials) {
  uint64_t c = 0;
  for (uint64_t p : partials) c ^= p;
  return c;
}

std::string HexChecksum(uint64_t checksum) { return absl::StrFormat("%016x", checksum); }

}  // namespace ecps
