// Online rebuild of a replaced server, in-process over real gRPC: a rebuilt row (weights and
// optimizer state) and parity row equal the lost one byte for byte; a server replaced while
// workers train is rebuilt on demand and in the background and the cluster ends consistent.
// Over 600 lines: each scenario builds its own cluster and failure on the shared fixture of
// test_cluster.h, and reads best as one test.
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <random>
#include <thread>

#include "coordinator/scrub.h"
#include "gtest/gtest.h"
#include "kernels/spec_config.h"
#include "proto/ecps.grpc.pb.h"
#include "runtime/rpc.h"
#include "tests/test_cluster.h"
#include "worker/training_loop.h"

namespace ecps {
namespace {

constexpr char kToken[] = "recovery-test";

JobSpec Spec(FaultToleranceMode mode, int k, int r, int servers, int64_t steps) {
  JobSpec spec = SmallSpec(servers, steps);
  spec.fault_tolerance.mode = mode;
  spec.fault_tolerance.k = k;
  spec.fault_tolerance.r = r;
  spec.fault_tolerance.dense_replicas = r;
  spec.job.eval_samples = 256;
  return spec;
}

std::vector<std::string> Addresses(const v1::ClusterMap& map) {
  std::vector<std::string> out;
  for (const auto& s : map.servers()) out.push_back(s.address());
  return out;
}

std::unique_ptr<PsClient> Client(const JobSpec& spec, TestCluster* cluster, const std::string& name) {
  auto model = Dlrm::Create(ToDlrmConfig(spec.model), spec.data.batch_size);
  std::vector<int64_t> sizes;
  for (const auto& t : (*model)->tensors()) sizes.push_back(t.size);
  auto ps = PsClient::Create(cluster->current_map(), spec.model.table_rows, spec.model.embedding_dim,
                             sizes, kToken, name, 10000);
  PsClient::FailureHandling handling;
  handling.map_source = [cluster] { return cluster->current_map(); };
  handling.recovery_wait_ms = 60000;
  (*ps)->SetFailureHandling(handling);
  return std::move(*ps);
}

// Up to `count` rows of `table` held by `server`, from the table's end (the sweep reaches
// them last).
std::vector<int64_t> RowsHeldBy(const PsClient& client, const JobSpec& spec, int table,
                                int server, size_t count) {
  std::vector<int64_t> rows;
  for (int64_t row = spec.model.table_rows[table] - 1; row >= 0 && rows.size() < count; --row) {
    if (client.placement().DataLocation(table, row).server == server) rows.push_back(row);
  }
  return rows;
}

void Train(const JobSpec& spec, TestCluster* cluster, int workers, std::atomic<int64_t>* steps) {
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] {
      JobSpec s = spec;
      s.cluster.workers = workers;
      auto model = Dlrm::Create(ToDlrmConfig(s.model), s.data.batch_size);
      auto ps = Client(s, cluster, "worker-" + std::to_string(w));
      ProgressBoard board;
      std::atomic<bool> stop{false};
      TrainingLoop loop(s, w, ps.get(), model->get(), &board, &stop);
      absl::Status st = loop.Train();
      if (!st.ok()) {
        ADD_FAILURE() << st;
        ++failures;
      }
      if (steps != nullptr) steps->fetch_add(board.Snapshot().step());
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_EQ(failures.load(), 0);
}

// Every payload of every row server `s` holds, through the data path.
std::vector<std::vector<float>> RowsOf(const JobSpec& spec, TestCluster* cluster, int s) {
  auto ps = Client(spec, cluster, "snapshot");
  std::vector<std::vector<float>> out;
  for (int t = 0; t < spec.model.num_sparse; ++t) {
    std::vector<int64_t> rows;
    for (int64_t slot = 0; slot < ps->placement().DataSlots(t); ++slot) {
      int64_t row = ps->placement().RowAtDataSlot(t, s, slot);
      if (row >= 0) rows.push_back(row);
    }
    std::vector<float> payloads;
    int pf = 0;
    EXPECT_TRUE(ps->ReadPayloads(t, rows, &payloads, &pf).ok());
    out.push_back(std::move(payloads));
  }
  return out;
}

std::vector<std::vector<uint8_t>> ParityOf(const JobSpec& spec, TestCluster* cluster, int s) {
  auto placement = Placement::Create(spec.cluster.servers, spec.fault_tolerance.k,
                                     spec.fault_tolerance.r, spec.model.table_rows);
  std::vector<std::vector<uint8_t>> out;
  for (int t = 0; t < spec.model.num_sparse; ++t) {
    int q = 0;
    for (int64_t slot = 0; slot < placement->ParitySlots(t); ++slot) {
      int64_t stripe = placement->StripeAtParitySlot(t, s, slot, &q);
      if (stripe < 0) continue;
      std::vector<uint8_t> row;
      EXPECT_TRUE(cluster->core(s)->ReadParityRow(t, stripe, &row).ok());
      out.push_back(std::move(row));
    }
  }
  return out;
}

bool WaitRebuilt(ParameterServerCore* core) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    if (core->rebuilt()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// Waits until no server has a parity delta in flight (with ack async they linger a while
// after the last push is answered).
bool WaitDeltasDelivered(const JobSpec& spec, TestCluster* cluster) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    int64_t unacked = 0;
    for (int s = 0; s < spec.cluster.servers; ++s) {
      v1::ServerStats stats;
      cluster->core(s)->FillStats(&stats);
      unacked += stats.unacked_deltas();
    }
    if (unacked == 0) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

void ExpectClean(TestCluster* cluster) {
  v1::ScrubReport report =
      ScrubServers(Addresses(cluster->current_map()), kToken, StampOf(cluster->current_map()), 10000);
  EXPECT_TRUE(report.clean()) << report.DebugString();
  EXPECT_GT(report.stripes_checked(), 0);
}

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

// A worker's prefetch hint makes a replacement rebuild the rows it names without a pull
// waiting for them: the client sends it only to RECOVERING servers, the server answers at
// once and rebuilds them on demand, ahead of a background sweep that would take far longer.
TEST(OnlineRebuild, PrefetchHintRebuildsRowsBeforeThePull) {
  JobSpec spec = Spec(FaultToleranceMode::kErasureCode, 2, 1, 3, 1);
  spec.fault_tolerance.rebuild_rate_mb_s = 0.01;  // the sweep would take minutes
  auto cluster = TestCluster::Start(spec, kToken);
  ASSERT_NE(cluster, nullptr);
  const int victim = 1;
  const int table = spec.model.num_sparse - 1;  // swept last
  ParameterServerCore* replacement = cluster->Replace(spec, kToken, victim);
  ASSERT_NE(replacement, nullptr);
  auto client = Client(spec, cluster.get(), "prefetcher");
  UniqueIds ids;
  ids.rows.assign(spec.model.num_sparse, {});
  ids.rows[table] = RowsHeldBy(*client, spec, table, victim, 20);
  // No server recovers in the map: no hint goes out.
  client->PrefetchRows(ids);
  v1::ServerStats stats;
  replacement->FillStats(&stats);
  EXPECT_EQ(stats.on_demand_rebuilds(), 0);
  // The map says server 1 recovers: the hint goes to it alone.
  PsClient::FailureHandling handling;
  handling.map_source = [&cluster] {  // victim is a constant
    v1::ClusterMap map = cluster->current_map();
    map.set_phase(v1::JOB_RECOVERING);
    map.mutable_servers(victim)->set_state(v1::NODE_RECOVERING);
    return map;
  };
  client->SetFailureHandling(handling);
  client->PrefetchRows(ids);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    replacement->FillStats(&stats);
    if (stats.on_demand_rebuilds() >= 20) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(stats.on_demand_rebuilds(), 20) << "the hinted rows are rebuilt on demand";
  EXPECT_FALSE(replacement->rebuilt()) << "the background sweep is far from done";
  std::vector<std::vector<float>> rows;
  ASSERT_TRUE(client->PullRows(ids, &rows).ok());
  replacement->FillStats(&stats);
  EXPECT_EQ(stats.on_demand_rebuilds(), 20) << "the pull found them rebuilt";
  // A hint is answered at once and carries no weights.
  v1::PullRequest hint;
  FillHeader(hint.mutable_header(), kToken, cluster->current_map().epoch(), "test");
  v1::TableRows* t = hint.add_tables();
  t->set_table(table);
  t->add_rows(ids.rows[table][0]);
  hint.set_prefetch(true);
  v1::PullResponse answer;
  ASSERT_TRUE(replacement->Pull(hint, &answer).ok());
  EXPECT_EQ(answer.weights_size(), 0);
}

// Hints that come in quick succession share one on-demand batch (one read from each survivor
// for both), and a pull that needs rows starts a batch at once.
TEST(OnlineRebuild, HintsShareABatchAndPullsDoNotWait) {
  JobSpec spec = Spec(FaultToleranceMode::kErasureCode, 2, 1, 3, 1);
  spec.fault_tolerance.rebuild_rate_mb_s = 0.01;  // the sweep would take minutes
  auto cluster = TestCluster::Start(spec, kToken);
  ASSERT_NE(cluster, nullptr);
  const int victim = 1;
  const int table = spec.model.num_sparse - 1;  // swept last
  ParameterServerCore* replacement = cluster->Replace(spec, kToken, victim);
  ASSERT_NE(replacement, nullptr);
  auto client = Client(spec, cluster.get(), "hinter");
  const std::vector<int64_t> lost = RowsHeldBy(*client, spec, table, victim, 40);
  ASSERT_EQ(lost.size(), 40u);
  auto hint = [&](size_t from, size_t to) {
    v1::PullRequest req;
    FillHeader(req.mutable_header(), kToken, cluster->current_map().epoch(), "hinter");
    v1::TableRows* t = req.add_tables();
    t->set_table(table);
    for (size_t i = from; i < to; ++i) t->add_rows(lost[i]);
    req.set_prefetch(true);
    v1::PullResponse answer;
    return replacement->Pull(req, &answer);
  };
  auto stats = [&] {
    v1::ServerStats st;
    replacement->FillStats(&st);
    return st;
  };
  auto wait_rebuilt = [&](int64_t rows) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (stats().on_demand_rebuilds() < rows && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return stats().on_demand_rebuilds();
  };
  // A worker's cadence: hints 30 ms apart (the sleep is the workload, not a wait for the
  // server). Each of these finds the previous one's rows rebuilt.
  for (size_t h = 0; h < 3; ++h) {
    if (h > 0) std::this_thread::sleep_for(std::chrono::milliseconds(30));
    ASSERT_TRUE(hint(h * 10, h * 10 + 5).ok());
    ASSERT_EQ(wait_rebuilt(static_cast<int64_t>(h + 1) * 5), static_cast<int64_t>(h + 1) * 5);
  }
  const int64_t batches = stats().on_demand_batches();
  EXPECT_GE(batches, 1);
  EXPECT_LE(batches, 3);
  // The next hint waits for the one after it (10 ms later: two workers, or a faster step)
  // and both are rebuilt in one batch; without the wait, the first would have had a batch
  // of its own long before the second came.
  ASSERT_TRUE(hint(30, 33).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_TRUE(hint(33, 36).ok());
  ASSERT_EQ(wait_rebuilt(21), 21);
  EXPECT_EQ(stats().on_demand_batches(), batches + 1) << "the two hints share a batch";
  // A pull that needs rows does not wait for another hint: it starts a batch with the rows
  // hinted before it.
  ASSERT_TRUE(hint(36, 38).ok());
  UniqueIds ids;
  ids.rows.assign(spec.model.num_sparse, {});
  ids.rows[table].assign(lost.begin() + 36, lost.end());
  std::vector<std::vector<float>> rows;
  ASSERT_TRUE(client->PullRows(ids, &rows).ok());
  v1::ServerStats after = stats();
  EXPECT_EQ(after.on_demand_rebuilds(), 25);
  EXPECT_EQ(after.on_demand_batches(), batches + 2);
  EXPECT_FALSE(replacement->rebuilt()) << "the background sweep is far from done";
}

// Once every worker has finished there is no training left to protect: the rebuild drops its
// rate limit, so the end of the job (its final scrub and checkpoint) does not wait for it.
TEST(OnlineRebuild, RateLimitEndsWhenTrainingIsDone) {
  JobSpec spec = Spec(FaultToleranceMode::kErasureCode, 2, 1, 3, 1);
  spec.fault_tolerance.rebuild_rate_mb_s = 0.001;  // about 8 minutes for this server's rows
  auto cluster = TestCluster::Start(spec, kToken);
  ASSERT_NE(cluster, nullptr);
  std::atomic<bool> done{false};
  cluster->training_done = [&done] { return done.load(); };
  ParameterServerCore* replacement = cluster->Replace(spec, kToken, 1);
  ASSERT_NE(replacement, nullptr);
  v1::ServerStats stats;
  replacement->FillStats(&stats);
  ASSERT_GT(stats.rebuild_rows_total(), 1000);
  done.store(true);
  ASSERT_TRUE(WaitRebuilt(replacement)) << "still capped after training ended";
  ExpectClean(cluster.get());
}

// The parity holders count the updates of each data row they protect, so that a replacement
// can rebuild the rows workers use most first (Rebuilder::LoadHotRows asks them).
TEST(HotRows, ParityHolderListsADataServersRowsByUpdateCount) {
  JobSpec spec = Spec(FaultToleranceMode::kErasureCode, 2, 1, 3, 1);
  auto cluster = TestCluster::Start(spec, kToken);
  ASSERT_NE(cluster, nullptr);
  auto placement = Placement::Create(3, 2, 1, spec.model.table_rows);
  ASSERT_TRUE(placement.ok());
  // Three rows of server 0 whose stripes' parity lives on one holder.
  const int table = 1, data_server = 0;
  int holder = -1;
  std::vector<int64_t> rows;
  for (int64_t row = 0; row < spec.model.table_rows[table] && rows.size() < 3; ++row) {
    if (placement->DataLocation(table, row).server != data_server) continue;
    const int h = placement->ServerOf(table, row / 2, 2);
    if (holder < 0) holder = h;
    if (h == holder) rows.push_back(row);
  }
  ASSERT_EQ(rows.size(), 3u);
  const int times[3] = {2, 5, 1};
  for (int i = 0; i < 3; ++i) {
    for (int n = 0; n < times[i]; ++n) {
      v1::PushRequest push;
      FillHeader(push.mutable_header(), kToken, 1, "test");
      v1::TableRows* t = push.add_tables();
      t->set_table(table);
      t->add_rows(rows[i]);
      std::vector<float> grad(spec.model.embedding_dim, 0.25f);
      push.add_grads(std::string(reinterpret_cast<const char*>(grad.data()),
                                 grad.size() * sizeof(float)));
      ASSERT_TRUE(cluster->core(data_server)->Push(push).ok());
    }
  }
  v1::HotRowsRequest request;
  FillHeader(request.mutable_header(), kToken, 1, "test");
  request.set_server(data_server);
  request.set_max_rows(10);
  v1::HotRowsResponse hot;
  ASSERT_TRUE(cluster->core(holder)->HotRows(request, &hot).ok());
  ASSERT_EQ(hot.rows_size(), 3) << hot.DebugString();
  EXPECT_EQ(hot.rows(0), rows[1]);
  EXPECT_EQ(hot.rows(1), rows[0]);
  EXPECT_EQ(hot.rows(2), rows[2]);
  EXPECT_EQ(hot.heat(0), 5u);
  EXPECT_EQ(hot.heat(1), 2u);
  EXPECT_EQ(hot.heat(2), 1u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(hot.tables(i), table);

  request.set_max_rows(1);
  hot.Clear();
  ASSERT_TRUE(cluster->core(holder)->HotRows(request, &hot).ok());
  ASSERT_EQ(hot.rows_size(), 1);
  EXPECT_EQ(hot.rows(0), rows[1]);

  // Rows of a server nobody updated: none. A server out of range: refused.
  request.set_server(holder == 1 ? 2 : 1);
  hot.Clear();
  ASSERT_TRUE(cluster->core(holder)->HotRows(request, &hot).ok());
  EXPECT_EQ(hot.rows_size(), 0);
  request.set_server(3);
  EXPECT_TRUE(absl::IsInvalidArgument(cluster->core(holder)->HotRows(request, &hot)));
}

// A checkpoint or scrub that froze the servers may see the epoch move on (a server died
// meanwhile); its release must still be accepted, or the survivors stay frozen for good.
TEST(Freeze, ReleaseFromAnOlderEpochIsAccepted) {
  JobSpec spec = Spec(FaultToleranceMode::kErasureCode, 2, 1, 3, 1);
  auto cluster = TestCluster::Start(spec, kToken);
  ASSERT_NE(cluster, nullptr);
  v1::FreezeRequest freeze;
  FillHeader(freeze.mutable_header(), kToken, 1, "checkpoint");
  freeze.set_freeze(true);
  freeze.set_freeze_id(7);
  freeze.set_owner(kCoordinatorFreezeOwner);
  ASSERT_TRUE(cluster->core(0)->Freeze(freeze).ok());
  cluster->core(0)->SetEpoch(3);  // a failure was detected while frozen

  // A new freeze from the old epoch is still refused; the release goes through.
  EXPECT_TRUE(absl::IsFailedPrecondition(cluster->core(0)->Freeze(freeze)));
  v1::FreezeRequest release = freeze;
  release.set_freeze(false);
  ASSERT_TRUE(cluster->core(0)->Freeze(release).ok());
  release.mutable_header()->set_token("wrong");
  EXPECT_TRUE(absl::IsUnauthenticated(cluster->core(0)->Freeze(release)));

  // Updates flow again (a frozen server would hold this push for 60 s, then refuse it).
  auto placement = Placement::Create(3, 2, 1, spec.model.table_rows);
  ASSERT_TRUE(placement.ok());
  int64_t row = 0;
  while (placement->DataLocation(0, row).server != 0) ++row;
  v1::PushRequest push;
  FillHeader(push.mutable_header(), kToken, 3, "test");
  v1::TableRows* t = push.add_tables();
  t->set_table(0);
  t->add_rows(row);
  std::vector<float> grad(spec.model.embedding_dim, 0.5f);
  push.add_grads(std::string(reinterpret_cast<const char*>(grad.data()),
                             grad.size() * sizeof(float)));
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(cluster->core(0)->Push(push).ok());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
}

// The replacement rebuilds the rows its parity holders saw updated most before the rest:
// with the background throttled to one small batch, the one hot row (in the last table, so
// last in slot order) is rebuilt while rows of the second table still wait.
TEST(HotRows, ReplacementRebuildsTheHottestRowsFirst) {
  JobSpec spec = Spec(FaultToleranceMode::kErasureCode, 2, 1, 3, 1);
  spec.fault_tolerance.rebuild_rate_mb_s = 1e-5;  // 16-stripe batches, minutes apart
  auto cluster = TestCluster::Start(spec, kToken);
  ASSERT_NE(cluster, nullptr);
  auto placement = Placement::Create(3, 2, 1, spec.model.table_rows);
  ASSERT_TRUE(placement.ok());
  const int victim = 0;
  auto first_row_of = [&](int table, bool last) {
    int64_t found = -1;
    for (int64_t slot = 0; slot < placement->DataSlots(table); ++slot) {
      const int64_t row = placement->RowAtDataSlot(table, victim, slot);
      if (row < 0) continue;
      found = row;
      if (!last) break;
    }
    return found;
  };
  const int hot_table = spec.model.num_sparse - 1, cold_table = 1;
  const int64_t hot = first_row_of(hot_table, /*last=*/true);
  const int64_t cold = first_row_of(cold_table, /*last=*/false);
  ASSERT_GE(hot, 0);
  ASSERT_GE(cold, 0);
  for (int n = 0; n < 3; ++n) {
    v1::PushRequest push;
    FillHeader(push.mutable_header(), kToken, 1, "test");
    v1::TableRows* t = push.add_tables();
    t->set_table(hot_table);
    t->add_rows(hot);
    std::vector<float> grad(spec.model.embedding_dim, 0.25f);
    push.add_grads(std::string(reinterpret_cast<const char*>(grad.data()),
                               grad.size() * sizeof(float)));
    ASSERT_TRUE(cluster->core(victim)->Push(push).ok());
  }

  ParameterServerCore* replacement = cluster->Replace(spec, kToken, victim);
  ASSERT_NE(replacement, nullptr);
  const uint64_t epoch = cluster->current_map().epoch();
  auto read = [&](int table, int64_t row) {
    v1::ReadRowsRequest request;  // reads what is there; never rebuilds on demand
    FillHeader(request.mutable_header(), kToken, epoch, "test");
    request.mutable_rows()->set_table(table);
    request.mutable_rows()->add_rows(row);
    v1::ReadRowsResponse response;
    return replacement->ReadRows(request, &response);
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!read(hot_table, hot).ok() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_TRUE(read(hot_table, hot).ok()) << "the hot row was not rebuilt first";
  EXPECT_TRUE(absl::IsUnavailable(read(cold_table, cold)));
}

}  // namespace
}  // namespace ecps
