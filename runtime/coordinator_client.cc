#include "runtime/coordinator_client.h"

#include <unistd.h>

#include <chrono>

#include "spdlog/spdlog.h"

namespace ecps {

std::string MakeInstanceId() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                std::chrono::system_clock::now().time_since_epoch())
                .count();
  return std::to_string(getpid()) + "@" + host + ":" + std::to_string(ns);
}

CoordinatorClient::CoordinatorClient(const std::string& address, std::string token,
                                     std::string sender, int rpc_timeout_ms)
    : channel_(MakeChannel(address)),
      stub_(v1::Coordinator::NewStub(channel_)),
      token_(std::move(token)),
      sender_(std::move(sender)),
      rpc_timeout_ms_(rpc_timeout_ms) {}

CoordinatorClient::~CoordinatorClient() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    if (watch_context_ != nullptr) watch_context_->TryCancel();
  }
  changed_.notify_all();
  if (watcher_.joinable()) watcher_.join();
}

uint64_t CoordinatorClient::epoch() const {
  std::lock_guard<std::mutex> lock(mu_);
  return map_.epoch();
}

absl::StatusOr<v1::RegisterResponse> CoordinatorClient::Register(v1::Role role,
                                                                 const std::string& address,
                                                                 int requested_id,
                                                                 const std::string& instance,
                                                                 int wait_ms) {
  v1::RegisterRequest request;
  FillHeader(request.mutable_header(), token_, 0, sender_);
  request.set_role(role);
  request.set_address(address);
  request.set_requested_id(requested_id);
  request.set_instance(instance);
  request.set_pid(getpid());
  v1::RegisterResponse response;
  RpcOptions options;
  options.deadline_ms = rpc_timeout_ms_;
  options.max_attempts = std::max(1, wait_ms / 200);
  options.max_backoff_ms = 200;
  absl::Status status = CallWithRetry(options, [&](grpc::ClientContext* ctx) {
    ctx->set_wait_for_ready(true);
    return stub_->Register(ctx, request, &response);
  });
  if (!status.ok()) return status;
  std::lock_guard<std::mutex> lock(mu_);
  if (response.map().epoch() >= map_.epoch()) map_ = response.map();
  return response;
}

absl::StatusOr<v1::HeartbeatResponse> CoordinatorClient::Heartbeat(
    const v1::HeartbeatRequest& request) {
  v1::HeartbeatResponse response;
  RpcOptions options;
  options.deadline_ms = rpc_timeout_ms_;
  options.max_attempts = 1;
  absl::Status status = CallWithRetry(
      options, [&](grpc::ClientContext* ctx) { return stub_->Heartbeat(ctx, request, &response); });
  if (!status.ok()) return status;
  return response;
}

absl::Status CoordinatorClient::ReportFailure(v1::Role role, int id, const std::string& reason,
                                             const std::string& address) {
  v1::ReportFailureRequest request;
  FillHeader(request.mutable_header(), token_, epoch(), sender_);
  request.set_role(role);
  request.set_id(id);
  request.set_reason(reason);
  request.set_address(address);
  v1::ReportFailureResponse response;
  RpcOptions options;
  options.deadline_ms = rpc_timeout_ms_;
  return CallWithRetry(options, [&](grpc::ClientContext* ctx) {
    return stub_->ReportFailure(ctx, request, &response);
  });
}

void CoordinatorClient::ReportServerUnreachable(int id, const std::string& reason,
                                                const std::string& address) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto now = std::chrono::steady_clock::now();
    auto [it, inserted] = last_report_.try_emplace(std::make_pair(id, address), now);
    if (!inserted) {
      if (now - it->second < std::chrono::seconds(1)) return;
      it->second = now;
    }
  }
  ReportFailure(v1::ROLE_SERVER, id, reason, address).IgnoreError();
}

absl::StatusOr<v1::StatusResponse> CoordinatorClient::Status() {
  v1::StatusRequest request;
  FillHeader(request.mutable_header(), token_, epoch(), sender_);
  v1::StatusResponse response;
  RpcOptions options;
  options.deadline_ms = rpc_timeout_ms_;
  options.max_attempts = 2;
  absl::Status status = CallWithRetry(
      options, [&](grpc::ClientContext* ctx) { return stub_->Status(ctx, request, &response); });
  if (!status.ok()) return status;
  return response;
}

void CoordinatorClient::StartWatch() {
  std::lock_guard<std::mutex> lock(mu_);
  if (watcher_.joinable()) return;
  watcher_ = std::thread([this] { WatchLoop(); });
}

void CoordinatorClient::WatchLoop() {
  int backoff_ms = 20;
  while (true) {
    grpc::ClientContext context;
    v1::WatchClusterMapRequest request;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;
      watch_context_ = &context;
      FillHeader(request.mutable_header(), token_, map_.epoch(), sender_);
    }
    auto reader = stub_->WatchClusterMap(&context, request);
    v1::ClusterMap map;
    while (reader->Read(&map)) {
      backoff_ms = 20;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (map.epoch() >= map_.epoch()) map_ = map;
      }
      changed_.notify_all();
    }
    grpc::Status status = reader->Finish();
    {
      std::lock_guard<std::mutex> lock(mu_);
      watch_context_ = nullptr;
      if (stopping_) return;
    }
    if (status.error_code() == grpc::StatusCode::UNAUTHENTICATED) {
      spdlog::error("cluster map watch refused: {}", status.error_message());
      return;
    }
    std::unique_lock<std::mutex> lock(mu_);
    changed_.wait_for(lock, std::chrono::milliseconds(backoff_ms), [this] { return stopping_; });
    backoff_ms = std::min(1000, backoff_ms * 2);
  }
}

v1::ClusterMap CoordinatorClient::map() const {
  std::lock_guard<std::mutex> lock(mu_);
  return map_;
}

absl::StatusOr<v1::ClusterMap> CoordinatorClient::WaitForMap(
    const std::function<bool(const v1::ClusterMap&)>& ready, int timeout_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  bool ok = changed_.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                              [&] { return stopping_ || ready(map_); });
  if (!ok || stopping_) {
    return absl::DeadlineExceededError("cluster map not ready after " +
                                       std::to_string(timeout_ms) + " ms (epoch " +
                                       std::to_string(map_.epoch()) + ")");
  }
  return map_;
}

}  // namespace ecps
