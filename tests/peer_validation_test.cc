// The peer RPCs refuse inconsistent requests whoever sends them (the gRPC glue admits only
// servers and the coordinator, access_test; these call the handlers directly): forged parity deltas, sequence numbers that skip or wrap, parity writes without
// the caller's freeze, dense replica updates from a non-primary, checkpoint writes into a
// committed checkpoint, non-finite gradients, requests past the limits, and releases of
// someone else's freeze. Each refusal changes nothing and is counted.
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <thread>

#include "gtest/gtest.h"
#include "proto/ecps.pb.h"
#include "tests/test_cluster.h"

namespace ecps {
namespace {

namespace fs = std::filesystem;
constexpr char kToken[] = "secret";

class PeerValidationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    spec_ = SmallSpec(3, 1);
    spec_.fault_tolerance.mode = FaultToleranceMode::kErasureCode;
    spec_.fault_tolerance.k = 2;
    spec_.fault_tolerance.r = 1;
    spec_.fault_tolerance.dense_replicas = 1;
    spec_.cluster.max_request_ids = 1000;
    cluster_ = TestCluster::Start(spec_, kToken);
    ASSERT_NE(cluster_, nullptr);
    auto placement = Placement::Create(3, 2, 1, spec_.model.table_rows);
    ASSERT_TRUE(placement.ok());
    placement_ = std::make_unique<Placement>(std::move(*placement));
    // Stripe 0 of table 0: data on servers 0 and 1, parity on server 2.
    ASSERT_EQ(placement_->ServerOf(0, 0, 0), 0);
    ASSERT_EQ(placement_->ServerOf(0, 0, 2), 2);
    ASSERT_EQ(placement_->ServerOf(0, 3, 2), 2);
  }

  ParameterServerCore* core(int s) { return cluster_->core(s); }

  // A batch from server `from` (instance `instance`) carrying one delta for member j of
  // stripe 0 of table 0.
  v1::ParityDeltaBatch Batch(int from, const std::string& instance, uint64_t seq, int j = 0) {
    v1::ParityDeltaBatch batch;
    FillHeader(batch.mutable_header(), kToken, 1, "forger");
    batch.set_from_server(from);
    batch.set_sender_instance(instance);
    batch.set_seq(seq);
    v1::ParityDelta* d = batch.add_deltas();
    d->set_table(0);
    d->set_stripe(0);
    d->set_j(j);
    d->set_from_version(0);
    d->set_to_version(1);
    std::vector<uint8_t> bytes(ParityBytes(), 0x5a);
    d->set_delta(std::string(bytes.begin(), bytes.end()));
    return batch;
  }
  size_t ParityBytes() {
    std::vector<uint8_t> row;
    EXPECT_TRUE(core(2)->ReadParityRow(0, 0, &row).ok());
    return row.size();
  }
  std::vector<uint8_t> Parity() {
    std::vector<uint8_t> row;
    EXPECT_TRUE(core(2)->ReadParityRow(0, 0, &row).ok());
    return row;
  }
  int64_t Refused(int s) {
    v1::ServerStats stats;
    core(s)->FillStats(&stats);
    return stats.refused_requests();
  }
  // A push of `value` to row 0 of table 0 (server 0), as a worker sends it.
  absl::Status PushRow0(float value) {
    v1::PushRequest push;
    FillHeader(push.mutable_header(), kToken, 1, "worker-0");
    v1::TableRows* t = push.add_tables();
    t->set_table(0);
    t->add_rows(0);
    std::vector<float> grad(spec_.model.embedding_dim, value);
    push.add_grads(std::string(reinterpret_cast<const char*>(grad.data()),
                               grad.size() * sizeof(float)));
    return core(0)->Push(push);
  }
  std::string Row0() {
    v1::ReadRowsRequest req;
    FillHeader(req.mutable_header(), kToken, 1, "test");
    req.mutable_rows()->set_table(0);
    req.mutable_rows()->add_rows(0);
    v1::ReadRowsResponse resp;
    EXPECT_TRUE(core(0)->ReadRows(req, &resp).ok());
    return resp.payloads();
  }
  // Parity of every stripe held by `s` agrees with its data.
  int64_t Mismatches(int s) {
    v1::ScrubParityRequest req;
    FillHeader(req.mutable_header(), kToken, 1, "test");
    v1::ScrubParityResponse resp;
    EXPECT_TRUE(core(s)->ScrubParity(req, &resp).ok());
    EXPECT_GT(resp.stripes_checked(), 0);
    return resp.mismatches();
  }
  v1::ClusterMap Map(uint64_t epoch, std::vector<std::string> instances) {
    v1::ClusterMap map;
    map.set_epoch(epoch);
    for (size_t s = 0; s < instances.size(); ++s) {
      v1::NodeInfo* n = map.add_servers();
      n->set_id(static_cast<int>(s));
      n->set_instance(instances[s]);
      n->set_state(v1::NODE_ACTIVE);
    }
    return map;
  }

  JobSpec spec_;
  std::unique_ptr<TestCluster> cluster_;
  std::unique_ptr<Placement> placement_;
};

TEST_F(PeerValidationTest, SequenceZeroIsRefusedAndRealDeltasStillApply) {
  // Before the fix, seq 0 made the receiver's applied sequence 2^64-1: every later delta of
  // server 0 was dropped while its pushes were still acknowledged.
  v1::ParityDeltaAck ack;
  v1::ParityDeltaBatch empty = Batch(0, "test-server-0", 0);
  empty.clear_deltas();
  EXPECT_TRUE(absl::IsInvalidArgument(core(2)->ApplyParityDeltas(empty, &ack)));
  EXPECT_TRUE(absl::IsInvalidArgument(
      core(2)->ApplyParityDeltas(Batch(0, "test-server-0", UINT64_MAX), &ack)));
  EXPECT_EQ(Refused(2), 2);
  ASSERT_TRUE(PushRow0(0.25f).ok());  // acknowledged after its parity delta applied
  EXPECT_EQ(Mismatches(2), 0);
}

TEST_F(PeerValidationTest, AGapOrARestartMidStreamIsRefused) {
  ASSERT_TRUE(PushRow0(0.25f).ok());  // server 2 now knows server 0's stream
  const std::vector<uint8_t> before = Parity();
  v1::ParityDeltaAck ack;
  // The real stream is at 1 or so: 50 skips.
  EXPECT_TRUE(absl::IsFailedPrecondition(
      core(2)->ApplyParityDeltas(Batch(0, "test-server-0", 50), &ack)));
  // A made-up "new instance" of server 0 must start its stream at 1 (and then only with the
  // map's say-so, below).
  EXPECT_TRUE(absl::IsFailedPrecondition(
      core(2)->ApplyParityDeltas(Batch(0, "forged-instance", 7), &ack)));
  EXPECT_EQ(Parity(), before);
  EXPECT_EQ(Refused(2), 2);
  ASSERT_TRUE(PushRow0(0.5f).ok());
  EXPECT_EQ(Mismatches(2), 0);
}

TEST_F(PeerValidationTest, MadeUpSendersAndRowsTheSenderDoesNotHoldAreRefused) {
  v1::ParityDeltaAck ack;
  const std::vector<uint8_t> before = Parity();
  EXPECT_TRUE(absl::IsInvalidArgument(core(2)->ApplyParityDeltas(Batch(99, "x", 1), &ack)));
  EXPECT_TRUE(absl::IsInvalidArgument(core(2)->ApplyParityDeltas(Batch(-1, "x", 1), &ack)));
  EXPECT_TRUE(absl::IsInvalidArgument(core(2)->ApplyParityDeltas(Batch(2, "x", 1), &ack)));
  EXPECT_TRUE(absl::IsInvalidArgument(core(2)->ApplyParityDeltas(Batch(0, "", 1), &ack)));
  // Member 1 of stripe 0 is server 1's row, not server 0's.
  EXPECT_TRUE(absl::IsInvalidArgument(
      core(2)->ApplyParityDeltas(Batch(0, "test-server-0", 1, /*j=*/1), &ack)));
  EXPECT_EQ(Parity(), before);
  EXPECT_EQ(Refused(2), 5);
}

TEST_F(PeerValidationTest, OnlyTheMapsCurrentInstanceSendsDeltas) {
  core(2)->FollowMap(Map(1, {"test-server-0", "test-server-1", "test-server-2"}));
  const std::vector<uint8_t> before = Parity();
  v1::ParityDeltaAck ack;
  EXPECT_TRUE(absl::IsFailedPrecondition(
      core(2)->ApplyParityDeltas(Batch(0, "old-instance", 1), &ack)));
  // A sender from a newer epoch than this server's map: it may be a replacement the map
  // does not show yet, so it is asked to retry.
  v1::ParityDeltaBatch newer = Batch(0, "replacement", 1);
  newer.mutable_header()->set_epoch(5);
  EXPECT_TRUE(absl::IsUnavailable(core(2)->ApplyParityDeltas(newer, &ack)));
  EXPECT_EQ(Parity(), before);
  ASSERT_TRUE(PushRow0(0.25f).ok());  // the real server 0 still gets through
  EXPECT_EQ(Mismatches(2), 0);
}

TEST_F(PeerValidationTest, ParityIsWrittenOnlyUnderTheCallersOwnFreeze) {
  v1::WriteParityRequest write;
  FillHeader(write.mutable_header(), kToken, 1, "server-1");
  write.set_table(0);
  write.add_stripes(0);
  std::vector<uint8_t> junk(ParityBytes(), 0x77);
  write.set_payloads(std::string(junk.begin(), junk.end()));
  for (int j = 0; j < 2; ++j) write.add_versions(0);
  write.set_freeze_id(42);
  write.set_owner("test-server-1");
  const std::vector<uint8_t> before = Parity();
  EXPECT_TRUE(absl::IsFailedPrecondition(core(2)->WriteParity(write)));  // nothing frozen

  v1::FreezeRequest freeze;
  FillHeader(freeze.mutable_header(), kToken, 1, "server-0");
  freeze.set_freeze(true);
  freeze.set_freeze_id(42);
  freeze.set_owner("test-server-0");
  freeze.set_owner_server(0);
  v1::TableStripes* stripes = freeze.add_stripes();
  stripes->set_table(0);
  stripes->add_stripes(0);
  ASSERT_TRUE(core(2)->Freeze(freeze).ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(core(2)->WriteParity(write)));  // someone else's
  write.set_owner("test-server-0");
  write.clear_stripes();
  write.add_stripes(3);  // a stripe of server 2's parity that the freeze does not cover
  EXPECT_TRUE(absl::IsFailedPrecondition(core(2)->WriteParity(write)));
  EXPECT_EQ(Parity(), before);
  EXPECT_EQ(Refused(2), 3);
  write.clear_stripes();
  write.add_stripes(0);
  EXPECT_TRUE(core(2)->WriteParity(write).ok());
  EXPECT_NE(Parity(), before);
}

TEST_F(PeerValidationTest, OnlyTheOwnerReleasesAFreezeAndADeadOwnersFreezesGo) {
  v1::FreezeRequest freeze;
  FillHeader(freeze.mutable_header(), kToken, 1, "server-1");
  freeze.set_freeze(true);
  freeze.set_freeze_id(9);
  freeze.set_owner("test-server-1");
  freeze.set_owner_server(1);
  ASSERT_TRUE(core(0)->Freeze(freeze).ok());  // whole-server
  v1::FreezeRequest release = freeze;
  release.set_freeze(false);
  release.set_owner("someone-else");
  EXPECT_TRUE(absl::IsPermissionDenied(core(0)->Freeze(release)));
  release.set_owner("test-server-1");
  release.set_freeze_id(10);
  EXPECT_TRUE(absl::IsNotFound(core(0)->Freeze(release)));
  v1::FreezeRequest unowned = freeze;
  unowned.clear_owner();
  EXPECT_TRUE(absl::IsInvalidArgument(core(0)->Freeze(unowned)));
  v1::FreezeRequest forever = freeze;
  forever.set_freeze_id(11);
  forever.set_lease_ms(24 * 3600 * 1000);
  EXPECT_TRUE(absl::IsInvalidArgument(core(0)->Freeze(forever)));
  EXPECT_EQ(Refused(0), 3);

  // Still frozen: a push would wait. The coordinator declares server 1's instance dead (the
  // map says so): its freeze goes, and pushes flow again.
  v1::ClusterMap map = Map(2, {"test-server-0", "test-server-1", "test-server-2"});
  map.mutable_servers(1)->set_state(v1::NODE_DEAD);
  core(0)->FollowMap(map);
  v1::ServerStats stats;
  core(0)->FillStats(&stats);
  EXPECT_EQ(stats.freezes_expired(), 1);
  EXPECT_TRUE(PushRow0(0.25f).ok());
  release.set_freeze_id(9);
  EXPECT_TRUE(absl::IsFailedPrecondition(core(0)->Freeze(release)));  // it had lapsed
}

TEST_F(PeerValidationTest, AFreezeFromAnInstanceTheMapDoesNotKnowIsRefused) {
  core(0)->FollowMap(Map(1, {"test-server-0", "test-server-1", "test-server-2"}));
  v1::FreezeRequest freeze;
  FillHeader(freeze.mutable_header(), kToken, 1, "server-1");
  freeze.set_freeze(true);
  freeze.set_freeze_id(9);
  freeze.set_owner("impostor");
  freeze.set_owner_server(1);
  EXPECT_TRUE(absl::IsFailedPrecondition(core(0)->Freeze(freeze)));
  freeze.clear_owner_server();
  EXPECT_TRUE(absl::IsInvalidArgument(core(0)->Freeze(freeze)));  // nor the coordinator
  EXPECT_TRUE(PushRow0(0.25f).ok());                               // nothing frozen
}

TEST_F(PeerValidationTest, DenseReplicaUpdatesComeOnlyFromThePrimary) {
  // Tensor 0's primary is server 0; server 1 holds its replica.
  v1::ReplicateDenseRequest rep;
  FillHeader(rep.mutable_header(), kToken, 1, "server-2");
  rep.set_tensor(0);
  rep.set_version(1);
  std::vector<float> grad(4, 0.5f);
  rep.set_grad(std::string(reinterpret_cast<const char*>(grad.data()), 16));
  rep.set_from_server(2);
  rep.set_sender_instance("test-server-2");
  EXPECT_TRUE(absl::IsFailedPrecondition(core(1)->ReplicateDense(rep)));
  rep.set_tensor(100000);
  EXPECT_TRUE(absl::IsInvalidArgument(core(1)->ReplicateDense(rep)));
  EXPECT_EQ(Refused(1), 1);
  // Found by fuzz/ps_requests (UBSan: memcpy into a null vector): the primary itself with an
  // empty gradient is a wrong size, not a crash.
  rep.set_tensor(0);
  rep.set_from_server(0);
  rep.set_sender_instance("test-server-0");
  rep.clear_grad();
  EXPECT_TRUE(absl::IsInvalidArgument(core(1)->ReplicateDense(rep)));
}

// On its way to the replica a dense update meets both error kinds (runtime/error_kind.h),
// never read from a message: a replica that missed an update refuses the next one
// (kReplicaBehind), and the primary sends it the whole tensor; a replica at a newer epoch
// refuses the update as stale (kStaleEpoch), and the primary retries it until it has that
// epoch too.
TEST_F(PeerValidationTest, ADenseReplicaThatMissedAnUpdateOrMovedOnIsCaughtUp) {
  // Tensor 0's primary is server 0; server 1 holds its replica.
  auto read = [&](int s, uint64_t epoch) {
    v1::ReadDenseRequest req;
    FillHeader(req.mutable_header(), kToken, epoch, "test");
    req.set_tensor(0);
    v1::ReadDenseResponse resp;
    EXPECT_TRUE(core(s)->ReadDense(req, &resp).ok());
    return resp;
  };
  const size_t floats = read(0, 1).weights().size() / sizeof(float);
  ASSERT_GT(floats, 0u);
  auto push = [&] {
    v1::PushDenseRequest req;
    FillHeader(req.mutable_header(), kToken, 1, "worker-0");
    req.add_tensors(0);
    std::vector<float> grad(floats, 0.125f);
    req.add_grads(
        std::string(reinterpret_cast<const char*>(grad.data()), grad.size() * sizeof(float)));
    return core(0)->PushDense(req);
  };
  // The replica's map gives server 0 to another instance: it refuses the update (no kind:
  // not retried), which the primary applied. The replica is one update behind.
  core(1)->FollowMap(Map(1, {"someone-else", "test-server-1", "test-server-2"}));
  EXPECT_TRUE(absl::IsFailedPrecondition(push()));
  EXPECT_EQ(read(0, 1).version(), 1);
  EXPECT_EQ(read(1, 1).version(), 0);
  core(1)->FollowMap(Map(2, {"test-server-0", "test-server-1", "test-server-2"}));
  ASSERT_TRUE(push().ok());
  v1::ReadDenseResponse primary = read(0, 1), replica = read(1, 1);
  EXPECT_EQ(replica.version(), 2);
  EXPECT_EQ(replica.weights(), primary.weights());
  EXPECT_EQ(replica.state(), primary.state());

  core(1)->SetEpoch(3);
  std::thread follows([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    core(0)->SetEpoch(3);
  });
  EXPECT_TRUE(push().ok());
  follows.join();
  primary = read(0, 3);
  replica = read(1, 3);
  EXPECT_EQ(primary.version(), 3);
  EXPECT_EQ(replica.version(), 3);
  EXPECT_EQ(replica.weights(), primary.weights());
}

TEST_F(PeerValidationTest, NonFiniteGradientsAreRefusedAndChangeNothing) {
  const std::string before = Row0();
  EXPECT_TRUE(absl::IsInvalidArgument(PushRow0(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(absl::IsInvalidArgument(PushRow0(std::numeric_limits<float>::infinity())));
  EXPECT_EQ(Row0(), before);
  EXPECT_EQ(Mismatches(2), 0);

  v1::PushDenseRequest dense;
  FillHeader(dense.mutable_header(), kToken, 1, "worker-0");
  v1::PullDenseRequest pull;
  FillHeader(pull.mutable_header(), kToken, 1, "worker-0");
  pull.add_tensors(0);
  v1::PullDenseResponse values;
  ASSERT_TRUE(core(0)->PullDense(pull, &values).ok());
  std::vector<float> grad(values.values(0).size() / sizeof(float), 0.1f);
  grad[grad.size() / 2] = -std::numeric_limits<float>::infinity();
  dense.add_tensors(0);
  dense.add_grads(std::string(reinterpret_cast<const char*>(grad.data()),
                              grad.size() * sizeof(float)));
  EXPECT_TRUE(absl::IsInvalidArgument(core(0)->PushDense(dense)));
  v1::PullDenseResponse after;
  ASSERT_TRUE(core(0)->PullDense(pull, &after).ok());
  EXPECT_EQ(after.values(0), values.values(0));
  EXPECT_EQ(after.versions(0), values.versions(0));
}

TEST_F(PeerValidationTest, RequestsPastTheLimitsAreRefusedBeforeAnyWork) {
  v1::PullRequest pull;
  FillHeader(pull.mutable_header(), kToken, 1, "worker-0");
  v1::TableRows* t = pull.add_tables();
  t->set_table(0);
  for (int i = 0; i < 1001; ++i) t->add_rows(0);  // max_request_ids is 1000
  v1::PullResponse resp;
  absl::Status s = core(0)->Pull(pull, &resp);
  EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
  EXPECT_NE(std::string(s.message()).find("cluster.max_request_ids"), std::string::npos);
  EXPECT_EQ(resp.weights_size(), 0);
  t->mutable_rows()->Truncate(1000);
  EXPECT_TRUE(core(0)->Pull(pull, &resp).ok());
}

TEST_F(PeerValidationTest, CheckpointsAreWrittenOnlyIntoUncommittedFolders) {
  const std::string root = ::testing::TempDir() + "/ecps_peer_ckpt";
  fs::remove_all(root);
  fs::create_directories(root + "/step-000000005");
  std::ofstream(root + "/step-000000005/MANIFEST.json") << "{}";
  fs::create_directories(root + "/step-000000006.tmp");
  std::ofstream(root + "/step-000000006.tmp/MANIFEST.json") << "{}";
  v1::SaveCheckpointRequest save;
  FillHeader(save.mutable_header(), kToken, 1, "coordinator");
  v1::SaveCheckpointResponse resp;
  save.set_tmp_dir(root + "/step-000000005");  // committed
  EXPECT_TRUE(absl::IsInvalidArgument(core(0)->SaveCheckpoint(save, &resp)));
  save.set_tmp_dir(root + "/step-000000006.tmp");  // holds a manifest
  EXPECT_TRUE(absl::IsFailedPrecondition(core(0)->SaveCheckpoint(save, &resp)));
  save.set_tmp_dir("/etc");
  EXPECT_TRUE(absl::IsInvalidArgument(core(0)->SaveCheckpoint(save, &resp)));
  EXPECT_EQ(Refused(0), 3);
  EXPECT_EQ(fs::file_size(root + "/step-000000005/MANIFEST.json"), 2u);
  fs::remove_all(root);
}

}  // namespace
}  // namespace ecps
