#include "runtime/health.h"

#include <chrono>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/health_check_service_interface.h"
#include "runtime/rpc.h"

namespace ecps {
namespace {

constexpr char kCheckMethod[] = "/grpc.health.v1.Health/Check";

// HealthCheckRequest and HealthCheckResponse have one field each (a string; an enum), so
// they are written and read here rather than generated: no second copy of grpc's health
// proto in the build, and no clash with the one inside libgrpc++.
std::string EncodeCheckRequest(const std::string& service) {
  std::string out;
  if (service.empty()) return out;  // proto3: the default value is not written
  out.push_back(0x0a);              // field 1, length-delimited
  for (uint64_t n = service.size();; n >>= 7) {
    if (n < 0x80) {
      out.push_back(static_cast<char>(n));
      break;
    }
    out.push_back(static_cast<char>((n & 0x7f) | 0x80));
  }
  return out + service;
}

absl::StatusOr<HealthStatus> DecodeCheckResponse(const std::string& bytes) {
  // Field 1 (varint) is the status; a reply without it is UNKNOWN (proto3 default).
  uint64_t status = 0;
  size_t i = 0;
  while (i < bytes.size()) {
    const uint8_t tag = static_cast<uint8_t>(bytes[i++]);
    if (tag != 0x08) {
      return absl::DataLossError(absl::StrCat("unexpected field tag ", tag, " in a health reply"));
    }
    status = 0;
    for (int shift = 0;; shift += 7) {
      if (i >= bytes.size() || shift > 63) {
        return absl::DataLossError("truncated status in a health reply");
      }
      const uint8_t b = static_cast<uint8_t>(bytes[i++]);
      status |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) break;
    }
  }
  if (status > 3) return absl::DataLossError(absl::StrCat("health status ", status, " unknown"));
  return static_cast<HealthStatus>(status);
}

}  // namespace

const char* ToString(HealthStatus status) {
  switch (status) {
    case HealthStatus::kServing:
      return "SERVING";
    case HealthStatus::kNotServing:
      return "NOT_SERVING";
    case HealthStatus::kServiceUnknown:
      return "SERVICE_UNKNOWN";
    case HealthStatus::kUnknown:
      break;
  }
  return "UNKNOWN";
}

void SetHealth(grpc::Server* server, const std::string& service, bool serving) {
  if (server == nullptr) return;
  if (grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService()) {
    health->SetServingStatus(service, serving);
  }
}

absl::StatusOr<HealthStatus> CheckHealth(const std::string& address, Role peer,
                                         const std::string& service, int deadline_ms,
                                         const TlsIdentity* tls) {
  grpc::GenericStub stub(MakeChannel(address, peer, tls));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(deadline_ms));
  const std::string request_bytes = EncodeCheckRequest(service);
  grpc::Slice slice(request_bytes);
  grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer response;
  grpc::Status rpc_status;
  absl::Notification done;
  stub.UnaryCall(&context, kCheckMethod, grpc::StubOptions(), &request, &response,
                 [&](grpc::Status s) {
                   rpc_status = std::move(s);
                   done.Notify();
                 });
  done.WaitForNotification();  // the context's deadline bounds the wait
  if (!rpc_status.ok()) return FromGrpcStatus(rpc_status);
  std::vector<grpc::Slice> slices;
  if (grpc::Status dumped = response.Dump(&slices); !dumped.ok()) return FromGrpcStatus(dumped);
  std::string bytes;
  for (const grpc::Slice& s : slices) {
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return DecodeCheckResponse(bytes);
}

}  // namespace ecps
