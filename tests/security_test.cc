// Role tokens, the gatekeeper's decisions, and mutual TLS over real gRPC connections (the
// health probe of `ecps health` among them), with certificates that openssl makes for each
// run (tests/tls/make_certs.sh).
#include "runtime/security.h"

#include <grpcpp/generic/generic_stub.h>

#include <future>
#include <string>

#include "cli/health_command.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/ecps.pb.h"
#include "runtime/access_policy.h"
#include "runtime/health.h"
#include "runtime/peer_probe.h"
#include "runtime/rpc.h"
#include "tests/tls/test_certificates.h"

namespace ecps {
namespace {

using ::testing::HasSubstr;

v1::RequestHeader Header(const std::string& token) {
  v1::RequestHeader header;
  FillHeader(&header, token, 0, "test");
  return header;
}

TEST(RoleTokenTest, EachRoleAndJobHasItsOwnToken) {
  const std::string worker = RoleToken("s3cret", Role::kWorker);
  EXPECT_EQ(worker, RoleToken("s3cret", Role::kWorker));  // derived, not random
  EXPECT_NE(worker, RoleToken("s3cret", Role::kServer));
  EXPECT_NE(worker, RoleToken("other", Role::kWorker));
  EXPECT_THAT(worker, ::testing::StartsWith("ecps-worker-"));
  EXPECT_EQ(worker.size(), std::string("ecps-worker-").size() + 32);
  EXPECT_EQ(ClaimedRole(worker), Role::kWorker);
  EXPECT_EQ(ClaimedRole(RoleToken("s3cret", Role::kAdmin)), Role::kAdmin);
  EXPECT_EQ(ClaimedRole("s3cret"), std::nullopt);
  EXPECT_EQ(ClaimedRole("ecps-worker-xyz"), std::nullopt);
  EXPECT_EQ(ClaimedRole("ecps-pilot-0123456789abcdef0123456789abcdef"), std::nullopt);
}

TEST(RoleTokenTest, APresentedTokenIsTheRolesOwn) {
  const std::string worker = RoleToken("s3cret", Role::kWorker);
  EXPECT_EQ(*PresentedToken("s3cret", Role::kWorker), worker);  // the secret: derived
  EXPECT_EQ(*PresentedToken(worker, Role::kWorker), worker);    // its own: as it is
  EXPECT_EQ(*PresentedToken("", Role::kWorker), "");            // a job without a secret
  auto other = PresentedToken(worker, Role::kAdmin);
  ASSERT_FALSE(other.ok());
  EXPECT_THAT(std::string(other.status().message()),
              HasSubstr("a worker's credential, not an admin's"));
  EXPECT_TRUE(CheckJobSecret("s3cret", Role::kServer).ok());
  absl::Status not_secret = CheckJobSecret(worker, Role::kServer);
  EXPECT_TRUE(absl::IsInvalidArgument(not_secret));
  EXPECT_THAT(std::string(not_secret.message()), HasSubstr("needs the job secret"));
}

TEST(GatekeeperTest, TheTokenGivesTheRole) {
  Gatekeeper gate("s3cret");
  const RoleSet servers = AccessOf(kParameterServerAccess, "ApplyParityDeltas");
  auto server = gate.Authorize(nullptr, Header(RoleToken("s3cret", Role::kServer)), servers,
                               "ApplyParityDeltas");
  ASSERT_TRUE(server.ok());
  EXPECT_EQ(server->role, Role::kServer);
  EXPECT_FALSE(server->secret);

  auto worker = gate.Authorize(nullptr, Header(RoleToken("s3cret", Role::kWorker)), servers,
                               "ApplyParityDeltas");
  ASSERT_TRUE(absl::IsPermissionDenied(worker.status()));
  EXPECT_THAT(std::string(worker.status().message()),
              HasSubstr("ApplyParityDeltas is not open to a worker (role from its token; "
                        "open to: server)"));

  auto secret = gate.Authorize(nullptr, Header("s3cret"), servers, "ApplyParityDeltas");
  ASSERT_TRUE(secret.ok());
  EXPECT_TRUE(secret->secret);

  // Another job's worker token, or a made-up one in the right form, is not this job's.
  for (const std::string& token :
       {RoleToken("other job", Role::kServer),
        std::string("ecps-server-0123456789abcdef0123456789abcdef"), std::string("")}) {
    auto stranger = gate.Authorize(nullptr, Header(token), servers, "ApplyParityDeltas");
    EXPECT_TRUE(absl::IsUnauthenticated(stranger.status())) << token;
    EXPECT_TRUE(absl::IsUnauthenticated(gate.Authenticate(Header(token)))) << token;
  }
}

TEST(GatekeeperTest, EveryMethodIsOpenToSomeoneAndNoWorkerReachesPeerRpcs) {
  for (const MethodAccess& m : kParameterServerAccess) {
    EXPECT_NE(m.roles.ToString(), "nobody") << m.method;
  }
  for (const char* peer : {"ApplyParityDeltas", "WriteParity", "ReadParity", "ReadRows", "Freeze",
                           "ReplicateDense", "ReadDense", "HotRows", "ScrubParity",
                           "SaveCheckpoint", "LoadCheckpoint", "DenseChecksums", "Health",
                           "WriteRows"}) {
    EXPECT_FALSE(AccessOf(kParameterServerAccess, peer).Has(Role::kWorker)) << peer;
    EXPECT_FALSE(AccessOf(kParameterServerAccess, peer).Has(Role::kAdmin)) << peer;
  }
  for (const char* admin : {"Scrub", "Kill", "Checkpoint"}) {
    EXPECT_EQ(AccessOf(kCoordinatorAccess, admin).ToString(), "admin") << admin;
  }
  EXPECT_EQ(AccessOf(kCoordinatorAccess, "NoSuchMethod").ToString(), "nobody");
}

// The certificates of one run, made once for the whole suite.
class TlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { certs_ = TestCertificates::Make().release(); }
  static void TearDownTestSuite() { delete certs_; }
  void SetUp() override { ASSERT_NE(certs_, nullptr); }

  static TlsFiles Files(const std::string& name) { return certs_->Files(name); }
  static TlsIdentity Identity(const std::string& name, Role role) {
    return certs_->Identity(name, role);
  }

  // Calls the liveness check of grpc.health.v1 on `address` over a channel with `tls`.
  static grpc::Status Probe(const std::string& address, const TlsIdentity* tls,
                            Role peer = Role::kServer) {
    grpc::GenericStub stub(MakeChannel(address, peer, tls));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    grpc::Slice empty(std::string(""));
    grpc::ByteBuffer request(&empty, 1), response;
    std::promise<grpc::Status> done;
    stub.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request,
                   &response, [&done](grpc::Status s) { done.set_value(s); });
    return done.get_future().get();
  }

  static TestCertificates* certs_;
};
TestCertificates* TlsTest::certs_ = nullptr;

TEST_F(TlsTest, LoadingChecksEveryFile) {
  auto good = LoadTlsIdentity(Files("server"), Role::kServer);
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ(good->role, Role::kServer);

  auto message = [](const absl::StatusOr<TlsIdentity>& id) {
    EXPECT_TRUE(absl::IsInvalidArgument(id.status())) << id.status();
    return std::string(id.status().message());
  };
  EXPECT_THAT(message(LoadTlsIdentity(Files("server"), Role::kWorker)),
              HasSubstr("its subject CN is 'server', but a worker's certificate must have "
                        "CN=worker"));
  EXPECT_THAT(message(LoadTlsIdentity(Files("expired-worker"), Role::kWorker)),
              HasSubstr("expired-worker.pem has expired"));
  EXPECT_THAT(message(LoadTlsIdentity(Files("other-worker"), Role::kWorker)),
              HasSubstr("does not chain to the CA"));
  TlsFiles wrong_key = Files("worker");
  wrong_key.key = certs_->Path("server.key");
  EXPECT_THAT(message(LoadTlsIdentity(wrong_key, Role::kWorker)),
              HasSubstr("server.key is not the private key of"));
  TlsFiles missing = Files("worker");
  missing.cert = certs_->Path("nope.pem");
  EXPECT_THAT(message(LoadTlsIdentity(missing, Role::kWorker)),
              HasSubstr("cannot read the worker's certificate"));
  TlsFiles not_pem = Files("worker");
  not_pem.ca = certs_->Path("ca-db/index.txt");
  EXPECT_THAT(message(LoadTlsIdentity(not_pem, Role::kWorker)), HasSubstr("not a PEM certificate"));
}

TEST_F(TlsTest, OnlyClientsWithACertificateOfTheJobsCaGetIn) {
  TlsIdentity server_id = Identity("server", Role::kServer);
  auto server = StartGrpcServer("127.0.0.1", 0, {}, 1, &server_id);
  ASSERT_TRUE(server.ok()) << server.status();

  TlsIdentity worker = Identity("worker", Role::kWorker);
  const grpc::Status in = Probe(server->address, &worker);
  EXPECT_TRUE(in.ok()) << in.error_code() << " " << in.error_message();

  // A plaintext client, a client of another CA, an expired certificate: no handshake.
  EXPECT_EQ(Probe(server->address, nullptr).error_code(), grpc::StatusCode::UNAVAILABLE);
  TlsIdentity other = certs_->Unchecked("other-worker", Role::kWorker);
  EXPECT_EQ(Probe(server->address, &other).error_code(), grpc::StatusCode::UNAVAILABLE);
  TlsIdentity expired = certs_->Unchecked("expired-worker", Role::kWorker);
  EXPECT_EQ(Probe(server->address, &expired).error_code(), grpc::StatusCode::UNAVAILABLE);

  // The client checks the server's role: a worker's certificate cannot pose as the
  // coordinator.
  TlsIdentity admin = Identity("admin", Role::kAdmin);
  EXPECT_TRUE(Probe(server->address, &admin, Role::kServer).ok());
  EXPECT_EQ(Probe(server->address, &admin, Role::kCoordinator).error_code(),
            grpc::StatusCode::UNAVAILABLE);

  // A plaintext server does not answer a TLS client either.
  auto plain = StartGrpcServer("127.0.0.1", 0, {}, 1, nullptr);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(Probe(plain->address, &worker).error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_TRUE(Probe(plain->address, nullptr).ok());
  server->server->Shutdown();
  plain->server->Shutdown();
}

// `ecps health`, the exec probe `ecps k8s` writes for a TLS job's pods: with the pod's own
// certificate it gets the answer; without one, as Kubernetes' gRPC probe asks, no handshake.
TEST_F(TlsTest, TheHealthCommandProbesOverMutualTlsWithTheRolesCertificate) {
  TlsIdentity server_id = Identity("server", Role::kServer);
  auto server = StartGrpcServer("127.0.0.1", 0, {}, 1, &server_id);
  ASSERT_TRUE(server.ok()) << server.status();
  SetHealth(server->server.get(), kParameterServerHealthService, false);
  const std::string& address = server->address;
  EXPECT_EQ(RunHealthCommand(address, Role::kServer, "", 5000, &server_id), kHealthServing);
  EXPECT_EQ(
      RunHealthCommand(address, Role::kServer, kParameterServerHealthService, 5000, &server_id),
      kHealthNotServing);
  EXPECT_EQ(RunHealthCommand(address, Role::kServer, "", 5000, nullptr), kHealthUnreachable);
  // The role asked for is checked against the server's certificate.
  EXPECT_EQ(RunHealthCommand(address, Role::kCoordinator, "", 5000, &server_id),
            kHealthUnreachable);
  server->server->Shutdown();
}

// What an operator command asks after a failed call (runtime/peer_probe.h): does the listener
// speak TLS? A TLS server answers a certificate-less ClientHello with TLS, a plaintext one not.
TEST_F(TlsTest, AProbeTellsATlsServerFromAPlaintextOne) {
  TlsIdentity coordinator = Identity("coordinator", Role::kCoordinator);
  auto tls = StartGrpcServer("127.0.0.1", 0, {}, 1, &coordinator);
  ASSERT_TRUE(tls.ok()) << tls.status();
  auto plain = StartGrpcServer("127.0.0.1", 0, {}, 1, nullptr);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(AnswersTls(tls->address, 2000), std::optional<bool>(true));
  EXPECT_EQ(AnswersTls(plain->address, 2000), std::optional<bool>(false));
  tls->server->Shutdown();
  plain->server->Shutdown();
}

}  // namespace
}  // namespace ecps
