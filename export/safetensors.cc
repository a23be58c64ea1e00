#include "export/safetensors.h"

#include <bit>
#include <set>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace ecps {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; this build writes memory as it is");

namespace {

// Bytes of one element, 0 for an unknown dtype.
int64_t ElementBytes(const std::string& dtype) {
  if (dtype == "F32") return 4;
  if (dtype == "I64") return 8;
  return 0;
}

absl::StatusOr<int64_t> TensorBytes(const SafetensorsTensor& t) {
  const int64_t element = ElementBytes(t.dtype);
  if (element == 0) {
    return absl::InvalidArgumentError(absl::StrCat("safetensors: tensor ", t.name, ": dtype '",
                                                   t.dtype,
                                                   "' is not one this writer knows (F32, I64)"));
  }
  constexpr int64_t kMaxBytes = int64_t{1} << 62;
  int64_t bytes = element;
  for (int64_t d : t.shape) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("safetensors: tensor ", t.name, ": negative dimension ", d));
    }
    if (d > 0 && bytes > kMaxBytes / d) {
      return absl::InvalidArgumentError(
          absl::StrCat("safetensors: tensor ", t.name, ": larger than 2^62 bytes"));
    }
    bytes *= d;
  }
  return bytes;
}

}  // namespace

int64_t SafetensorsPlan::file_bytes() const {
  return data_start() + (begin.empty() ? 0 : begin.back() + bytes.back());
}

absl::StatusOr<SafetensorsPlan> PlanSafetensors(
    const std::vector<SafetensorsTensor>& tensors,
    const std::map<std::string, std::string>& metadata) {
  SafetensorsPlan plan;
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string> names;
  int64_t offset = 0;
  for (const SafetensorsTensor& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__" || !names.insert(t.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("safetensors: tensor name '", t.name, "' is empty, reserved or repeated"));
    }
    absl::StatusOr<int64_t> bytes = TensorBytes(t);
    if (!bytes.ok()) return bytes.status();
    header[t.name] = {
        {"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + *bytes}}};
    plan.begin.push_back(offset);
    plan.bytes.push_back(*bytes);
    offset += *bytes;
  }
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');  // 8 + json is a multiple of 8
  const uint64_t n = json.size();
  plan.header.resize(8);
  for (int i = 0; i < 8; ++i) plan.header[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  plan.header += json;
  return plan;
}

absl::StatusOr<std::unique_ptr<SafetensorsWriter>> SafetensorsWriter::Start(
    std::unique_ptr<ByteSink> sink, const std::vector<SafetensorsTensor>& tensors,
    const std::map<std::string, std::string>& metadata) {
  absl::StatusOr<SafetensorsPlan> plan = PlanSafetensors(tensors, metadata);
  if (!plan.ok()) return plan.status();
  if (absl::Status s = sink->Append(plan->header); !s.ok()) return s;
  return std::unique_ptr<SafetensorsWriter>(
      new SafetensorsWriter(std::move(sink), *std::move(plan)));
}

absl::Status SafetensorsWriter::Append(absl::string_view bytes) {
  const int64_t total = plan_.file_bytes() - plan_.data_start();
  if (written_ + static_cast<int64_t>(bytes.size()) > total) {
    return absl::FailedPreconditionError(absl::StrCat("safetensors: ", written_ + bytes.size(),
                                                      " data bytes written, past the ", total,
                                                      " the header declares"));
  }
  written_ += static_cast<int64_t>(bytes.size());
  return sink_->Append(bytes);
}

absl::Status SafetensorsWriter::AppendFloats(const float* values, int64_t n) {
  return Append(absl::string_view(reinterpret_cast<const char*>(values),
                                  static_cast<size_t>(n) * sizeof(float)));
}

absl::Status SafetensorsWriter::Finish() {
  const int64_t total = plan_.file_bytes() - plan_.data_start();
  if (written_ != total) {
    return absl::FailedPreconditionError(
        absl::StrCat("safetensors: ", written_, " of ", total, " data bytes written"));
  }
  return sink_->Close();
}

}  // namespace ecps
