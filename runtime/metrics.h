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
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
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

// How long a client may take and how many may be open; the defaults are production's, tests
// shorten them.
struct MetricsEndpointOptions {
  // From accept to the last byte of the reply. A scrape takes milliseconds, so 5 s leaves a
  // loaded host room; a client that trickles its request or never reads its reply is closed
  // then (unanswered) instead of holding a slot.
  std::chrono::milliseconds deadline{5000};
  // Open connections at most (a file descriptor and a request or reply buffer each). Past it,
  // a new connection closes the oldest open one rather than being refused: a flood of idle
  // connections then costs its own oldest, and the next scrape still gets in.
  int max_connections = 64;
};

// /metrics over HTTP on host:port. Serves the process's gRPC server metrics and whatever
// the callbacks add. One thread of its own runs an event loop: poll() over the listening
// socket and every open connection, all non-blocking, so that no client (one that sends
// nothing, trickles a byte at a time, or never reads its reply) can hold the thread; each has
// until its deadline for the whole request and reply, and the open ones are capped (see
// MetricsEndpointOptions). Requests are read in turn as their bytes come; the exposition is
// built on the same thread, one scrape at a time (it takes milliseconds). Connections it
// closes unanswered are counted in ecps_metrics_connections_dropped_total{reason}.
//
// It is not prometheus-cpp's Exposer: civetweb's threads there have 100 KiB stacks, 60 KiB of
// which OpenBLAS's thread-local storage takes in the ecps binary, and a scrape overflowed the
// rest. The loop runs on a std::thread, with the default stack (8 MiB), and the callbacks run
// on it; serving connections concurrently takes no thread per connection, so no small stack.
class MetricsEndpoint {
 public:
  // Listens on host:port (0: a free port). UNAVAILABLE when it cannot listen;
  // INVALID_ARGUMENT for a deadline or a cap that is not positive.
  static absl::StatusOr<std::unique_ptr<MetricsEndpoint>> Start(
      const std::string& host, int port, const MetricsEndpointOptions& options = {});
  ~MetricsEndpoint();

  int port() const { return port_; }

  // Adds figures computed at each scrape. Callbacks run until the endpoint is destroyed:
  // destroy it before what they read.
  void AddCallback(MetricsCallback callback);

 private:
  struct Connection;  // one client, from accept to close

  explicit MetricsEndpoint(const MetricsEndpointOptions& options) : options_(options) {}
  // The event loop, until stop_.
  void Serve();
  // Takes every pending connection, closing the oldest open ones past the cap. False when
  // accept failed for another reason than an empty queue (out of file descriptors, say).
  bool Accept(std::deque<Connection>* open);
  // Closes the connections past their deadline, unanswered.
  void CloseExpired(std::deque<Connection>* open);
  // Reads what a client sent; once its request is whole, answers it.
  void Read(Connection* connection);
  // Sends what the socket takes of the reply; closes the connection once all is sent.
  void Write(Connection* connection);
  std::string Reply(const std::string& request);
  std::string Exposition();

  const MetricsEndpointOptions options_;
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
