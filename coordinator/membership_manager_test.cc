#include "coordinator/membership_manager.h"

#include <memory>
#include <vector>

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

// A MembershipManager with real failure and progress managers, and hooks that stand in for
// the checkpoint and scrub managers: they record what the manager asks of them.
class MembershipManagerTest : public ::testing::Test {
 protected:
  MembershipManagerTest() { Make(1, 1); }

  void Make(int servers, int workers) {
    membership_.reset();
    FailureManager::Options options;
    options.detector.heartbeat_timeout = kTimeout;
    options.detector.suspicion_timeout = kTimeout / 3;
    failures_ = std::make_unique<FailureManager>(&clock_, options);
    progress_ = std::make_unique<ProgressManager>(&clock_, workers, 100);
    Membership::Config config;
    config.servers = servers;
    config.workers = workers;
    MembershipManager::Hooks hooks;
    hooks.save_parts = [this](v1::CoordinatorState* state) {
      failures_->Save(state);
      state->mutable_last_scrub()->set_error(scrub_part_);  // the scrub manager's part
    };
    hooks.final_checkpoint_wanted = [this] {
      ++facts_asked_;
      return final_checkpoint_wanted_;
    };
    hooks.final_scrub_wanted = [] { return false; };
    hooks.request_final_checkpoint = [this] { ++final_checkpoint_requests_; };
    hooks.request_final_scrub = [] {};
    membership_ = std::make_unique<MembershipManager>(
        &clock_, config, MembershipManager::Options{"test-job", absl::Seconds(120),
                                                    absl::Milliseconds(200)},
        failures_.get(), progress_.get(), std::move(hooks));
  }
  void SaveInto(std::vector<v1::CoordinatorState>* saved) {
    membership_->SetStateSaver([saved](const v1::CoordinatorState& state) {
      saved->push_back(state);
      return absl::OkStatus();
    });
  }
  void Start() {
    v1::RegisterResponse r;
    ASSERT_TRUE(membership_->Register(ServerRegistration(0, "s0"), &r).ok());
    ASSERT_TRUE(membership_->Register(WorkerRegistration(0, "w0"), &r).ok());
    v1::HeartbeatResponse h;
    ASSERT_TRUE(membership_->Heartbeat(ServerHeartbeat(0, "s0"), &h).ok());
    ASSERT_EQ(membership_->phase(), v1::JOB_RUNNING);
  }

  FakeClock clock_;
  std::unique_ptr<FailureManager> failures_;
  std::unique_ptr<ProgressManager> progress_;
  std::unique_ptr<MembershipManager> membership_;
  std::string scrub_part_ = "scrub part";
  bool final_checkpoint_wanted_ = false;
  int facts_asked_ = 0;
  int final_checkpoint_requests_ = 0;
};

TEST_F(MembershipManagerTest, AChangeOfTheMapIsSavedWholeBeforeTheCallReturns) {
  std::vector<v1::CoordinatorState> saved;
  SaveInto(&saved);
  ASSERT_EQ(saved.size(), 1u) << "the saver saves once at once";
  v1::RegisterResponse response;
  ASSERT_TRUE(membership_->Register(ServerRegistration(0, "s0"), &response).ok());
  ASSERT_EQ(saved.size(), 2u);
  EXPECT_EQ(saved.back().servers(0).info().instance(), "s0");
  EXPECT_EQ(saved.back().version(), response.map().version() - saved.back().phase_changes())
      << "the saved table is the one the response shows";
  EXPECT_EQ(saved.back().last_scrub().error(), "scrub part") << "with the other managers' parts";
}

TEST_F(MembershipManagerTest, TheFinalCheckpointIsAskedForOnceEveryWorkerIsDone) {
  final_checkpoint_wanted_ = true;
  Start();
  EXPECT_EQ(facts_asked_, 0) << "the other managers' locks are not taken on every heartbeat";
  v1::HeartbeatResponse h;
  ASSERT_TRUE(membership_->Heartbeat(WorkerHeartbeat(0, "w0", 100, /*done=*/true), &h).ok());
  EXPECT_EQ(final_checkpoint_requests_, 1);
  EXPECT_EQ(membership_->phase(), v1::JOB_RUNNING) << "the job waits for its final checkpoint";
  final_checkpoint_wanted_ = false;  // what the checkpoint manager says once it saved
  membership_->Advance();
  EXPECT_EQ(membership_->phase(), v1::JOB_FINISHED);
}

TEST_F(MembershipManagerTest, SaveWithSavesOnlyAChangeThatHappened) {
  std::vector<v1::CoordinatorState> saved;
  SaveInto(&saved);
  Start();
  const size_t before = saved.size();
  int workers_seen = -1;
  EXPECT_EQ(membership_
                ->SaveWith([&](const WorkerReports& workers) {
                  workers_seen = static_cast<int>(workers.size());
                  return absl::FailedPreconditionError("nothing changed");
                })
                .code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(workers_seen, 1);
  EXPECT_EQ(saved.size(), before);
  scrub_part_ = "changed";
  ASSERT_TRUE(membership_->SaveWith([](const WorkerReports&) { return absl::OkStatus(); }).ok());
  ASSERT_EQ(saved.size(), before + 1);
  EXPECT_EQ(saved.back().last_scrub().error(), "changed");
}

TEST_F(MembershipManagerTest, ADeadServerIsHandedBackAndMarkedInTheMap) {
  Start();
  clock_.Advance(kTimeout / 2);
  v1::HeartbeatResponse h;
  ASSERT_TRUE(membership_->Heartbeat(WorkerHeartbeat(0, "w0", 3), &h).ok());
  clock_.Advance(kTimeout / 2 + absl::Milliseconds(1));
  const MembershipManager::TickResult tick = membership_->Tick();
  ASSERT_EQ(tick.dead.size(), 1u);
  EXPECT_EQ(tick.dead[0].id, 0);
  EXPECT_EQ(membership_->epoch(), 2u);
  v1::ClusterMap map;
  EXPECT_TRUE(membership_->View(&map).any_server_recovering);
  EXPECT_EQ(map.servers(0).state(), v1::NODE_DEAD);
  EXPECT_FALSE(membership_->EndedOrDataLost()) << "mode none has no stripes to lose";
  membership_->Fail("server 0 is gone");
  EXPECT_TRUE(membership_->EndedOrDataLost()) << "nothing is handed over once the job ended";
  EXPECT_FALSE(membership_->data_lost());
}

TEST_F(MembershipManagerTest, ATakeoverRaisesTheTermAndWatchesEveryLiveNodeAgain) {
  std::vector<v1::CoordinatorState> saved;
  SaveInto(&saved);
  Start();
  const v1::CoordinatorState state = saved.back();
  Make(1, 1);
  ASSERT_TRUE(membership_->Restore(state).ok());
  EXPECT_EQ(membership_->term(), state.term() + 1);
  EXPECT_EQ(membership_->phase(), v1::JOB_RUNNING);
  EXPECT_TRUE(failures_->SinceHeartbeat("s0").has_value());
  EXPECT_TRUE(failures_->SinceHeartbeat("w0").has_value());
  clock_.Advance(kTimeout + absl::Milliseconds(1));
  EXPECT_TRUE(membership_->Tick().dead.empty()) << "the takeover's grace holds";

  Make(2, 1);
  EXPECT_EQ(membership_->Restore(state).code(), absl::StatusCode::kInvalidArgument)
      << "a state of another spec";
  EXPECT_EQ(membership_->term(), 1u) << "nothing changed";
}

}  // namespace
}  // namespace ecps
