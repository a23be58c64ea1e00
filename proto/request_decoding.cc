#include "proto/request_decoding.h"

#include <grpcpp/impl/codegen/proto_buffer_reader.h>
#include <grpcpp/impl/codegen/proto_buffer_writer.h>

#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/message.h"
#include "google/protobuf/wire_format_lite.h"

namespace ecps {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::io::CodedInputStream;
using google::protobuf::internal::WireFormatLite;

bool ValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    int extra;
    uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xe0) == 0xc0) {
      extra = 1;
      cp = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      extra = 2;
      cp = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      extra = 3;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + extra >= s.size()) return false;  // cut short
    for (int k = 1; k <= extra; ++k) {
      const unsigned char d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3f);
    }
    // Overlong forms, surrogates and code points past U+10FFFF are not UTF-8.
    if ((extra == 1 && cp < 0x80) || (extra == 2 && cp < 0x800) || (extra == 3 && cp < 0x10000) ||
        (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff) {
      return false;
    }
    i += extra + 1;
  }
  return true;
}

bool IsPackableVarint(const FieldDescriptor* f) {
  switch (f->type()) {
    case FieldDescriptor::TYPE_INT32:
    case FieldDescriptor::TYPE_INT64:
    case FieldDescriptor::TYPE_UINT32:
    case FieldDescriptor::TYPE_UINT64:
    case FieldDescriptor::TYPE_SINT32:
    case FieldDescriptor::TYPE_SINT64:
    case FieldDescriptor::TYPE_BOOL:
    case FieldDescriptor::TYPE_ENUM:
      return true;
    default:
      return false;
  }
}

std::string Walk(std::string_view bytes, const Descriptor* type, const std::string& path,
                 int depth);

// Checks the `body` of the length-delimited `field` at `where` (of the message at `path`,
// `depth` deep): a message walked in turn, a string's UTF-8, a packed list's varints.
// Returns the first problem, or "".
std::string CheckBody(std::string_view body, const FieldDescriptor* field, const std::string& path,
                      const std::string& where, int depth) {
  if (field->type() == FieldDescriptor::TYPE_MESSAGE) {
    return Walk(body, field->message_type(), where, depth + 1);
  }
  if (field->type() == FieldDescriptor::TYPE_STRING && !ValidUtf8(body)) {
    return absl::StrCat("field ", where, ": not valid UTF-8");
  }
  if (field->is_repeated() && IsPackableVarint(field)) {
    CodedInputStream packed(reinterpret_cast<const uint8_t*>(body.data()),
                            static_cast<int>(body.size()));
    for (int i = 0; packed.CurrentPosition() < static_cast<int>(body.size()); ++i) {
      uint64_t v;
      if (!packed.ReadVarint64(&v)) {
        return absl::StrCat("field ",
                            path.empty() ? field->name() : absl::StrCat(path, ".", field->name()),
                            ": packed value ", i, " is a truncated or overlong varint");
      }
    }
  }
  return "";
}

// Walks `bytes` as a `type` message; returns the first problem, or "".
std::string Walk(std::string_view bytes, const Descriptor* type, const std::string& path,
                 int depth) {
  if (depth > 32) return absl::StrCat("field ", path, ": nested too deep");
  CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()),
                      static_cast<int>(bytes.size()));
  std::vector<int> counts(type->field_count(), 0);  // repeated fields seen so far, by index
  while (true) {
    const int at = in.CurrentPosition();
    const uint32_t tag = in.ReadTag();
    if (tag == 0) {
      if (at == static_cast<int>(bytes.size())) return "";
      return absl::StrCat(path.empty() ? "" : absl::StrCat("field ", path, ": "),
                          "invalid tag at byte ", at);
    }
    const int number = WireFormatLite::GetTagFieldNumber(tag);
    const FieldDescriptor* field = type->FindFieldByNumber(number);
    std::string name = field != nullptr ? field->name() : absl::StrCat("#", number);
    if (field != nullptr && field->is_repeated()) {
      absl::StrAppend(&name, "[", counts[field->index()]++, "]");
    }
    const std::string where = path.empty() ? name : absl::StrCat(path, ".", name);
    switch (WireFormatLite::GetTagWireType(tag)) {
      case WireFormatLite::WIRETYPE_VARINT: {
        uint64_t v;
        if (!in.ReadVarint64(&v)) {
          return absl::StrCat("field ", where, ": truncated or overlong varint at byte ", at);
        }
        break;
      }
      case WireFormatLite::WIRETYPE_FIXED64: {
        uint64_t v;
        if (!in.ReadLittleEndian64(&v)) {
          return absl::StrCat("field ", where, ": truncated 8-byte value at byte ", at);
        }
        break;
      }
      case WireFormatLite::WIRETYPE_FIXED32: {
        uint32_t v;
        if (!in.ReadLittleEndian32(&v)) {
          return absl::StrCat("field ", where, ": truncated 4-byte value at byte ", at);
        }
        break;
      }
      case WireFormatLite::WIRETYPE_LENGTH_DELIMITED: {
        uint32_t length;
        if (!in.ReadVarint32(&length)) {
          return absl::StrCat("field ", where, ": truncated length at byte ", at);
        }
        const int left = static_cast<int>(bytes.size()) - in.CurrentPosition();
        if (length > static_cast<uint32_t>(left)) {
          return absl::StrCat("field ", where, ": length ", length, " runs past the end (",
                              left, " bytes left) at byte ", at);
        }
        const std::string_view body = bytes.substr(in.CurrentPosition(), length);
        in.Skip(static_cast<int>(length));
        if (field == nullptr) break;
        std::string problem = CheckBody(body, field, path, where, depth);
        if (!problem.empty()) return problem;
        break;
      }
      case WireFormatLite::WIRETYPE_START_GROUP:
      case WireFormatLite::WIRETYPE_END_GROUP:
        return absl::StrCat("field ", where, ": group wire type at byte ", at,
                            " (ecps messages have no groups)");
      default:
        return absl::StrCat("field ", where, ": invalid wire type ",
                            static_cast<int>(WireFormatLite::GetTagWireType(tag)), " at byte ", at);
    }
  }
}

}  // namespace

std::string FindDecodeError(std::string_view bytes, const Descriptor* type) {
  return Walk(bytes, type, "", 0);
}

grpc::Status DecodeRequest(grpc::ByteBuffer* buffer, grpc::protobuf::MessageLite* msg) {
  if (buffer == nullptr) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "no request");
  {
    grpc::ProtoBufferReader reader(buffer);
    if (!reader.status().ok()) return reader.status();
    if (msg->ParseFromZeroCopyStream(&reader)) {
      buffer->Clear();
      return grpc::Status::OK;
    }
  }
  // Slow path, for a request that is refused anyway: copy it out and find the broken field.
  std::vector<grpc::Slice> slices;
  std::string bytes;
  if (buffer->Dump(&slices).ok()) {
    for (const grpc::Slice& s : slices) {
      bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
    }
  }
  buffer->Clear();
  const auto* message = dynamic_cast<const google::protobuf::Message*>(msg);
  const std::string type = message != nullptr ? message->GetDescriptor()->full_name()
                                              : msg->GetTypeName();
  std::string why = message != nullptr ? FindDecodeError(bytes, message->GetDescriptor()) : "";
  if (why.empty()) why = "not a valid protobuf encoding";
  // A request that does not decode is the sender's fault; a response, the peer's.
  const bool request = absl::EndsWith(type, "Request") || type == "ecps.v1.ParityDeltaBatch";
  return grpc::Status(request ? grpc::StatusCode::INVALID_ARGUMENT : grpc::StatusCode::INTERNAL,
                      absl::StrCat("cannot decode ", type, " (", bytes.size(), " bytes): ", why));
}

}  // namespace ecps

namespace grpc {

Status SerializationTraits<grpc::protobuf::MessageLite, void>::Serialize(
    const grpc::protobuf::MessageLite& msg, ByteBuffer* bb, bool* own_buffer) {
  return GenericSerialize<ProtoBufferWriter, grpc::protobuf::MessageLite>(msg, bb, own_buffer);
}

Status SerializationTraits<grpc::protobuf::MessageLite, void>::Deserialize(
    ByteBuffer* buffer, grpc::protobuf::MessageLite* msg) {
  return ::ecps::DecodeRequest(buffer, msg);
}

}  // namespace grpc
