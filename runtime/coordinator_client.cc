#include "runtime/coordinator_client.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/status_macros.h"
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
                                     std::string sender, int rpc_timeout_ms,
                                     std::string address_file)
    : finder_(address, std::move(address_file)),
      stub_(v1::Coordinator::NewStub(MakeChannel(address, Role::kCoordinator))),
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

std::string CoordinatorClient::address() const {
  std::lock_guard<std::mutex> lock(dial_mu_);
  return finder_.address();
}

std::shared_ptr<v1::Coordinator::Stub> CoordinatorClient::stub() const {
  std::lock_guard<std::mutex> lock(dial_mu_);
  return stub_;
}

bool CoordinatorClient::FindMoved(const absl::Status& failed) {
  if (!absl::IsUnavailable(failed) && !absl::IsDeadlineExceeded(failed)) return false;
  std::lock_guard<std::mutex> lock(dial_mu_);
  const std::string before = finder_.address();
  std::optional<std::string> moved = finder_.Refresh();
  if (!moved.has_value()) return false;
  // Calls in flight finish on the old channel; every later one, and the map watch's next
  // stream, goes to the new address.
  stub_ = v1::Coordinator::NewStub(MakeChannel(*moved, Role::kCoordinator));
  spdlog::warn("{}: the coordinator moved from {} to {} ({}); dialling the new address", sender_,
               before, *moved, finder_.address_file());
  return true;
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
  request.set_metrics_address(metrics_address_);
  v1::RegisterResponse response;
  // Roles may start in any order (Slurm steps, Kubernetes pods): until the coordinator
  // answers, keep trying, with backoff, until `wait_ms` has passed, and say what we wait for.
  // wait_for_ready holds each attempt until the channel connects (or its deadline), so an
  // attempt is cheap while nothing listens. A coordinator that answers with an error other
  // than UNAVAILABLE is there: its answer stands.
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::milliseconds(wait_ms);
  auto next_note = start + std::chrono::seconds(5);
  int backoff_ms = 50;
  absl::Status status;
  while (true) {
    grpc::ClientContext ctx;
    ctx.set_wait_for_ready(true);
    const auto attempt_end =
        std::min(deadline, Clock::now() + std::chrono::milliseconds(std::min(rpc_timeout_ms_, 5000)));
    ctx.set_deadline(std::chrono::system_clock::now() + (attempt_end - Clock::now()));
    status = FromGrpcStatus(stub()->Register(&ctx, request, &response));
    if (!absl::IsUnavailable(status) && !absl::IsDeadlineExceeded(status)) break;
    FindMoved(status);
    const auto now = Clock::now();
    if (now >= deadline) {
      status = absl::DeadlineExceededError(absl::StrFormat(
          "the coordinator at %s did not answer within %.0f s (cluster.connect_timeout_s): %s",
          this->address(), wait_ms / 1000.0, status.message()));
      break;
    }
    if (now >= next_note) {
      spdlog::info("{}: waiting for the coordinator at {} ({:.0f} s of {:.0f} s): {}", sender_,
                   this->address(), std::chrono::duration<double>(now - start).count(),
                   wait_ms / 1000.0, std::string(status.message()));
      next_note = now + std::chrono::seconds(10);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(
        std::min<int64_t>(backoff_ms, std::chrono::duration_cast<std::chrono::milliseconds>(
                                          deadline - now).count())));
    backoff_ms = std::min(backoff_ms * 2, 1000);
  }
  if (!status.ok()) return status;
  std::lock_guard<std::mutex> lock(mu_);
  TakeMapLocked(response.map());
  return response;
}

absl::StatusOr<v1::HeartbeatResponse> CoordinatorClient::Heartbeat(
    const v1::HeartbeatRequest& request) {
  v1::HeartbeatResponse response;
  RpcOptions options;
  options.deadline_ms = rpc_timeout_ms_;
  options.max_attempts = 1;
  absl::Status status = CallWithRetry(options, [&](grpc::ClientContext* ctx) {
    return stub()->Heartbeat(ctx, request, &response);
  });
  if (!status.ok()) {
    FindMoved(status);
    return status;
  }
  // A deposed coordinator's answer counts as none: the role backs off and keeps its grace.
  RETURN_IF_ERROR(term_fence_.Check(response.term()));
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
  absl::Status status = CallWithRetry(options, [&](grpc::ClientContext* ctx) {
    return stub()->ReportFailure(ctx, request, &response);
  });
  FindMoved(status);
  return status;
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
  auto call = [&](grpc::ClientContext* ctx) { return stub()->Status(ctx, request, &response); };
  absl::Status status = CallWithRetry(options, call);
  // Moved: the new address is asked at once (an operator's one status, the launcher's poll).
  if (!status.ok() && FindMoved(status)) status = CallWithRetry(options, call);
  if (!status.ok()) return status;
  return response;
}

absl::Status CoordinatorClient::Kill(v1::Role role, int id) {
  v1::KillRequest request;
  FillHeader(request.mutable_header(), token_, epoch(), sender_);
  request.set_role(role);
  request.set_id(id);
  v1::KillResponse response;
  RpcOptions options;
  options.deadline_ms = rpc_timeout_ms_;
  options.max_attempts = 3;
  absl::Status status = CallWithRetry(
      options, [&](grpc::ClientContext* ctx) { return stub()->Kill(ctx, request, &response); });
  FindMoved(status);
  return status;
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
    auto reader = stub()->WatchClusterMap(&context, request);
    v1::ClusterMap map;
    while (reader->Read(&map)) {
      backoff_ms = 20;
      {
        std::lock_guard<std::mutex> lock(mu_);
        TakeMapLocked(map);
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
    FindMoved(FromGrpcStatus(status));
    std::unique_lock<std::mutex> lock(mu_);
    changed_.wait_for(lock, std::chrono::milliseconds(backoff_ms), [this] { return stopping_; });
    backoff_ms = std::min(1000, backoff_ms * 2);
  }
}

bool NewerMap(const v1::ClusterMap& held, const v1::ClusterMap& offered) {
  if (offered.term() != held.term()) return offered.term() > held.term();
  return offered.epoch() >= held.epoch();
}

void CoordinatorClient::TakeMapLocked(const v1::ClusterMap& map) {
  if (absl::Status deposed = term_fence_.Check(map.term()); !deposed.ok()) {
    spdlog::warn("{}: ignored a cluster map (epoch {}): {}", sender_, map.epoch(),
                 std::string(deposed.message()));
    return;
  }
  if (NewerMap(map_, map)) map_ = map;
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
