// /metrics: the builder's families in Prometheus' text format, a real endpoint scraped over
// HTTP, and the RPC figures every gRPC server of the process records.
#include "runtime/metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <set>
#include <sstream>
#include <string>
#include <string_view>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <grpcpp/impl/codegen/client_unary_call.h>
#include <grpcpp/support/byte_buffer.h>

#include "proto/ecps.grpc.pb.h"
#include "runtime/health.h"
#include "runtime/rpc.h"

namespace ecps {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

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
