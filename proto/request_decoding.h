// Requests that do not decode get INVALID_ARGUMENT naming the field, not gRPC's bare
// INTERNAL with an empty message.
//
// gRPC decodes a request through grpc::SerializationTraits<Request> before any handler runs.
// This header specializes it: the fast path is gRPC's own
// (protobuf parses the received buffer in place); only a request that fails to parse is
// walked field by field to say which field is broken and why. It is force-included into the
// generated ecps.grpc.pb.cc (proto/CMakeLists.txt), where the handlers and stubs are
// instantiated, so it must come before any other include there. Responses keep gRPC's
// traits.
#ifndef ECPS_PROTO_REQUEST_DECODING_H_
#define ECPS_PROTO_REQUEST_DECODING_H_

#include <string>
#include <string_view>

#include <grpcpp/impl/codegen/proto_utils.h>

namespace google {
namespace protobuf {
class Descriptor;
}  // namespace protobuf
}  // namespace google

namespace ecps {

// Parses `buffer` into `msg` (a google::protobuf::Message); on failure INVALID_ARGUMENT
// "cannot decode ecps.v1.PushRequest: field tables[0].rows: truncated varint at byte 17"
// for a request (a server receiving it), INTERNAL with the same text for a response.
grpc::Status DecodeRequest(grpc::ByteBuffer* buffer, grpc::protobuf::MessageLite* msg);

// What is wrong with `bytes` as a `type` message, e.g. "field header.token: not valid
// UTF-8"; empty when the walk finds nothing (then the caller says so generically).
std::string FindDecodeError(std::string_view bytes, const google::protobuf::Descriptor* type);

}  // namespace ecps

// The generated code decodes every message as a MessageLite (grpc_cpp_plugin passes
// MessageLite as the handlers' and stubs' base type), so this one specialization covers
// every ecps request and response. Its members are defined (not inline) in
// request_decoding.cc.
namespace grpc {
template <>
class SerializationTraits<grpc::protobuf::MessageLite, void> {
 public:
  static Status Serialize(const grpc::protobuf::MessageLite& msg, ByteBuffer* bb,
                          bool* own_buffer);
  static Status Deserialize(ByteBuffer* buffer, grpc::protobuf::MessageLite* msg);
};
}  // namespace grpc

#endif  // ECPS_PROTO_REQUEST_DECODING_H_
