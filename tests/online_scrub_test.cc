// The online scrub against real servers (in-process, real loopback gRPC between them, the
// scrubber's own thread at a short interval) while a pusher keeps updating rows: a bit
// flipped in a data row, a parity row or a dense replica, and a forged parity delta, are
// found within a scrub interval or so; with r = 2 the bad member is located and rewritten,
// with r = 1 the parity is re-derived from the data rows (docs/abft.md). The end-of-job
// scrub (ScrubParity on every server, as the coordinator's) is then clean, and nothing clean
// was ever confirmed as a mismatch.
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <random>
#include <thread>

#include "gtest/gtest.h"
#include "proto/ecps.pb.h"
#include "tests/poll.h"
#include "tests/test_cluster.h"

namespace ecps {
namespace {

using testing_process::PollUntil;
constexpr char kToken[] = "secret";

class OnlineScrubTest : public ::testing::Test {
 protected:
  void Start(int servers, int k, int r) {
    setenv("ECPS_FAULT_INJECTION", "1", 1);
    spec_ = SmallSpec(servers, 1);
    spec_.fault_tolerance.mode = FaultToleranceMode::kErasureCode;
    spec_.fault_tolerance.k = k;
    spec_.fault_tolerance.r = r;
    spec_.fault_tolerance.dense_replicas = r;  // what the spec's -1 resolves to
    spec_.fault_tolerance.scrub.interval_s = 0.2;
    spec_.fault_tolerance.scrub.rate_mb_s = 50;
    cluster_ = TestCluster::Start(spec_, kToken);
    ASSERT_NE(cluster_, nullptr);
    auto placement = Placement::Create(servers, k, r, spec_.model.table_rows);
    ASSERT_TRUE(placement.ok());
    placement_ = std::make_unique<Placement>(std::move(*placement));
  }
  void TearDown() override {
    StopPushing();
    cluster_.reset();
  }

  // Pushes small gradients to random rows of table 1 until StopPushing (training going on
  // while the scrub runs; the faults go into table 0, which it leaves alone, so that a
  // repaired row can be compared with its value before the flip).
  void StartPushing() {
    pusher_ = std::thread([this] {
      std::mt19937 rng(3);
      while (!stop_.load()) {
        const int64_t row = rng() % spec_.model.table_rows[1];
        const int server = placement_->DataLocation(1, row).server;
        v1::PushRequest push;
        FillHeader(push.mutable_header(), kToken, 1, "worker-0");
        v1::TableRows* t = push.add_tables();
        t->set_table(1);
        t->add_rows(row);
        std::vector<float> grad(spec_.model.embedding_dim, 0.01f);
        push.add_grads(
            std::string(reinterpret_cast<const char*>(grad.data()), grad.size() * sizeof(float)));
        if (cluster_->core(server)->Push(push).ok()) pushes_.fetch_add(1);
      }
    });
  }
  void StopPushing() {
    stop_.store(true);
    if (pusher_.joinable()) pusher_.join();
  }

  v1::ServerStats Sum() {
    v1::ServerStats sum;
    for (int s = 0; s < spec_.cluster.servers; ++s) {
      v1::ServerStats one;
      cluster_->core(s)->FillStats(&one);
      sum.set_scrub_stripes_checked(sum.scrub_stripes_checked() + one.scrub_stripes_checked());
      sum.set_scrub_mismatches_found(sum.scrub_mismatches_found() + one.scrub_mismatches_found());
      sum.set_scrub_mismatches_confirmed(sum.scrub_mismatches_confirmed() +
                                         one.scrub_mismatches_confirmed());
      sum.set_scrub_repaired(sum.scrub_repaired() + one.scrub_repaired());
      sum.set_scrub_unlocated(sum.scrub_unlocated() + one.scrub_unlocated());
      sum.set_scrub_dense_checked(sum.scrub_dense_checked() + one.scrub_dense_checked());
      sum.set_scrub_passes(sum.scrub_passes() + one.scrub_passes());
    }
    return sum;
  }
  // Every server has finished `passes` more passes than in `before`.
  bool PassesAfter(const v1::ServerStats& before, int passes) {
    return Sum().scrub_passes() >= before.scrub_passes() + passes * spec_.cluster.servers;
  }

  absl::Status Flip(int server, v1::InjectFaultRequest::Target target, int table, int64_t index,
                    int64_t bit, int tensor = 0) {
    v1::InjectFaultRequest req;
    FillHeader(req.mutable_header(), kToken, 1, "drill");
    req.set_target(target);
    req.set_table(table);
    req.set_index(index);
    req.set_tensor(tensor);
    req.set_bit(bit);
    return cluster_->core(server)->InjectFault(req);
  }

  std::string DataRow(int table, int64_t row) {
    v1::ReadRowsRequest req;
    FillHeader(req.mutable_header(), kToken, 1, "test");
    req.mutable_rows()->set_table(table);
    req.mutable_rows()->add_rows(row);
    v1::ReadRowsResponse resp;
    EXPECT_TRUE(
        cluster_->core(placement_->DataLocation(table, row).server)->ReadRows(req, &resp).ok());
    return resp.payloads();
  }
  std::vector<uint8_t> ParityRow(int table, int64_t stripe, int q) {
    std::vector<uint8_t> row;
    const int server = placement_->ServerOf(table, stripe, placement_->k() + q);
    EXPECT_TRUE(cluster_->core(server)->ReadParityRow(table, stripe, &row).ok());
    return row;
  }
  // The end-of-job scrub's parity check on every server (the dense one is ScrubDense's).
  int64_t FinalMismatches() {
    int64_t mismatches = 0;
    for (int s = 0; s < spec_.cluster.servers; ++s) {
      v1::ScrubParityRequest req;
      FillHeader(req.mutable_header(), kToken, 1, "test");
      v1::ScrubParityResponse resp;
      EXPECT_TRUE(cluster_->core(s)->ScrubParity(req, &resp).ok());
      mismatches += resp.mismatches();
    }
    return mismatches;
  }
  // The checksums of dense tensor `tensor` on every server holding it: (primary, replica).
  std::pair<uint64_t, uint64_t> DenseSums(int tensor, int* replica_server) {
    uint64_t primary = 0, replica = 0;
    for (int s = 0; s < spec_.cluster.servers; ++s) {
      v1::DenseChecksumsRequest req;
      FillHeader(req.mutable_header(), kToken, 1, "test");
      v1::DenseChecksumsResponse resp;
      EXPECT_TRUE(cluster_->core(s)->DenseChecksums(req, &resp).ok());
      for (const auto& c : resp.tensors()) {
        if (c.tensor() != tensor) continue;
        if (c.primary()) {
          primary = c.checksum();
        } else {
          replica = c.checksum();
          *replica_server = s;
        }
      }
    }
    return {primary, replica};
  }

  JobSpec spec_;
  std::unique_ptr<TestCluster> cluster_;
  std::unique_ptr<Placement> placement_;
  std::thread pusher_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> pushes_{0};
};

TEST_F(OnlineScrubTest, TwoParityRowsLocateAndRepairADataRowAParityRowAndADenseReplica) {
  Start(4, 2, 2);
  StartPushing();
  const int k = 2;
  // Table 0: a data row of stripe 10, parity 0 of stripe 20 and parity 1 of stripe 30.
  const int64_t row = 10 * k + 1;
  const std::string row_before = DataRow(0, row);
  const std::vector<uint8_t> p0_before = ParityRow(0, 20, 0);
  const std::vector<uint8_t> p1_before = ParityRow(0, 30, 1);
  int replica = -1;
  const auto dense_before = DenseSums(1, &replica);
  ASSERT_GE(replica, 0);
  ASSERT_EQ(dense_before.first, dense_before.second);

  ASSERT_TRUE(
      Flip(placement_->DataLocation(0, row).server, v1::InjectFaultRequest::DATA_ROW, 0, row, 20)
          .ok());
  ASSERT_TRUE(
      Flip(placement_->ServerOf(0, 20, k), v1::InjectFaultRequest::PARITY_ROW, 0, 20, 7).ok());
  ASSERT_TRUE(
      Flip(placement_->ServerOf(0, 30, k + 1), v1::InjectFaultRequest::PARITY_ROW, 0, 30, 100)
          .ok());
  ASSERT_TRUE(Flip(replica, v1::InjectFaultRequest::DENSE_WEIGHTS, 0, 0, 3, /*tensor=*/1).ok());
  ASSERT_NE(DataRow(0, row), row_before);

  // A pass is 0.2 s apart at most; give the scrub a few, under a deadline.
  ASSERT_TRUE(PollUntil([&] { return Sum().scrub_repaired() >= 4; }, std::chrono::seconds(60)))
      << Sum().DebugString();
  const v1::ServerStats before = Sum();
  ASSERT_TRUE(PollUntil([&] { return PassesAfter(before, 2); }, std::chrono::seconds(60)));
  StopPushing();
  EXPECT_GT(pushes_.load(), 0);

  const v1::ServerStats sum = Sum();
  EXPECT_EQ(sum.scrub_repaired(), 4) << sum.DebugString();
  EXPECT_EQ(sum.scrub_mismatches_confirmed(), 4) << "a clean stripe was confirmed as corrupt";
  EXPECT_EQ(sum.scrub_unlocated(), 0);
  EXPECT_GT(sum.scrub_stripes_checked(), 0);
  EXPECT_GT(sum.scrub_dense_checked(), 0);
  EXPECT_EQ(DataRow(0, row), row_before);
  EXPECT_EQ(ParityRow(0, 20, 0), p0_before);
  EXPECT_EQ(ParityRow(0, 30, 1), p1_before);
  const auto dense_after = DenseSums(1, &replica);
  EXPECT_EQ(dense_after.first, dense_after.second);
  EXPECT_EQ(FinalMismatches(), 0);
}

TEST_F(OnlineScrubTest, OneParityRowDetectsAndReDerivesTheParity) {
  Start(3, 2, 1);
  StartPushing();
  const int k = 2;
  const int64_t row = 40 * k;
  const std::vector<uint8_t> parity_before = ParityRow(0, 50, 0);
  ASSERT_TRUE(
      Flip(placement_->DataLocation(0, row).server, v1::InjectFaultRequest::DATA_ROW, 0, row, 20)
          .ok());
  const std::string flipped = DataRow(0, row);
  ASSERT_TRUE(
      Flip(placement_->ServerOf(0, 50, k), v1::InjectFaultRequest::PARITY_ROW, 0, 50, 9).ok());
  ASSERT_TRUE(PollUntil([&] { return Sum().scrub_unlocated() >= 2; }, std::chrono::seconds(60)))
      << Sum().DebugString();
  const v1::ServerStats before = Sum();
  ASSERT_TRUE(PollUntil([&] { return PassesAfter(before, 1); }, std::chrono::seconds(60)));
  StopPushing();
  const v1::ServerStats sum = Sum();
  EXPECT_EQ(sum.scrub_unlocated(), 2) << sum.DebugString();
  EXPECT_EQ(sum.scrub_repaired(), 0);
  EXPECT_EQ(sum.scrub_mismatches_confirmed(), 2);
  // The data row keeps its flip (two members cannot say which one is wrong; training reads
  // the data row); the parity now encodes it. A flipped parity row is simply re-derived.
  EXPECT_EQ(DataRow(0, row), flipped);
  EXPECT_EQ(ParityRow(0, 50, 0), parity_before);
  EXPECT_EQ(FinalMismatches(), 0);
}

// A holder of the server credential forges one parity batch with the next sequence number and
// garbage bytes (issue 43): the parity holder applies it; the scrub finds the stripe and, with
// two parity rows, rewrites the forged one.
TEST_F(OnlineScrubTest, AForgedParityDeltaIsFoundAndRepaired) {
  Start(4, 2, 2);
  const int k = 2;
  const int64_t stripe = 60;
  const int data_server = placement_->ServerOf(0, stripe, 0);
  const int parity_server = placement_->ServerOf(0, stripe, k + 1);
  const std::vector<uint8_t> parity_before = ParityRow(0, stripe, 1);
  // The stream from data_server to parity_server is fresh: its first batch is sequence 1.
  v1::ParityDeltaBatch batch;
  FillHeader(batch.mutable_header(), kToken, 1, "forger");
  batch.set_from_server(data_server);
  batch.set_sender_instance("test-server-" + std::to_string(data_server));
  batch.set_seq(1);
  v1::ParityDelta* d = batch.add_deltas();
  d->set_table(0);
  d->set_stripe(stripe);
  d->set_j(0);
  d->set_from_version(0);
  d->set_to_version(1);
  d->set_delta(std::string(parity_before.size(), '\x5a'));
  v1::ParityDeltaAck ack;
  ASSERT_TRUE(cluster_->core(parity_server)->ApplyParityDeltas(batch, &ack).ok());
  ASSERT_EQ(ack.applied_seq(), 1u);
  ASSERT_NE(ParityRow(0, stripe, 1), parity_before);
  // No pushes here: the data server's own next batch on that stream would now carry the
  // sequence number the forger took, be taken for a resend and dropped, and put more stripes
  // out of parity (what the issue saw: 346 of them), each of which the scrub would repair too.
  ASSERT_TRUE(PollUntil([&] { return Sum().scrub_repaired() >= 1; }, std::chrono::seconds(60)))
      << Sum().DebugString();
  EXPECT_EQ(Sum().scrub_mismatches_confirmed(), 1);
  EXPECT_EQ(ParityRow(0, stripe, 1), parity_before);
  EXPECT_EQ(FinalMismatches(), 0);
}

TEST_F(OnlineScrubTest, FaultInjectionIsOffUnlessTheProcessAllowsIt) {
  Start(3, 2, 1);
  unsetenv("ECPS_FAULT_INJECTION");
  int64_t row = 0;
  while (placement_->DataLocation(0, row).server != 0) ++row;
  const std::string before = DataRow(0, row);
  absl::Status s = Flip(0, v1::InjectFaultRequest::DATA_ROW, 0, row, 0);
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_EQ(DataRow(0, row), before);
  setenv("ECPS_FAULT_INJECTION", "1", 1);
  EXPECT_TRUE(absl::IsInvalidArgument(Flip(0, v1::InjectFaultRequest::DATA_ROW, 0, row, 1 << 30)));
  EXPECT_TRUE(absl::IsInvalidArgument(Flip(1, v1::InjectFaultRequest::DATA_ROW, 0, row, 0)))
      << "a row server 1 does not hold";
  EXPECT_TRUE(Flip(0, v1::InjectFaultRequest::DATA_ROW, 0, row, 0).ok());
  EXPECT_NE(DataRow(0, row), before);
}

}  // namespace
}  // namespace ecps
