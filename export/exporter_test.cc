#include "export/exporter.h"

#include <cstring>
#include <filesystem>

#include "checkpoint/checkpoint_test_util.h"
#include "export/export_manifest.h"
#include "kernels/dense_math.h"
#include "kernels/row_hash.h"
#include "nlohmann/json.hpp"
#include "proto/onnx_subset.pb.h"

namespace ecps {
namespace {

namespace fs = std::filesystem;

class ExporterTest : public CheckpointTest {
 protected:
  static CheckpointLayout DlrmLayout() {
    CheckpointLayout l;
    l.job = "export-test";
    l.step = 42;
    l.dim = 4;
    l.payload_floats = 8;  // adagrad
    l.sparse_optimizer = "adagrad";
    l.dense_optimizer = "adam";
    l.table_rows = {10000, 7};  // table 0 spans two read blocks
    l.dense_sizes = DenseTensorSizes({3, 2, 4, {6, 4}, {5}});
    for (int64_t s : l.dense_sizes) l.dense_state_floats.push_back(2 * s);
    return l;
  }

  // The data of safetensors tensor `name` in `file`, as floats.
  static std::vector<float> TensorData(const std::string& file, const std::string& name) {
    uint64_t n = 0;
    std::memcpy(&n, file.data(), 8);
    nlohmann::json h = nlohmann::json::parse(file.substr(8, n));
    const int64_t begin = h[name]["data_offsets"][0], end = h[name]["data_offsets"][1];
    std::vector<float> v((end - begin) / 4);
    std::memcpy(v.data(), file.data() + 8 + n + begin, end - begin);
    return v;
  }
};

TEST_F(ExporterTest, WritesTablesModelAndManifest) {
  const CheckpointLayout l = DlrmLayout();
  const std::string ckpt = WriteCheckpoint(l);
  const std::string out = root_ + "/export";
  auto summary = ExportCheckpoint(root_, out, {});  // the root: its newest checkpoint
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->checkpoint_dir, ckpt);
  EXPECT_EQ(summary->step, 42);
  EXPECT_FALSE(fs::exists(out + ".partial"));
  EXPECT_FALSE(fs::exists(out + "/" + kExportDenseStateName));

  const std::string tables = ReadText(out + "/" + kExportTablesName);
  for (int t = 0; t < 2; ++t) {
    const std::vector<float> w = TensorData(tables, TableWeightsTensor(t));
    ASSERT_EQ(w.size(), static_cast<size_t>(l.table_rows[t] * 4));
    for (int64_t r : {int64_t{0}, int64_t{6}, l.table_rows[t] - 1}) {
      const std::vector<float> p = Payload(t, r, 8);
      EXPECT_EQ(std::vector<float>(w.begin() + r * 4, w.begin() + r * 4 + 4),
                std::vector<float>(p.begin(), p.begin() + 4))
          << "table " << t << " row " << r;
    }
  }
  onnx::ModelProto model;
  ASSERT_TRUE(model.ParseFromString(ReadText(out + "/" + kExportOnnxName)));
  EXPECT_EQ(model.graph().initializer(0).name(), "bottom.0.weight");

  nlohmann::json m = nlohmann::json::parse(ReadText(out + "/" + kExportManifestName));
  EXPECT_EQ(m["format"], "ecps-export");
  EXPECT_EQ(m["step"], 42);
  EXPECT_EQ(m["model"]["bottom_mlp"], nlohmann::json({6, 4}));
  EXPECT_EQ(m["model"]["top_mlp"], nlohmann::json({5, 1}));
  EXPECT_EQ(m["model"]["table_rows"], nlohmann::json({10000, 7}));
  EXPECT_EQ(m["row_mapping"]["hash"], kCategoricalRowHashName);
  EXPECT_EQ(m["row_mapping"]["examples"][1]["row"], CategoricalRow(0x05db9164, 0, 10000));
  EXPECT_EQ(m["onnx"]["inputs"][1]["name"], "sparse_rows");
  EXPECT_FALSE(m["embeddings"]["tables"][0].contains("optimizer_state"));
}

TEST_F(ExporterTest, WithOptimizerStateWritesTheStateToo) {
  const CheckpointLayout l = DlrmLayout();
  WriteCheckpoint(l);
  const std::string out = root_ + "/export";
  ASSERT_TRUE(ExportCheckpoint(root_, out, {.with_optimizer_state = true}).ok());
  const std::string tables = ReadText(out + "/" + kExportTablesName);
  const std::vector<float> s = TensorData(tables, TableStateTensor(1));
  const std::vector<float> p = Payload(1, 3, 8);
  EXPECT_EQ(std::vector<float>(s.begin() + 12, s.begin() + 16),
            std::vector<float>(p.begin() + 4, p.end()));
  const std::string dense = ReadText(out + "/" + kExportDenseStateName);
  EXPECT_EQ(TensorData(dense, "top.1.bias.optimizer_state"),
            DenseValues(7, l.dense_state_floats[7], -2.0f));  // tensor 7: top.1.bias
  nlohmann::json m = nlohmann::json::parse(ReadText(out + "/" + kExportManifestName));
  EXPECT_EQ(m["embeddings"]["tables"][1]["optimizer_state"], TableStateTensor(1));
}

TEST_F(ExporterTest, RefusesMissingDamagedOrForeignInput) {
  EXPECT_EQ(ExportCheckpoint(root_ + "/nothing", root_ + "/out", {}).status().code(),
            absl::StatusCode::kNotFound);
  const std::string ckpt = WriteCheckpoint(DlrmLayout());
  fs::create_directories(root_ + "/full");
  WriteText(root_ + "/full/x", "x");
  absl::Status full = ExportCheckpoint(ckpt, root_ + "/full", {}).status();
  EXPECT_EQ(full.code(), absl::StatusCode::kFailedPrecondition) << full;
  EXPECT_NE(full.message().find("not empty"), absl::string_view::npos) << full;
  fs::create_directories(root_ + "/empty");  // an empty folder is fine
  EXPECT_TRUE(ExportCheckpoint(ckpt, root_ + "/empty", {}).ok());

  FlipByte(ckpt + "/" + TableFileName(0), 123);
  absl::Status damaged = ExportCheckpoint(ckpt, root_ + "/out", {}).status();
  EXPECT_EQ(damaged.code(), absl::StatusCode::kDataLoss) << damaged;
  EXPECT_NE(damaged.message().find("table-000.rows"), absl::string_view::npos) << damaged;
  EXPECT_FALSE(fs::exists(root_ + "/out"));
}

TEST_F(ExporterTest, RefusesACheckpointThatIsNoDlrm) {
  CheckpointLayout l = SmallLayout(3);  // dense sizes 10 and 3: no layer
  absl::Status s = ExportCheckpoint(WriteCheckpoint(l), root_ + "/out", {}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
}

}  // namespace
}  // namespace ecps
