#include "export/onnx_graph.h"

#include <bit>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "proto/onnx_subset.pb.h"

namespace ecps {

static_assert(std::endian::native == std::endian::little,
              "ONNX raw_data is little-endian; this build copies memory as it is");

namespace {

using onnx::AttributeProto;
using onnx::NodeProto;
using onnx::TensorProto;

// Appends the nodes, initializers, inputs and outputs of one graph.
class GraphBuilder {
 public:
  explicit GraphBuilder(onnx::GraphProto* graph) : graph_(graph) {}

  void FloatInitializer(const std::string& name, const std::vector<int64_t>& dims,
                        const std::vector<float>& values) {
    TensorProto* t = NewInitializer(name, dims, TensorProto::FLOAT);
    t->set_raw_data(values.data(), values.size() * sizeof(float));
  }
  void Int64Initializer(const std::string& name, const std::vector<int64_t>& dims,
                        const std::vector<int64_t>& values) {
    TensorProto* t = NewInitializer(name, dims, TensorProto::INT64);
    t->set_raw_data(values.data(), values.size() * sizeof(int64_t));
  }
  void ExternalInitializer(const std::string& name, const std::vector<int64_t>& dims,
                           const ExternalTable& where) {
    TensorProto* t = NewInitializer(name, dims, TensorProto::FLOAT);
    t->set_data_location(TensorProto::EXTERNAL);
    auto add = [t](const std::string& key, const std::string& value) {
      onnx::StringStringEntryProto* e = t->add_external_data();
      e->set_key(key);
      e->set_value(value);
    };
    add("location", where.location);
    add("offset", std::to_string(where.offset));
    add("length", std::to_string(where.bytes));
  }

  NodeProto* Node(const std::string& op, const std::vector<std::string>& inputs,
                  const std::string& output) {
    NodeProto* n = graph_->add_node();
    n->set_op_type(op);
    n->set_name(output);
    for (const std::string& in : inputs) n->add_input(in);
    n->add_output(output);
    return n;
  }
  static void IntAttribute(NodeProto* n, const std::string& name, int64_t value) {
    AttributeProto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(AttributeProto::INT);
    a->set_i(value);
  }
  static void IntsAttribute(NodeProto* n, const std::string& name,
                            const std::vector<int64_t>& values) {
    AttributeProto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(AttributeProto::INTS);
    for (int64_t v : values) a->add_ints(v);
  }

  // A graph input or output: a tensor of `elem_type` with a symbolic batch "N" first.
  void Value(bool input, const std::string& name, int elem_type, int64_t width) {
    onnx::ValueInfoProto* v = input ? graph_->add_input() : graph_->add_output();
    v->set_name(name);
    onnx::TypeProto::Tensor* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(elem_type);
    t->mutable_shape()->add_dim()->set_dim_param("N");
    t->mutable_shape()->add_dim()->set_dim_value(width);
  }

 private:
  TensorProto* NewInitializer(const std::string& name, const std::vector<int64_t>& dims, int type) {
    TensorProto* t = graph_->add_initializer();
    t->set_name(name);
    t->set_data_type(type);
    for (int64_t d : dims) t->add_dims(d);
    return t;
  }

  onnx::GraphProto* graph_;
};

// "bottom.0.weight", "top.2.bias": Dlrm's names of layer `index`'s tensors.
std::string DenseName(int bottom_layers, int index, bool bias) {
  const bool bottom = index < bottom_layers;
  return absl::StrCat(bottom ? "bottom." : "top.", bottom ? index : index - bottom_layers,
                      bias ? ".bias" : ".weight");
}

// Gemm (+ Relu) per layer of [first, last) from `x`; returns the last output's name.
std::string Mlp(GraphBuilder* g, const std::vector<DlrmLayer>& layers, int first, int last,
                int bottom_layers, std::string x) {
  for (int i = first; i < last; ++i) {
    const DlrmLayer& l = layers[i];
    const std::string w = DenseName(bottom_layers, i, false);
    const std::string b = DenseName(bottom_layers, i, true);
    const std::string base = w.substr(0, w.size() - 7);  // "bottom.0"
    NodeProto* gemm = g->Node("Gemm", {x, w, b}, l.relu ? base + ".linear" : kOnnxLogitOutput);
    GraphBuilder::IntAttribute(gemm, "transB", 1);
    x = gemm->output(0);
    if (l.relu) x = g->Node("Relu", {x}, base + ".relu")->output(0);
  }
  return x;
}

absl::Status CheckInputs(const DlrmShape& shape, const std::vector<DlrmLayer>& layers,
                         const std::vector<std::vector<float>>& dense,
                         const std::vector<ExternalTable>& tables) {
  if (dense.size() != 2 * layers.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("onnx: ", dense.size(), " dense tensors for ", layers.size(), " layers"));
  }
  for (const DlrmLayer& l : layers) {
    if (dense[l.weight].size() != static_cast<size_t>(l.in) * l.out ||
        dense[l.weight + 1].size() != static_cast<size_t>(l.out)) {
      return absl::InvalidArgumentError(absl::StrCat("onnx: dense tensors ", l.weight, ", ",
                                                     l.weight + 1, " are not a ", l.in, " x ",
                                                     l.out, " layer"));
    }
  }
  if (tables.size() != shape.table_rows.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("onnx: ", tables.size(), " tables for ", shape.table_rows.size()));
  }
  for (size_t t = 0; t < tables.size(); ++t) {
    if (tables[t].bytes != shape.table_rows[t] * shape.dim * 4) {
      return absl::InvalidArgumentError(
          absl::StrCat("onnx: table ", t, " has ", tables[t].bytes, " bytes, not rows x dim x 4"));
    }
  }
  return absl::OkStatus();
}

// The lookups, the interaction and the top input [N, dim + pairs]; returns its name.
std::string Interaction(GraphBuilder* g, const DlrmShape& shape, const std::string& z0) {
  const int T = shape.num_sparse();
  std::vector<std::string> vectors = {z0};
  for (int t = 0; t < T; ++t) {
    const std::string column = absl::StrCat("sparse_rows.", t);
    g->Int64Initializer(column + ".index", {}, {t});
    GraphBuilder::IntAttribute(g->Node("Gather", {kOnnxRowsInput, column + ".index"}, column),
                               "axis", 1);
    g->Node("Gather", {OnnxTableName(t), column}, absl::StrCat("embedding.", t));
    vectors.push_back(absl::StrCat("embedding.", t));
  }
  GraphBuilder::IntAttribute(g->Node("Concat", vectors, "interaction.flat"), "axis", 1);
  g->Int64Initializer("interaction.shape", {3}, {-1, T + 1, shape.dim});
  g->Node("Reshape", {"interaction.flat", "interaction.shape"}, "interaction.vectors");
  GraphBuilder::IntsAttribute(
      g->Node("Transpose", {"interaction.vectors"}, "interaction.vectors_t"), "perm", {0, 2, 1});
  g->Node("MatMul", {"interaction.vectors", "interaction.vectors_t"}, "interaction.all_dots");
  g->Int64Initializer("interaction.dots_shape", {2}, {-1, (T + 1) * (T + 1)});
  g->Node("Reshape", {"interaction.all_dots", "interaction.dots_shape"}, "interaction.dots_flat");
  const std::vector<int64_t> pairs = InteractionPairIndex(T);
  g->Int64Initializer("interaction.pairs", {static_cast<int64_t>(pairs.size())}, pairs);
  GraphBuilder::IntAttribute(
      g->Node("Gather", {"interaction.dots_flat", "interaction.pairs"}, "interaction.dots"), "axis",
      1);
  GraphBuilder::IntAttribute(g->Node("Concat", {z0, "interaction.dots"}, "top.input"), "axis", 1);
  return "top.input";
}

}  // namespace

std::string OnnxTableName(int table) {
  char name[32];
  std::snprintf(name, sizeof(name), "table_%03d", table);
  return name;
}

std::vector<int64_t> InteractionPairIndex(int num_sparse) {
  std::vector<int64_t> index;
  for (int i = 1; i <= num_sparse; ++i) {
    for (int j = 0; j < i; ++j) index.push_back(static_cast<int64_t>(i) * (num_sparse + 1) + j);
  }
  return index;
}

absl::StatusOr<std::string> BuildDlrmOnnx(const DlrmShape& shape,
                                          const std::vector<std::vector<float>>& dense,
                                          const std::vector<ExternalTable>& tables) {
  const std::vector<DlrmLayer> layers = DlrmLayers(shape);
  if (absl::Status s = CheckInputs(shape, layers, dense, tables); !s.ok()) return s;
  onnx::ModelProto model;
  model.set_ir_version(kOnnxIrVersion);
  model.add_opset_import()->set_version(kOnnxOpset);
  model.set_producer_name("ecps");
  model.set_doc_string("DLRM exported by `ecps export` (docs/model.md, \"Exporting a model\")");
  onnx::GraphProto* graph = model.mutable_graph();
  graph->set_name("dlrm");
  GraphBuilder g(graph);
  g.Value(true, kOnnxDenseInput, TensorProto::FLOAT, shape.num_dense);
  g.Value(true, kOnnxRowsInput, TensorProto::INT64, shape.num_sparse());
  g.Value(false, kOnnxLogitOutput, TensorProto::FLOAT, 1);
  g.Value(false, kOnnxProbabilityOutput, TensorProto::FLOAT, 1);
  const int bottom = static_cast<int>(shape.bottom_mlp.size());
  for (int i = 0; i < static_cast<int>(layers.size()); ++i) {
    const DlrmLayer& l = layers[i];
    g.FloatInitializer(DenseName(bottom, i, false), {l.out, l.in}, dense[l.weight]);
    g.FloatInitializer(DenseName(bottom, i, true), {l.out}, dense[l.weight + 1]);
  }
  for (int t = 0; t < shape.num_sparse(); ++t) {
    g.ExternalInitializer(OnnxTableName(t), {shape.table_rows[t], shape.dim}, tables[t]);
  }
  const std::string z0 = Mlp(&g, layers, 0, bottom, bottom, kOnnxDenseInput);
  const std::string top_in = Interaction(&g, shape, z0);
  Mlp(&g, layers, bottom, static_cast<int>(layers.size()), bottom, top_in);
  g.Node("Sigmoid", {kOnnxLogitOutput}, kOnnxProbabilityOutput);
  std::string bytes;
  if (!model.SerializeToString(&bytes)) return absl::InternalError("onnx: serialization failed");
  return bytes;
}

}  // namespace ecps
