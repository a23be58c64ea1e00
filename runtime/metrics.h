// Prometheus metrics of a role (docs/deploy.md, "Metrics"): an HTTP endpoint that serves
// /metrics, the request counts and latencies of every gRPC server of the process, and a
// builder for the figures a role computes at scrape time from what it already keeps (the
// coordinator's status, a server's stats, a worker's progress): nothing is counted twice.
//
// Names follow Prometheus' conventions: an ecps_ prefix, base units in the name (_seconds,
// _bytes), _total on counters, labels for what varies (role, id, state, grpc_method).
#ifndef ECPS_RUNTIME_METRICS_H_
#define ECPS_RUNTIME_METRICS_H_

#include <atomic>
#include <functional>
#include <thread>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/support/server_interceptor.h"
#include "prometheus/metric_family.h"
#include "proto/ecps.pb.h"

namespace ecps {

using MetricLabels = std::vector<std::pair<std::string, std::string>>;

// The families of one scrape, built in the order they are started.
class MetricsBuilder {
 public:
  // Starts a family. Samples added after it belong to it.
  void Gauge(const std::string& name, const std::string& help);
  void Counter(const std::string& name, const std::string& help);
  // A sample of the family last started (one per distinct label set).
  void Add(double value, const MetricLabels& labels = {});
  // A family of one sample.
  void Gauge(const std::string& name, const std::string& help, double value,
             const MetricLabels& labels = {});
  void Counter(const std::string& name, const std::string& help, double value,
               const MetricLabels& labels = {});

  std::vector<prometheus::MetricFamily> Take() { return std::move(families_); }

 private:
  std::vector<prometheus::MetricFamily> families_;
};

// "coordinator", "server", "worker": the role as series and scrape targets label it.
const char* RoleLabel(v1::Role role);
// "starting", "running", "recovering", "finished", "failed" ("unknown" otherwise): the phase
// as ecps_job_phase, the progress line and metrics.csv name it.
const char* PhaseName(v1::JobPhase phase);

// Fills a builder at each scrape, on the endpoint's thread.
using MetricsCallback = std::function<void(MetricsBuilder*)>;

// Prometheus' text format of `families` (tests; what /metrics serves).
std::string MetricsText(const std::vector<prometheus::MetricFamily>& families);

// /metrics over HTTP on host:port. Serves the process's gRPC server metrics and whatever
// the callbacks add. One thread of its own answers one scrape at a time (Prometheus scrapes
// every few seconds). It is not prometheus-cpp's Exposer: civetweb's threads there have
// 100 KiB stacks, 60 KiB of which OpenBLAS's thread-local storage takes in the ecps
// binary, and a scrape overflowed the rest.
class MetricsEndpoint {
 public:
  // Listens on host:port (0: a free port). UNAVAILABLE when it cannot listen.
  static absl::StatusOr<std::unique_ptr<MetricsEndpoint>> Start(const std::string& host,
                                                               int port);
  ~MetricsEndpoint();

  int port() const { return port_; }

  // Adds figures computed at each scrape. Callbacks run until the endpoint is destroyed:
  // destroy it before what they read.
  void AddCallback(MetricsCallback callback);

 private:
  MetricsEndpoint() = default;
  void Serve();
  void Answer(int connection);
  std::string Exposition();

  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  absl::Mutex mu_;
  std::vector<MetricsCallback> callbacks_ ABSL_GUARDED_BY(mu_);
};

// The interceptor StartGrpcServer installs on every server: counts each handled RPC by
// service, method and code (ecps_grpc_server_handled_total) and observes its handling time
// (ecps_grpc_server_handling_seconds), into the process's registry that every
// MetricsEndpoint serves.
std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> RpcMetricsInterceptor();

// Starts a role's endpoint when monitoring.metrics_port asks for one (-1: none) and logs
// where it listens; a role runs on without metrics when it cannot listen (logged). Returns
// null then.
std::unique_ptr<MetricsEndpoint> StartRoleMetrics(const std::string& role, const std::string& host,
                                                  int metrics_port);

}  // namespace ecps

#endif  // ECPS_RUNTIME_METRICS_H_
