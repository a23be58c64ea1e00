// The order of an online rebuild, in-process over real gRPC: a worker's prefetch hint rebuilds
// rows before its pull, hints share batches and pulls do not wait, the rate limit ends when
// training does, parity holders list a data server's hottest rows and a replacement rebuilds
// them first; a freeze released from an older epoch is accepted.
#include "tests/recovery_test_util.h"

namespace ecps {
namespace {

using recovery_test::kToken;
using recovery_test::Spec;
using recovery_test::Client;
using recovery_test::RowsHeldBy;
using recovery_test::WaitRebuilt;
using recovery_test::ExpectClean;

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
