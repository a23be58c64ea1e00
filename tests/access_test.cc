// Per-role credentials (docs/security.md) over real gRPC: every method of both services,
// called with each role's credential it is not open to, is refused with PERMISSION_DENIED
// before its handler runs; a worker's forged peer RPCs against a live erasure-coded cluster
// change nothing (the scrub stays clean); with TLS the certificate, not the token, names the
// role.
#include <grpcpp/generic/generic_stub.h>

#include <chrono>
#include <future>
#include <string>

#include "coordinator/coordinator_test_util.h"
#include "coordinator/scrub.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/ecps.grpc.pb.h"
#include "ps/grpc_parameter_server.h"
#include "runtime/access_policy.h"
#include "tests/test_cluster.h"
#include "tests/tls/test_certificates.h"

namespace ecps {
namespace {

using ::testing::HasSubstr;

constexpr char kSecret[] = "s3cret";
constexpr Role kRoles[] = {Role::kCoordinator, Role::kServer, Role::kWorker, Role::kAdmin};

// The bytes of a request that holds only its header (field 1 of every ecps request).
std::string HeaderOnly(const std::string& token) {
  v1::RequestHeader header;
  FillHeader(&header, token, 1, "access-test");
  const std::string bytes = header.SerializeAsString();
  std::string out(1, '\x0a');  // field 1, length-delimited
  for (size_t n = bytes.size();; n >>= 7) {
    if (n < 0x80) {
      out += static_cast<char>(n);
      break;
    }
    out += static_cast<char>((n & 0x7f) | 0x80);
  }
  return out + bytes;
}

grpc::Status CallRaw(const std::shared_ptr<grpc::Channel>& channel, const std::string& method,
                     const std::string& bytes) {
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::Slice slice(bytes);
  grpc::ByteBuffer request(&slice, 1), response;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&context, method, grpc::StubOptions(), &request, &response,
                 [&done](grpc::Status s) { done.set_value(s); });
  return done.get_future().get();
}

// Every method of both services has a row in the table, and every row is a method.
TEST(AccessTest, TheTableNamesEveryMethodOfBothServices) {
  for (auto [service, table] : {std::pair<const char*, std::span<const MethodAccess>>{
                                    "ecps.v1.ParameterServer", kParameterServerAccess},
                                {"ecps.v1.Coordinator", kCoordinatorAccess}}) {
    const google::protobuf::ServiceDescriptor* descriptor =
        google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(service);
    ASSERT_NE(descriptor, nullptr) << service;
    EXPECT_EQ(static_cast<size_t>(descriptor->method_count()), table.size()) << service;
    for (int i = 0; i < descriptor->method_count(); ++i) {
      const std::string name = descriptor->method(i)->name();
      EXPECT_NE(AccessOf(table, name).ToString(), "nobody") << service << "/" << name;
    }
  }
}

// A server that is not initialised yet: whatever a call gets past the gatekeeper, it answers
// UNAVAILABLE ("still initialising") and changes nothing.
TEST(AccessTest, EveryParameterServerMethodRefusesTheRolesItIsNotOpenTo) {
  ParameterServerCore core(kSecret);
  GrpcParameterServer service(&core);
  auto server = StartGrpcServer("127.0.0.1", 0, {&service}, 2);
  ASSERT_TRUE(server.ok());
  auto channel = MakeChannel(server->address, Role::kServer);
  int refused = 0;
  for (const MethodAccess& m : kParameterServerAccess) {
    const std::string method = absl::StrCat("/ecps.v1.ParameterServer/", std::string(m.method));
    for (Role role : kRoles) {
      grpc::Status status = CallRaw(channel, method, HeaderOnly(RoleToken(kSecret, role)));
      if (m.roles.Has(role)) {
        EXPECT_NE(status.error_code(), grpc::StatusCode::PERMISSION_DENIED)
            << method << " as " << RoleName(role) << ": " << status.error_message();
      } else {
        EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED)
            << method << " as " << RoleName(role) << ": " << status.error_message();
        EXPECT_THAT(status.error_message(),
                    HasSubstr(absl::StrCat(std::string(m.method), " is not open to ",
                                           RoleWithArticle(role))));
        ++refused;
      }
    }
  }
  EXPECT_GE(refused, 40);  // most of 17 methods x 4 roles
  v1::ServerStats stats;
  core.FillStats(&stats);
  EXPECT_EQ(stats.refused_requests(), refused);  // each refusal counted
  server->server->Shutdown();
}

TEST(AccessTest, EveryCoordinatorMethodRefusesTheRolesItIsNotOpenTo) {
  FakeClock clock;
  auto service = CoordinatorService::Create(testing::TestSpec(2, 1), kSecret, &clock);
  ASSERT_TRUE(service.ok());
  GrpcCoordinator glue(service->get());
  auto server = StartGrpcServer("127.0.0.1", 0, {glue.grpc_service()}, 2);
  ASSERT_TRUE(server.ok());
  auto channel = MakeChannel(server->address, Role::kCoordinator);
  for (const MethodAccess& m : kCoordinatorAccess) {
    const std::string method = absl::StrCat("/ecps.v1.Coordinator/", std::string(m.method));
    for (Role role : kRoles) {
      // Allowed calls of a streaming method would stream until the deadline.
      if (m.roles.Has(role) && m.method == "WatchClusterMap") continue;
      grpc::Status status = CallRaw(channel, method, HeaderOnly(RoleToken(kSecret, role)));
      if (m.roles.Has(role)) {
        EXPECT_NE(status.error_code(), grpc::StatusCode::PERMISSION_DENIED)
            << method << " as " << RoleName(role) << ": " << status.error_message();
      } else {
        EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED)
            << method << " as " << RoleName(role) << ": " << status.error_message();
      }
    }
  }

  // A worker's credential cannot join, or heartbeat, as a server; a server's not as a worker.
  auto stub = v1::Coordinator::NewStub(channel);
  const std::string worker = RoleToken(kSecret, Role::kWorker);
  const std::string server_token = RoleToken(kSecret, Role::kServer);
  v1::RegisterResponse registered;
  grpc::ClientContext c1, c2, c3, c4;
  grpc::Status as_server =
      stub->Register(&c1, testing::ServerRegistration(0, "intruder", worker), &registered);
  EXPECT_EQ(as_server.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(as_server.error_message(), HasSubstr("Register as a ROLE_SERVER needs that role"));
  v1::HeartbeatResponse beat;
  EXPECT_EQ(
      stub->Heartbeat(&c2, testing::ServerHeartbeat(0, "intruder", v1::NODE_ACTIVE, worker), &beat)
          .error_code(),
      grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(stub->Register(&c3, testing::WorkerRegistration(0, "w", server_token), &registered)
                .error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  // Nothing joined; the right credentials still can.
  v1::StatusRequest request;
  FillHeader(request.mutable_header(), RoleToken(kSecret, Role::kAdmin), 0, "test");
  v1::StatusResponse status;
  ASSERT_TRUE((*service)->Status(request, &status).ok());
  EXPECT_EQ(status.nodes_size(), 0);
  EXPECT_TRUE(
      stub->Register(&c4, testing::ServerRegistration(0, "s0", server_token), &registered).ok());
  server->server->Shutdown();
}

class LiveClusterAccessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    spec_ = SmallSpec(3, 1);
    spec_.fault_tolerance.mode = FaultToleranceMode::kErasureCode;
    spec_.fault_tolerance.k = 2;
    spec_.fault_tolerance.r = 1;
    spec_.fault_tolerance.dense_replicas = 1;
    cluster_ = TestCluster::Start(spec_, kSecret);
    ASSERT_NE(cluster_, nullptr);
    for (int s = 0; s < 3; ++s) {
      stubs_.push_back(
          v1::ParameterServer::NewStub(MakeChannel(cluster_->address(s), Role::kServer)));
      addresses_.push_back(cluster_->address(s));
    }
  }

  std::vector<uint8_t> Parity() {
    std::vector<uint8_t> row;
    EXPECT_TRUE(cluster_->core(2)->ReadParityRow(0, 0, &row).ok());
    return row;
  }
  std::string Row0() {
    v1::ReadRowsRequest req;
    FillHeader(req.mutable_header(), RoleToken(kSecret, Role::kServer), 1, "test");
    req.mutable_rows()->set_table(0);
    req.mutable_rows()->add_rows(0);
    v1::ReadRowsResponse resp;
    grpc::ClientContext ctx;
    EXPECT_TRUE(stubs_[0]->ReadRows(&ctx, req, &resp).ok());
    return resp.payloads();
  }
  v1::ScrubReport Scrub() {
    return ScrubServers(addresses_, RoleToken(kSecret, Role::kCoordinator), {1}, 10000);
  }

  JobSpec spec_;
  std::unique_ptr<TestCluster> cluster_;
  std::vector<std::unique_ptr<v1::ParameterServer::Stub>> stubs_;
  std::vector<std::string> addresses_;
};

// A well-formed batch of one parity delta (`bytes` long) from server 0, as a server would
// send it, but sent with `token`.
v1::ParityDeltaBatch ForgedDeltas(const std::string& token, size_t bytes) {
  v1::ParityDeltaBatch batch;
  FillHeader(batch.mutable_header(), token, 1, "worker-0");
  batch.set_from_server(0);
  batch.set_sender_instance("test-server-0");
  batch.set_seq(1);
  v1::ParityDelta* d = batch.add_deltas();
  d->set_table(0);
  d->set_stripe(0);
  d->set_j(0);
  d->set_from_version(0);
  d->set_to_version(1);
  d->set_delta(std::string(bytes, '\x5a'));
  return batch;
}

// A well-formed write of a zero parity row (`bytes` long) under the coordinator's freeze 7,
// as a rebuild would send it, but sent with `token`.
v1::WriteParityRequest ForgedParityWrite(const std::string& token, size_t bytes) {
  v1::WriteParityRequest write;
  FillHeader(write.mutable_header(), token, 1, "worker-0");
  write.set_table(0);
  write.add_stripes(0);
  write.set_payloads(std::string(bytes, '\0'));
  write.add_versions(0);
  write.add_versions(0);
  write.set_freeze_id(7);
  write.set_owner(kCoordinatorFreezeOwner);
  return write;
}

TEST_F(LiveClusterAccessTest, AWorkersForgedPeerCallsChangeNothing) {
  const std::string worker = RoleToken(kSecret, Role::kWorker);
  const std::vector<uint8_t> parity = Parity();
  const std::string row = Row0();

  // Well-formed peer requests, as a server would send them, but with a worker's credential.
  const v1::ParityDeltaBatch batch = ForgedDeltas(worker, parity.size());
  v1::ParityDeltaAck ack;
  grpc::ClientContext c1;
  grpc::Status deltas = stubs_[2]->ApplyParityDeltas(&c1, batch, &ack);
  EXPECT_EQ(deltas.error_code(), grpc::StatusCode::PERMISSION_DENIED) << deltas.error_message();

  v1::FreezeRequest freeze;
  FillHeader(freeze.mutable_header(), worker, 1, "worker-0");
  freeze.set_freeze(true);
  freeze.set_freeze_id(7);
  freeze.set_owner(kCoordinatorFreezeOwner);
  v1::FreezeResponse frozen;
  grpc::ClientContext c2;
  EXPECT_EQ(stubs_[0]->Freeze(&c2, freeze, &frozen).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);

  const v1::WriteParityRequest write = ForgedParityWrite(worker, parity.size());
  v1::WriteParityResponse written;
  grpc::ClientContext c3;
  EXPECT_EQ(stubs_[2]->WriteParity(&c3, write, &written).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);

  v1::ReadRowsRequest read;
  FillHeader(read.mutable_header(), worker, 1, "worker-0");
  read.mutable_rows()->set_table(0);
  read.mutable_rows()->add_rows(0);
  v1::ReadRowsResponse rows;
  grpc::ClientContext c4;
  EXPECT_EQ(stubs_[0]->ReadRows(&c4, read, &rows).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_TRUE(rows.payloads().empty());

  v1::ScrubParityRequest scrub;
  FillHeader(scrub.mutable_header(), worker, 1, "worker-0");
  v1::ScrubParityResponse scrubbed;
  grpc::ClientContext c5;
  EXPECT_EQ(stubs_[2]->ScrubParity(&c5, scrub, &scrubbed).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);

  // Nothing changed, and nothing is frozen: the scrub (the coordinator's) is clean.
  EXPECT_EQ(Parity(), parity);
  EXPECT_EQ(Row0(), row);
  v1::ScrubReport report = Scrub();
  EXPECT_TRUE(report.done()) << report.error();
  EXPECT_TRUE(report.clean());
  EXPECT_GT(report.stripes_checked(), 0);

  // What a worker may do, it can: a push changes its row, and parity follows.
  v1::PushRequest push;
  FillHeader(push.mutable_header(), worker, 1, "worker-0");
  v1::TableRows* t = push.add_tables();
  t->set_table(0);
  t->add_rows(0);
  std::vector<float> grad(spec_.model.embedding_dim, 0.25f);
  push.add_grads()->assign(reinterpret_cast<const char*>(grad.data()), grad.size() * sizeof(float));
  v1::PushResponse pushed;
  grpc::ClientContext c6;
  grpc::Status ok = stubs_[0]->Push(&c6, push, &pushed);
  ASSERT_TRUE(ok.ok()) << ok.error_message();
  EXPECT_NE(Row0(), row);
  EXPECT_NE(Parity(), parity);
  EXPECT_TRUE(Scrub().clean());
}

// With TLS the role is the certificate's, whatever token comes with the request.
TEST(TlsAccessTest, TheCertificateNamesTheRole) {
  std::unique_ptr<TestCertificates> certs = TestCertificates::Make();
  ASSERT_NE(certs, nullptr);
  ParameterServerCore core(kSecret);
  GrpcParameterServer service(&core);
  TlsIdentity server_id = certs->Identity("server", Role::kServer);
  auto server = StartGrpcServer("127.0.0.1", 0, {&service}, 2, &server_id);
  ASSERT_TRUE(server.ok());
  const std::string method = "/ecps.v1.ParameterServer/ApplyParityDeltas";

  // A worker's certificate with the job secret as its token: still a worker.
  TlsIdentity worker = certs->Identity("worker", Role::kWorker);
  grpc::Status as_worker =
      CallRaw(MakeChannel(server->address, Role::kServer, &worker), method, HeaderOnly(kSecret));
  EXPECT_EQ(as_worker.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(as_worker.error_message(), HasSubstr("role from its certificate"));

  // A server's certificate with a worker's token: a server (admitted; not initialised).
  TlsIdentity peer = certs->Identity("server", Role::kServer);
  grpc::Status as_server = CallRaw(MakeChannel(server->address, Role::kServer, &peer), method,
                                   HeaderOnly(RoleToken(kSecret, Role::kWorker)));
  EXPECT_EQ(as_server.error_code(), grpc::StatusCode::UNAVAILABLE) << as_server.error_message();
  EXPECT_THAT(as_server.error_message(), HasSubstr("initialising"));

  // The job's token is still needed: two jobs may share a CA.
  grpc::Status stranger = CallRaw(MakeChannel(server->address, Role::kServer, &peer), method,
                                  HeaderOnly(RoleToken("another job", Role::kServer)));
  EXPECT_EQ(stranger.error_code(), grpc::StatusCode::UNAUTHENTICATED);

  // A certificate of the CA whose CN is no role gets nothing (LoadTlsIdentity would refuse
  // it: its files are used unchecked).
  TlsIdentity intruder = certs->Unchecked("intruder", Role::kWorker);
  grpc::Status nobody =
      CallRaw(MakeChannel(server->address, Role::kServer, &intruder), method, HeaderOnly(kSecret));
  EXPECT_EQ(nobody.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(nobody.error_message(), HasSubstr("CN 'intruder', not a role"));
  server->server->Shutdown();
}

}  // namespace
}  // namespace ecps
