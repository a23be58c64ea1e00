// End-to-end checkpoints through the real `ecps` binary: the final save of `ecps run`,
// resuming from it byte for byte (same layout, and resharded onto another number of servers
// and another mode), `ecps checkpoint` on a running job, the refusal of a damaged
// checkpoint before anything starts, and a resume in the second of data.epochs.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include "checkpoint/checkpoint.h"
#include "gtest/gtest.h"
#include "tests/ecps_process.h"

namespace ecps {
namespace {

using namespace testing_process;  // NOLINT: TempDir, ReadFile, Start, WaitFor
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string Spec(const std::string& name, int steps, int servers, const std::string& extra) {
  return "job:\n  name: " + name + "\n  steps: " + std::to_string(steps) +
         "\n  eval_every: 0\n  eval_samples: 1024\n  token: e2e-token\n" + extra +
         "cluster:\n  servers: " + std::to_string(servers) +
         "\n  workers: 2\n  heartbeat_interval_ms: 100\n"
         "model:\n  embedding_dim: 8\n  bottom_mlp: [32, 8]\n  top_mlp: [32, 16]\n"
         "  table_rows: 500\n"
         "optimizer:\n  sparse: {type: adagrad, lr: 0.05}\n  dense: {type: adam, lr: 0.003}\n"
         "data:\n  source: synthetic\n  batch_size: 128\n"
         "monitoring:\n  metrics_interval_ms: 200\n";
}

// Runs `ecps run` on `spec` in `dir`; returns the exit code (-1: did not finish) and the log.
int RunJob(const fs::path& dir, const std::string& spec, std::string* log) {
  fs::create_directories(dir);
  std::ofstream(dir / "job.yaml") << spec;
  pid_t pid = Start(
      {"run", (dir / "job.yaml").string(), "--output", (dir / "out").string(), "--no-progress"},
      dir / "run.log");
  int status = WaitFor(pid, std::chrono::seconds(240));
  *log = ReadFile(dir / "run.log");
  if (status == -1 || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

class CheckpointE2E : public ::testing::Test {
 public:
  static constexpr int kSteps = 30;

 protected:
  // Job A: mode none on 2 servers, 2 workers, 30 steps; its final checkpoint is the baseline.
  static void SetUpTestSuite() {
    root_ = new fs::path(fs::temp_directory_path() / ("ecps_ckpt_e2e_" + std::to_string(getpid())));
    fs::remove_all(*root_);
    std::string log;
    exit_a_ = RunJob(*root_ / "a", Spec("ckpt-a", kSteps, 2, ""), &log);
    log_a_ = new std::string(log);
  }
  static void TearDownTestSuite() {
    fs::remove_all(*root_);
    delete root_;
    delete log_a_;
  }
  static fs::path SavedDir() { return *root_ / "a" / "out" / "checkpoints" / "step-000000030"; }

  // Every table and dense file and the manifest's step, checksums and reader positions of
  // `dir` equal those of the baseline.
  static void ExpectSameCheckpoint(const fs::path& dir) {
    auto a = ReadManifest(SavedDir().string());
    auto b = ReadManifest(dir.string());
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(a->layout.step, b->layout.step);
    EXPECT_EQ(a->reader_positions, b->reader_positions);
    EXPECT_EQ(a->table_checksums, b->table_checksums);
    EXPECT_EQ(a->dense, b->dense);
    for (size_t t = 0; t < a->layout.table_rows.size(); ++t) {
      const std::string name = TableFileName(static_cast<int>(t));
      EXPECT_TRUE(ReadFile(SavedDir() / name) == ReadFile(dir / name)) << name << " differs";
    }
    for (size_t t = 0; t < a->layout.dense_sizes.size(); ++t) {
      const std::string name = DenseFileName(static_cast<int>(t));
      EXPECT_TRUE(ReadFile(SavedDir() / name) == ReadFile(dir / name)) << name << " differs";
    }
    EXPECT_TRUE(VerifyCheckpoint(dir.string()).ok());
  }

  static fs::path* root_;
  static int exit_a_;
  static std::string* log_a_;

 public:
  static fs::path& root() { return *root_; }
  static int exit_a() { return exit_a_; }
  static const std::string& log_a() { return *log_a_; }
  static fs::path saved() { return SavedDir(); }
  static void Same(const fs::path& d) { ExpectSameCheckpoint(d); }
};
fs::path* CheckpointE2E::root_ = nullptr;
int CheckpointE2E::exit_a_ = -1;
std::string* CheckpointE2E::log_a_ = nullptr;

void CheckFinalSave() {
  ASSERT_EQ(CheckpointE2E::exit_a(), 0) << CheckpointE2E::log_a();
  EXPECT_NE(CheckpointE2E::log_a().find("final checkpoint of step 30 saved to"), std::string::npos)
      << CheckpointE2E::log_a();
  ASSERT_TRUE(VerifyCheckpoint(CheckpointE2E::saved().string()).ok())
      << VerifyCheckpoint(CheckpointE2E::saved().string());
  auto m = ReadManifest(CheckpointE2E::saved().string());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->layout.step, CheckpointE2E::kSteps);
  // Each worker read exactly its 30 batches of 128 samples.
  EXPECT_EQ(m->reader_positions,
            (std::vector<int64_t>{CheckpointE2E::kSteps * 128, CheckpointE2E::kSteps * 128}));
  // Training changed the model: the dense tensors' versions count the updates.
  EXPECT_GT(m->dense[0].version, 0);
}

void CheckResume() {
  ASSERT_EQ(CheckpointE2E::exit_a(), 0) << CheckpointE2E::log_a();
  // Resume from the root (the newest step-N under it) with nothing left to train: the job's
  // own final checkpoint is then exactly what it loaded.
  std::string log;
  const fs::path dir = CheckpointE2E::root() / "b";
  int code = RunJob(dir,
                    Spec("ckpt-b", CheckpointE2E::kSteps, 2,
                         "  resume_from: " +
                             (CheckpointE2E::root() / "a" / "out" / "checkpoints").string() + "\n"),
                    &log);
  ASSERT_EQ(code, 0) << log;
  EXPECT_NE(log.find("resuming from"), std::string::npos) << log;
  CheckpointE2E::Same(dir / "out" / "checkpoints" / "step-000000030");
}

void CheckReshard() {
  ASSERT_EQ(CheckpointE2E::exit_a(), 0) << CheckpointE2E::log_a();
  std::string log;
  const fs::path dir = CheckpointE2E::root() / "c";
  int code = RunJob(dir,
                    Spec("ckpt-c", CheckpointE2E::kSteps, 3,
                         "  resume_from: " + CheckpointE2E::saved().string() + "\n") +
                        "fault_tolerance:\n  mode: erasure_code\n  k: 2\n  r: 1\n",
                    &log);
  ASSERT_EQ(code, 0) << log;
  CheckpointE2E::Same(dir / "out" / "checkpoints" / "step-000000030");
  // The parity was encoded from the loaded rows: the final scrub is clean.
  std::string report = ReadFile(dir / "out" / "report.json");
  EXPECT_NE(report.find("\"scrub\": {\"done\": true, \"clean\": true"), std::string::npos)
      << report;
}

void CheckTrainOn() {
  ASSERT_EQ(CheckpointE2E::exit_a(), 0) << CheckpointE2E::log_a();
  std::string log;
  const fs::path dir = CheckpointE2E::root() / "d";
  int code = RunJob(dir,
                    Spec("ckpt-d", CheckpointE2E::kSteps + 10, 2,
                         "  resume_from: " + CheckpointE2E::saved().string() + "\n"),
                    &log);
  ASSERT_EQ(code, 0) << log;
  auto m = ReadManifest((dir / "out" / "checkpoints" / "step-000000040").string());
  ASSERT_TRUE(m.ok()) << m.status() << "\n" << log;
  // 10 more steps of 128 samples per worker, continuing from the saved positions.
  EXPECT_EQ(m->reader_positions, (std::vector<int64_t>{40 * 128, 40 * 128}));
}

// Copies the baseline checkpoint, damages the copy with `damage`, and expects `ecps run` to
// refuse it with exit code 2 and a message holding every string of `expect`.
void ExpectRefused(const fs::path& root, const fs::path& saved, const std::string& name,
                   const std::function<void(const fs::path&)>& damage,
                   const std::vector<std::string>& expect) {
  const fs::path copy = root / name / "step-000000030";
  fs::create_directories(copy.parent_path());
  fs::copy(saved, copy, fs::copy_options::recursive);
  damage(copy);
  std::string log;
  const fs::path dir = root / (name + "-run");
  int code = RunJob(dir, Spec("ckpt-bad", 30, 2, "  resume_from: " + copy.string() + "\n"), &log);
  EXPECT_EQ(code, 2) << log;
  for (const std::string& e : expect) EXPECT_NE(log.find(e), std::string::npos) << e << "\n" << log;
  EXPECT_FALSE(fs::exists(dir / "out" / "logs" / "server-0.log")) << "nothing may start";
}

void CheckRefusals() {
  ASSERT_EQ(CheckpointE2E::exit_a(), 0) << CheckpointE2E::log_a();
  ExpectRefused(CheckpointE2E::root(), CheckpointE2E::saved(), "truncated",
                [](const fs::path& d) {
                  fs::resize_file(d / "table-003.rows", fs::file_size(d / "table-003.rows") - 4);
                },
                {"table-003.rows", "truncated"});
  ExpectRefused(CheckpointE2E::root(), CheckpointE2E::saved(), "flipped",
                [](const fs::path& d) {
                  std::fstream f(d / "table-005.rows",
                                 std::ios::in | std::ios::out | std::ios::binary);
                  f.seekg(1000);
                  char c = 0;
                  f.read(&c, 1);
                  c ^= 0x10;
                  f.seekp(1000);
                  f.write(&c, 1);
                },
                {"table-005.rows", "checksum mismatch"});
  ExpectRefused(CheckpointE2E::root(), CheckpointE2E::saved(), "nomanifest",
                [](const fs::path& d) { fs::remove(d / "MANIFEST.json"); },
                {"MANIFEST.json: missing"});
  ExpectRefused(CheckpointE2E::root(), CheckpointE2E::saved(), "dense",
                [](const fs::path& d) {
                  std::ofstream f(d / "dense-001.bin",
                                  std::ios::in | std::ios::out | std::ios::binary);
                  f.seekp(60);
                  f.write("\x7f", 1);
                },
                {"dense-001.bin"});
}

TEST_F(CheckpointE2E, SaveThenResumeByteForByteAndTrainOn) {
  CheckFinalSave();
  CheckResume();
  CheckTrainOn();
}

TEST_F(CheckpointE2E, ReshardOntoErasureCodingAndRefuseDamage) {
  CheckReshard();
  CheckRefusals();
}

TEST(CheckpointCommand, SavesARunningJob) {
  const fs::path dir = fs::temp_directory_path() / ("ecps_ckpt_live_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "job.yaml") << Spec("ckpt-live", 1000000, 2, "");
  pid_t pid = Start(
      {"run", (dir / "job.yaml").string(), "--output", (dir / "out").string(), "--no-progress"},
      dir / "run.log");
  std::string address;
  auto deadline = Clock::now() + std::chrono::seconds(60);
  while (Clock::now() < deadline) {
    std::ifstream port_file(dir / "out" / "coordinator.port");
    int port = 0;
    if (port_file >> port && port > 0 &&
        ReadFile(dir / "out" / "metrics.csv").find("running") != std::string::npos) {
      address = "127.0.0.1:" + std::to_string(port);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_FALSE(address.empty()) << ReadFile(dir / "run.log");
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // some steps trained
  pid_t cli = Start({"checkpoint", address, "--token", "e2e-token"}, dir / "checkpoint.log");
  int status = WaitFor(cli, std::chrono::seconds(60));
  const std::string out = ReadFile(dir / "checkpoint.log");
  EXPECT_TRUE(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0) << out;
  kill(pid, SIGINT);
  WaitFor(pid, std::chrono::seconds(30));
  auto saved = ListCheckpoints((dir / "out" / "checkpoints").string());
  ASSERT_TRUE(saved.ok()) << saved.status();
  ASSERT_EQ(saved->size(), 1u) << out;
  EXPECT_NE(out.find((*saved)[0]), std::string::npos) << out;
  EXPECT_TRUE(VerifyCheckpoint((*saved)[0]).ok()) << VerifyCheckpoint((*saved)[0]);
  auto m = ReadManifest((*saved)[0]);
  ASSERT_TRUE(m.ok());
  EXPECT_GT(m->layout.step, 0);
  ASSERT_EQ(m->reader_positions.size(), 2u);
  EXPECT_GT(m->reader_positions[0], 0);
  fs::remove_all(dir);
}

// fault_tolerance.mode checkpoint: a server killed under load; the job pauses, every server
// (the replacement too) reloads the last periodic checkpoint, every worker rewinds to its
// reader position, and the job finishes.
TEST(CheckpointMode, KilledServerRollsBackAndTheJobFinishes) {
  const fs::path dir = fs::temp_directory_path() / ("ecps_ckpt_mode_" + std::to_string(getpid()));
  fs::remove_all(dir);
  std::string log;
  int code = RunJob(dir,
                    Spec("ckpt-mode", 150, 2, "") +
                        "fault_tolerance:\n  mode: checkpoint\n  checkpoint:\n"
                        "    interval_steps: 20\n"
                        "faults:\n  - at_step: 60\n    action: kill_server\n    target: 1\n",
                    &log);
  ASSERT_EQ(code, 0) << log;
  EXPECT_NE(log.find("SIGKILL server 1"), std::string::npos) << log;
  const std::string coordinator = ReadFile(dir / "out" / "logs" / "coordinator.log");
  EXPECT_NE(coordinator.find("rolling back to the last checkpoint"), std::string::npos)
      << coordinator;
  EXPECT_NE(coordinator.find("every server reloaded"), std::string::npos) << coordinator;
  for (int w = 0; w < 2; ++w) {
    const std::string worker =
        ReadFile(dir / "out" / "logs" / ("worker-" + std::to_string(w) + ".log"));
    EXPECT_NE(worker.find("rolled back to"), std::string::npos) << worker;
  }
  auto saved = ListCheckpoints((dir / "out" / "checkpoints").string());
  ASSERT_TRUE(saved.ok());
  // The first at once, periodic ones, the final one: checkpoint.keep (default 3) remain.
  ASSERT_EQ(saved->size(), 3u) << coordinator;
  auto final_manifest = ReadManifest((*saved)[0]);
  ASSERT_TRUE(final_manifest.ok());
  EXPECT_EQ(final_manifest->layout.step, 150);
  // Every worker resumes at its own step (from its own position), so after the rollback each
  // still trains exactly its configured samples.
  ASSERT_EQ(final_manifest->reader_positions.size(), 2u);
  for (int64_t p : final_manifest->reader_positions) EXPECT_EQ(p, 150 * 128);
  EXPECT_TRUE(VerifyCheckpoint((*saved)[0]).ok());
  fs::remove_all(dir);
}

// data.epochs: a job stopped in its second (shuffled) epoch and resumed from its checkpoint
// lands on the same sample of the same epoch: it ends with the very model, byte for byte, of
// the job that trained both epochs without a stop. 190 training rows (every 20th of 200 held
// out), one worker, batches of 19: 10 steps per epoch; the stop is at step 13.
std::string EpochSpec(const std::string& name, int steps, const std::string& extra) {
  return "job:\n  name: " + name + "\n  steps: " + std::to_string(steps) +
         "\n  eval_samples: 10\n  token: e2e-token\n  synchronous: true\n" + extra +
         "cluster:\n  servers: 2\n  workers: 1\n  heartbeat_interval_ms: 100\n"
         "model:\n  embedding_dim: 8\n  bottom_mlp: [32, 8]\n  top_mlp: [32, 16]\n"
         "  table_rows: 500\n"
         "optimizer:\n  sparse: {type: adagrad, lr: 0.05}\n  dense: {type: adam, lr: 0.003}\n"
         "data:\n  source: criteo_tsv\n  paths: [" ECPS_TEST_DATA_DIR
         "/criteo_sample.tsv]\n"
         "  batch_size: 19\n  eval_fraction: 0.05\n  epochs: 2\n  shuffle: true\n"
         "  shuffle_block_lines: 32\n";
}

TEST(CheckpointEpochs, AJobResumedInTheSecondEpochEndsWithTheSameModel) {
  const fs::path root =
      fs::temp_directory_path() / ("ecps_ckpt_epochs_" + std::to_string(getpid()));
  fs::remove_all(root);
  std::string log;
  ASSERT_EQ(RunJob(root / "whole", EpochSpec("epochs-whole", 20, ""), &log), 0) << log;
  ASSERT_EQ(RunJob(root / "first", EpochSpec("epochs-first", 13, ""), &log), 0) << log;
  const fs::path stopped = root / "first" / "out" / "checkpoints" / "step-000000013";
  auto m = ReadManifest(stopped.string());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->reader_positions, std::vector<int64_t>{13 * 19}) << "3 steps into epoch 2";
  ASSERT_EQ(
      RunJob(root / "resumed",
             EpochSpec("epochs-resumed", 20, "  resume_from: " + stopped.string() + "\n"), &log),
      0)
      << log;
  const fs::path whole = root / "whole" / "out" / "checkpoints" / "step-000000020";
  const fs::path resumed = root / "resumed" / "out" / "checkpoints" / "step-000000020";
  auto a = ReadManifest(whole.string());
  auto b = ReadManifest(resumed.string());
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  // Two epochs train 2x the samples: 2 x 190.
  EXPECT_EQ(a->reader_positions, std::vector<int64_t>{2 * 190});
  EXPECT_EQ(b->reader_positions, a->reader_positions);
  EXPECT_EQ(b->table_checksums, a->table_checksums) << "the resumed job trained other samples";
  EXPECT_EQ(b->dense, a->dense);
  for (size_t t = 0; t < a->layout.dense_sizes.size(); ++t) {
    const std::string name = DenseFileName(static_cast<int>(t));
    EXPECT_TRUE(ReadFile(whole / name) == ReadFile(resumed / name)) << name << " differs";
  }
  const std::string worker = ReadFile(root / "whole" / "out" / "logs" / "worker-0.log");
  EXPECT_NE(worker.find("reading epoch 2/2"), std::string::npos) << worker;
  // The slowest worker's pass, as status and the report count it.
  const std::string report = ReadFile(root / "whole" / "out" / "report.json");
  EXPECT_NE(report.find("\"data_epoch\": 2,"), std::string::npos) << report;
  EXPECT_NE(report.find("\"data_epochs\": 2,"), std::string::npos) << report;
  fs::remove_all(root);
}

}  // namespace
}  // namespace ecps
