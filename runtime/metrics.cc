#include "runtime/metrics.h"

#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>

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

absl::StatusOr<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(const std::string& host,
                                                                       int port) {
  Rpc();  // the families exist from the start: a scrape before the first RPC shows them
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
  std::unique_ptr<MetricsEndpoint> endpoint(new MetricsEndpoint());
  std::string error = "no address";
  for (addrinfo* a = found; a != nullptr && endpoint->listen_fd_ < 0; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 16) == 0) {
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
  while (!stop_.load()) {
    pollfd listening{listen_fd_, POLLIN, 0};
    if (poll(&listening, 1, 100) <= 0) continue;  // wakes 10 times a second to see stop_
    const int connection = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (connection < 0) continue;
    Answer(connection);
    close(connection);
  }
}

void MetricsEndpoint::Answer(int connection) {
  // The request line is all that matters; a client that sends nothing for 5 s is dropped.
  timeval timeout{5, 0};
  setsockopt(connection, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  setsockopt(connection, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  std::string request;
  char buf[2048];
  while (request.find("\r\n\r\n") == std::string::npos && request.size() < 16384) {
    const ssize_t n = recv(connection, buf, sizeof(buf), 0);
    if (n <= 0) return;
    request.append(buf, static_cast<size_t>(n));
  }
  const bool metrics = absl::StartsWith(request, "GET /metrics ") ||
                       absl::StartsWith(request, "GET /metrics?");
  const std::string body = metrics ? Exposition() : "only /metrics is served here\n";
  const std::string reply = absl::StrCat(
      metrics ? "HTTP/1.1 200 OK\r\n" : "HTTP/1.1 404 Not Found\r\n",
      "Content-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: ",
      body.size(), "\r\nConnection: close\r\n\r\n", body);
  for (size_t sent = 0; sent < reply.size();) {
    const ssize_t n = send(connection, reply.data() + sent, reply.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return;
    sent += static_cast<size_t>(n);
  }
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
