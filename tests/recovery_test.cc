// Online rebuild of a replaced server, in-process over real gRPC: a rebuilt row (weights and
// optimizer state) and parity row equal the lost one byte for byte; a server replaced while
// workers train is rebuilt on demand and in the background and the cluster ends consistent.
// The order of a rebuild (hints, hot rows first, rate limits) and freezes are in
// rebuild_order_test.cc.
#include "tests/recovery_test_util.h"

namespace ecps {
namespace {

using recovery_test::kToken;
using recovery_test::Spec;
using recovery_test::Client;
using recovery_test::Train;
using recovery_test::RowsOf;
using recovery_test::ParityOf;
using recovery_test::WaitRebuilt;
using recovery_test::WaitDeltasDelivered;
using recovery_test::ExpectClean;

struct Case {
  FaultToleranceMode mode;
  int k, r, servers, victim;
};

class QuiescentRebuild : public ::testing::TestWithParam<Case> {};

TEST_P(QuiescentRebuild, RebuiltRowsAreByteIdentical) {
  const Case& c = GetParam();
  JobSpec spec = Spec(c.mode, c.k, c.r, c.servers, 25);
  auto cluster = TestCluster::Start(spec, kToken);
  ASSERT_NE(cluster, nullptr);
  Train(spec, cluster.get(), 2, nullptr);
  auto rows_before = RowsOf(spec, cluster.get(), c.victim);
  auto parity_before = ParityOf(spec, cluster.get(), c.victim);
  std::vector<std::vector<float>> dense_before;
  ASSERT_TRUE(Client(spec, cluster.get(), "dense")->PullDense(&dense_before).ok());
  ASSERT_TRUE(WaitDeltasDelivered(spec, cluster.get()));

  ParameterServerCore* replacement = cluster->Replace(spec, kToken, c.victim);
  ASSERT_NE(replacement, nullptr);
  ASSERT_TRUE(WaitRebuilt(replacement));
  v1::ServerStats stats;
  replacement->FillStats(&stats);
  EXPECT_EQ(stats.frozen_rebuild_stripes(), 0) << "nothing changes: no read needs a freeze";

  auto rows_after = RowsOf(spec, cluster.get(), c.victim);
  ASSERT_EQ(rows_after.size(), rows_before.size());
  for (size_t t = 0; t < rows_before.size(); ++t) {
    ASSERT_EQ(rows_after[t].size(), rows_before[t].size());
    EXPECT_EQ(0, std::memcmp(rows_after[t].data(), rows_before[t].data(),
                             rows_before[t].size() * sizeof(float)))
        << "table " << t << ": a rebuilt row differs from the lost one";
  }
  EXPECT_EQ(ParityOf(spec, cluster.get(), c.victim), parity_before);
  std::vector<std::vector<float>> dense_after;
  ASSERT_TRUE(Client(spec, cluster.get(), "dense")->PullDense(&dense_after).ok());
  EXPECT_EQ(dense_after, dense_before);
  ExpectClean(cluster.get());
}

INSTANTIATE_TEST_SUITE_P(Codes, QuiescentRebuild,
                         ::testing::Values(Case{FaultToleranceMode::kErasureCode, 2, 1, 3, 1},
                                           Case{FaultToleranceMode::kErasureCode, 4, 1, 5, 0},
                                           Case{FaultToleranceMode::kErasureCode, 3, 2, 5, 4},
                                           Case{FaultToleranceMode::kReplication, 1, 1, 3, 2}),
                         [](const auto& info) {
                           return std::string(ToString(info.param.mode)) + "_k" +
                                  std::to_string(info.param.k) + "_r" +
                                  std::to_string(info.param.r);
                         });

TEST(OnlineRebuild, ReplacedWhileTrainingEndsConsistent) {
  JobSpec spec = Spec(FaultToleranceMode::kErasureCode, 3, 2, 5, 200);
  // A slow background rebuild, so workers certainly ask for rows it has not reached yet.
  spec.fault_tolerance.rebuild_rate_mb_s = 0.1;
  auto cluster = TestCluster::Start(spec, kToken);
  ASSERT_NE(cluster, nullptr);
  std::atomic<int64_t> steps{0};
  std::thread trainer([&] { Train(spec, cluster.get(), 2, &steps); });
  // Replace a server once training is under way.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (cluster->core(2)->epoch() == 1 && std::chrono::steady_clock::now() < deadline) {
    v1::ServerStats stats;
    cluster->core(2)->FillStats(&stats);
    if (stats.pushes() > 300) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ParameterServerCore* replacement = cluster->Replace(spec, kToken, 2);
  ASSERT_NE(replacement, nullptr);
  trainer.join();
  EXPECT_EQ(steps.load(), 2 * 200);
  ASSERT_TRUE(WaitRebuilt(replacement));
  v1::ServerStats stats;
  replacement->FillStats(&stats);
  EXPECT_EQ(stats.rebuild_rows_done(), stats.rebuild_rows_total());
  EXPECT_GT(stats.on_demand_rebuilds(), 0) << "workers must have asked for lost rows";
  // Most stripes are read without freezing anything, while the workers push.
  EXPECT_LT(stats.frozen_rebuild_stripes(), stats.rebuild_rows_total() / 4);
  ExpectClean(cluster.get());
}

TEST(SimultaneousFailures, TwoServersOfAThreeTwoCodeAreRebuiltExactly) {
  JobSpec spec = Spec(FaultToleranceMode::kErasureCode, 3, 2, 5, 25);
  auto cluster = TestCluster::Start(spec, kToken);
  ASSERT_NE(cluster, nullptr);
  Train(spec, cluster.get(), 2, nullptr);
  auto rows1 = RowsOf(spec, cluster.get(), 1);
  auto rows3 = RowsOf(spec, cluster.get(), 3);
  auto parity1 = ParityOf(spec, cluster.get(), 1);
  auto parity3 = ParityOf(spec, cluster.get(), 3);
  auto replaced = cluster->ReplaceMany(spec, kToken, {1, 3});
  ASSERT_EQ(replaced.size(), 2u);
  ASSERT_TRUE(WaitRebuilt(replaced[0]));
  ASSERT_TRUE(WaitRebuilt(replaced[1]));
  EXPECT_EQ(RowsOf(spec, cluster.get(), 1), rows1);
  EXPECT_EQ(RowsOf(spec, cluster.get(), 3), rows3);
  EXPECT_EQ(ParityOf(spec, cluster.get(), 1), parity1);
  EXPECT_EQ(ParityOf(spec, cluster.get(), 3), parity3);
  ExpectClean(cluster.get());
}

TEST(SimultaneousFailures, SecondFailureDuringARecovery) {
  JobSpec spec = Spec(FaultToleranceMode::kErasureCode, 3, 2, 5, 25);
  spec.fault_tolerance.rebuild_rate_mb_s = 0.2;  // slow, so the second failure lands mid-rebuild
  auto cluster = TestCluster::Start(spec, kToken);
  ASSERT_NE(cluster, nullptr);
  Train(spec, cluster.get(), 1, nullptr);
  auto rows0 = RowsOf(spec, cluster.get(), 0);
  auto rows2 = RowsOf(spec, cluster.get(), 2);
  ParameterServerCore* first = cluster->Replace(spec, kToken, 0);
  ASSERT_NE(first, nullptr);
  v1::ServerStats stats;
  first->FillStats(&stats);
  ASSERT_FALSE(first->rebuilt());
  ParameterServerCore* second = cluster->Replace(spec, kToken, 2);
  ASSERT_NE(second, nullptr);
  ASSERT_TRUE(WaitRebuilt(first));
  ASSERT_TRUE(WaitRebuilt(second));
  EXPECT_EQ(RowsOf(spec, cluster.get(), 0), rows0);
  EXPECT_EQ(RowsOf(spec, cluster.get(), 2), rows2);
  ExpectClean(cluster.get());
}

// A (2, 1) job whose every applied +1 push takes exactly 1 off each weight (SGD, lr 1), with
// pushes acknowledged only once their parity is: what the counting tests below need.
JobSpec CountingSpec() {
  JobSpec spec = Spec(FaultToleranceMode::kErasureCode, 2, 1, 3, 1);
  spec.optimizer.sparse.type = SparseOptimizerType::kSgd;
  spec.optimizer.sparse.lr = 1.0f;
  spec.fault_tolerance.ack = AckPolicy::kAfterParity;
  return spec;
}

// Pushes +1 gradients (SGD, lr 1: each applied push takes 1 off every weight) to `rows` of
// `table` from a thread of its own, counting the pushes that were acknowledged.
class CountingPusher {
 public:
  CountingPusher(const JobSpec& spec, PsClient* client, int table, std::vector<int64_t> rows)
      : client_(client), table_(table), rows_(std::move(rows)) {
    ok_ = client_->ReadPayloads(table_, rows_, &initial_, &pf_).ok();
    ids_.rows.assign(spec.model.num_sparse, {});
    ids_.rows[table_] = rows_;
    grads_.resize(spec.model.num_sparse);
    grads_[table_].assign(rows_.size() * spec.model.embedding_dim, 1.0f);
    thread_ = std::thread([this] {
      while (!stop_.load()) {
        if (client_->Push(ids_, grads_, {}).ok()) acked_.fetch_add(1);
      }
    });
  }
  ~CountingPusher() { Stop(); }
  bool ok() const { return ok_; }  // the initial rows were read
  int64_t acked() const { return acked_.load(); }
  // Waits until `n` more pushes than now are acknowledged (at most `timeout`).
  void WaitForMore(int64_t n, std::chrono::seconds timeout) const {
    const int64_t start = acked();
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (acked() < start + n && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  void Stop() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
  }
  // Every dimension of every row shows at least `at_least` applied updates; else a failure
  // naming the row.
  ::testing::AssertionResult HoldsAtLeast(int64_t at_least, int dim) const {
    std::vector<float> now;
    int pf = 0;
    if (!client_->ReadPayloads(table_, rows_, &now, &pf).ok()) {
      return ::testing::AssertionFailure() << "cannot read the rows";
    }
    for (size_t i = 0; i < rows_.size(); ++i) {
      for (int d = 0; d < dim; ++d) {
        const double applied = initial_[i * pf_ + d] - now[i * pf + d];  // w = w0 - count
        if (applied < at_least - 0.5) {
          return ::testing::AssertionFailure()
                 << "row " << rows_[i] << " lost an acknowledged update: " << applied
                 << " applied, " << at_least << " acknowledged";
        }
      }
    }
    return ::testing::AssertionSuccess();
  }

 private:
  PsClient* client_;
  const int table_;
  const std::vector<int64_t> rows_;
  std::vector<float> initial_;
  int pf_ = 0;
  bool ok_ = false;
  UniqueIds ids_;
  std::vector<std::vector<float>> grads_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> acked_{0};
  std::thread thread_;
};

// Pushes +1 gradients with SGD (lr 1) to rows of one server while it is replaced, counting
// the pushes that were acknowledged; afterwards every row must show at least that many
// updates: nothing acknowledged is lost (a push whose answer was lost may apply twice).
TEST(OnlineRebuild, EveryAcknowledgedUpdateSurvives) {
  const JobSpec spec = CountingSpec();
  auto cluster = TestCluster::Start(spec, kToken);
  ASSERT_NE(cluster, nullptr);
  const int victim = 1, table = 3;
  auto client = Client(spec, cluster.get(), "pusher");
  std::vector<int64_t> rows;
  for (int64_t row = 0; row < spec.model.table_rows[table] && rows.size() < 40; ++row) {
    if (client->placement().DataLocation(table, row).server == victim) rows.push_back(row);
  }
  CountingPusher pusher(spec, client.get(), table, rows);
  ASSERT_TRUE(pusher.ok());
  pusher.WaitForMore(30, std::chrono::seconds(20));
  ParameterServerCore* replacement = cluster->Replace(spec, kToken, victim);
  ASSERT_NE(replacement, nullptr);
  const int64_t at_replace = pusher.acked();
  pusher.WaitForMore(30, std::chrono::seconds(20));
  pusher.Stop();
  ASSERT_TRUE(WaitRebuilt(replacement));
  EXPECT_GE(pusher.acked(), at_replace + 30) << "pushes must go on through the replacement";
  EXPECT_TRUE(pusher.HoldsAtLeast(pusher.acked(), spec.model.embedding_dim));
  ExpectClean(cluster.get());
}

// Soak (short form; ECPS_SOAK_FAILURES=20 for the long one): one server after another, in a
// seeded random order, dies and is replaced while a pusher sends +1 gradients (SGD, lr 1) to
// rows of every server, counting the acknowledged pushes. After every failure each row shows
// at least that many updates, and the cluster ends with a clean scrub.
TEST(Soak, EveryAcknowledgedUpdateSurvivesFailureAfterFailure) {
  const char* env = std::getenv("ECPS_SOAK_FAILURES");
  const int failures = env != nullptr ? std::max(1, std::atoi(env)) : 8;
  const JobSpec spec = CountingSpec();
  auto cluster = TestCluster::Start(spec, kToken);
  ASSERT_NE(cluster, nullptr);
  const int table = 5;
  auto client = Client(spec, cluster.get(), "pusher");
  std::vector<int64_t> rows;
  for (int64_t row = 0; row < 60; ++row) rows.push_back(row);  // on every server
  CountingPusher pusher(spec, client.get(), table, rows);
  ASSERT_TRUE(pusher.ok());
  std::mt19937 rng(20261201);
  for (int f = 0; f < failures; ++f) {
    pusher.WaitForMore(10, std::chrono::seconds(30));
    const int victim = static_cast<int>(rng() % 3);
    ParameterServerCore* replacement = cluster->Replace(spec, kToken, victim);
    ASSERT_NE(replacement, nullptr) << "failure " << f;
    ASSERT_TRUE(WaitRebuilt(replacement)) << "failure " << f << ": server " << victim;
    // Read while the pusher goes on: every push acknowledged before the read is in it.
    ASSERT_TRUE(pusher.HoldsAtLeast(pusher.acked(), 1))
        << "after failure " << f + 1 << " (server " << victim << ")";
  }
  pusher.Stop();
  EXPECT_TRUE(pusher.HoldsAtLeast(pusher.acked(), spec.model.embedding_dim));
  EXPECT_GE(pusher.acked(), 10 * failures);
  ExpectClean(cluster.get());
}

}  // namespace
}  // namespace ecps
