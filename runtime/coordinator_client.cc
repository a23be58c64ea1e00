#include "runtime/coordinator_client.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "runtime/net.h"
#include "runtime/retry_policy.h"
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

namespace {

// The candidates of an address list. Callers check the list (cli/main.cc, the spec); one that
// does not split is one address, whose calls then fail naming it.
std::vector<std::string> Candidates(const std::string& address) {
  absl::StatusOr<std::vector<std::string>> list = SplitDialAddresses(address);
  if (!list.ok() || list->empty()) return {address};
  return *std::move(list);
}

// Registering: 50 ms doubling to 1 s (once per round of the candidates), for `wait_ms`, while
// nobody answers (UNAVAILABLE, DEADLINE_EXCEEDED: not started yet, not resolvable yet).
RetryPolicy RegisterRetry(int wait_ms) {
  RetryPolicy policy;
  policy.initial_backoff = std::chrono::milliseconds(50);
  policy.multiplier = 2;
  policy.max_backoff = std::chrono::milliseconds(1000);
  policy.deadline = std::chrono::milliseconds(wait_ms);
  policy.codes = {absl::StatusCode::kUnavailable, absl::StatusCode::kDeadlineExceeded};
  return policy;
}

// The map watch: opened again after 20 ms doubling to 1 s (back to 20 ms once a map arrives),
// for as long as the client lives, whatever ended the stream but a refused credential.
RetryPolicy WatchRetry() {
  RetryPolicy policy;
  policy.initial_backoff = std::chrono::milliseconds(20);
  policy.multiplier = 2;
  policy.max_backoff = std::chrono::milliseconds(1000);
  policy.codes = StatusCodeSet::AllErrors().Without(absl::StatusCode::kUnauthenticated);
  return policy;
}

bool NoAnswer(const grpc::Status& status) {
  return status.error_code() == grpc::StatusCode::UNAVAILABLE ||
         status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
}

}  // namespace

CoordinatorClient::CoordinatorClient(const std::string& address, std::string token,
                                     std::string sender, int rpc_timeout_ms,
                                     std::string address_file)
    : addresses_(Candidates(address)),
      finder_(addresses_.front(), std::move(address_file)),
      token_(std::move(token)),
      sender_(std::move(sender)),
      rpc_timeout_ms_(rpc_timeout_ms) {
  absl::MutexLock lock(&dial_mu_);
  channels_.resize(addresses_.size());
  stubs_.resize(addresses_.size());
  for (size_t i = 0; i < addresses_.size(); ++i) DialLocked(i, addresses_[i]);
}

CoordinatorClient::~CoordinatorClient() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    if (watch_context_ != nullptr) watch_context_->TryCancel();
  }
  if (watcher_.joinable()) watcher_.join();
}

std::string CoordinatorClient::address() const {
  absl::MutexLock lock(&dial_mu_);
  return addresses_[current_];
}

void CoordinatorClient::DialLocked(size_t index, const std::string& address) {
  addresses_[index] = address;
  channels_[index] = MakeChannel(address, Role::kCoordinator);
  stubs_[index] = v1::Coordinator::NewStub(channels_[index]);
}

CoordinatorClient::Dial CoordinatorClient::Current() const {
  absl::MutexLock lock(&dial_mu_);
  return Dial{current_, addresses_[current_], channels_[current_], stubs_[current_],
              addresses_.size() > 1};
}

std::string CoordinatorClient::CandidatesText() const {
  absl::MutexLock lock(&dial_mu_);
  return absl::StrJoin(addresses_, ",");
}

uint64_t CoordinatorClient::Moves() const {
  absl::MutexLock lock(&dial_mu_);
  return moves_;
}

bool CoordinatorClient::MoveOn(size_t index, const std::string& why) {
  absl::MutexLock lock(&dial_mu_);
  // Another call moved on from this candidate already (the watch and the heartbeats fail
  // together): once is enough.
  if (current_ != index) return true;
  const std::string before = addresses_[index];
  // 1. The address file: a coordinator that took over, or was relaunched, wrote it. Naming
  // the candidate that failed, it tells nothing new.
  std::optional<std::string> named = finder_.Refresh();
  if (named.has_value() && *named != before) {
    const auto known = std::find(addresses_.begin(), addresses_.end(), *named);
    if (known != addresses_.end()) {
      current_ = known - addresses_.begin();
    } else {
      // Calls in flight finish on the old channel; every later one, and the map watch's next
      // stream, goes to the new address.
      DialLocked(index, *named);
    }
    ++moves_;
    spdlog::warn("{}: the coordinator moved from {} to {} ({}); dialling the new address",
                 sender_, before, *named, finder_.address_file());
    return true;
  }
  // 2. The next candidate.
  if (addresses_.size() < 2) return false;
  current_ = (index + 1) % addresses_.size();
  ++moves_;
  // One line per outage (until some coordinator answers), not one per attempt.
  if (!moving_on_) {
    moving_on_ = true;
    spdlog::info("{}: the coordinator at {} {}; trying {}", sender_, before, why,
                 addresses_[current_]);
  }
  return true;
}

grpc::Status CoordinatorClient::CallCurrent(
    const std::function<grpc::Status(v1::Coordinator::Stub*)>& call, size_t* dialled) {
  const Dial dial = Current();
  if (dialled != nullptr) *dialled = dial.index;
  // With several candidates a call fails fast; the connection it needs is awaited here.
  if (dial.several && !WaitForConnection(dial.channel.get(), std::chrono::system_clock::now() +
                                                                 std::chrono::seconds(1))) {
    MoveOn(dial.index, "does not answer");
    return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        "the coordinator at " + dial.address + " does not answer");
  }
  grpc::Status status = call(dial.stub.get());
  if (status.ok()) {
    absl::MutexLock lock(&dial_mu_);
    if (moving_on_ && current_ == dial.index) {
      moving_on_ = false;
      spdlog::info("{}: the coordinator at {} answers", sender_, addresses_[dial.index]);
    }
  } else if (NoAnswer(status)) {
    MoveOn(dial.index, "does not answer");
  }
  return status;
}

uint64_t CoordinatorClient::epoch() const {
  absl::MutexLock lock(&mu_);
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
  // With one candidate, wait_for_ready holds each attempt until the channel connects (or its
  // deadline), so an attempt is cheap while nothing listens; with several, an attempt fails
  // fast on one that does not listen (a standby) and the next attempt tries the next. A
  // coordinator that answers with an error other than UNAVAILABLE is there: its answer stands.
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::milliseconds(wait_ms);
  auto next_note = start + std::chrono::seconds(5);
  Retrier retrier(RegisterRetry(wait_ms));
  absl::Status status;
  while (true) {
    const bool several = Current().several;
    const auto attempt_end = std::min(
        deadline,
        Clock::now() + std::chrono::milliseconds(std::min(rpc_timeout_ms_, several ? 1000 : 5000)));
    status = FromGrpcStatus(CallCurrent([&](v1::Coordinator::Stub* stub) {
      grpc::ClientContext ctx;
      ctx.set_wait_for_ready(!several);
      ctx.set_deadline(std::chrono::system_clock::now() + (attempt_end - Clock::now()));
      return stub->Register(&ctx, request, &response);
    }));
    if (!retrier.policy().Retries(status)) break;
    if (!retrier.CountAttempt()) {
      status = absl::DeadlineExceededError(absl::StrFormat(
          "the coordinator at %s did not answer within %.0f s (cluster.connect_timeout_s): %s",
          CandidatesText(), wait_ms / 1000.0, status.message()));
      break;
    }
    if (const auto now = Clock::now(); now >= next_note) {
      spdlog::info("{}: waiting for the coordinator at {} ({:.0f} s of {:.0f} s): {}", sender_,
                   CandidatesText(), std::chrono::duration<double>(now - start).count(),
                   wait_ms / 1000.0, std::string(status.message()));
      next_note = now + std::chrono::seconds(10);
    }
    retrier.Hold();
    // Every candidate gets an attempt before the backoff grows.
    if (Current().index == 0) retrier.Grow();
  }
  if (!status.ok()) return status;
  absl::MutexLock lock(&mu_);
  TakeMapLocked(response.map());
  return response;
}

absl::StatusOr<v1::HeartbeatResponse> CoordinatorClient::Heartbeat(
    const v1::HeartbeatRequest& request) {
  v1::HeartbeatResponse response;
  RpcOptions options;
  options.deadline_ms = rpc_timeout_ms_;
  options.max_attempts = 1;
  size_t dialled = 0;
  absl::Status status = CallWithRetry(options, [&](grpc::ClientContext* ctx) {
    return CallCurrent(
        [&](v1::Coordinator::Stub* stub) { return stub->Heartbeat(ctx, request, &response); },
        &dialled);
  });
  if (!status.ok()) return status;
  // A deposed coordinator's answer counts as none: the role backs off and keeps its grace,
  // and asks the coordinator that took over (the address file's, the next candidate) next.
  if (absl::Status fenced = term_fence_.Check(response.term()); !fenced.ok()) {
    MoveOn(dialled, absl::StrCat("answers as term ", response.term(), ", deposed"));
    return fenced;
  }
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
    return CallCurrent(
        [&](v1::Coordinator::Stub* stub) { return stub->ReportFailure(ctx, request, &response); });
  });
}

void CoordinatorClient::ReportServerUnreachable(int id, const std::string& reason,
                                                const std::string& address) {
  {
    absl::MutexLock lock(&mu_);
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
  auto call = [&](grpc::ClientContext* ctx) {
    return CallCurrent(
        [&](v1::Coordinator::Stub* stub) { return stub->Status(ctx, request, &response); });
  };
  const uint64_t moves = Moves();
  absl::Status status = CallWithRetry(options, call);
  // Moved on: the coordinator now dialled is asked at once (an operator's one status, the
  // launcher's poll), once.
  if ((absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status)) && Moves() != moves) {
    status = CallWithRetry(options, call);
  }
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
  return CallWithRetry(options, [&](grpc::ClientContext* ctx) {
    return CallCurrent(
        [&](v1::Coordinator::Stub* stub) { return stub->Kill(ctx, request, &response); });
  });
}

void CoordinatorClient::StartWatch() {
  absl::MutexLock lock(&mu_);
  if (watcher_.joinable()) return;
  watcher_ = std::thread([this] { WatchLoop(); });
}

void CoordinatorClient::WatchLoop() {
  Retrier retrier(WatchRetry());
  while (true) {
    grpc::ClientContext context;
    v1::WatchClusterMapRequest request;
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
      watch_context_ = &context;
      FillHeader(request.mutable_header(), token_, map_.epoch(), sender_);
    }
    const Dial dial = Current();
    auto reader = dial.stub->WatchClusterMap(&context, request);
    v1::ClusterMap map;
    while (reader->Read(&map)) {
      retrier.Reset();
      {
        absl::MutexLock lock(&mu_);
        TakeMapLocked(map);
      }
    }
    grpc::Status status = reader->Finish();
    {
      absl::MutexLock lock(&mu_);
      watch_context_ = nullptr;
      if (stopping_) return;
    }
    if (!status.ok() && !retrier.policy().Retries(FromGrpcStatus(status))) {
      spdlog::error("cluster map watch refused: {}", status.error_message());
      return;
    }
    if (NoAnswer(status)) MoveOn(dial.index, "does not answer");
    // A stream that ended (OK) is opened again as after an error.
    const auto wait = retrier.NextBackoff();
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(absl::Condition(&stopping_), absl::FromChrono(wait));
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
  absl::MutexLock lock(&mu_);
  return map_;
}

absl::StatusOr<v1::ClusterMap> CoordinatorClient::WaitForMap(
    const std::function<bool(const v1::ClusterMap&)>& ready, int timeout_ms) {
  absl::MutexLock lock(&mu_);
  // Waiters on mu_ are woken by every release of it (a new map, stopping).
  auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || ready(map_); };
  const bool ok = mu_.AwaitWithTimeout(absl::Condition(&done), absl::Milliseconds(timeout_ms));
  if (!ok || stopping_) {
    return absl::DeadlineExceededError("cluster map not ready after " +
                                       std::to_string(timeout_ms) + " ms (epoch " +
                                       std::to_string(map_.epoch()) + ")");
  }
  return map_;
}

}  // namespace ecps
