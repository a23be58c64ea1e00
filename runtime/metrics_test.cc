// /metrics: the builder's families in Prometheus' text format, a real endpoint scraped over
// HTTP, the RPC figures every gRPC server of the process records, and scrapes answered while
// hostile clients hold connections (idle, trickling, never reading, oversized).
#include "runtime/metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <grpcpp/impl/codegen/client_unary_call.h>
#include <grpcpp/support/byte_buffer.h>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "proto/ecps.grpc.pb.h"
#include "runtime/health.h"
#include "runtime/rpc.h"

namespace ecps {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

using Clock = std::chrono::steady_clock;

// Milliseconds from now to `deadline`, 0 once it has passed: poll()'s timeout.
int MillisLeft(Clock::time_point deadline) {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
  return static_cast<int>(std::max<int64_t>(0, left.count()));
}

// Whether `fd` reports one of `events` before `deadline`.
bool WaitFor(int fd, short events, Clock::time_point deadline) {
  pollfd polled{fd, events, 0};
  int n;
  while ((n = poll(&polled, 1, MillisLeft(deadline))) < 0 && errno == EINTR) {
  }
  return n > 0;
}

// A test's connection to 127.0.0.1:port, non-blocking, so that no step of a test can wait
// past its deadline. Closed when it goes out of scope, also when an assertion returns early.
class Client {
 public:
  explicit Client(int port) : fd_(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd_ >= 0) connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  }
  ~Client() {
    if (fd_ >= 0) close(fd_);
  }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  int fd() const { return fd_; }

  // Whether the handshake completed by `deadline` (the endpoint need not have accepted yet).
  bool Connected(Clock::time_point deadline) const {
    int error = 0;
    socklen_t length = sizeof(error);
    return fd_ >= 0 && WaitFor(fd_, POLLOUT, deadline) &&
           getsockopt(fd_, SOL_SOCKET, SO_ERROR, &error, &length) == 0 && error == 0;
  }

  // Whether all of `data` went out by `deadline`.
  bool Send(std::string_view data, Clock::time_point deadline) const {
    while (!data.empty()) {
      const ssize_t n = send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n > 0) {
        data.remove_prefix(static_cast<size_t>(n));
      } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
        return false;
      } else if (!WaitFor(fd_, POLLOUT, deadline)) {
        return false;
      }
    }
    return true;
  }

  // Reads into `received` until the endpoint closes the connection (true) or `deadline`
  // passes (false).
  bool ReadUntilClosed(Clock::time_point deadline, std::string* received) const {
    char buf[4096];
    while (true) {
      const ssize_t n = recv(fd_, buf, sizeof(buf), 0);
      if (n > 0) {
        received->append(buf, static_cast<size_t>(n));
      } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
        return true;  // closed, or reset
      } else if (!WaitFor(fd_, POLLIN, deadline)) {
        return false;
      }
    }
  }

 private:
  const int fd_;
};

// GET /metrics from 127.0.0.1:port within `timeout`: the whole reply (headers and body);
// empty when the endpoint did not answer and close in time.
std::string Get(int port, std::chrono::milliseconds timeout) {
  const Clock::time_point deadline = Clock::now() + timeout;
  Client client(port);
  std::string reply;
  if (!client.Connected(deadline) ||
      !client.Send("GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
                   deadline) ||
      !client.ReadUntilClosed(deadline, &reply)) {
    return "";
  }
  return reply;
}

// A scrape with time to spare: a test that fails does not hang.
std::string Scrape(int port) { return Get(port, std::chrono::seconds(10)); }

// Whether `reply` is a 200 with the whole body its Content-Length announces.
testing::AssertionResult WholeOkReply(const std::string& reply) {
  constexpr std::string_view kLength = "Content-Length: ";
  const size_t end = reply.find("\r\n\r\n");
  const size_t length = reply.find(kLength);
  if (reply.rfind("HTTP/1.1 200 OK\r\n", 0) != 0 || end == std::string::npos ||
      length == std::string::npos || length > end) {
    return testing::AssertionFailure() << "not a 200 reply: \"" << reply.substr(0, 200) << "\"";
  }
  const size_t body = std::stoul(reply.substr(length + kLength.size()));
  if (reply.size() - end - 4 != body) {
    return testing::AssertionFailure()
           << "a body of " << reply.size() - end - 4 << " bytes of " << body;
  }
  return testing::AssertionSuccess();
}

// Connections that send one byte of a request header every 150 ms and never end it, from a
// thread of their own. The thread stops, and the connections close, when this goes out of
// scope.
class TricklingClients {
 public:
  TricklingClients(int port, int count) {
    for (int i = 0; i < count; ++i) clients_.push_back(std::make_unique<Client>(port));
  }
  ~TricklingClients() {
    stop_.Notify();
    if (thread_.joinable()) thread_.join();
  }

  const std::vector<std::unique_ptr<Client>>& clients() const { return clients_; }

  // Starts sending (once the clients are connected).
  void Start() {
    thread_ = std::thread([this] { Trickle(); });
  }

  // Whether `rounds` bytes went to each client (or failed: the endpoint closed it) within
  // `timeout`.
  bool AwaitRounds(int rounds, absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    auto reached = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return rounds_ >= rounds; };
    return mu_.AwaitWithTimeout(absl::Condition(&reached), timeout);
  }

 private:
  void Trickle() {
    constexpr std::string_view kHeader = "GET /metrics HTTP/1.1\r\nX-Slow: ";
    for (size_t i = 0; !stop_.WaitForNotificationWithTimeout(absl::Milliseconds(150)); ++i) {
      const char byte = i < kHeader.size() ? kHeader[i] : 'a';
      for (const auto& client : clients_) send(client->fd(), &byte, 1, MSG_NOSIGNAL);
      absl::MutexLock lock(&mu_);
      ++rounds_;
    }
  }

  std::vector<std::unique_ptr<Client>> clients_;
  absl::Notification stop_;
  absl::Mutex mu_;
  int rounds_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

TEST(MetricsTest, BuilderFamiliesInTextFormat) {
  MetricsBuilder b;
  b.Counter("ecps_test_rows_total", "Rows", 3, {{"server", "1"}});
  b.Gauge("ecps_test_state", "States");
  b.Add(1, {{"state", "active"}});
  b.Add(0, {{"state", "dead"}});
  const std::string text = MetricsText(b.Take());
  EXPECT_THAT(text, HasSubstr("# HELP ecps_test_rows_total Rows\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE ecps_test_rows_total counter\n"));
  EXPECT_THAT(text, HasSubstr("ecps_test_rows_total{server=\"1\"} 3\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE ecps_test_state gauge\n"));
  EXPECT_THAT(text, HasSubstr("ecps_test_state{state=\"active\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("ecps_test_state{state=\"dead\"} 0\n"));
}

TEST(MetricsTest, EndpointServesCallbacksAndRpcFigures) {
  auto endpoint = MetricsEndpoint::Start("127.0.0.1", 0);
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  ASSERT_GT((*endpoint)->port(), 0);
  int scrapes = 0;
  (*endpoint)->AddCallback([&scrapes](MetricsBuilder* out) {
    out->Gauge("ecps_test_scrapes", "Scrapes so far", ++scrapes);
  });

  // One health check answered by a server of this process is counted and timed.
  auto server = StartGrpcServer("127.0.0.1", 0, {});
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_TRUE(CheckHealth(server->address, Role::kServer, kLivenessService, 5000).ok());
  server->server->Shutdown();

  const std::string first = Scrape((*endpoint)->port());
  EXPECT_THAT(first, HasSubstr("200 OK"));
  EXPECT_THAT(first, HasSubstr("ecps_test_scrapes 1\n"));
  EXPECT_THAT(first, HasSubstr("ecps_grpc_server_handled_total{grpc_code=\"OK\",grpc_method="
                               "\"Check\",grpc_service=\"grpc.health.v1.Health\"}"));
  EXPECT_THAT(first, HasSubstr("ecps_grpc_server_handling_seconds_bucket{grpc_method=\"Check\","
                               "grpc_service=\"grpc.health.v1.Health\",le=\"+Inf\"}"));
  // Computed at each scrape, not cached.
  EXPECT_THAT(Scrape((*endpoint)->port()), HasSubstr("ecps_test_scrapes 2\n"));
}

// Each call adds to its method's series, whatever code it ends with; the series are made once
// and kept, so the second call counts on the first's.
TEST(MetricsTest, EveryCallCountsOnItsMethodsSeries) {
  auto endpoint = MetricsEndpoint::Start("127.0.0.1", 0);
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  // A server with no services answers every method Unimplemented.
  auto server = StartGrpcServer("127.0.0.1", 0, {});
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = v1::ParameterServer::NewStub(MakeChannel(server->address, Role::kServer));
  for (int call = 0; call < 2; ++call) {
    grpc::ClientContext ctx;
    v1::HotRowsRequest request;
    v1::HotRowsResponse response;
    EXPECT_EQ(stub->HotRows(&ctx, request, &response).error_code(),
              grpc::StatusCode::UNIMPLEMENTED);
  }
  server->server->Shutdown();
  const std::string text = Scrape((*endpoint)->port());
  EXPECT_THAT(text, HasSubstr("ecps_grpc_server_handled_total{grpc_code=\"Unimplemented\","
                              "grpc_method=\"HotRows\","
                              "grpc_service=\"ecps.v1.ParameterServer\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("ecps_grpc_server_handling_seconds_count{grpc_method=\"HotRows\","
                              "grpc_service=\"ecps.v1.ParameterServer\"} 2\n"));
  EXPECT_THAT(text, Not(HasSubstr("grpc_code=\"OK\",grpc_method=\"HotRows\"")));
}

// Whoever can reach a port names the methods it calls: past the cap, new names share one
// series, so calls to made-up methods cannot grow a process's metrics without bound.
TEST(MetricsTest, MadeUpMethodNamesAreCapped) {
  auto endpoint = MetricsEndpoint::Start("127.0.0.1", 0);
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  auto server = StartGrpcServer("127.0.0.1", 0, {});
  ASSERT_TRUE(server.ok()) << server.status();
  std::shared_ptr<grpc::Channel> channel = MakeChannel(server->address, Role::kServer);
  constexpr int kNames = 300;  // more than the cap (256) with every other test's names
  for (int i = 0; i < kNames; ++i) {
    grpc::internal::RpcMethod method(("/made.up.Service/Call" + std::to_string(i)).c_str(),
                                     grpc::internal::RpcMethod::NORMAL_RPC, channel);
    grpc::ClientContext ctx;
    grpc::Slice empty("");  // an empty message
    grpc::ByteBuffer request(&empty, 1), response;
    grpc::Status s = grpc::internal::BlockingUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(
        channel.get(), method, &ctx, request, &response);
    ASSERT_EQ(s.error_code(), grpc::StatusCode::UNIMPLEMENTED) << i;
  }
  server->server->Shutdown();
  const std::string text = Scrape((*endpoint)->port());
  // The distinct methods named on the counter's lines: at most the cap and "other".
  std::set<std::string> methods;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("ecps_grpc_server_handled_total{", 0) != 0) continue;
    constexpr std::string_view kLabel = "grpc_method=\"";
    const size_t at = line.find(kLabel);
    if (at == std::string::npos) continue;
    methods.insert(line.substr(at, line.find('"', at + kLabel.size()) - at));
  }
  EXPECT_LE(methods.size(), 257u);
  EXPECT_GE(methods.size(), 200u);  // the made-up names did get series, up to the cap
  EXPECT_THAT(text, HasSubstr("grpc_method=\"Call0\",grpc_service=\"made.up.Service\"} 1\n"));
  EXPECT_THAT(text, Not(HasSubstr("grpc_method=\"Call299\"")));
  EXPECT_THAT(text, HasSubstr("ecps_grpc_server_handled_total{grpc_code=\"Unimplemented\","
                              "grpc_method=\"other\",grpc_service=\"other\"}"));
}

// A callback may need a deep stack (a coordinator's status does): the endpoint's thread has
// an ordinary one. civetweb's (100 KiB, 60 KiB of it OpenBLAS's TLS in ecps) overflowed.
TEST(MetricsTest, ACallbackMayUseMoreStackThanTheHttpThreadsHave) {
  auto endpoint = MetricsEndpoint::Start("127.0.0.1", 0);
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  (*endpoint)->AddCallback([](MetricsBuilder* out) {
    volatile char deep[512 << 10];
    for (size_t i = 0; i < sizeof(deep); i += 4096) deep[i] = static_cast<char>(i);
    out->Gauge("ecps_test_deep", "A callback with a deep stack", deep[4096] + 1);
  });
  EXPECT_THAT(Scrape((*endpoint)->port()), HasSubstr("ecps_test_deep 1\n"));
}

// Clients that hold connections cannot keep Prometheus out: while 200 connections sit idle
// and 10 send their header a byte at a time, 5 scrapes in a row are each answered in full
// within 1 s (the production deadline and cap). An endpoint that served one connection at a
// time, each read waiting up to 5 s, answered none of them.
TEST(MetricsTest, ScrapesAreAnsweredWhileHostileClientsHoldConnections) {
  auto endpoint = MetricsEndpoint::Start("127.0.0.1", 0);
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  const int port = (*endpoint)->port();

  constexpr int kIdle = 200;
  constexpr int kTrickling = 10;
  std::vector<std::unique_ptr<Client>> idle;
  for (int i = 0; i < kIdle; ++i) idle.push_back(std::make_unique<Client>(port));
  TricklingClients trickling(port, kTrickling);
  const Clock::time_point connect_by = Clock::now() + std::chrono::seconds(10);
  int connected = 0;
  for (const auto& client : idle) connected += client->Connected(connect_by);
  for (const auto& client : trickling.clients()) connected += client->Connected(connect_by);
  EXPECT_EQ(connected, kIdle + kTrickling);
  trickling.Start();
  // The trickle is under way: each slow client has sent a few bytes of its header.
  ASSERT_TRUE(trickling.AwaitRounds(3, absl::Seconds(5)));

  for (int scrape = 0; scrape < 5; ++scrape) {
    const Clock::time_point start = Clock::now();
    EXPECT_TRUE(WholeOkReply(Get(port, std::chrono::seconds(1))))
        << "scrape " << scrape << " after "
        << std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count()
        << " ms";
  }
}

// The value of ecps_metrics_connections_dropped_total{reason} in a scrape of `port`; -1 when
// the scrape has no such line.
double Dropped(int port, const std::string& reason) {
  const std::string prefix = "ecps_metrics_connections_dropped_total{reason=\"" + reason + "\"} ";
  std::istringstream lines(Scrape(port));
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(prefix, 0) == 0) return std::stod(line.substr(prefix.size()));
  }
  return -1;
}

// A client that starts a request and goes quiet is closed at its deadline, counted as such.
TEST(MetricsTest, APartialRequestIsClosedAtTheDeadline) {
  MetricsEndpointOptions options;
  options.deadline = std::chrono::milliseconds(300);
  auto endpoint = MetricsEndpoint::Start("127.0.0.1", 0, options);
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  const int port = (*endpoint)->port();
  const double before = Dropped(port, "deadline");
  ASSERT_GE(before, 0);

  Client client(port);
  const Clock::time_point start = Clock::now();
  ASSERT_TRUE(client.Connected(start + std::chrono::seconds(5)));
  ASSERT_TRUE(client.Send("GET /metrics HTTP/1.1\r\nHost: 127", start + std::chrono::seconds(5)));
  std::string reply;
  // Closed unanswered, long before the 5 s it is given here (the production deadline)...
  EXPECT_TRUE(client.ReadUntilClosed(start + std::chrono::seconds(5), &reply));
  EXPECT_EQ(reply, "");
  // ... and not before its own deadline (counted from accept, a little before `start`).
  EXPECT_GE(Clock::now() - start, std::chrono::milliseconds(200));
  EXPECT_EQ(Dropped(port, "deadline"), before + 1);
}

// A client that asks and never reads its reply cannot hold the thread either: a scrape is
// answered while it stalls, and it is closed at its deadline with its reply cut short.
TEST(MetricsTest, AClientThatNeverReadsItsReplyIsClosedAtTheDeadline) {
  // Far more than the socket buffers between the endpoint and the client hold (4 MiB at most
  // on the sending side by default), so the endpoint cannot send it all.
  constexpr size_t kHelp = 16 << 20;
  std::atomic<bool> big{false};  // the next scrape's body is over kHelp
  absl::Notification built;
  MetricsEndpointOptions options;
  options.deadline = std::chrono::seconds(1);  // ample for the other scrape to be answered in
  auto endpoint = MetricsEndpoint::Start("127.0.0.1", 0, options);
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  const int port = (*endpoint)->port();
  (*endpoint)->AddCallback([&big, &built](MetricsBuilder* out) {
    if (!big.exchange(false)) return;
    out->Gauge("ecps_test_big", std::string(kHelp, 'h'), 1);
    built.Notify();
  });
  const double before = Dropped(port, "deadline");
  ASSERT_GE(before, 0);

  big = true;
  Client stalled(port);
  const Clock::time_point give_up = Clock::now() + std::chrono::seconds(10);
  ASSERT_TRUE(stalled.Connected(give_up));
  ASSERT_TRUE(stalled.Send("GET /metrics HTTP/1.1\r\n\r\n", give_up));
  ASSERT_TRUE(built.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_TRUE(WholeOkReply(Get(port, std::chrono::seconds(1))));
  EXPECT_EQ(Dropped(port, "deadline"), before) << "answered only once the stalled one was closed";

  // Read only once the endpoint has given up on it: reading earlier would let it finish.
  while (Dropped(port, "deadline") < before + 1 && Clock::now() < give_up) {
  }
  EXPECT_EQ(Dropped(port, "deadline"), before + 1);
  std::string received;
  EXPECT_TRUE(stalled.ReadUntilClosed(give_up, &received));
  EXPECT_THAT(received, StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_LT(received.size(), kHelp);
}

// Past the cap, a new connection closes the oldest open one, not itself: idle connections
// cannot lock a scraper out, whoever opened them first.
TEST(MetricsTest, ANewConnectionPastTheCapEvictsTheOldest) {
  MetricsEndpointOptions options;
  options.max_connections = 3;
  auto endpoint = MetricsEndpoint::Start("127.0.0.1", 0, options);
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  const int port = (*endpoint)->port();
  const double before = Dropped(port, "evicted");
  ASSERT_GE(before, 0);

  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(5);
  std::vector<std::unique_ptr<Client>> idle;
  for (int i = 0; i < 4; ++i) {  // one past the cap; each connected before the next
    idle.push_back(std::make_unique<Client>(port));
    ASSERT_TRUE(idle.back()->Connected(deadline)) << i;
  }
  std::string received;
  EXPECT_TRUE(idle[0]->ReadUntilClosed(deadline, &received)) << "the oldest was not closed";
  EXPECT_EQ(received, "");
  // The others stay: the endpoint closed the oldest when it accepted the fourth, before
  // idle[0] saw the close.
  for (int i = 1; i < 4; ++i) EXPECT_FALSE(WaitFor(idle[i]->fd(), POLLIN, Clock::now())) << i;
  // This scrape is one past the cap again: it closes idle[1] and is answered.
  EXPECT_EQ(Dropped(port, "evicted"), before + 2);
}

// Headers that run past 16 KiB without their blank line are not buffered further.
TEST(MetricsTest, AnOversizedRequestIsClosed) {
  auto endpoint = MetricsEndpoint::Start("127.0.0.1", 0);
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  const int port = (*endpoint)->port();
  const double before = Dropped(port, "oversized");
  ASSERT_GE(before, 0);

  Client client(port);
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(5);
  ASSERT_TRUE(client.Connected(deadline));
  // The send may fail part way: the endpoint closes as soon as it has read 16 KiB.
  client.Send("GET /metrics HTTP/1.1\r\nX-Long: " + std::string(20 << 10, 'a'), deadline);
  std::string reply;
  EXPECT_TRUE(client.ReadUntilClosed(deadline, &reply));
  EXPECT_EQ(reply, "");
  EXPECT_EQ(Dropped(port, "oversized"), before + 1);
}

TEST(MetricsTest, APortInUseIsAnErrorThatNamesIt) {
  auto first = MetricsEndpoint::Start("127.0.0.1", 0);
  ASSERT_TRUE(first.ok()) << first.status();
  const int port = (*first)->port();
  auto second = MetricsEndpoint::Start("127.0.0.1", port);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(second.status().message()),
              HasSubstr("127.0.0.1:" + std::to_string(port)));
}

TEST(MetricsTest, RoleMetricsOffWhenThePortIsMinusOne) {
  EXPECT_EQ(StartRoleMetrics("test", "127.0.0.1", -1), nullptr);
  auto on = StartRoleMetrics("test", "127.0.0.1", 0);
  ASSERT_NE(on, nullptr);
  EXPECT_THAT(Scrape(on->port()), Not(HasSubstr("ecps_test_scrapes")));
}

}  // namespace
}  // namespace ecps
