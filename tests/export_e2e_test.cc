// `ecps export` end to end (label export): a model trained in-process (LocalTrainer, the
// reference the distributed job is tested equal to) is saved as a checkpoint, the real `ecps`
// binary exports it, and ONNX Runtime (tests/export/run_onnx.js, onnxruntime-node) runs the
// exported model with its safetensors tables on 1,000 held-out samples: every probability
// must be ecps' own to 1e-5. Python's ONNX checker (Debian's python3-onnx) checks the model
// when it is installed. Skipped, saying why, without node or the npm module
// (deploy/setup.sh --tests installs both).
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "checkpoint/checkpoint.h"
#include "checkpoint/layout.h"
#include "gtest/gtest.h"
#include "tests/spawn.h"
#include "worker/local_trainer.h"

namespace ecps {
namespace {

namespace fs = std::filesystem;

constexpr int kSamples = 1000;

struct RunResult {
  int exit_code = -1;
  std::string output;
};

RunResult RunProgram(const std::vector<std::string>& argv, const fs::path& log) {
  const pid_t pid = testing_process::SpawnLogged(argv, log, /*die_with_test=*/true);
  int status = 0;
  waitpid(pid, &status, 0);
  std::ifstream in(log);
  std::stringstream text;
  text << in.rdbuf();
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, text.str()};
}

JobSpec TinyJob() {
  JobSpec s;
  s.job.name = "export-e2e";
  s.job.seed = 7;
  s.job.eval_samples = kSamples;
  s.model.embedding_dim = 8;
  s.model.bottom_mlp = {16, 8};
  s.model.top_mlp = {32, 16};
  s.model.table_rows.assign(26, 400);
  s.data.batch_size = 128;
  s.optimizer.sparse.type = SparseOptimizerType::kAdagrad;
  s.optimizer.sparse.lr = 0.05f;
  s.optimizer.dense.type = DenseOptimizerType::kAdam;
  s.optimizer.dense.lr = 0.003f;
  return s;
}

// Saves the trainer's whole state as a checkpoint under `root`; returns its directory.
std::string SaveCheckpoint(const JobSpec& spec, const LocalTrainer& trainer,
                           const std::string& root) {
  auto layout = CheckpointLayoutFor(spec, trainer.steps());
  EXPECT_TRUE(layout.ok()) << layout.status();
  auto tmp = BeginCheckpoint(root, *layout);
  EXPECT_TRUE(tmp.ok()) << tmp.status();
  std::vector<uint64_t> checksums;
  for (size_t t = 0; t < layout->table_rows.size(); ++t) {
    auto writer = TableWriter::Open(*tmp, t, layout->table_rows[t], layout->payload_floats);
    EXPECT_TRUE(writer.ok()) << writer.status();
    for (int64_t r = 0; r < layout->table_rows[t]; ++r) {
      EXPECT_TRUE((*writer)->WriteRows(&r, trainer.row_payload(t, r), 1).ok());
    }
    EXPECT_TRUE((*writer)->Finish().ok());
    checksums.push_back((*writer)->checksum());
  }
  std::vector<DenseEntry> dense;
  for (size_t i = 0; i < layout->dense_sizes.size(); ++i) {
    auto entry =
        WriteDense(*tmp, i, trainer.steps(), trainer.dense_tensor(i), trainer.dense_state(i));
    EXPECT_TRUE(entry.ok()) << entry.status();
    dense.push_back(*entry);
  }
  std::string dir;
  EXPECT_TRUE(CommitCheckpoint(*tmp, *layout, checksums, dense, {trainer.samples()}, &dir).ok());
  return dir;
}

template <typename T>
void WriteRaw(const fs::path& path, const std::vector<T>& v) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

class ExportE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const fs::path source(ECPS_SOURCE_DIR);
    script_ = (source / "tests/export/run_onnx.js").string();
    work_ = fs::temp_directory_path() / ("ecps-export-e2e-" + std::to_string(getpid()));
    fs::remove_all(work_);
    fs::create_directories(work_);
    if (RunProgram({"/usr/bin/env", "node", "--version"}, work_ / "node.log").exit_code != 0) {
      GTEST_SKIP() << "node is not installed (deploy/setup.sh --tests installs it)";
    }
    if (!fs::exists(source / "tests/export/node_modules/onnxruntime-node/package.json")) {
      GTEST_SKIP() << "tests/export/node_modules/onnxruntime-node is missing "
                      "(deploy/setup.sh --tests installs it)";
    }
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(work_);
  }

  std::string script_;
  fs::path work_;
};

TEST_F(ExportE2eTest, OnnxRuntimeGivesEcpsProbabilities) {
  const JobSpec spec = TinyJob();
  auto trainer = LocalTrainer::Create(spec);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  ASSERT_TRUE((*trainer)->Train(150).ok());
  const std::string ckpt = SaveCheckpoint(spec, **trainer, (work_ / "checkpoints").string());
  ASSERT_FALSE(ckpt.empty());

  const fs::path out = work_ / "export";
  RunResult exported =
      RunProgram({ECPS_BINARY, "export", ckpt, "-o", out.string()}, work_ / "export.log");
  ASSERT_EQ(exported.exit_code, 0) << exported.output;

  auto eval = MakeDataSource(spec.data, spec.model, spec.job.seed, 0, 1, /*eval=*/true, kSamples);
  ASSERT_TRUE(eval.ok()) << eval.status();
  Batch batch;
  ASSERT_TRUE((*eval)->Next(kSamples, &batch).ok());
  ASSERT_EQ(batch.size, kSamples);
  std::vector<float> expected;
  (*trainer)->Predict(batch, &expected);
  WriteRaw(work_ / "dense.f32", batch.dense);
  WriteRaw(work_ / "rows.i64", batch.sparse);

  RunResult onnx = RunProgram({"/usr/bin/env", "node", script_, out.string(), work_.string()},
                              work_ / "run_onnx.log");
  ASSERT_EQ(onnx.exit_code, 0) << onnx.output;
  std::printf("%s", onnx.output.c_str());
  std::vector<float> got(kSamples);
  std::ifstream in(work_ / "onnx_probabilities.f32", std::ios::binary);
  in.read(reinterpret_cast<char*>(got.data()), kSamples * sizeof(float));
  ASSERT_EQ(in.gcount(), static_cast<std::streamsize>(kSamples * sizeof(float)));
  double max_diff = 0, spread = 0;
  for (int i = 0; i < kSamples; ++i) {
    max_diff = std::max(max_diff, std::abs(static_cast<double>(got[i]) - expected[i]));
    spread = std::max(spread, std::abs(static_cast<double>(expected[i]) - expected[0]));
  }
  std::printf(
      "export: %d held-out samples, max abs difference ONNX Runtime vs ecps %.3g "
      "(probabilities spread over %.3f)\n",
      kSamples, max_diff, spread);
  EXPECT_LE(max_diff, 1e-5);
  EXPECT_GT(spread, 0.1);  // a trained model: the comparison is not between constants
}

TEST_F(ExportE2eTest, PythonOnnxCheckerAcceptsTheModel) {
  if (RunProgram({"/usr/bin/python3", "-c", "import onnx"}, work_ / "py.log").exit_code != 0) {
    GTEST_SKIP() << "python3-onnx is not installed (deploy/setup.sh --tests installs it)";
  }
  JobSpec spec = TinyJob();
  spec.model.table_rows.assign(26, 50);
  auto trainer = LocalTrainer::Create(spec);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  const std::string ckpt = SaveCheckpoint(spec, **trainer, (work_ / "checkpoints").string());
  const fs::path out = work_ / "export";
  ASSERT_EQ(RunProgram({ECPS_BINARY, "export", ckpt, "-o", out.string(), "--with-optimizer-state"},
                       work_ / "export.log")
                .exit_code,
            0);
  RunResult checked = RunProgram({"/usr/bin/python3", "-c",
                                  "import onnx, sys; onnx.checker.check_model(sys.argv[1], "
                                  "full_check=True); print('onnx checker: ok')",
                                  (out / "model.onnx").string()},
                                 work_ / "checker.log");
  EXPECT_EQ(checked.exit_code, 0) << checked.output;
}

}  // namespace
}  // namespace ecps
