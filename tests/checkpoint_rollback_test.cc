// Save and rollback across in-process servers over real gRPC: what SaveCheckpointOnServers
// writes is every server's state, and after ReloadCheckpointOnServers (mode checkpoint's
// rollback) every server's rows and dense tensors equal the checkpoint byte for byte, even
// after more training changed them.
#include <atomic>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "checkpoint/layout.h"
#include "coordinator/checkpoint_job.h"
#include "gtest/gtest.h"
#include "domain/spec_config.h"
#include "tests/test_cluster.h"
#include "worker/training_loop.h"

namespace ecps {
namespace {

namespace fs = std::filesystem;
constexpr char kToken[] = "rollback-test";

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void Train(const JobSpec& spec, TestCluster* cluster) {
  auto model = Dlrm::Create(ToDlrmConfig(spec.model), spec.data.batch_size);
  ASSERT_TRUE(model.ok());
  std::vector<int64_t> sizes;
  for (const auto& t : (*model)->tensors()) sizes.push_back(t.size);
  auto ps = PsClient::Create(cluster->current_map(), spec.model.table_rows,
                             spec.model.embedding_dim, sizes, kToken, "worker-0", 10000);
  ASSERT_TRUE(ps.ok());
  ProgressBoard board;
  std::atomic<bool> stop{false};
  TrainingLoop loop(spec, 0, ps->get(), model->get(), &board, &stop);
  absl::Status trained = loop.Train();
  ASSERT_TRUE(trained.ok()) << trained;
}

// Saves the cluster's state under `root`; returns the committed directory.
std::string Save(const JobSpec& spec, TestCluster* cluster, const fs::path& root, int64_t step) {
  const v1::ClusterMap map = cluster->current_map();
  std::vector<std::string> addresses;
  for (const auto& s : map.servers()) addresses.push_back(s.address());
  auto layout = CheckpointLayoutFor(spec);
  EXPECT_TRUE(layout.ok());
  v1::CheckpointReport report = SaveCheckpointOnServers(
      addresses, kToken, StampOf(map), 10000, root.string(), *layout, [step] {
        return CheckpointProgress{step, {step * 128}};
      });
  EXPECT_TRUE(report.done()) << report.error();
  EXPECT_TRUE(VerifyCheckpoint(report.dir()).ok()) << VerifyCheckpoint(report.dir());
  return report.dir();
}

// Whether every table and dense file of two checkpoints is identical.
bool SameFiles(const JobSpec& spec, const fs::path& a, const fs::path& b) {
  bool same = true;
  for (size_t t = 0; t < spec.model.table_rows.size(); ++t) {
    const std::string name = TableFileName(static_cast<int>(t));
    same &= ReadFile(a / name) == ReadFile(b / name);
  }
  for (int t = 0; fs::exists(a / DenseFileName(t)); ++t) {
    same &= ReadFile(a / DenseFileName(t)) == ReadFile(b / DenseFileName(t));
  }
  return same;
}

// A server that dies between the freeze and its save fails the checkpoint, and the caller
// hears of it at once (the coordinator reports it: the frozen workers cannot).
TEST(CheckpointRollback, ServerGoneMidSaveIsReportedAtOnce) {
  const fs::path root = fs::temp_directory_path() / ("ecps_midsave_" + std::to_string(getpid()));
  fs::remove_all(root);
  const JobSpec spec = SmallSpec(3, 1);
  auto cluster = TestCluster::Start(spec, kToken);
  ASSERT_NE(cluster, nullptr);
  const v1::ClusterMap map = cluster->current_map();
  std::vector<std::string> addresses;
  for (const auto& s : map.servers()) addresses.push_back(s.address());
  auto layout = CheckpointLayoutFor(spec);
  ASSERT_TRUE(layout.ok());
  std::vector<std::pair<int, std::string>> reported;
  v1::CheckpointReport report = SaveCheckpointOnServers(
      addresses, kToken, StampOf(map), 10000, root.string(), *layout,
      [&] {
        cluster->Stop(1);  // every server is frozen now; the saves come next
        return CheckpointProgress{10, {1280}};
      },
      [&](int server, const std::string& address) { reported.emplace_back(server, address); });
  EXPECT_FALSE(report.done());
  EXPECT_NE(report.error().find("server 1 could not save"), std::string::npos) << report.error();
  const std::vector<std::pair<int, std::string>> want = {{1, addresses[1]}};
  EXPECT_EQ(reported, want);
  fs::remove_all(root);
}

TEST(CheckpointRollback, EveryServerReloadsTheCheckpointByteForByte) {
  const fs::path root = fs::temp_directory_path() / ("ecps_rollback_" + std::to_string(getpid()));
  fs::remove_all(root);
  JobSpec spec = SmallSpec(3, 15);
  spec.fault_tolerance.mode = FaultToleranceMode::kCheckpoint;
  auto cluster = TestCluster::Start(spec, kToken);
  ASSERT_NE(cluster, nullptr);
  Train(spec, cluster.get());
  const std::string saved = Save(spec, cluster.get(), root / "a", 15);

  Train(spec, cluster.get());  // 15 more updates of the same rows
  const std::string moved = Save(spec, cluster.get(), root / "b", 15);
  EXPECT_FALSE(SameFiles(spec, saved, moved)) << "training did not change the model";

  const v1::ClusterMap map = cluster->current_map();
  std::vector<std::string> addresses;
  for (const auto& s : map.servers()) addresses.push_back(s.address());
  auto reloaded =
      ReloadCheckpointOnServers(addresses, kToken, StampOf(map), 10000, (root / "a").string());
  ASSERT_TRUE(reloaded.ok()) << reloaded.status();
  EXPECT_EQ(reloaded->dir(), saved);
  EXPECT_EQ(reloaded->step(), 15);
  ASSERT_EQ(reloaded->reader_positions_size(), 1);
  EXPECT_EQ(reloaded->reader_positions(0), 15 * 128);

  const std::string after = Save(spec, cluster.get(), root / "c", 15);
  EXPECT_TRUE(SameFiles(spec, saved, after)) << "the rolled-back state differs from the checkpoint";
  fs::remove_all(root);
}

TEST(CheckpointRollback, ReloadRefusesAMissingCheckpointNamingTheRoot) {
  JobSpec spec = SmallSpec(2, 1);
  spec.fault_tolerance.mode = FaultToleranceMode::kCheckpoint;
  auto cluster = TestCluster::Start(spec, kToken);
  ASSERT_NE(cluster, nullptr);
  const v1::ClusterMap map = cluster->current_map();
  std::vector<std::string> addresses;
  for (const auto& s : map.servers()) addresses.push_back(s.address());
  auto reloaded =
      ReloadCheckpointOnServers(addresses, kToken, StampOf(map), 10000, "/nonexistent/ckpt-root");
  ASSERT_FALSE(reloaded.ok());
  EXPECT_NE(reloaded.status().message().find("/nonexistent/ckpt-root"), std::string::npos)
      << reloaded.status();
}

}  // namespace
}  // namespace ecps
