// Where `ecps export` writes its files: a sequential stream of bytes behind one small
// interface, so the writers (safetensors, ONNX, manifest) are tested against memory and a
// test can fail a write part way through.
#ifndef ECPS_EXPORT_BYTE_SINK_H_
#define ECPS_EXPORT_BYTE_SINK_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ecps {

// A destination written front to back. Not thread-safe.
class ByteSink {
 public:
  virtual ~ByteSink() = default;
  // Appends `bytes`. A non-OK result leaves the sink unusable; its message names the file.
  virtual absl::Status Append(absl::string_view bytes) = 0;
  // Makes what was appended durable and closes the sink (no Append after it).
  virtual absl::Status Close() = 0;
};

// A new file at `path`, created exclusively (mode 0644): ALREADY_EXISTS naming it when
// something is there; other failures INTERNAL with the errno text. Close() fdatasyncs it.
// A sink destroyed without Close() closes the descriptor and leaves the file as it is.
absl::StatusOr<std::unique_ptr<ByteSink>> CreateFileSink(const std::string& path);

// Memory: what was appended is in *out (owned by the caller, which outlives the sink).
// With fail_after >= 0 the Append that would take the total past fail_after bytes fails
// (INTERNAL "memory sink: write failed"), for tests of a failing disk.
std::unique_ptr<ByteSink> MemorySink(std::string* out, int64_t fail_after = -1);

}  // namespace ecps

#endif  // ECPS_EXPORT_BYTE_SINK_H_
