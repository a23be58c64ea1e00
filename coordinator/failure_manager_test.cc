#include "coordinator/failure_manager.h"

#include "runtime/clock.h"
#include "coordinator/coordinator_test_util.h"
#include "gtest/gtest.h"
#include "proto/coordinator_state.pb.h"
#include "proto/ecps.pb.h"

namespace ecps {
namespace {

using testing::ServerHeartbeat;
using testing::ServerRegistration;
using testing::WorkerHeartbeat;
using testing::WorkerRegistration;

constexpr absl::Duration kTimeout = absl::Milliseconds(1500);

FailureManager::Options Options() {
  FailureManager::Options options;
  options.detector.heartbeat_timeout = kTimeout;
  options.detector.suspicion_timeout = kTimeout / 3;
  return options;
}

// A table with server 0 and worker 0 registered, and the failure manager told of both.
class FailureManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Membership::Config config;
    config.servers = 1;
    config.workers = 1;
    membership_ = std::make_unique<Membership>(config);
    Register(ServerRegistration(0, "s0"));
    Register(WorkerRegistration(0, "w0"));
  }
  Membership::Registration Register(const v1::RegisterRequest& request) {
    absl::StatusOr<Membership::Registration> reg = membership_->Register(request);
    EXPECT_TRUE(reg.ok()) << reg.status();
    failures_.Registered(*reg, request.pid(), membership_->epoch());
    return *reg;
  }
  // Every death the detector sees now, declared as the membership manager does.
  std::vector<std::string> DeclareDeaths() {
    std::vector<std::string> why;
    for (const FailureDetector::Death& death : failures_.Check()) {
      std::optional<NodeRef> node = membership_->MarkDead(death.node);
      if (node) why.push_back(failures_.Declared(*node, death));
    }
    return why;
  }

  FakeClock clock_;
  FailureManager failures_{&clock_, Options()};
  std::unique_ptr<Membership> membership_;
};

TEST_F(FailureManagerTest, AKilledServersDeathSaysSoAndIsInTheHistory) {
  failures_.RequestKill("s0");
  EXPECT_TRUE(failures_.KillRequested("s0"));
  clock_.Advance(kTimeout + absl::Milliseconds(1));
  auto hb = membership_->ApplyHeartbeat(WorkerHeartbeat(0, "w0", 1));
  ASSERT_TRUE(hb.ok());
  failures_.Heartbeat(*hb, WorkerHeartbeat(0, "w0", 1));
  const std::vector<std::string> why = DeclareDeaths();
  ASSERT_EQ(why.size(), 1u) << "the worker heartbeated";
  EXPECT_NE(why[0].find("server 0"), std::string::npos) << why[0];
  EXPECT_NE(why[0].find("(killed by ecps kill)"), std::string::npos) << why[0];
  EXPECT_FALSE(failures_.KillRequested("s0")) << "a dead instance's kill request is done";
  v1::StatusResponse status;
  failures_.FillStatus(&status);
  ASSERT_EQ(status.failures_size(), 1);
  EXPECT_EQ(status.failures(0).role(), v1::ROLE_SERVER);
  EXPECT_EQ(status.failures(0).instance(), "s0");
}

TEST_F(FailureManagerTest, AFinishedWorkerIsNotWatchedAndItsSilenceIsNoFailure) {
  auto hb = membership_->ApplyHeartbeat(WorkerHeartbeat(0, "w0", 100, /*done=*/true));
  ASSERT_TRUE(hb.ok());
  ASSERT_TRUE(hb->became_done);
  failures_.Heartbeat(*hb, WorkerHeartbeat(0, "w0", 100, true));
  auto server = membership_->ApplyHeartbeat(ServerHeartbeat(0, "s0"));
  clock_.Advance(kTimeout / 2);
  failures_.Heartbeat(*server, ServerHeartbeat(0, "s0"));
  clock_.Advance(kTimeout / 2 + absl::Milliseconds(1));
  EXPECT_TRUE(DeclareDeaths().empty());
  EXPECT_FALSE(failures_.SinceHeartbeat("w0").has_value());
}

TEST_F(FailureManagerTest, AReplacementWorkersResumeStepIsKeptUntilItDies) {
  auto hb = membership_->ApplyHeartbeat(WorkerHeartbeat(0, "w0", 5));
  ASSERT_TRUE(hb.ok());
  failures_.Heartbeat(*hb, WorkerHeartbeat(0, "w0", 5));
  clock_.Advance(kTimeout + absl::Milliseconds(1));
  EXPECT_EQ(DeclareDeaths().size(), 2u);
  const Membership::Registration reg = Register(WorkerRegistration(0, "w0b"));
  ASSERT_TRUE(reg.replaced.has_value());
  ASSERT_TRUE(reg.resume.has_value());
  EXPECT_TRUE(failures_.Resumes(0));

  v1::CoordinatorState state;
  failures_.Save(&state);
  EXPECT_EQ(state.failures_size(), 2);
  EXPECT_EQ(state.worker_resume_step().count(0), 1u);
  FailureManager restored(&clock_, Options());
  restored.Restore(state);
  EXPECT_TRUE(restored.Resumes(0)) << "a takeover keeps the resume step";
  v1::StatusResponse status;
  restored.FillStatus(&status);
  EXPECT_EQ(status.failures_size(), 2);

  clock_.Advance(kTimeout + absl::Milliseconds(1));
  DeclareDeaths();
  EXPECT_FALSE(failures_.Resumes(0)) << "its replacement resumes from the last report instead";
}

TEST(FailureManagerDataLossTest, MoreThanRLostMembersOfAStripeIsDataLoss) {
  FakeClock clock;
  FailureManager::Options options = Options();
  absl::StatusOr<Placement> placement = Placement::Create(3, 2, 1, {100});
  ASSERT_TRUE(placement.ok()) << placement.status();
  options.placement = std::move(*placement);
  options.keeps_redundancy = true;
  options.r = 1;
  FailureManager failures(&clock, std::move(options));
  v1::ClusterMap map;
  for (int s = 0; s < 3; ++s) map.add_servers()->set_state(v1::NODE_ACTIVE);
  map.mutable_servers(1)->set_state(v1::NODE_DEAD);
  EXPECT_EQ(failures.DataLoss(map), "") << "r = 1 member lost is recoverable";
  map.mutable_servers(2)->set_state(v1::NODE_RECOVERING);
  const std::string loss = failures.DataLoss(map);
  EXPECT_EQ(loss.rfind("DATA LOST: servers 1 (dead), 2 (rebuilding)", 0), 0u) << loss;
}

}  // namespace
}  // namespace ecps
