// A safetensors file (https://huggingface.co/docs/safetensors), written as a stream:
//
//   8 bytes     N, the header's length (uint64, little-endian)
//   N bytes     a JSON object: per tensor {"dtype": "F32", "shape": [...],
//               "data_offsets": [begin, end]} (byte offsets into the data that follows),
//               and "__metadata__": {string: string}; padded with spaces so that the data
//               starts at a multiple of 8 bytes
//   data        every tensor's bytes, little-endian, row-major, in the order given, no gaps
//
// The whole header is known before any data (shapes and dtypes are), so a table of any size
// is written row block by row block without holding it in memory.
#ifndef ECPS_EXPORT_SAFETENSORS_H_
#define ECPS_EXPORT_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "export/byte_sink.h"

namespace ecps {

struct SafetensorsTensor {
  std::string name;            // unique, not "__metadata__"
  std::string dtype;           // "F32" or "I64"
  std::vector<int64_t> shape;  // every dimension >= 0; {} is a scalar
};

// The file's header and where each tensor's bytes lie.
struct SafetensorsPlan {
  std::string header;                 // the 8-byte length and the padded JSON
  std::vector<int64_t> begin, bytes;  // per tensor: offset from the start of the data, size
  int64_t data_start() const { return static_cast<int64_t>(header.size()); }
  int64_t file_bytes() const;
};

// INVALID_ARGUMENT naming the tensor for an empty or duplicate name, an unknown dtype, a
// negative dimension or a size past 2^62 bytes.
absl::StatusOr<SafetensorsPlan> PlanSafetensors(const std::vector<SafetensorsTensor>& tensors,
                                                const std::map<std::string, std::string>& metadata);

// Writes one file through a sink: the header at Start, then the tensors' bytes in order.
// Not thread-safe.
class SafetensorsWriter {
 public:
  // Plans the file and writes its header. Errors: PlanSafetensors', the sink's.
  static absl::StatusOr<std::unique_ptr<SafetensorsWriter>> Start(
      std::unique_ptr<ByteSink> sink, const std::vector<SafetensorsTensor>& tensors,
      const std::map<std::string, std::string>& metadata);

  // The next bytes of the data (they may cross from one tensor into the next).
  // FAILED_PRECONDITION when they go past the last tensor's end; the sink's errors.
  absl::Status Append(absl::string_view bytes);
  absl::Status AppendFloats(const float* values, int64_t n);

  // FAILED_PRECONDITION "safetensors: N of M data bytes written" when data is missing;
  // otherwise closes the sink (its errors).
  absl::Status Finish();

  const SafetensorsPlan& plan() const { return plan_; }

 private:
  SafetensorsWriter(std::unique_ptr<ByteSink> sink, SafetensorsPlan plan)
      : sink_(std::move(sink)), plan_(std::move(plan)) {}

  std::unique_ptr<ByteSink> sink_;
  SafetensorsPlan plan_;
  int64_t written_ = 0;  // data bytes so far
};

}  // namespace ecps

#endif  // ECPS_EXPORT_SAFETENSORS_H_
