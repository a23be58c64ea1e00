#include "ps/server_lifecycle.h"

#include <atomic>
#include <chrono>

#include "gtest/gtest.h"
#include "runtime/fake_coordinator_link.h"
#include "runtime/rpc.h"

namespace ecps {
namespace {

using ::ecps::testing::FakeCoordinatorLink;

v1::NodeInfo Server(const std::string& instance, v1::NodeState state,
                    const std::string& address = "") {
  v1::NodeInfo node;
  node.set_role(v1::ROLE_SERVER);
  node.set_instance(instance);
  node.set_state(state);
  node.set_address(address);
  return node;
}

v1::ClusterMap MapOf(uint64_t epoch, const std::vector<v1::NodeInfo>& servers) {
  v1::ClusterMap map;
  map.set_epoch(epoch);
  for (const v1::NodeInfo& s : servers) *map.add_servers() = s;
  return map;
}

TEST(InitialServerStateTest, KeepsStandbyAndRecoveringAndStartsEverythingElse) {
  EXPECT_EQ(InitialServerState(v1::NODE_STANDBY), v1::NODE_STANDBY);
  EXPECT_EQ(InitialServerState(v1::NODE_RECOVERING), v1::NODE_RECOVERING);
  EXPECT_EQ(InitialServerState(v1::NODE_ACTIVE), v1::NODE_STARTING);
  EXPECT_EQ(InitialServerState(v1::NODE_STARTING), v1::NODE_STARTING);
}

TEST(ServerSlotOfTest, FindsTheInstancesSlot) {
  const v1::ClusterMap map =
      MapOf(3, {Server("a", v1::NODE_ACTIVE), Server("b", v1::NODE_ACTIVE)});
  EXPECT_EQ(ServerSlotOf(map, "b"), 1);
  EXPECT_EQ(ServerSlotOf(map, "c"), -1);
}

TEST(EveryServerAddressedTest, NeedsEverySlotWithAnAddress) {
  const v1::ClusterMap both = MapOf(1, {Server("a", v1::NODE_STARTING, "h:1"),
                                        Server("b", v1::NODE_STARTING, "h:2")});
  EXPECT_TRUE(EveryServerAddressed(both, 2));
  EXPECT_FALSE(EveryServerAddressed(both, 3));
  const v1::ClusterMap one =
      MapOf(1, {Server("a", v1::NODE_STARTING, "h:1"), Server("", v1::NODE_DEAD)});
  EXPECT_FALSE(EveryServerAddressed(one, 2));
}

TEST(RecoveryViewTest, SuspectsAreReadableAndDeadOrStartingServersAreNot) {
  const v1::ClusterMap map =
      MapOf(5, {Server("self", v1::NODE_RECOVERING), Server("a", v1::NODE_ACTIVE),
                Server("s", v1::NODE_SUSPECT), Server("d", v1::NODE_DEAD),
                Server("r", v1::NODE_RECOVERING), Server("n", v1::NODE_STARTING)});
  EXPECT_EQ(UnusableServers(map, 0), (std::set<int>{3, 4, 5}));
  EXPECT_EQ(LivePeers(map, 0), (std::vector<int>{1, 2, 4}));
  // Seen from server 1, the recovering server 0 is a live peer but cannot be read.
  EXPECT_EQ(UnusableServers(map, 1), (std::set<int>{0, 3, 4, 5}));
  EXPECT_EQ(LivePeers(map, 1), (std::vector<int>{0, 2, 4}));
}

TEST(TrainingDoneTest, EveryWorkerFinishedAndAtLeastOne) {
  v1::ClusterMap map;
  EXPECT_FALSE(TrainingDone(map));
  map.add_workers()->set_state(v1::NODE_FINISHED);
  EXPECT_TRUE(TrainingDone(map));
  map.add_workers()->set_state(v1::NODE_ACTIVE);
  EXPECT_FALSE(TrainingDone(map));
}

TEST(StandingInMapTest, TellsHeldReplacedAndDeclaredDeadApart) {
  const v1::ClusterMap map =
      MapOf(4, {Server("me", v1::NODE_ACTIVE), Server("other", v1::NODE_RECOVERING),
                Server("me2", v1::NODE_DEAD), Server("", v1::NODE_DEAD)});
  EXPECT_EQ(StandingInMap(map, 0, "me"), MapStanding::kHeld);
  EXPECT_EQ(StandingInMap(map, 1, "me"), MapStanding::kReplaced);
  EXPECT_EQ(StandingInMap(map, 2, "me2"), MapStanding::kDeclaredDead);
  EXPECT_EQ(StandingInMap(map, 3, "me"), MapStanding::kHeld);  // not filled in yet
  EXPECT_EQ(StandingInMap(map, 7, "me"), MapStanding::kHeld);  // past the map: no verdict
  EXPECT_EQ(StandingInMap(map, -1, "me"), MapStanding::kHeld);
}

TEST(PeerAddressBookTest, ReportsOnlyAddressesThatChanged) {
  PeerAddressBook book;
  EXPECT_TRUE(book.Update(MapOf(1, {Server("a", v1::NODE_ACTIVE, "h:1"),
                                    Server("b", v1::NODE_ACTIVE, "")}))
                  .empty());
  // Slot 1's first address is learnt; slot 0's replacement is reported.
  const auto changed = book.Update(
      MapOf(2, {Server("a2", v1::NODE_RECOVERING, "h:9"), Server("b", v1::NODE_ACTIVE, "h:2")}));
  ASSERT_EQ(changed.size(), 1u);
  EXPECT_EQ(changed[0], (std::pair<int, std::string>{0, "h:9"}));
  // An address that disappears is not forgotten, nor reported.
  EXPECT_TRUE(book.Update(MapOf(3, {Server("a2", v1::NODE_DEAD, ""),
                                    Server("b", v1::NODE_ACTIVE, "h:2")}))
                  .empty());
}

class ServerLifecycleTest : public ::testing::Test {
 protected:
  ServerLifecycleTest() : core_("token") {
    options_.spec.cluster.servers = 1;
    options_.spec.cluster.workers = 1;
    options_.spec.fault_tolerance.mode = FaultToleranceMode::kNone;
    options_.spec.model.embedding_dim = 8;
    options_.spec.model.bottom_mlp = {16, 8};
    options_.spec.model.top_mlp = {16};
    options_.spec.model.table_rows.assign(options_.spec.model.num_sparse, 50);
    options_.coordinator = "coord:7000";
    options_.token = "token";
  }

  std::unique_ptr<ServerLifecycle> Make(int requested_id = 0) {
    options_.requested_id = requested_id;
    return std::make_unique<ServerLifecycle>(options_, "me", "host:9", &coordinator_, &core_,
                                             &stop_);
  }

  void Registered(int id, v1::NodeState state) {
    v1::RegisterResponse response;
    response.set_id(id);
    response.set_state(state);
    coordinator_.SetRegistration(response);
  }

  ServerOptions options_;
  FakeCoordinatorLink coordinator_;
  ParameterServerCore core_;
  std::atomic<bool> stop_{false};
};

TEST_F(ServerLifecycleTest, RegisterTakesTheIdAndStateTheCoordinatorGives) {
  Registered(2, v1::NODE_STANDBY);
  auto life = Make(-1);
  ASSERT_TRUE(life->Register().ok());
  EXPECT_EQ(life->id(), 2);
  EXPECT_EQ(life->state(), v1::NODE_STANDBY);
  const auto sent = coordinator_.registrations();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].role(), v1::ROLE_SERVER);
  EXPECT_EQ(sent[0].address(), "host:9");
  EXPECT_EQ(sent[0].requested_id(), -1);
  EXPECT_EQ(sent[0].instance(), "me");
}

TEST_F(ServerLifecycleTest, RegisterErrorNamesTheCoordinator) {
  coordinator_.SetRegistration(absl::UnavailableError("connection refused"));
  auto life = Make();
  auto registered = life->Register();
  ASSERT_FALSE(registered.ok());
  EXPECT_EQ(registered.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(registered.status().message().find("coord:7000"), std::string::npos);
  EXPECT_NE(registered.status().message().find("connection refused"), std::string::npos);
}

TEST_F(ServerLifecycleTest, HeartbeatAdoptsANewerEpochAndEndsWithTheJob) {
  Registered(0, v1::NODE_ACTIVE);
  auto life = Make();
  ASSERT_TRUE(life->Register().ok());
  v1::HeartbeatResponse running;
  running.set_epoch(7);
  running.set_phase(v1::JOB_RUNNING);
  coordinator_.QueueHeartbeatResponse(running);
  EXPECT_EQ(life->Heartbeat(), HeartbeatAction::kContinue);
  EXPECT_EQ(core_.epoch(), 7u);
  EXPECT_TRUE(life->running());

  v1::HeartbeatResponse finished = running;
  finished.set_phase(v1::JOB_FINISHED);
  coordinator_.QueueHeartbeatResponse(finished);
  EXPECT_EQ(life->Heartbeat(), HeartbeatAction::kContinue);
  EXPECT_EQ(life->exit_code(), 0);
  EXPECT_FALSE(life->running());

  const auto sent = coordinator_.heartbeats();
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[0].role(), v1::ROLE_SERVER);
  EXPECT_EQ(sent[0].id(), 0);
  EXPECT_EQ(sent[0].instance(), "me");
  EXPECT_EQ(sent[0].state(), v1::NODE_STARTING);  // registered ACTIVE, not yet serving
  EXPECT_EQ(sent[0].header().sender(), "server-0");
}

// The coordinator gone: heartbeats fail, back off, and the server trains on; an answer ends
// the backoff; only a whole grace with no answer stops the server, saying why.
TEST_F(ServerLifecycleTest, WithoutTheCoordinatorTrainingGoesOnUntilTheGraceEnds) {
  options_.spec.cluster.heartbeat_interval_ms = 100;
  options_.spec.cluster.coordinator_grace_s = 5;
  Registered(0, v1::NODE_ACTIVE);
  auto life = Make();
  ASSERT_TRUE(life->Register().ok());
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(life->Heartbeat(t0), HeartbeatAction::kContinue);  // no response queued: down
  EXPECT_EQ(life->Heartbeat(t0 + std::chrono::seconds(1)), HeartbeatAction::kContinue);
  EXPECT_EQ(life->NextHeartbeatWait(), std::chrono::milliseconds(400));
  EXPECT_TRUE(life->running());
  // Back for a moment: the grace starts again from its answer.
  v1::HeartbeatResponse running;
  running.set_phase(v1::JOB_RUNNING);
  coordinator_.QueueHeartbeatResponse(running);
  EXPECT_EQ(life->Heartbeat(t0 + std::chrono::seconds(4)), HeartbeatAction::kContinue);
  EXPECT_EQ(life->NextHeartbeatWait(), std::chrono::milliseconds(100));
  EXPECT_EQ(life->Heartbeat(t0 + std::chrono::seconds(8)), HeartbeatAction::kContinue);
  EXPECT_TRUE(life->running());
  EXPECT_EQ(life->Heartbeat(t0 + std::chrono::seconds(9)), HeartbeatAction::kCoordinatorLost);
  EXPECT_EQ(life->exit_code(), 1);
  EXPECT_FALSE(life->running());
  EXPECT_NE(life->lost_message().find("server 0: no answer from the coordinator at coord:7000"),
            std::string::npos)
      << life->lost_message();
  EXPECT_NE(life->lost_message().find("cluster.coordinator_grace_s = 5"), std::string::npos);
}

TEST_F(ServerLifecycleTest, AFailedJobExitsOne) {
  Registered(0, v1::NODE_ACTIVE);
  auto life = Make();
  ASSERT_TRUE(life->Register().ok());
  v1::HeartbeatResponse failed;
  failed.set_phase(v1::JOB_FAILED);
  coordinator_.QueueHeartbeatResponse(failed);
  EXPECT_EQ(life->Heartbeat(), HeartbeatAction::kContinue);
  EXPECT_EQ(life->exit_code(), 1);
}

TEST_F(ServerLifecycleTest, AFencedServerFencesItsCoreAndKeepsItsOldEpoch) {
  Registered(0, v1::NODE_ACTIVE);
  auto life = Make();
  ASSERT_TRUE(life->Register().ok());
  core_.SetEpoch(3);
  v1::HeartbeatResponse fenced;
  fenced.set_epoch(9);
  fenced.set_fenced(true);
  coordinator_.QueueHeartbeatResponse(fenced);
  EXPECT_EQ(life->Heartbeat(), HeartbeatAction::kFenced);
  EXPECT_TRUE(core_.fenced());
  EXPECT_EQ(core_.epoch(), 3u);
  EXPECT_EQ(life->fenced_epoch(), 9u);
}

TEST_F(ServerLifecycleTest, AKillWinsOverEverythingElse) {
  Registered(0, v1::NODE_ACTIVE);
  auto life = Make();
  ASSERT_TRUE(life->Register().ok());
  v1::HeartbeatResponse kill;
  kill.set_kill(true);
  kill.set_fenced(true);
  coordinator_.QueueHeartbeatResponse(kill);
  EXPECT_EQ(life->Heartbeat(), HeartbeatAction::kKill);
}

TEST_F(ServerLifecycleTest, AFailedHeartbeatChangesNothing) {
  Registered(0, v1::NODE_ACTIVE);
  auto life = Make();
  ASSERT_TRUE(life->Register().ok());
  EXPECT_EQ(life->Heartbeat(), HeartbeatAction::kContinue);  // nothing queued: UNAVAILABLE
  EXPECT_TRUE(life->running());
  EXPECT_FALSE(core_.fenced());
}

TEST_F(ServerLifecycleTest, ASpareTakesTheSlotTheMapGivesIt) {
  Registered(-1, v1::NODE_STANDBY);
  auto life = Make(-1);
  ASSERT_TRUE(life->Register().ok());
  coordinator_.SetMap(MapOf(4, {Server("a", v1::NODE_ACTIVE), Server("me", v1::NODE_RECOVERING)}));
  EXPECT_TRUE(life->WaitForSlot());
  EXPECT_EQ(life->id(), 1);
  EXPECT_EQ(life->state(), v1::NODE_RECOVERING);
}

TEST_F(ServerLifecycleTest, AStoppedSpareStopsWaiting) {
  Registered(-1, v1::NODE_STANDBY);
  auto life = Make(-1);
  ASSERT_TRUE(life->Register().ok());
  stop_.store(true);
  EXPECT_FALSE(life->WaitForSlot());
  EXPECT_EQ(life->state(), v1::NODE_STANDBY);
}

TEST_F(ServerLifecycleTest, StartWithoutEveryPeersAddressFails) {
  options_.spec.cluster.servers = 2;
  options_.spec.cluster.connect_timeout_s = 0;
  Registered(0, v1::NODE_ACTIVE);
  auto life = Make();
  ASSERT_TRUE(life->Register().ok());
  coordinator_.SetMap(MapOf(1, {Server("me", v1::NODE_STARTING, "host:9"), Server("", v1::NODE_DEAD)}));
  EXPECT_FALSE(life->Start().ok());
  EXPECT_EQ(life->exit_code(), 1);
  EXPECT_FALSE(core_.ready());
}

TEST_F(ServerLifecycleTest, StartInstallsTheTablesAndServes) {
  Registered(0, v1::NODE_ACTIVE);
  auto life = Make();
  ASSERT_TRUE(life->Register().ok());
  coordinator_.SetMap(MapOf(2, {Server("me", v1::NODE_STARTING, "host:9")}));
  ASSERT_TRUE(life->Start().ok());
  EXPECT_TRUE(core_.ready());
  EXPECT_EQ(life->state(), v1::NODE_ACTIVE);
  EXPECT_EQ(core_.epoch(), 2u);
  EXPECT_EQ(life->exit_code(), -1);
}

TEST_F(ServerLifecycleTest, TablesThatDoNotFitExitWithTheirOwnCode) {
  options_.spec.model.table_rows.assign(options_.spec.model.num_sparse, int64_t{1} << 40);
  Registered(0, v1::NODE_ACTIVE);
  auto life = Make();
  ASSERT_TRUE(life->Register().ok());
  coordinator_.SetMap(MapOf(2, {Server("me", v1::NODE_STARTING, "host:9")}));
  EXPECT_FALSE(life->Start().ok());
  EXPECT_EQ(life->exit_code(), kExitCannotAllocate);
}

TEST_F(ServerLifecycleTest, FollowMapFencesAReplacedServerOrOneDeclaredDead) {
  options_.requested_id = 0;  // server 0 until a registration says otherwise
  for (const v1::ClusterMap& map :
       {MapOf(5, {Server("someone-else", v1::NODE_RECOVERING, "h:1")}),
        MapOf(5, {Server("me", v1::NODE_DEAD, "host:9")})}) {
    ParameterServerCore core("token");
    ServerLifecycle follower(options_, "me", "host:9", &coordinator_, &core, &stop_);
    coordinator_.SetMap(map);
    EXPECT_FALSE(follower.FollowMap()) << map.DebugString();
    EXPECT_TRUE(core.fenced());
    EXPECT_EQ(core.epoch(), 0u);  // the new epoch is never adopted
  }
}

TEST_F(ServerLifecycleTest, FollowMapAdoptsANewerEpoch) {
  Registered(0, v1::NODE_ACTIVE);
  auto life = Make();
  ASSERT_TRUE(life->Register().ok());
  coordinator_.SetMap(MapOf(6, {Server("me", v1::NODE_ACTIVE, "host:9")}));
  EXPECT_TRUE(life->FollowMap());
  EXPECT_EQ(core_.epoch(), 6u);
  EXPECT_FALSE(core_.fenced());
}

// The coordinator's term, from its heartbeat answers and its maps, is what the core refuses a
// deposed coordinator's requests by (ParameterServerCore::CheckCoordinatorTerm).
TEST_F(ServerLifecycleTest, TheCoordinatorsTermReachesTheCore) {
  Registered(0, v1::NODE_ACTIVE);
  auto life = Make();
  ASSERT_TRUE(life->Register().ok());
  v1::HeartbeatResponse answer;
  answer.set_phase(v1::JOB_RUNNING);
  answer.set_term(2);
  coordinator_.QueueHeartbeatResponse(answer);
  EXPECT_EQ(life->Heartbeat(), HeartbeatAction::kContinue);
  EXPECT_EQ(core_.coordinator_term(), 2u);
  v1::ClusterMap map = MapOf(6, {Server("me", v1::NODE_ACTIVE, "host:9")});
  map.set_term(3);
  coordinator_.SetMap(map);
  EXPECT_TRUE(life->FollowMap());
  EXPECT_EQ(core_.coordinator_term(), 3u);
  v1::RequestHeader deposed;
  FillHeader(&deposed, "token", CoordinatorStamp{6, 2}, "scrub");
  EXPECT_EQ(core_.CheckCoordinatorTerm(deposed).code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(ServerLifecycleTest, ExitCodeIsDecidedOnce) {
  auto life = Make();
  life->SetExitCodeIfUnset(1);
  life->SetExitCodeIfUnset(0);
  EXPECT_EQ(life->exit_code(), 1);
}

}  // namespace
}  // namespace ecps
