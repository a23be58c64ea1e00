// Requests with a wrong token, a stale epoch, out-of-range ids or wrong sizes are refused
// with the right code over real gRPC, and change nothing.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <future>

#include <grpcpp/generic/generic_stub.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/ecps.grpc.pb.h"
#include "ps/grpc_parameter_server.h"
#include "runtime/error_kind.h"
#include "runtime/rpc.h"
#include "tests/test_cluster.h"
#include "worker/ps_client.h"

namespace ecps {
namespace {

class BadRequestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    spec_ = SmallSpec(2, 1);
    cluster_ = TestCluster::Start(spec_, kToken);
    ASSERT_NE(cluster_, nullptr);
    stub_ = v1::ParameterServer::NewStub(MakeChannel(cluster_->address(0), Role::kServer));
    auto placement = Placement::Create(2, 1, 0, spec_.model.table_rows);
    // Rows 0 and 2 of table 0 live on server 0 (member 0 of stripes 0 and 2).
    ASSERT_EQ(placement->DataLocation(0, 0).server, 0);
    ASSERT_EQ(placement->DataLocation(0, 2).server, 0);
    ASSERT_EQ(placement->DataLocation(0, 1).server, 1);
    before_ = ReadRows(0, {0, 2});
  }

  std::string ReadRows(int table, std::vector<int64_t> rows) {
    v1::ReadRowsRequest req;
    FillHeader(req.mutable_header(), kToken, 1, "test");
    req.mutable_rows()->set_table(table);
    for (int64_t r : rows) req.mutable_rows()->add_rows(r);
    v1::ReadRowsResponse resp;
    grpc::ClientContext ctx;
    EXPECT_TRUE(stub_->ReadRows(&ctx, req, &resp).ok());
    return resp.payloads();
  }

  grpc::Status Push(const std::string& token, uint64_t epoch, int table,
                    std::vector<int64_t> rows, size_t grad_floats) {
    v1::PushRequest req;
    FillHeader(req.mutable_header(), token, epoch, "test");
    auto* t = req.add_tables();
    t->set_table(table);
    for (int64_t r : rows) t->add_rows(r);
    std::vector<float> g(grad_floats, 0.5f);
    req.add_grads()->assign(reinterpret_cast<const char*>(g.data()), g.size() * sizeof(float));
    v1::PushResponse resp;
    grpc::ClientContext ctx;
    return stub_->Push(&ctx, req, &resp);
  }

  static constexpr char kToken[] = "secret";
  JobSpec spec_;
  std::unique_ptr<TestCluster> cluster_;
  std::unique_ptr<v1::ParameterServer::Stub> stub_;
  std::string before_;
};

TEST_F(BadRequestTest, ValidPushChangesRows) {
  const size_t dim = spec_.model.embedding_dim;
  EXPECT_TRUE(Push(kToken, 1, 0, {0, 2}, 2 * dim).ok());
  EXPECT_NE(ReadRows(0, {0, 2}), before_);
}

TEST_F(BadRequestTest, WrongTokenIsUnauthenticated) {
  const size_t dim = spec_.model.embedding_dim;
  EXPECT_EQ(Push("wrong", 1, 0, {0, 2}, 2 * dim).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(Push("", 1, 0, {0, 2}, 2 * dim).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(ReadRows(0, {0, 2}), before_);
}

// A refusal comes from a live server and says so; a port nothing listens on gives the same
// code, UNAVAILABLE, without the mark. Only the latter makes a worker report the server.
TEST_F(BadRequestTest, RefusalsAreMarkedAsAnsweredByALiveServer) {
  const size_t dim = spec_.model.embedding_dim;
  const grpc::Status refused = Push("wrong", 1, 0, {0, 2}, 2 * dim);
  ASSERT_EQ(refused.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(AnsweredByPeer(refused));
  EXPECT_TRUE(AnsweredByPeer(FromGrpcStatus(refused))) << "the mark survives the conversion";
  EXPECT_FALSE(AnsweredByPeer(absl::UnavailableError("made up here")));

  int port = 0;
  {
    // A port that was free a moment ago: nothing listens on it.
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    socklen_t len = sizeof(addr);
    ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
    port = ntohs(addr.sin_port);
    close(fd);
  }
  auto nobody = v1::ParameterServer::NewStub(MakeChannel("127.0.0.1:" + std::to_string(port), Role::kServer));
  v1::PullRequest req;
  FillHeader(req.mutable_header(), kToken, 1, "test");
  v1::PullResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  const grpc::Status gone = nobody->Pull(&ctx, req, &resp);
  ASSERT_EQ(gone.error_code(), grpc::StatusCode::UNAVAILABLE) << gone.error_message();
  EXPECT_FALSE(AnsweredByPeer(gone));
}

// The worker reports a server that did not answer, never one that answered "not ready":
// a server still initialising its tables answers UNAVAILABLE, the same code as a closed port.
TEST(FailureReports, WorkerReportsAClosedPortButNotAServerStillInitialising) {
  const std::string token = "secret";
  ParameterServerCore core(token);  // never Installed: not ready
  core.SetEpoch(1);
  GrpcParameterServer service(&core);
  auto server = StartGrpcServer("127.0.0.1", 0, {&service}, 2);
  ASSERT_TRUE(server.ok()) << server.status();
  v1::ClusterMap map;
  map.set_epoch(1);
  map.set_k(1);
  map.add_servers()->set_address(server->address);
  auto client = PsClient::Create(map, {10}, 4, {8}, token, "worker-0", 300);
  ASSERT_TRUE(client.ok()) << client.status();
  std::vector<std::pair<int, std::string>> reported;
  PsClient::FailureHandling handling;
  handling.map_source = [&map] { return map; };
  handling.on_unavailable = [&](int s, const std::string& address) {
    reported.emplace_back(s, address);
  };
  handling.recovery_wait_ms = 300;
  (*client)->SetFailureHandling(handling);
  std::vector<std::vector<float>> dense;

  absl::Status initialising = (*client)->PullDense(&dense);
  ASSERT_TRUE(absl::IsUnavailable(initialising)) << initialising;
  EXPECT_TRUE(reported.empty()) << "it answered: it is alive";

  server->server->Shutdown();
  absl::Status gone = (*client)->PullDense(&dense);
  ASSERT_TRUE(absl::IsUnavailable(gone)) << gone;
  ASSERT_FALSE(reported.empty());
  EXPECT_EQ(reported.front(), std::make_pair(0, server->address));
}

TEST_F(BadRequestTest, StaleEpochIsFenced) {
  cluster_->core(0)->SetEpoch(3);
  const size_t dim = spec_.model.embedding_dim;
  const grpc::Status stale = Push(kToken, 2, 0, {0, 2}, 2 * dim);
  EXPECT_EQ(stale.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  // The kind crosses the wire: a caller tests it, never the message.
  EXPECT_TRUE(HasErrorKind(FromGrpcStatus(stale), ErrorKind::kStaleEpoch));
  cluster_->core(0)->SetEpoch(1);
  EXPECT_EQ(ReadRows(0, {0, 2}), before_);
}

TEST_F(BadRequestTest, OutOfRangeAndForeignRowsAreInvalid) {
  const size_t dim = spec_.model.embedding_dim;
  // The first row is fine; the request as a whole must still change nothing.
  EXPECT_EQ(Push(kToken, 1, 0, {0, 300}, 2 * dim).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Push(kToken, 1, 0, {0, -1}, 2 * dim).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Push(kToken, 1, 0, {0, 1}, 2 * dim).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);  // row 1 lives on server 1
  EXPECT_EQ(Push(kToken, 1, 26, {0}, dim).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(ReadRows(0, {0, 2}), before_);
}

TEST_F(BadRequestTest, WrongDimensionIsInvalid) {
  const size_t dim = spec_.model.embedding_dim;
  grpc::Status s = Push(kToken, 1, 0, {0, 2}, 2 * dim - 1);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("dimension"), std::string::npos) << s.error_message();
  EXPECT_EQ(ReadRows(0, {0, 2}), before_);
}

TEST_F(BadRequestTest, BadDenseRequestsChangeNothing) {
  v1::PullDenseRequest pull;
  FillHeader(pull.mutable_header(), kToken, 1, "test");
  pull.add_tensors(0);
  v1::PullDenseResponse before;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub_->PullDense(&ctx, pull, &before).ok());
  }
  v1::PushDenseRequest push;
  FillHeader(push.mutable_header(), kToken, 1, "test");
  push.add_tensors(0);
  push.add_grads()->assign(12, '\0');  // 3 floats: not the tensor's size
  push.add_tensors(1);                 // tensor 1 lives on server 1
  push.add_grads()->assign(4, '\0');
  v1::PushDenseResponse unused;
  {
    grpc::ClientContext ctx;
    EXPECT_EQ(stub_->PushDense(&ctx, push, &unused).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
  }
  v1::PullDenseResponse after;
  grpc::ClientContext ctx;
  ASSERT_TRUE(stub_->PullDense(&ctx, pull, &after).ok());
  EXPECT_EQ(after.values(0), before.values(0));
  EXPECT_EQ(after.versions(0), before.versions(0));
}

// Bytes that do not decode as the request are refused before any handler runs, with
// INVALID_ARGUMENT naming the broken field (gRPC alone answers INTERNAL with no message).
grpc::Status CallRaw(const std::string& address, const std::string& method,
                     const std::string& bytes) {
  grpc::GenericStub generic(MakeChannel(address, Role::kServer));
  grpc::Slice slice(bytes);
  grpc::ByteBuffer request(&slice, 1), response;
  grpc::ClientContext ctx;
  std::promise<grpc::Status> done;
  generic.UnaryCall(&ctx, method, grpc::StubOptions(), &request, &response,
                    [&done](grpc::Status s) { done.set_value(s); });
  return done.get_future().get();
}

TEST_F(BadRequestTest, UndecodableRequestsAreInvalidArgumentNamingTheField) {
  // PushRequest{tables: [TableRows{table: 0, rows: <100 bytes announced, 3 there>}]}.
  const std::string rows_cut_short("\x12\x07\x08\x00\x12\x64\x01\x02\x03", 9);
  grpc::Status s = CallRaw(cluster_->address(0), "/ecps.v1.ParameterServer/Push", rows_cut_short);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_THAT(s.error_message(), ::testing::HasSubstr("ecps.v1.PushRequest"));
  EXPECT_THAT(s.error_message(), ::testing::HasSubstr("field tables[0].rows"));
  EXPECT_THAT(s.error_message(), ::testing::HasSubstr("runs past the end"));

  // PullRequest{header: RequestHeader{token: "\xff\xfe"}}: proto3 strings are UTF-8.
  const std::string bad_token("\x0a\x04\x0a\x02\xff\xfe", 6);
  s = CallRaw(cluster_->address(0), "/ecps.v1.ParameterServer/Pull", bad_token);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_THAT(s.error_message(), ::testing::HasSubstr("field header.token: not valid UTF-8"));

  // A truncated varint at the top level.
  s = CallRaw(cluster_->address(0), "/ecps.v1.ParameterServer/Freeze", std::string("\x10\xff", 2));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_THAT(s.error_message(), ::testing::HasSubstr("field freeze: truncated"));
  EXPECT_EQ(ReadRows(0, {0, 2}), before_);

  // A well-formed request through the same path still works.
  v1::PullRequest pull;
  FillHeader(pull.mutable_header(), kToken, 1, "test");
  s = CallRaw(cluster_->address(0), "/ecps.v1.ParameterServer/Pull", pull.SerializeAsString());
  EXPECT_TRUE(s.ok()) << s.error_message();
}

}  // namespace
}  // namespace ecps
