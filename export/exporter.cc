#include "export/exporter.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/layout.h"
#include "export/byte_sink.h"
#include "export/export_manifest.h"
#include "export/onnx_graph.h"
#include "export/safetensors.h"
#include "runtime/posix_file.h"
#include "runtime/status_macros.h"

namespace ecps {
namespace {

namespace fs = std::filesystem;

// Rows read from a table file at a time.
constexpr int64_t kBlockRows = 8192;

struct DenseTensors {
  std::vector<std::vector<float>> weights, state;
};

absl::Status CheckOutputDir(const std::string& out_dir) {
  std::error_code ec;
  if (!fs::exists(out_dir, ec)) return absl::OkStatus();
  if (!fs::is_directory(out_dir, ec)) {
    return FileError(absl::StatusCode::kFailedPrecondition, out_dir, "exists and is not a folder");
  }
  if (!fs::is_empty(out_dir, ec) || ec) {
    return FileError(absl::StatusCode::kFailedPrecondition, out_dir,
                     "exists and is not empty (an export never overwrites files)");
  }
  return absl::OkStatus();
}

absl::StatusOr<DenseTensors> ReadDenseTensors(const Manifest& manifest) {
  DenseTensors d;
  const int n = static_cast<int>(manifest.layout.dense_sizes.size());
  d.weights.resize(n);
  d.state.resize(n);
  for (int i = 0; i < n; ++i) {
    int64_t version = 0;
    RETURN_IF_ERROR(ReadDense(manifest, i, &d.weights[i], &d.state[i], &version));
  }
  return d;
}

// Streams floats [first, first + count) of every row of `table` into `writer`.
absl::Status CopyTableColumns(const Manifest& manifest, int table, int first, int count,
                              SafetensorsWriter* writer) {
  ASSIGN_OR_RETURN(std::unique_ptr<TableReader> reader, TableReader::Open(manifest, table));
  const int payload = reader->payload_floats();
  std::vector<int64_t> ids;
  std::vector<float> rows, columns;
  for (int64_t r0 = 0; r0 < reader->rows(); r0 += kBlockRows) {
    const int64_t n = std::min(kBlockRows, reader->rows() - r0);
    ids.resize(n);
    std::iota(ids.begin(), ids.end(), r0);
    rows.resize(n * payload);
    RETURN_IF_ERROR(reader->ReadRows(ids.data(), n, rows.data()));
    columns.resize(n * count);
    for (int64_t i = 0; i < n; ++i) {
      std::copy_n(rows.data() + i * payload + first, count, columns.data() + i * count);
    }
    RETURN_IF_ERROR(writer->AppendFloats(columns.data(), n * count));
  }
  return absl::OkStatus();
}

// Writes embeddings.safetensors: every table's weights, then (with_state) every table's
// optimizer state. Returns where each table's weights lie, for the ONNX model.
absl::StatusOr<std::vector<ExternalTable>> WriteTables(const Manifest& manifest,
                                                       const std::string& dir, bool with_state) {
  const CheckpointLayout& l = manifest.layout;
  const int tables = static_cast<int>(l.table_rows.size());
  const int state = l.payload_floats - l.dim;
  std::vector<SafetensorsTensor> tensors;
  for (int t = 0; t < tables; ++t) {
    tensors.push_back({TableWeightsTensor(t), "F32", {l.table_rows[t], l.dim}});
  }
  with_state = with_state && state > 0;
  for (int t = 0; with_state && t < tables; ++t) {
    tensors.push_back({TableStateTensor(t), "F32", {l.table_rows[t], state}});
  }
  const std::map<std::string, std::string> metadata = {{"format", "ecps-export"},
                                                       {"job", l.job},
                                                       {"step", std::to_string(l.step)},
                                                       {"sparse_optimizer", l.sparse_optimizer}};
  ASSIGN_OR_RETURN(std::unique_ptr<ByteSink> sink,
                   CreateFileSink(JoinPath(dir, kExportTablesName)));
  ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsWriter> writer,
                   SafetensorsWriter::Start(std::move(sink), tensors, metadata));
  for (int t = 0; t < tables; ++t) {
    RETURN_IF_ERROR(CopyTableColumns(manifest, t, 0, l.dim, writer.get()));
  }
  for (int t = 0; with_state && t < tables; ++t) {
    RETURN_IF_ERROR(CopyTableColumns(manifest, t, l.dim, state, writer.get()));
  }
  RETURN_IF_ERROR(writer->Finish());
  std::vector<ExternalTable> where;
  for (int t = 0; t < tables; ++t) {
    where.push_back({kExportTablesName, writer->plan().data_start() + writer->plan().begin[t],
                     writer->plan().bytes[t]});
  }
  return where;
}

absl::Status WriteDenseState(const Manifest& manifest, const std::vector<std::string>& names,
                             const DenseTensors& dense, const std::string& dir) {
  std::vector<SafetensorsTensor> tensors;
  for (size_t i = 0; i < names.size(); ++i) {
    tensors.push_back(
        {DenseStateTensor(names[i]), "F32", {static_cast<int64_t>(dense.state[i].size())}});
  }
  ASSIGN_OR_RETURN(std::unique_ptr<ByteSink> sink,
                   CreateFileSink(JoinPath(dir, kExportDenseStateName)));
  ASSIGN_OR_RETURN(
      std::unique_ptr<SafetensorsWriter> writer,
      SafetensorsWriter::Start(
          std::move(sink), tensors,
          {{"format", "ecps-export"}, {"dense_optimizer", manifest.layout.dense_optimizer}}));
  for (const std::vector<float>& s : dense.state) {
    RETURN_IF_ERROR(writer->AppendFloats(s.data(), static_cast<int64_t>(s.size())));
  }
  return writer->Finish();
}

absl::Status WriteWhole(const std::string& path, const std::string& bytes) {
  ASSIGN_OR_RETURN(std::unique_ptr<ByteSink> sink, CreateFileSink(path));
  RETURN_IF_ERROR(sink->Append(bytes));
  return sink->Close();
}

// "bottom.0.weight", ...: Dlrm's names of the dense tensors.
std::vector<std::string> DenseNames(const DlrmShape& shape) {
  std::vector<std::string> names;
  const int bottom = static_cast<int>(shape.bottom_mlp.size());
  const std::vector<DlrmLayer> layers = DlrmLayers(shape);
  for (int i = 0; i < static_cast<int>(layers.size()); ++i) {
    const std::string base =
        i < bottom ? absl::StrCat("bottom.", i) : absl::StrCat("top.", i - bottom);
    names.push_back(base + ".weight");
    names.push_back(base + ".bias");
  }
  return names;
}

// Every file of the export, into `dir`.
absl::Status WriteExport(const Manifest& manifest, const DlrmShape& shape,
                         const ExportOptions& options, const std::string& dir) {
  ASSIGN_OR_RETURN(DenseTensors dense, ReadDenseTensors(manifest));
  ASSIGN_OR_RETURN(std::vector<ExternalTable> tables,
                   WriteTables(manifest, dir, options.with_optimizer_state));
  ASSIGN_OR_RETURN(std::string onnx, BuildDlrmOnnx(shape, dense.weights, tables));
  RETURN_IF_ERROR(WriteWhole(JoinPath(dir, kExportOnnxName), onnx));
  ExportDescription d;
  d.job = manifest.layout.job;
  d.step = manifest.layout.step;
  d.shape = shape;
  d.sparse_optimizer = manifest.layout.sparse_optimizer;
  d.dense_optimizer = manifest.layout.dense_optimizer;
  d.sparse_state_floats = manifest.layout.payload_floats - manifest.layout.dim;
  d.with_optimizer_state = options.with_optimizer_state;
  d.dense_names = DenseNames(shape);
  if (options.with_optimizer_state) {
    RETURN_IF_ERROR(WriteDenseState(manifest, d.dense_names, dense, dir));
  }
  return WriteWhole(JoinPath(dir, kExportManifestName), ExportManifestJson(d));
}

int64_t FolderBytes(const std::string& dir) {
  int64_t bytes = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) bytes += e.file_size(ec);
  return bytes;
}

}  // namespace

absl::StatusOr<ExportSummary> ExportCheckpoint(const std::string& checkpoint,
                                               const std::string& out_dir,
                                               const ExportOptions& options) {
  ASSIGN_OR_RETURN(std::string dir, ResolveCheckpointDir(checkpoint));
  ASSIGN_OR_RETURN(Manifest manifest, ReadManifest(dir));
  RETURN_IF_ERROR(VerifyCheckpoint(dir));
  ASSIGN_OR_RETURN(DlrmShape shape, ShapeFromLayout(manifest.layout));
  const std::string final_dir = StripTrailingSlashes(out_dir);
  RETURN_IF_ERROR(CheckOutputDir(final_dir));
  const std::string partial = final_dir + ".partial";
  std::error_code ec;
  fs::remove_all(partial, ec);  // left by an export that died
  if (!fs::create_directories(partial, ec) || ec) {
    return FileError(absl::StatusCode::kInternal, partial,
                     absl::StrCat("cannot create: ", ec.message()));
  }
  absl::Status written = WriteExport(manifest, shape, options, partial);
  if (written.ok()) written = FsyncPath(partial);
  if (written.ok() && ::rename(partial.c_str(), final_dir.c_str()) != 0) {
    written = ErrnoError(final_dir, "rename", errno);
  }
  if (!written.ok()) {
    fs::remove_all(partial, ec);
    return written;
  }
  const std::string parent = fs::absolute(final_dir).parent_path().string();
  RETURN_IF_ERROR(FsyncPath(parent));
  return ExportSummary{dir, manifest.layout.step, FolderBytes(final_dir)};
}

}  // namespace ecps
