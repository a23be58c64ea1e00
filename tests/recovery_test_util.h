// What the in-process recovery tests share (recovery_test.cc, rebuild_order_test.cc): their
// spec, a client of the cluster, training in threads, every row and parity row a server
// holds, and the waits and the scrub that end each test.
#ifndef ECPS_TESTS_RECOVERY_TEST_UTIL_H_
#define ECPS_TESTS_RECOVERY_TEST_UTIL_H_

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <random>
#include <thread>

#include "coordinator/scrub.h"
#include "gtest/gtest.h"
#include "domain/spec_config.h"
#include "proto/ecps.grpc.pb.h"
#include "runtime/rpc.h"
#include "tests/test_cluster.h"
#include "worker/training_loop.h"

namespace ecps {
namespace recovery_test {

inline constexpr char kToken[] = "recovery-test";

inline JobSpec Spec(FaultToleranceMode mode, int k, int r, int servers, int64_t steps) {
  JobSpec spec = SmallSpec(servers, steps);
  spec.fault_tolerance.mode = mode;
  spec.fault_tolerance.k = k;
  spec.fault_tolerance.r = r;
  spec.fault_tolerance.dense_replicas = r;
  spec.job.eval_samples = 256;
  return spec;
}

inline std::vector<std::string> Addresses(const v1::ClusterMap& map) {
  std::vector<std::string> out;
  for (const auto& s : map.servers()) out.push_back(s.address());
  return out;
}

inline std::unique_ptr<PsClient> Client(const JobSpec& spec, TestCluster* cluster, const std::string& name) {
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
inline std::vector<int64_t> RowsHeldBy(const PsClient& client, const JobSpec& spec, int table,
                                int server, size_t count) {
  std::vector<int64_t> rows;
  for (int64_t row = spec.model.table_rows[table] - 1; row >= 0 && rows.size() < count; --row) {
    if (client.placement().DataLocation(table, row).server == server) rows.push_back(row);
  }
  return rows;
}

inline void Train(const JobSpec& spec, TestCluster* cluster, int workers, std::atomic<int64_t>* steps) {
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
inline std::vector<std::vector<float>> RowsOf(const JobSpec& spec, TestCluster* cluster, int s) {
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

inline std::vector<std::vector<uint8_t>> ParityOf(const JobSpec& spec, TestCluster* cluster, int s) {
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

inline bool WaitRebuilt(ParameterServerCore* core) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    if (core->rebuilt()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// Waits until no server has a parity delta in flight (with ack async they linger a while
// after the last push is answered).
inline bool WaitDeltasDelivered(const JobSpec& spec, TestCluster* cluster) {
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

inline void ExpectClean(TestCluster* cluster) {
  v1::ScrubReport report =
      ScrubServers(Addresses(cluster->current_map()), kToken, StampOf(cluster->current_map()), 10000);
  EXPECT_TRUE(report.clean()) << report.DebugString();
  EXPECT_GT(report.stripes_checked(), 0);
}

}  // namespace recovery_test
}  // namespace ecps

#endif  // ECPS_TESTS_RECOVERY_TEST_UTIL_H_
