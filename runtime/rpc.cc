#include "runtime/rpc.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "grpcpp/health_check_service_interface.h"
#include "proto/ecps.pb.h"
#include "runtime/error_kind.h"
#include "runtime/metrics.h"

namespace ecps {

namespace {
// A gRPC status's error details as ToGrpcStatus writes them: the mark, then the error's kind
// (runtime/error_kind.h) when it has one: "ecps:answered" or "ecps:answered;kind=stale_epoch".
constexpr std::string_view kAnsweredDetails = "ecps:answered";
constexpr std::string_view kKindField = ";kind=";
constexpr char kAnsweredPayload[] = "type.googleapis.com/ecps.AnsweredByPeer";
}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  std::string details(kAnsweredDetails);
  if (const ErrorKind kind = ErrorKindOf(status); kind != ErrorKind::kNone) {
    details.append(kKindField);
    details.append(ErrorKindName(kind));
  }
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()),
                      std::move(details));
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  absl::Status converted(static_cast<absl::StatusCode>(status.error_code()),
                         status.error_message());
  if (!AnsweredByPeer(status)) return converted;
  converted.SetPayload(kAnsweredPayload, absl::Cord("1"));
  const std::string details = status.error_details();  // a copy: gRPC returns it by value
  const std::string_view rest = std::string_view(details).substr(kAnsweredDetails.size());
  if (rest.substr(0, kKindField.size()) == kKindField) {
    converted = WithErrorKind(std::move(converted), ErrorKindNamed(rest.substr(kKindField.size())));
  }
  return converted;
}

bool AnsweredByPeer(const grpc::Status& status) {
  if (status.ok()) return false;
  const std::string details = status.error_details();  // a copy: gRPC returns it by value
  const std::string_view view = details;
  return view == kAnsweredDetails ||
         (view.substr(0, kAnsweredDetails.size()) == kAnsweredDetails &&
          view.substr(kAnsweredDetails.size(), kKindField.size()) == kKindField);
}

absl::Status AnsweredByPeerStatus(absl::StatusCode code, std::string_view message) {
  absl::Status status(code, absl::string_view(message.data(), message.size()));
  if (!status.ok()) status.SetPayload(kAnsweredPayload, absl::Cord("1"));
  return status;
}

bool AnsweredByPeer(const absl::Status& status) {
  return !status.ok() && status.GetPayload(kAnsweredPayload).has_value();
}

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address, Role peer,
                                           const TlsIdentity* tls) {
  grpc::ChannelArguments args;
  // The peer's certificate must name the role: its CN (security.h), checked as gRPC checks a
  // host name. Hosts are not named in the certificates, so one certificate serves a role on
  // any host.
  if (tls != nullptr) args.SetSslTargetNameOverride(RoleName(peer));
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  // Reconnect fast after a peer restarts: recovery depends on it.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 50);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  // gRPC also takes this as the least time one connection attempt (TCP, the TLS handshake,
  // HTTP/2's SETTINGS) may take. At 50 ms a TLS handshake on a loaded machine (the suite under
  // ASan, two at a time) failed every attempt; a peer that refuses still fails at once, and
  // the retries still start 50 ms apart.
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 2000);
  return grpc::CreateCustomChannel(address, ChannelCredentialsFor(tls), args);
}

bool WaitForConnection(grpc::Channel* channel, std::chrono::system_clock::time_point deadline) {
  grpc_connectivity_state state = channel->GetState(/*try_to_connect=*/true);
  bool attempted = false;
  while (state != GRPC_CHANNEL_READY) {
    if (state == GRPC_CHANNEL_TRANSIENT_FAILURE && attempted) return false;
    if (state == GRPC_CHANNEL_CONNECTING) attempted = true;
    if (!channel->WaitForStateChange(state, deadline)) return false;
    state = channel->GetState(/*try_to_connect=*/true);
  }
  return true;
}

RetryPolicy RpcRetryPolicy(const RpcOptions& options) {
  RetryPolicy policy;
  policy.initial_backoff = std::chrono::milliseconds(options.initial_backoff_ms);
  policy.multiplier = 2;
  policy.max_backoff = std::chrono::milliseconds(options.max_backoff_ms);
  policy.max_attempts = std::max(1, options.max_attempts);
  policy.codes = {absl::StatusCode::kUnavailable};
  return policy;
}

absl::Status CallWithRetry(const RpcOptions& options,
                           const std::function<grpc::Status(grpc::ClientContext*)>& call) {
  return RetryUntilDone(RpcRetryPolicy(options), [&] {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::milliseconds(options.deadline_ms));
    return FromGrpcStatus(call(&context));
  });
}

void FillHeader(v1::RequestHeader* header, std::string_view token, uint64_t epoch,
                std::string_view sender) {
  header->set_token(std::string(token));
  header->set_epoch(epoch);
  header->set_sender(std::string(sender));
}

CoordinatorStamp StampOf(const v1::ClusterMap& map) { return {map.epoch(), map.term()}; }

void FillHeader(v1::RequestHeader* header, std::string_view token, const CoordinatorStamp& stamp,
                std::string_view sender) {
  FillHeader(header, token, stamp.epoch, sender);
  header->set_term(stamp.term);
}

absl::StatusOr<GrpcServer> StartGrpcServer(const std::string& host, int port,
                                           const std::vector<grpc::Service*>& services,
                                           int threads, const TlsIdentity* tls) {
  GrpcServer result;
  // grpc.health.v1 on every server (runtime/health.h); a process-wide switch read when a
  // server is built, so every server of the process has it.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
  // gRPC starts a thread whenever fewer than MIN_POLLERS wait for work and ends one whenever
  // more than MAX_POLLERS do. With a narrow band, bursts of calls (a push waiting on parity
  // acks while delta batches arrive) create and destroy threads all the time, each new stack
  // faulting in fresh pages; a wide band keeps idle threads for the next burst.
  const int pollers = std::max(1, threads);
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MIN_POLLERS, pollers);
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MAX_POLLERS,
                              std::max(8, 4 * pollers));
  std::string listen = host + ":" + std::to_string(port);
  builder.AddListeningPort(listen, ServerCredentialsFor(tls), &result.port);
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(RpcMetricsInterceptor());  // requests and latency, for /metrics
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  for (grpc::Service* service : services) builder.RegisterService(service);
  if (services.empty()) {
    result.unimplemented = std::make_unique<grpc::CallbackGenericService>();
    builder.RegisterCallbackGenericService(result.unimplemented.get());
  }
  result.server = builder.BuildAndStart();
  if (result.server == nullptr || result.port == 0) {
    return absl::UnavailableError("could not listen on " + listen);
  }
  result.address = host + ":" + std::to_string(result.port);
  return result;
}

absl::Status SplitHostPort(const std::string& address, std::string* host, int* port) {
  size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) {
    return absl::InvalidArgumentError("address '" + address + "' is not host:port");
  }
  *host = address.substr(0, colon);
  if (!absl::SimpleAtoi(address.substr(colon + 1), port) || *port < 0 || *port > 65535) {
    return absl::InvalidArgumentError("address '" + address + "' has a bad port");
  }
  return absl::OkStatus();
}

}  // namespace ecps
