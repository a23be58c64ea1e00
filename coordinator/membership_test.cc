#include "coordinator/membership.h"

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

Membership::Config Config(int servers, int workers) {
  Membership::Config config;
  config.servers = servers;
  config.workers = workers;
  config.mode = FaultToleranceMode::kErasureCode;
  config.k = 2;
  config.r = 1;
  return config;
}

TEST(MembershipTest, ServersTakeRequestedOrLowestFreeIdsThenBecomeSpares) {
  Membership m(Config(3, 1));
  auto s1 = m.Register(ServerRegistration(1, "s1"));
  ASSERT_TRUE(s1.ok()) << s1.status();
  EXPECT_EQ(s1->node.id, 1);
  EXPECT_EQ(s1->state, v1::NODE_STARTING);

  auto a = m.Register(ServerRegistration(-1, "a"));
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->node.id, 0) << "-1 takes the lowest free slot";
  auto b = m.Register(ServerRegistration(-1, "b"));
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->node.id, 2);

  auto spare = m.Register(ServerRegistration(-1, "spare"));
  ASSERT_TRUE(spare.ok());
  EXPECT_EQ(spare->node.id, -1);
  EXPECT_TRUE(spare->node.spare);
  EXPECT_EQ(spare->state, v1::NODE_STANDBY);
  EXPECT_EQ(m.epoch(), 1u) << "registrations are not membership changes";

  v1::ClusterMap map;
  m.FillClusterMap(&map);
  ASSERT_EQ(map.servers_size(), 3) << "spares hold no logical id";
  EXPECT_EQ(map.servers(0).instance(), "a");
  EXPECT_EQ(map.servers(1).instance(), "s1");
  EXPECT_EQ(map.mode(), "erasure_code");
  EXPECT_EQ(map.k(), 2);
  EXPECT_EQ(map.r(), 1);
}

TEST(MembershipTest, RefusesDuplicatesAndOutOfRangeIdsAndChangesNothing) {
  Membership m(Config(2, 1));
  ASSERT_TRUE(m.Register(ServerRegistration(0, "s0")).ok());
  const uint64_t version = m.version();

  auto dup = m.Register(ServerRegistration(0, "other"));
  EXPECT_EQ(dup.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(m.Register(ServerRegistration(2, "x")).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m.Register(ServerRegistration(-2, "x")).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m.Register(WorkerRegistration(1, "w")).status().code(),
            absl::StatusCode::kInvalidArgument);
  v1::RegisterRequest no_instance = ServerRegistration(1, "");
  EXPECT_EQ(m.Register(no_instance).status().code(), absl::StatusCode::kInvalidArgument);
  v1::RegisterRequest no_role = ServerRegistration(1, "y");
  no_role.set_role(v1::ROLE_COORDINATOR);
  EXPECT_EQ(m.Register(no_role).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m.version(), version) << "refused registrations change nothing";

  ASSERT_TRUE(m.Register(WorkerRegistration(-1, "w0")).ok());
  EXPECT_EQ(m.Register(WorkerRegistration(-1, "w1")).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(m.Register(WorkerRegistration(0, "w1")).status().code(),
            absl::StatusCode::kAlreadyExists);
}

TEST(MembershipTest, RetriedRegistrationReturnsTheSameAssignment) {
  Membership m(Config(2, 1));
  ASSERT_TRUE(m.Register(ServerRegistration(-1, "s")).ok());
  const uint64_t version = m.version();
  auto again = m.Register(ServerRegistration(-1, "s"));
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->repeated);
  EXPECT_EQ(again->node.id, 0);
  EXPECT_EQ(m.version(), version);
}

TEST(MembershipTest, DeathBumpsEpochAndAReplacementTakesTheId) {
  Membership m(Config(2, 1));
  ASSERT_TRUE(m.Register(ServerRegistration(0, "old")).ok());
  ASSERT_TRUE(m.Register(ServerRegistration(1, "s1")).ok());
  ASSERT_TRUE(m.ApplyHeartbeat(ServerHeartbeat(0, "old")).ok());
  EXPECT_EQ(m.epoch(), 1u) << "STARTING -> ACTIVE is not a membership change";

  std::optional<NodeRef> dead = m.MarkDead("old");
  ASSERT_TRUE(dead.has_value());
  EXPECT_EQ(dead->id, 0);
  EXPECT_EQ(m.epoch(), 2u);
  EXPECT_FALSE(m.MarkDead("old").has_value()) << "dies once";
  EXPECT_EQ(m.epoch(), 2u);
  EXPECT_EQ(m.StateOf("old"), v1::NODE_DEAD);

  auto fenced = m.ApplyHeartbeat(ServerHeartbeat(0, "old"));
  ASSERT_TRUE(fenced.ok());
  EXPECT_TRUE(fenced->fenced) << "a dead instance is fenced";
  EXPECT_EQ(m.StateOf("old"), v1::NODE_DEAD) << "and its heartbeat changes nothing";

  auto replacement = m.Register(ServerRegistration(0, "new"));
  ASSERT_TRUE(replacement.ok()) << replacement.status();
  EXPECT_EQ(replacement->replaced, "old");
  EXPECT_EQ(replacement->state, v1::NODE_RECOVERING);
  EXPECT_EQ(m.epoch(), 3u) << "a replacement taking an id bumps the epoch";

  auto old_again = m.ApplyHeartbeat(ServerHeartbeat(0, "old"));
  ASSERT_TRUE(old_again.ok());
  EXPECT_TRUE(old_again->fenced) << "the old instance no longer holds id 0";
  auto fresh = m.ApplyHeartbeat(ServerHeartbeat(0, "new"));
  ASSERT_TRUE(fresh.ok());
  EXPECT_FALSE(fresh->fenced);
  auto stranger = m.ApplyHeartbeat(ServerHeartbeat(1, "stranger"));
  ASSERT_TRUE(stranger.ok());
  EXPECT_TRUE(stranger->fenced) << "an instance that never registered is fenced";
}

TEST(MembershipTest, HeartbeatStatesAndSuspicion) {
  Membership m(Config(1, 1));
  ASSERT_TRUE(m.Register(ServerRegistration(0, "s0")).ok());
  ASSERT_TRUE(m.Register(WorkerRegistration(0, "w0")).ok());
  EXPECT_FALSE(m.AllServersActive());
  const uint64_t v0 = m.version();
  auto hb = m.ApplyHeartbeat(ServerHeartbeat(0, "s0", v1::NODE_STARTING));
  ASSERT_TRUE(hb.ok());
  EXPECT_FALSE(hb->map_changed);
  EXPECT_EQ(m.version(), v0);
  hb = m.ApplyHeartbeat(ServerHeartbeat(0, "s0", v1::NODE_ACTIVE));
  EXPECT_TRUE(hb->map_changed);
  EXPECT_GT(m.version(), v0);
  EXPECT_TRUE(m.AllServersActive());

  // A node cannot declare itself dead; the coordinator's SUSPECT is cleared by a heartbeat.
  m.ApplyHeartbeat(ServerHeartbeat(0, "s0", v1::NODE_DEAD)).IgnoreError();
  EXPECT_EQ(m.StateOf("s0"), v1::NODE_ACTIVE);
  EXPECT_TRUE(m.MarkSuspect("s0"));
  EXPECT_EQ(m.StateOf("s0"), v1::NODE_SUSPECT);
  m.ApplyHeartbeat(ServerHeartbeat(0, "s0", v1::NODE_STATE_UNSPECIFIED)).IgnoreError();
  EXPECT_EQ(m.StateOf("s0"), v1::NODE_ACTIVE);

  EXPECT_EQ(m.ApplyHeartbeat(ServerHeartbeat(5, "s0")).status().code(),
            absl::StatusCode::kInvalidArgument);

  EXPECT_FALSE(m.AllWorkersDone());
  auto done = m.ApplyHeartbeat(WorkerHeartbeat(0, "w0", 100, /*done=*/true));
  ASSERT_TRUE(done.ok());
  EXPECT_TRUE(done->became_done);
  EXPECT_EQ(m.StateOf("w0"), v1::NODE_FINISHED);
  EXPECT_TRUE(m.AllWorkersDone());
  done = m.ApplyHeartbeat(WorkerHeartbeat(0, "w0", 100, /*done=*/false));
  EXPECT_FALSE(done->became_done);
  EXPECT_TRUE(m.AllWorkersDone()) << "done is sticky";
}

// A server heartbeat with online scrub counts: `confirmed` corruptions found and repaired.
v1::HeartbeatRequest ScrubbingHeartbeat(int id, const std::string& instance, int64_t confirmed) {
  v1::HeartbeatRequest request = ServerHeartbeat(id, instance);
  request.mutable_server()->set_scrub_passes(5);
  request.mutable_server()->set_scrub_mismatches_confirmed(confirmed);
  request.mutable_server()->set_scrub_repaired(confirmed);
  return request;
}

// The finding: the run report summed the status's servers, so the scrub counts of a server
// that was replaced went with it. The table keeps them over a restarted process and a
// promoted spare, and across a takeover (Save, Restore); a dead server still in its slot
// shows its own and is not counted twice.
TEST(MembershipTest, ReplacedServersKeepTheirScrubCounts) {
  Membership m(Config(2, 1));
  ASSERT_TRUE(m.Register(ServerRegistration(0, "s0")).ok());
  ASSERT_TRUE(m.Register(ServerRegistration(1, "s1")).ok());
  ASSERT_TRUE(m.Register(ServerRegistration(-1, "spare")).ok());
  ASSERT_TRUE(m.ApplyHeartbeat(ScrubbingHeartbeat(0, "s0", 2)).ok());
  ASSERT_TRUE(m.ApplyHeartbeat(ScrubbingHeartbeat(1, "s1", 3)).ok());
  EXPECT_EQ(m.replaced_servers_scrub().ByteSizeLong(), 0u) << "nobody was replaced yet";

  ASSERT_TRUE(m.MarkDead("s0").has_value());
  EXPECT_EQ(m.replaced_servers_scrub().scrub_repaired(), 0) << "still in its slot";
  ASSERT_TRUE(m.Register(ServerRegistration(0, "s0-restarted")).ok());
  EXPECT_EQ(m.replaced_servers_scrub().scrub_repaired(), 2);
  EXPECT_EQ(m.ServerStatsOf(0)->scrub_repaired(), 0) << "the slot shows the replacement's";

  ASSERT_TRUE(m.MarkDead("s1").has_value());
  ASSERT_TRUE(m.PromoteSpare(1).ok());
  const v1::ServerStats& replaced = m.replaced_servers_scrub();
  EXPECT_EQ(replaced.scrub_repaired(), 5);
  EXPECT_EQ(replaced.scrub_mismatches_confirmed(), 5);
  EXPECT_EQ(replaced.scrub_passes(), 10);
  EXPECT_EQ(replaced.data_rows(), 0) << "only the scrub counts add up";

  v1::CoordinatorState state;
  m.Save(&state);
  Membership restored(Config(2, 1));
  ASSERT_TRUE(restored.Restore(state).ok());
  EXPECT_EQ(restored.replaced_servers_scrub().SerializeAsString(), replaced.SerializeAsString());
}

TEST(MembershipTest, StatusNodesListEveryRegisteredNode) {
  Membership m(Config(2, 1));
  ASSERT_TRUE(m.Register(ServerRegistration(0, "s0")).ok());
  ASSERT_TRUE(m.Register(ServerRegistration(1, "s1")).ok());
  ASSERT_TRUE(m.Register(ServerRegistration(-1, "spare")).ok());
  ASSERT_TRUE(m.Register(WorkerRegistration(0, "w0")).ok());
  ASSERT_TRUE(m.ApplyHeartbeat(ServerHeartbeat(1, "s1")).ok());
  v1::StatusResponse status;
  m.FillStatusNodes(
      [](const std::string& instance) -> std::optional<absl::Duration> {
        if (instance == "w0") return std::nullopt;
        return absl::Milliseconds(42);
      },
      &status);
  ASSERT_EQ(status.nodes_size(), 4);
  EXPECT_EQ(status.nodes(1).instance(), "s1");
  EXPECT_EQ(status.nodes(1).state(), v1::NODE_ACTIVE);
  EXPECT_EQ(status.nodes(1).server().data_rows(), 1001);
  EXPECT_EQ(status.nodes(1).heartbeat_age_ms(), 42);
  EXPECT_EQ(status.nodes(2).state(), v1::NODE_STANDBY);
  EXPECT_EQ(status.nodes(3).role(), v1::ROLE_WORKER);
  EXPECT_EQ(status.nodes(3).heartbeat_age_ms(), -1);
  EXPECT_EQ(status.nodes(3).pid(), 2000);
}

}  // namespace
}  // namespace ecps
