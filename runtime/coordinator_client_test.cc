// Which coordinator a CoordinatorClient calls: along its list of candidates, to the address
// its address file names, and away from a deposed one. Real gRPC servers on free ports, each
// a fake coordinator that tells who answered.
#include "runtime/coordinator_client.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/net.h"
#include "runtime/rpc.h"

namespace ecps {
namespace {

// Answers Status with its `id` as the step, and Heartbeat with its `term`.
class FakeCoordinator final : public v1::Coordinator::Service {
 public:
  FakeCoordinator(int id, uint64_t term) : id_(id), term_(term) {}
  grpc::Status Status(grpc::ServerContext*, const v1::StatusRequest*,
                      v1::StatusResponse* response) override {
    response->set_step(id_);
    return grpc::Status::OK;
  }
  grpc::Status Heartbeat(grpc::ServerContext*, const v1::HeartbeatRequest*,
                         v1::HeartbeatResponse* response) override {
    response->set_term(term_.load());
    return grpc::Status::OK;
  }
  void set_term(uint64_t term) { term_ = term; }

 private:
  const int id_;
  std::atomic<uint64_t> term_;
};

class CoordinatorClientTest : public ::testing::Test {
 protected:
  // Starts fake coordinator `id` (answering as `term`); returns its address.
  std::string Serve(int id, uint64_t term = 1) {
    fakes_.push_back(std::make_unique<FakeCoordinator>(id, term));
    absl::StatusOr<GrpcServer> server = StartGrpcServer("127.0.0.1", 0, {fakes_.back().get()});
    EXPECT_TRUE(server.ok()) << server.status();
    servers_.push_back(*std::move(server));
    return servers_.back().address;
  }
  // An address where nothing listens.
  static std::string Nobody() {
    absl::StatusOr<int> port = PickFreePort("127.0.0.1");
    EXPECT_TRUE(port.ok()) << port.status();
    return JoinHostPort("127.0.0.1", *port);
  }
  void TearDown() override {
    for (GrpcServer& s : servers_) s.server->Shutdown();
    if (!file_.empty()) std::remove(file_.c_str());
  }
  std::string AddressFile(const std::string& names) {
    file_ = ::testing::TempDir() + "/coordinator_client_test." + std::to_string(getpid());
    std::ofstream(file_) << names << "\n";
    return file_;
  }

  std::vector<std::unique_ptr<FakeCoordinator>> fakes_;
  std::vector<GrpcServer> servers_;
  std::string file_;
};

int64_t AnsweredBy(CoordinatorClient* client) {
  absl::StatusOr<v1::StatusResponse> status = client->Status();
  EXPECT_TRUE(status.ok()) << status.status();
  return status.ok() ? status->step() : -1;
}

TEST_F(CoordinatorClientTest, OneAddressIsCalledAsGiven) {
  const std::string a = Serve(1);
  CoordinatorClient client(a, "", "test", 2000);
  EXPECT_EQ(AnsweredBy(&client), 1);
  EXPECT_EQ(client.address(), a);
}

TEST_F(CoordinatorClientTest, MovesAlongTheListToTheCoordinatorThatListens) {
  // A standby does not listen; the next candidate leads.
  const std::string b = Serve(2);
  CoordinatorClient client(Nobody() + "," + b, "", "test", 2000);
  EXPECT_EQ(AnsweredBy(&client), 2);
  EXPECT_EQ(client.address(), b);
  EXPECT_EQ(AnsweredBy(&client), 2);  // and stays there
}

TEST_F(CoordinatorClientTest, DialsAnAddressTheFileNamesOutsideTheList) {
  // The coordinator was started again elsewhere and wrote its new address.
  const std::string dead = Nobody();
  const std::string moved = Serve(7);
  CoordinatorClient client(dead, "", "test", 2000, AddressFile(moved));
  EXPECT_EQ(AnsweredBy(&client), 7);
  EXPECT_EQ(client.address(), moved);
}

TEST_F(CoordinatorClientTest, AFileNamingACandidateGoesStraightToIt) {
  // Of three candidates the first is gone and the file names the third, which leads; the
  // second, which also listens, is skipped.
  const std::string second = Serve(2);
  const std::string third = Serve(3);
  CoordinatorClient client(Nobody() + "," + second + "," + third, "", "test", 2000,
                           AddressFile(third));
  EXPECT_EQ(AnsweredBy(&client), 3);
  EXPECT_EQ(client.address(), third);
}

TEST_F(CoordinatorClientTest, ADeposedCoordinatorsAnswerMovesToTheNext) {
  const std::string a = Serve(1, /*term=*/2);
  const std::string b = Serve(2, /*term=*/2);
  CoordinatorClient client(a + "," + b, "", "test", 2000);
  v1::HeartbeatRequest request;
  ASSERT_TRUE(client.Heartbeat(request).ok());  // term 2 seen
  fakes_[0]->set_term(1);                       // the one at `a` is a deposed one now
  absl::StatusOr<v1::HeartbeatResponse> refused = client.Heartbeat(request);
  EXPECT_TRUE(absl::IsFailedPrecondition(refused.status())) << refused.status();
  EXPECT_EQ(client.address(), b);
  EXPECT_TRUE(client.Heartbeat(request).ok());
}

}  // namespace
}  // namespace ecps
