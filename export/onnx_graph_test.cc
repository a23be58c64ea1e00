// The ONNX graph is checked by evaluating it: a small interpreter of the operators the export
// uses runs the serialized model and must give Dlrm::Forward's probabilities. ONNX Runtime
// runs the same model end to end in tests/export_test.sh.
#include "export/onnx_graph.h"

#include <cmath>
#include <cstring>
#include <map>
#include <memory>

#include "gtest/gtest.h"
#include "kernels/dlrm.h"
#include "proto/onnx_subset.pb.h"

namespace ecps {
namespace {

struct Tensor {
  std::vector<int64_t> dims;
  std::vector<double> v;  // int64 values too (row ids and indices are small)
  int64_t size() const {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    return n;
  }
};

int64_t Attr(const onnx::NodeProto& n, const std::string& name, int64_t fallback) {
  for (const auto& a : n.attribute()) {
    if (a.name() == name) return a.i();
  }
  return fallback;
}

Tensor FromInitializer(const onnx::TensorProto& t) {
  Tensor out;
  out.dims.assign(t.dims().begin(), t.dims().end());
  const std::string& raw = t.raw_data();
  for (int64_t i = 0; i < out.size(); ++i) {
    if (t.data_type() == onnx::TensorProto::FLOAT) {
      float f;
      std::memcpy(&f, raw.data() + 4 * i, 4);
      out.v.push_back(f);
    } else {
      int64_t x;
      std::memcpy(&x, raw.data() + 8 * i, 8);
      out.v.push_back(static_cast<double>(x));
    }
  }
  return out;
}

// Rank-2 data, axis 0 or 1, scalar or 1-D indices.
Tensor Gather(const Tensor& data, const Tensor& idx, int64_t axis) {
  const int64_t rows = data.dims[0], cols = data.dims[1];
  Tensor out;
  if (axis == 0) {
    out.dims = {idx.size(), cols};
    for (double r : idx.v) {
      for (int64_t c = 0; c < cols; ++c)
        out.v.push_back(data.v[static_cast<int64_t>(r) * cols + c]);
    }
  } else {
    out.dims =
        idx.dims.empty() ? std::vector<int64_t>{rows} : std::vector<int64_t>{rows, idx.size()};
    for (int64_t r = 0; r < rows; ++r) {
      for (double c : idx.v) out.v.push_back(data.v[r * cols + static_cast<int64_t>(c)]);
    }
  }
  return out;
}

Tensor Gemm(const Tensor& a, const Tensor& w, const Tensor& b) {  // a [N,in], w [out,in]
  const int64_t n = a.dims[0], in = a.dims[1], out = w.dims[0];
  Tensor y{{n, out}, {}};
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t o = 0; o < out; ++o) {
      double s = b.v[o];
      for (int64_t k = 0; k < in; ++k) s += a.v[i * in + k] * w.v[o * in + k];
      y.v.push_back(s);
    }
  }
  return y;
}

Tensor Run(const onnx::NodeProto& n, const std::vector<const Tensor*>& in) {
  const std::string& op = n.op_type();
  Tensor y;
  if (op == "Gemm") {
    EXPECT_EQ(Attr(n, "transB", 0), 1);
    return Gemm(*in[0], *in[1], *in[2]);
  }
  if (op == "Relu" || op == "Sigmoid") {
    y = *in[0];
    for (double& x : y.v) x = op == "Relu" ? std::max(x, 0.0) : 1 / (1 + std::exp(-x));
    return y;
  }
  if (op == "Gather") return Gather(*in[0], *in[1], Attr(n, "axis", 0));
  if (op == "Concat") {  // rank 2, axis 1
    EXPECT_EQ(Attr(n, "axis", 0), 1);
    int64_t width = 0;
    for (const Tensor* t : in) width += t->dims[1];
    y.dims = {in[0]->dims[0], width};
    for (int64_t r = 0; r < y.dims[0]; ++r) {
      for (const Tensor* t : in) {
        y.v.insert(y.v.end(), t->v.begin() + r * t->dims[1], t->v.begin() + (r + 1) * t->dims[1]);
      }
    }
    return y;
  }
  if (op == "Reshape") {
    y = *in[0];
    y.dims.clear();
    int64_t known = 1;
    for (double d : in[1]->v) known *= d < 0 ? 1 : static_cast<int64_t>(d);
    for (double d : in[1]->v)
      y.dims.push_back(d < 0 ? in[0]->size() / known : static_cast<int64_t>(d));
    return y;
  }
  const int64_t b = in[0]->dims[0], r = in[0]->dims[1], c = in[0]->dims[2];
  if (op == "Transpose") {  // perm 0, 2, 1
    y.dims = {b, c, r};
    for (int64_t i = 0; i < b; ++i)
      for (int64_t j = 0; j < c; ++j)
        for (int64_t k = 0; k < r; ++k) y.v.push_back(in[0]->v[(i * r + k) * c + j]);
    return y;
  }
  EXPECT_EQ(op, "MatMul");  // [b, r, c] x [b, c, m]
  const int64_t m = in[1]->dims[2];
  y.dims = {b, r, m};
  for (int64_t i = 0; i < b; ++i)
    for (int64_t j = 0; j < r; ++j)
      for (int64_t k = 0; k < m; ++k) {
        double s = 0;
        for (int64_t q = 0; q < c; ++q)
          s += in[0]->v[(i * r + j) * c + q] * in[1]->v[(i * c + q) * m + k];
        y.v.push_back(s);
      }
  return y;
}

// Runs the model on `inputs`; external initializers come from `external` by name.
std::map<std::string, Tensor> Evaluate(const onnx::ModelProto& model,
                                       std::map<std::string, Tensor> values,
                                       const std::map<std::string, Tensor>& external) {
  for (const auto& t : model.graph().initializer()) {
    values[t.name()] = t.data_location() == onnx::TensorProto::EXTERNAL ? external.at(t.name())
                                                                        : FromInitializer(t);
  }
  for (const auto& n : model.graph().node()) {
    std::vector<const Tensor*> in;
    for (const auto& name : n.input()) in.push_back(&values.at(name));
    values[n.output(0)] = Run(n, in);
  }
  return values;
}

TEST(OnnxGraphTest, PairIndexIsEcpsInteractionOrder) {
  // T = 3: vectors 0..3; i = 1: (1,0); i = 2: (2,0), (2,1); i = 3: (3,0), (3,1), (3,2).
  EXPECT_EQ(InteractionPairIndex(3), (std::vector<int64_t>{4, 8, 9, 12, 13, 14}));
  EXPECT_EQ(OnnxTableName(7), "table_007");
}

class OnnxModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config_ = {3, 4, 5, {7, 5}, {6}};
    shape_ = {3, 5, {11, 3, 9, 2}, {7, 5}, {6}};
    auto dlrm = Dlrm::Create(config_, kBatch);
    ASSERT_TRUE(dlrm.ok()) << dlrm.status();
    dlrm_ = std::move(*dlrm);
    dlrm_->InitDense(17, &dense_);
    for (auto& t : dense_) {  // non-zero biases too
      for (size_t i = 0; i < t.size(); ++i) t[i] += 0.01f * static_cast<float>((i * 7) % 5);
    }
    for (int t = 0; t < 4; ++t) {
      Tensor table{{shape_.table_rows[t], 5}, {}};
      for (int64_t i = 0; i < table.size(); ++i) table.v.push_back(std::sin(0.37 * i + t));
      tables_.push_back(table);
      where_.push_back({"embeddings.safetensors", 1000 * t, table.size() * 4});
    }
  }

  static constexpr int kBatch = 9;
  DlrmConfig config_;
  DlrmShape shape_;
  std::unique_ptr<Dlrm> dlrm_;
  std::vector<std::vector<float>> dense_;
  std::vector<Tensor> tables_;
  std::vector<ExternalTable> where_;
};

TEST_F(OnnxModelTest, DescribesInputsOutputsAndExternalTables) {
  auto bytes = BuildDlrmOnnx(shape_, dense_, where_);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  onnx::ModelProto model;
  ASSERT_TRUE(model.ParseFromString(*bytes));
  EXPECT_EQ(model.ir_version(), kOnnxIrVersion);
  EXPECT_EQ(model.opset_import(0).version(), kOnnxOpset);
  ASSERT_EQ(model.graph().input_size(), 2);
  EXPECT_EQ(model.graph().input(0).name(), "dense");
  EXPECT_EQ(model.graph().input(1).name(), "sparse_rows");
  EXPECT_EQ(model.graph().input(1).type().tensor_type().elem_type(), onnx::TensorProto::INT64);
  EXPECT_EQ(model.graph().input(1).type().tensor_type().shape().dim(1).dim_value(), 4);
  EXPECT_EQ(model.graph().output(1).name(), "probability");
  int external = 0;
  for (const auto& t : model.graph().initializer()) {
    if (t.data_location() != onnx::TensorProto::EXTERNAL) continue;
    const int table = external++;
    EXPECT_EQ(t.name(), OnnxTableName(table));
    EXPECT_EQ(t.dims(0), shape_.table_rows[table]);
    EXPECT_EQ(t.external_data(0).value(), "embeddings.safetensors");
    EXPECT_EQ(t.external_data(1).value(), std::to_string(1000 * table));
    EXPECT_EQ(t.external_data(2).value(), std::to_string(shape_.table_rows[table] * 5 * 4));
  }
  EXPECT_EQ(external, 4);
}

TEST_F(OnnxModelTest, EvaluatesToDlrmForward) {
  auto bytes = BuildDlrmOnnx(shape_, dense_, where_);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  onnx::ModelProto model;
  ASSERT_TRUE(model.ParseFromString(*bytes));
  Tensor dense{{kBatch, 3}, {}}, rows{{kBatch, 4}, {}};
  std::vector<float> dense_x, pooled;
  for (int b = 0; b < kBatch; ++b) {
    for (int j = 0; j < 3; ++j) dense_x.push_back(std::cos(1.3 * b + j));
    for (int t = 0; t < 4; ++t) {
      const int64_t r = (b * 5 + t * 3) % shape_.table_rows[t];
      rows.v.push_back(static_cast<double>(r));
      for (int k = 0; k < 5; ++k) pooled.push_back(static_cast<float>(tables_[t].v[r * 5 + k]));
    }
  }
  dense.v.assign(dense_x.begin(), dense_x.end());
  std::map<std::string, Tensor> external;
  for (int t = 0; t < 4; ++t) external[OnnxTableName(t)] = tables_[t];
  auto values = Evaluate(model, {{"dense", dense}, {"sparse_rows", rows}}, external);

  std::vector<const float*> params;
  for (const auto& t : dense_) params.push_back(t.data());
  std::vector<float> probs(kBatch);
  dlrm_->Forward(kBatch, dense_x.data(), pooled.data(), params, probs.data());
  const Tensor& p = values.at("probability");
  ASSERT_EQ(p.dims, (std::vector<int64_t>{kBatch, 1}));
  double max_diff = 0;
  for (int b = 0; b < kBatch; ++b) max_diff = std::max(max_diff, std::abs(p.v[b] - probs[b]));
  EXPECT_LT(max_diff, 1e-6);
  const Tensor& logit = values.at("logit");
  EXPECT_GT(std::abs(logit.v[0] - logit.v[1]), 1e-3);  // the samples differ: a real check
}

TEST_F(OnnxModelTest, RefusesTensorsThatDoNotFitTheShape) {
  auto wrong = dense_;
  wrong[2].pop_back();
  EXPECT_EQ(BuildDlrmOnnx(shape_, wrong, where_).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto few = where_;
  few.pop_back();
  EXPECT_FALSE(BuildDlrmOnnx(shape_, dense_, few).ok());
}

TEST(DlrmShapeTest, ReadsTheShapeBackFromTensorSizes) {
  const DlrmConfig config{13, 3, 4, {16, 8, 4}, {32, 16}};
  CheckpointLayout layout;
  layout.dim = 4;
  layout.table_rows = {5, 6, 7};
  layout.dense_sizes = DenseTensorSizes(config);
  auto shape = ShapeFromLayout(layout);
  ASSERT_TRUE(shape.ok()) << shape.status();
  EXPECT_EQ(shape->num_dense, 13);
  EXPECT_EQ(shape->bottom_mlp, config.bottom_mlp);
  EXPECT_EQ(shape->top_mlp, config.top_mlp);
  EXPECT_EQ(shape->top_in(), 4 + 6);

  layout.table_rows = {5, 6};  // the top MLP no longer takes dim + pairs inputs
  EXPECT_EQ(ShapeFromLayout(layout).status().code(), absl::StatusCode::kFailedPrecondition);
  layout.table_rows = {5, 6, 7};
  layout.dense_sizes.pop_back();
  EXPECT_FALSE(ShapeFromLayout(layout).ok());
}

}  // namespace
}  // namespace ecps
