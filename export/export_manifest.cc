#include "export/export_manifest.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "export/onnx_graph.h"
#include "kernels/row_hash.h"
#include "nlohmann/json.hpp"

namespace ecps {
namespace {

using Json = nlohmann::ordered_json;

std::string Hex64(uint64_t v) {
  char text[24];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(v));
  return text;
}

Json ModelJson(const DlrmShape& s) {
  std::vector<int> top = s.top_mlp;
  top.push_back(1);
  return Json{
      {"architecture", "dlrm"},
      {"num_dense", s.num_dense},
      {"num_sparse", s.num_sparse()},
      {"embedding_dim", s.dim},
      {"table_rows", s.table_rows},
      {"bottom_mlp", s.bottom_mlp},
      {"bottom_activation", "relu after every layer"},
      {"interaction",
       "dot: vectors v_0 = bottom output, v_t = embedding of table t-1; the dots <v_i, v_j> "
       "for i = 1..num_sparse, j = 0..i-1 in that order, appended to v_0"},
      {"top_input", s.top_in()},
      {"top_mlp", top},
      {"top_activation", "relu after every layer but the last (the logit)"},
      {"output", "probability = sigmoid(logit)"},
      {"dense_transform", "the raw dense features x become log(1 + max(x, 0)) before the model"}};
}

Json RowMappingJson(const DlrmShape& s) {
  Json salts = Json::array();
  for (int t = 0; t < s.num_sparse(); ++t) salts.push_back(Hex64(CategoricalRowSalt(t)));
  Json examples = Json::array();
  for (const RowMappingExample& e : RowMappingExamples(s)) {
    examples.push_back({{"table", e.table}, {"raw", e.raw_hex}, {"row", e.row}});
  }
  return Json{
      {"hash", kCategoricalRowHashName},
      {"applies_to",
       "criteo_tsv and criteo_csv data: categorical columns C1..C26 (table t = column C(t+1)); "
       "the synthetic source's ids are rows already"},
      {"raw", "the column's hexadecimal text (at most 16 digits) as an unsigned 64-bit integer"},
      {"missing_row", 0},
      {"row",
       "1 + H(salt[t], raw) mod (table_rows[t] - 1); 0 when the value is missing or "
       "table_rows[t] == 1"},
      {"H", "H(s, x) = mix64(mix64(s) ^ (x + 0x632be59bd9b4e019 + (s << 6)))"},
      {"mix64",
       "x += 0x9e3779b97f4a7c15; x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9; "
       "x = (x ^ (x >> 27)) * 0x94d049bb133111eb; return x ^ (x >> 31)"},
      {"arithmetic", "unsigned 64-bit, modulo 2^64; the salts are 16 hex digits"},
      {"salt", salts},
      {"examples", examples}};
}

Json TensorInfo(const std::string& name, const std::string& dtype, int width) {
  return Json{{"name", name}, {"dtype", dtype}, {"shape", Json{"N", width}}};
}

Json OnnxJson(const DlrmShape& s) {
  return Json{{"file", kExportOnnxName},
              {"ir_version", kOnnxIrVersion},
              {"opset", kOnnxOpset},
              {"inputs", Json{TensorInfo(kOnnxDenseInput, "float32", s.num_dense),
                              TensorInfo(kOnnxRowsInput, "int64", s.num_sparse())}},
              {"outputs", Json{TensorInfo(kOnnxLogitOutput, "float32", 1),
                               TensorInfo(kOnnxProbabilityOutput, "float32", 1)}},
              {"tables", absl::StrCat("initializers table_TTT [rows, dim], ONNX external data in ",
                                      kExportTablesName, " (load the model from this folder)")}};
}

Json TablesJson(const ExportDescription& d) {
  Json tables = Json::array();
  for (int t = 0; t < d.shape.num_sparse(); ++t) {
    Json entry{{"table", t}, {"rows", d.shape.table_rows[t]}, {"weights", TableWeightsTensor(t)}};
    if (d.with_optimizer_state && d.sparse_state_floats > 0) {
      entry["optimizer_state"] = TableStateTensor(t);
    }
    tables.push_back(entry);
  }
  return Json{{"file", kExportTablesName},
              {"dtype", "F32"},
              {"weights_shape", "[rows, embedding_dim]"},
              {"sparse_optimizer", d.sparse_optimizer},
              {"optimizer_state_floats_per_row", d.sparse_state_floats},
              {"optimizer_state_included", d.with_optimizer_state},
              {"tables", tables}};
}

}  // namespace

std::string TableWeightsTensor(int table) { return OnnxTableName(table); }
std::string TableStateTensor(int table) { return OnnxTableName(table) + ".optimizer_state"; }
std::string DenseStateTensor(const std::string& dense_name) {
  return dense_name + ".optimizer_state";
}

std::vector<RowMappingExample> RowMappingExamples(const DlrmShape& shape) {
  std::vector<RowMappingExample> out;
  const uint64_t raws[] = {0x0ull, 0x05db9164ull, 0xffffffffffffffffull};
  for (int t : {0, shape.num_sparse() - 1}) {
    for (uint64_t raw : raws) {
      out.push_back({t, Hex64(raw), CategoricalRow(raw, t, shape.table_rows[t])});
    }
    if (shape.num_sparse() == 1) break;
  }
  return out;
}

std::string ExportManifestJson(const ExportDescription& d) {
  Json j{{"format", "ecps-export"},
         {"format_version", kExportFormatVersion},
         {"job", d.job},
         {"step", d.step},
         {"model", ModelJson(d.shape)},
         {"onnx", OnnxJson(d.shape)},
         {"embeddings", TablesJson(d)},
         {"row_mapping", RowMappingJson(d.shape)}};
  if (d.with_optimizer_state) {
    Json names = Json::array();
    for (const std::string& n : d.dense_names) names.push_back(DenseStateTensor(n));
    j["dense_optimizer_state"] = {{"file", kExportDenseStateName},
                                  {"dense_optimizer", d.dense_optimizer},
                                  {"tensors", names}};
  }
  return j.dump(2) + "\n";
}

}  // namespace ecps
