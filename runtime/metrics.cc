#include "runtime/metrics.h"

#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"
#include "spdlog/spdlog.h"

namespace ecps {
namespace {

prometheus::MetricFamily NewFamily(const std::string& name, const std::string& help,
                                   prometheus::MetricType type) {
  prometheus::MetricFamily family;
  family.name = name;
  family.help = help;
  family.type = type;
  return family;
}

// The registry of the figures counted as they happen (today: the RPC interceptor's), one per
// process: every endpoint of the process serves it.
prometheus::Registry& ProcessRegistry() {
  static auto* const registry = new prometheus::Registry();
  return *registry;
}

const char* GrpcCodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK: return "OK";
    case grpc::StatusCode::CANCELLED: return "Canceled";
    case grpc::StatusCode::UNKNOWN: return "Unknown";
    case grpc::StatusCode::INVALID_ARGUMENT: return "InvalidArgument";
    case grpc::StatusCode::DEADLINE_EXCEEDED: return "DeadlineExceeded";
    case grpc::StatusCode::NOT_FOUND: return "NotFound";
    case grpc::StatusCode::ALREADY_EXISTS: return "AlreadyExists";
    case grpc::StatusCode::PERMISSION_DENIED: return "PermissionDenied";
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return "ResourceExhausted";
    case grpc::StatusCode::FAILED_PRECONDITION: return "FailedPrecondition";
    case grpc::StatusCode::ABORTED: return "Aborted";
    case grpc::StatusCode::OUT_OF_RANGE: return "OutOfRange";
    case grpc::StatusCode::UNIMPLEMENTED: return "Unimplemented";
    case grpc::StatusCode::INTERNAL: return "Internal";
    case grpc::StatusCode::UNAVAILABLE: return "Unavailable";
    case grpc::StatusCode::DATA_LOSS: return "DataLoss";
    case grpc::StatusCode::UNAUTHENTICATED: return "Unauthenticated";
    default: return "Unknown";
  }
}

struct RpcFamilies {
  prometheus::Family<prometheus::Counter>* handled;
  prometheus::Family<prometheus::Histogram>* handling;
};

const RpcFamilies& Rpc() {
  static const RpcFamilies* const families = new RpcFamilies{
      &prometheus::BuildCounter()
           .Name("ecps_grpc_server_handled_total")
           .Help("RPCs this process's gRPC servers completed, by service, method and status code")
           .Register(ProcessRegistry()),
      &prometheus::BuildHistogram()
           .Name("ecps_grpc_server_handling_seconds")
           .Help("Time from receiving an RPC to sending its status, by service and method")
           .Register(ProcessRegistry()),
  };
  return *families;
}

// Connections an endpoint closed without answering, by why: with the RPC families in the
// process's registry, so every endpoint of the process serves them. Made with the first
// endpoint, so that a scrape shows each reason from 0.
struct DroppedConnections {
  prometheus::Counter* deadline;   // the whole request and reply took longer than allowed
  prometheus::Counter* evicted;    // the oldest open one when a new one came past the cap
  prometheus::Counter* oversized;  // its request's headers ran past kMaxRequestBytes
};

const DroppedConnections& Dropped() {
  static const DroppedConnections* const dropped = [] {
    auto& family = prometheus::BuildCounter()
                       .Name("ecps_metrics_connections_dropped_total")
                       .Help(
                           "Connections to /metrics closed unanswered: past their deadline, "
                           "evicted by a newer one past the cap, or with an oversized request")
                       .Register(ProcessRegistry());
    return new DroppedConnections{&family.Add({{"reason", "deadline"}}),
                                  &family.Add({{"reason", "evicted"}}),
                                  &family.Add({{"reason", "oversized"}})};
  }();
  return *dropped;
}

// A request's headers at most; Prometheus' GET takes a few hundred bytes.
constexpr size_t kMaxRequestBytes = 16 << 10;
// How often the loop wakes, at the least, to see whether the endpoint is being destroyed.
constexpr std::chrono::milliseconds kStopCheck{100};

// Buckets from 100 us (a pull from memory on loopback) to 30 s (a rebuild read under load).
const prometheus::Histogram::BucketBoundaries& LatencyBuckets() {
  static const auto* const buckets = new prometheus::Histogram::BucketBoundaries{
      0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
      0.1,    0.25,    0.5,    1,     2.5,    5,     10,   30};
  return *buckets;
}

// One method's series, found once per process: Family::Add locks its family and builds a
// label map, and doing that twice per RPC held about 2% of a busy server's CPU.
class MethodSeries {
 public:
  MethodSeries(std::string service, std::string method)
      : service_(std::move(service)),
        method_(std::move(method)),
        handling_(&Rpc().handling->Add({{"grpc_service", service_}, {"grpc_method", method_}},
                                       LatencyBuckets())) {}

  prometheus::Histogram& handling() { return *handling_; }
  // The counter of calls that ended with `code`, made at its first use (codes a method never
  // returned have no series).
  prometheus::Counter& handled(grpc::StatusCode code) {
    const int c = static_cast<int>(code);
    const size_t i = c >= 0 && c < static_cast<int>(kCodes) ? static_cast<size_t>(c)
                                                             : static_cast<size_t>(grpc::UNKNOWN);
    prometheus::Counter* counter = handled_[i].load(std::memory_order_acquire);
    if (counter == nullptr) {
      absl::MutexLock lock(&mu_);
      counter = handled_[i].load(std::memory_order_relaxed);
      if (counter == nullptr) {
        counter = &Rpc().handled->Add(
            {{"grpc_service", service_},
             {"grpc_method", method_},
             {"grpc_code", GrpcCodeName(static_cast<grpc::StatusCode>(i))}});
        handled_[i].store(counter, std::memory_order_release);
      }
    }
    return *counter;
  }

  // The series of "/ecps.v1.ParameterServer/Pull": service "ecps.v1.ParameterServer", method
  // "Pull". Thread-safe; the series live as long as the process. The method is the caller's
  // to name (a server answers any name, if only with Unimplemented), so the names are capped:
  // past kMaxMethods, calls to a name not seen yet count under service and method "other".
  static MethodSeries& Of(absl::string_view full) {
    static absl::Mutex mu(absl::kConstInit);
    static auto* const known =
        new absl::flat_hash_map<std::string, std::unique_ptr<MethodSeries>>();
    absl::MutexLock lock(&mu);
    auto it = known->find(full);
    if (it != known->end()) return *it->second;
    if (known->size() >= kMaxMethods) {
      static MethodSeries* const other = [] {
        spdlog::warn("RPC metrics: more than {} method names called; further new ones are "
                     "counted as grpc_method=\"other\"", kMaxMethods);
        return new MethodSeries("other", "other");
      }();
      return *other;
    }
    absl::string_view name = full;
    if (!name.empty() && name[0] == '/') name.remove_prefix(1);
    const size_t slash = name.find('/');
    auto series = std::make_unique<MethodSeries>(
        std::string(name.substr(0, slash)),
        slash == absl::string_view::npos ? "" : std::string(name.substr(slash + 1)));
    return *known->emplace(std::string(full), std::move(series)).first->second;
  }

 private:
  static constexpr size_t kCodes = 17;  // grpc::StatusCode's OK .. UNAUTHENTICATED
  // Far above the methods of every ecps service together (about 40).
  static constexpr size_t kMaxMethods = 256;
  const std::string service_;
  const std::string method_;
  prometheus::Histogram* const handling_;
  absl::Mutex mu_;
  std::array<std::atomic<prometheus::Counter*>, kCodes> handled_{};
};

class RpcMetrics : public grpc::experimental::Interceptor {
 public:
  explicit RpcMetrics(grpc::experimental::ServerRpcInfo* info)
      : start_(std::chrono::steady_clock::now()),
        series_(&MethodSeries::Of(info->method() != nullptr ? info->method() : "")) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_STATUS)) {
      const grpc::Status status = methods->GetSendStatus();
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
      series_->handled(status.error_code()).Increment();
      series_->handling().Observe(seconds);
    }
    methods->Proceed();
  }

 private:
  std::chrono::steady_clock::time_point start_;
  MethodSeries* series_;
};

class RpcMetricsFactory : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new RpcMetrics(info);
  }
};

}  // namespace

const char* RoleLabel(v1::Role role) {
  switch (role) {
    case v1::ROLE_COORDINATOR:
      return "coordinator";
    case v1::ROLE_SERVER:
      return "server";
    case v1::ROLE_WORKER:
      return "worker";
    default:
      return "unknown";
  }
}

const char* PhaseName(v1::JobPhase phase) {
  switch (phase) {
    case v1::JOB_STARTING: return "starting";
    case v1::JOB_RUNNING: return "running";
    case v1::JOB_RECOVERING: return "recovering";
    case v1::JOB_FINISHED: return "finished";
    case v1::JOB_FAILED: return "failed";
    default: return "unknown";
  }
}

void MetricsBuilder::Gauge(const std::string& name, const std::string& help) {
  families_.push_back(NewFamily(name, help, prometheus::MetricType::Gauge));
}

void MetricsBuilder::Counter(const std::string& name, const std::string& help) {
  families_.push_back(NewFamily(name, help, prometheus::MetricType::Counter));
}

void MetricsBuilder::Add(double value, const MetricLabels& labels) {
  if (families_.empty()) return;  // a sample without a family: a bug of the caller
  prometheus::MetricFamily& family = families_.back();
  prometheus::ClientMetric metric;
  for (const auto& [name, label_value] : labels) metric.label.push_back({name, label_value});
  if (family.type == prometheus::MetricType::Counter) {
    metric.counter.value = value;
  } else {
    metric.gauge.value = value;
  }
  family.metric.push_back(std::move(metric));
}

void MetricsBuilder::Gauge(const std::string& name, const std::string& help, double value,
                           const MetricLabels& labels) {
  Gauge(name, help);
  Add(value, labels);
}

void MetricsBuilder::Counter(const std::string& name, const std::string& help, double value,
                             const MetricLabels& labels) {
  Counter(name, help);
  Add(value, labels);
}

std::string MetricsText(const std::vector<prometheus::MetricFamily>& families) {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, families);
  return out.str();
}

struct MetricsEndpoint::Connection {
  Connection(int fd, std::chrono::steady_clock::time_point deadline) : fd(fd), deadline(deadline) {}

  int fd;
  std::chrono::steady_clock::time_point deadline;
  std::string request;  // as received, until its blank line
  std::string reply;    // once the request is whole
  size_t sent = 0;      // of the reply

  bool closed() const { return fd < 0; }
  void Close() {
    close(fd);
    fd = -1;
  }
};

absl::StatusOr<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(
    const std::string& host, int port, const MetricsEndpointOptions& options) {
  if (options.deadline <= std::chrono::milliseconds::zero() || options.max_connections < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("/metrics needs a positive deadline and connection cap, not ",
                     options.deadline.count(), " ms and ", options.max_connections));
  }
  // The families exist from the start: a scrape before the first RPC or drop shows them.
  Rpc();
  Dropped();
  const std::string where = absl::StrCat(
      host.find(':') != std::string::npos ? absl::StrCat("[", host, "]") : host, ":", port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found); rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve /metrics on ", where, ": ", gai_strerror(rc)));
  }
  std::unique_ptr<MetricsEndpoint> endpoint(new MetricsEndpoint(options));
  std::string error = "no address";
  for (addrinfo* a = found; a != nullptr && endpoint->listen_fd_ < 0; a = a->ai_next) {
    const int fd =
        socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    // The kernel completes handshakes while the loop is busy with a scrape; a short backlog
    // full of a flood's connections would make a scraper's connect wait for a SYN retry.
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, SOMAXCONN) == 0) {
      endpoint->listen_fd_ = fd;
    } else {
      error = std::strerror(errno);
      close(fd);
    }
  }
  freeaddrinfo(found);
  if (endpoint->listen_fd_ < 0) {
    return absl::UnavailableError(absl::StrCat("cannot serve /metrics on ", where, ": ", error));
  }
  sockaddr_storage bound{};
  socklen_t length = sizeof(bound);
  getsockname(endpoint->listen_fd_, reinterpret_cast<sockaddr*>(&bound), &length);
  endpoint->port_ = ntohs(bound.ss_family == AF_INET6
                              ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                              : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  endpoint->thread_ = std::thread([e = endpoint.get()] { e->Serve(); });
  return endpoint;
}

MetricsEndpoint::~MetricsEndpoint() {
  // The thread stops first: no scrape runs a callback past this point.
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
  if (listen_fd_ >= 0) close(listen_fd_);
}

void MetricsEndpoint::AddCallback(MetricsCallback callback) {
  absl::MutexLock lock(&mu_);
  callbacks_.push_back(std::move(callback));
}

void MetricsEndpoint::Serve() {
  // In the order accepted, which is also the order of their deadlines.
  std::deque<Connection> open;
  std::vector<pollfd> polled;
  bool accept_failed = false;
  while (!stop_.load()) {
    polled.clear();
    // After a failed accept (out of file descriptors, say) the listener stays readable; it
    // sits out one round, or the loop would spin until a descriptor is freed.
    polled.push_back({listen_fd_, static_cast<short>(accept_failed ? 0 : POLLIN), 0});
    for (const Connection& c : open) {
      polled.push_back({c.fd, static_cast<short>(c.reply.empty() ? POLLIN : POLLOUT), 0});
    }
    // Wakes at the oldest connection's deadline, and at least every kStopCheck to see stop_.
    std::chrono::milliseconds wait = kStopCheck;
    if (!open.empty()) {
      wait = std::clamp(std::chrono::ceil<std::chrono::milliseconds>(
                            open.front().deadline - std::chrono::steady_clock::now()),
                        std::chrono::milliseconds::zero(), kStopCheck);
    }
    if (poll(polled.data(), polled.size(), static_cast<int>(wait.count())) < 0) continue;  // EINTR
    for (size_t i = 0; i < open.size(); ++i) {
      if (polled[i + 1].revents == 0) continue;
      if (open[i].reply.empty()) {
        Read(&open[i]);
      } else {
        Write(&open[i]);
      }
    }
    CloseExpired(&open);
    std::erase_if(open, [](const Connection& c) { return c.closed(); });
    accept_failed = polled[0].revents != 0 && !Accept(&open);
  }
  for (Connection& c : open) c.Close();
}

void MetricsEndpoint::CloseExpired(std::deque<Connection>* open) {
  const auto now = std::chrono::steady_clock::now();
  for (Connection& c : *open) {
    if (c.deadline > now) break;  // and so are all after it
    if (c.closed()) continue;
    Dropped().deadline->Increment();
    c.Close();
  }
}

bool MetricsEndpoint::Accept(std::deque<Connection>* open) {
  while (true) {
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;  // the next one may be fine
      return errno == EAGAIN || errno == EWOULDBLOCK;
    }
    if (open->size() >= static_cast<size_t>(options_.max_connections)) {
      Dropped().evicted->Increment();
      open->front().Close();
      open->pop_front();
    }
    open->emplace_back(fd, std::chrono::steady_clock::now() + options_.deadline);
  }
}

void MetricsEndpoint::Read(Connection* connection) {
  char buf[2048];
  while (true) {
    const ssize_t n = recv(connection->fd, buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;  // the rest is to come
    if (n <= 0) {  // the client left (or reset) before its request was whole
      connection->Close();
      return;
    }
    connection->request.append(buf, static_cast<size_t>(n));
    if (connection->request.find("\r\n\r\n") != std::string::npos) {
      connection->reply = Reply(connection->request);
      connection->request = std::string();
      Write(connection);
      return;
    }
    if (connection->request.size() >= kMaxRequestBytes) {
      Dropped().oversized->Increment();
      connection->Close();
      return;
    }
  }
}

void MetricsEndpoint::Write(Connection* connection) {
  const std::string& reply = connection->reply;
  while (connection->sent < reply.size()) {
    const ssize_t n = send(connection->fd, reply.data() + connection->sent,
                           reply.size() - connection->sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;  // POLLOUT says when
    if (n <= 0) break;                                               // the client left
    connection->sent += static_cast<size_t>(n);
  }
  connection->Close();
}

std::string MetricsEndpoint::Reply(const std::string& request) {
  // The request line is all that matters.
  const bool metrics = absl::StartsWith(request, "GET /metrics ") ||
                       absl::StartsWith(request, "GET /metrics?");
  const std::string body = metrics ? Exposition() : "only /metrics is served here\n";
  return absl::StrCat(metrics ? "HTTP/1.1 200 OK\r\n" : "HTTP/1.1 404 Not Found\r\n",
                      "Content-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: ",
                      body.size(), "\r\nConnection: close\r\n\r\n", body);
}

std::string MetricsEndpoint::Exposition() {
  std::vector<prometheus::MetricFamily> families = ProcessRegistry().Collect();
  MetricsBuilder builder;
  {
    absl::MutexLock lock(&mu_);
    for (const MetricsCallback& callback : callbacks_) callback(&builder);
  }
  for (prometheus::MetricFamily& family : builder.Take()) families.push_back(std::move(family));
  return MetricsText(families);
}

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> RpcMetricsInterceptor() {
  return std::make_unique<RpcMetricsFactory>();
}

std::unique_ptr<MetricsEndpoint> StartRoleMetrics(const std::string& role, const std::string& host,
                                                  int metrics_port) {
  if (metrics_port < 0) return nullptr;
  auto endpoint = MetricsEndpoint::Start(host, metrics_port);
  if (!endpoint.ok()) {
    spdlog::warn("{}: no metrics: {}", role, endpoint.status().ToString());
    return nullptr;
  }
  spdlog::info("{}: metrics on http://{}:{}/metrics", role, host, (*endpoint)->port());
  return std::move(endpoint).value();
}

}  // namespace ecps
