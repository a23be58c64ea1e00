#include "checkpoint/manifest.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <exception>
#include <limits>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/posix_file.h"
#include "runtime/status_macros.h"

namespace ecps {
namespace {

// Insertion-ordered, so that fields are written in the documented order and an unknown field
// is reported in document order.
using Json = nlohmann::ordered_json;

constexpr char kFormatName[] = "ecps-checkpoint";
constexpr size_t kMaxManifestBytes = size_t{256} << 20;
// Deeper than any manifest; a bound on what a hostile file can make the parser build.
constexpr int kMaxDepth = 16;

const char* KindName(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null:
      return "null";
    case Json::value_t::boolean:
      return "a boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
      return "an integer";
    case Json::value_t::string:
      return "a string";
    case Json::value_t::array:
      return "an array";
    case Json::value_t::object:
      return "an object";
    default:
      return "a number with a fraction";  // refused by ParseStrict; never reaches a field
  }
}

// Standard JSON (nlohmann), and stricter than the standard where a manifest must be exact: a
// duplicated field, a number that is not an integer, an integer beyond int64 or nesting
// deeper than kMaxDepth is refused. INVALID_ARGUMENT with the reason.
absl::StatusOr<Json> ParseStrict(absl::string_view text) {
  std::string error;
  std::vector<std::vector<std::string>> keys;  // per open object: its fields so far
  auto check = [&](int depth, Json::parse_event_t event, Json& parsed) {
    if (!error.empty()) return true;
    switch (event) {
      case Json::parse_event_t::object_start:
        keys.emplace_back();
        [[fallthrough]];
      case Json::parse_event_t::array_start:
        if (depth > kMaxDepth) error = "nested too deeply";
        break;
      case Json::parse_event_t::object_end:
        if (!keys.empty()) keys.pop_back();
        break;
      case Json::parse_event_t::array_end:
        break;
      case Json::parse_event_t::key: {
        const std::string& key = parsed.get_ref<const std::string&>();
        if (keys.empty()) break;
        if (std::find(keys.back().begin(), keys.back().end(), key) != keys.back().end()) {
          error = absl::StrCat("duplicate field \"", key, "\"");
        }
        keys.back().push_back(key);
        break;
      }
      case Json::parse_event_t::value:
        if (depth > kMaxDepth) {
          error = "nested too deeply";
        } else if (parsed.is_number_float()) {
          error = absl::StrCat("numbers must be integers, not ", parsed.dump());
        } else if (parsed.is_number_unsigned() &&
                   parsed.get<uint64_t>() >
                       static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
          error = absl::StrCat("integer ", parsed.dump(), " out of range");
        }
        break;
    }
    return true;
  };
  Json root;
  try {
    root = Json::parse(text.begin(), text.end(), check);
  } catch (const Json::exception& e) {
    // e.what() is "[json.exception.parse_error.101] parse error at line L, column C: why".
    std::string what = e.what();
    if (size_t end = what.find("] "); what.rfind("[json.exception.", 0) == 0 && end != what.npos) {
      what.erase(0, end + 2);
    }
    return absl::InvalidArgumentError(what);
  }
  if (!error.empty()) return absl::InvalidArgumentError(error);
  return root;
}

// Strict access to the fields of one JSON object: each field read once, then NoOthers()
// refuses anything left. Errors name the field by its path ("tables[2].rows").
class Fields {
 public:
  Fields(const Json& object, std::string context) : object_(object), context_(std::move(context)) {}

  absl::Status Int(const char* key, int64_t min, int64_t* out) {
    const Json* v;
    RETURN_IF_ERROR(Get(key, "an integer", &v));
    const int64_t value = v->get<int64_t>();  // ParseStrict refused what does not fit
    if (value < min) {
      return absl::InvalidArgumentError(
          absl::StrCat(Path(key), " is ", value, ", must be >= ", min));
    }
    *out = value;
    return absl::OkStatus();
  }
  absl::Status SmallInt(const char* key, int min, int* out) {
    int64_t v;
    RETURN_IF_ERROR(Int(key, min, &v));
    if (v > INT_MAX) {
      return absl::InvalidArgumentError(absl::StrCat(Path(key), " is ", v, ", too large"));
    }
    *out = static_cast<int>(v);
    return absl::OkStatus();
  }
  absl::Status String(const char* key, std::string* out) {
    const Json* v;
    RETURN_IF_ERROR(Get(key, "a string", &v));
    *out = v->get<std::string>();
    return absl::OkStatus();
  }
  absl::Status Checksum(const char* key, uint64_t* out) {
    std::string s;
    RETURN_IF_ERROR(String(key, &s));
    uint64_t v = 0;
    bool ok = s.size() == 16;
    for (char c : s) {
      v <<= 4;
      if (c >= '0' && c <= '9') {
        v |= c - '0';
      } else if (c >= 'a' && c <= 'f') {
        v |= c - 'a' + 10;
      } else {
        ok = false;
      }
    }
    if (!ok) {
      return absl::InvalidArgumentError(
          absl::StrCat(Path(key), " is \"", s, "\", expected 16 lowercase hex digits"));
    }
    *out = v;
    return absl::OkStatus();
  }
  absl::Status Array(const char* key, const Json::array_t** out) {
    const Json* v;
    RETURN_IF_ERROR(Get(key, "an array", &v));
    *out = &v->get_ref<const Json::array_t&>();
    return absl::OkStatus();
  }
  absl::Status NoOthers() const {
    for (auto it = object_.begin(); it != object_.end(); ++it) {
      if (std::find(used_.begin(), used_.end(), it.key()) == used_.end()) {
        return absl::InvalidArgumentError(absl::StrCat("unknown field ", Path(it.key())));
      }
    }
    return absl::OkStatus();
  }

 private:
  std::string Path(absl::string_view key) const {
    return context_.empty() ? std::string(key) : absl::StrCat(context_, ".", key);
  }
  absl::Status Get(const char* key, const char* kind, const Json** out) {
    auto it = object_.find(key);
    if (it == object_.end()) {
      return absl::InvalidArgumentError(absl::StrCat("missing field ", Path(key)));
    }
    if (absl::string_view(KindName(*it)) != kind) {
      return absl::InvalidArgumentError(
          absl::StrCat(Path(key), " must be ", kind, ", not ", KindName(*it)));
    }
    used_.push_back(key);
    *out = &*it;
    return absl::OkStatus();
  }

  const Json& object_;
  const std::string context_;
  std::vector<std::string> used_;
};

absl::Status ExpectObject(const Json& v, const std::string& what) {
  if (!v.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(what, " must be an object, not ", KindName(v)));
  }
  return absl::OkStatus();
}

// A value on one line, with the separators the manifest has always had: {"a": 1, "b": [2]}.
std::string OneLine(const Json& v) {
  std::string out;
  if (v.is_object()) {
    for (auto it = v.begin(); it != v.end(); ++it) {
      absl::StrAppend(&out, out.empty() ? "{" : ", ", Json(it.key()).dump(), ": ",
                      OneLine(it.value()));
    }
    return out.empty() ? "{}" : out + "}";
  }
  if (v.is_array()) {
    for (const Json& e : v) absl::StrAppend(&out, out.empty() ? "[" : ", ", OneLine(e));
    return out.empty() ? "[]" : out + "]";
  }
  // A job name that is not UTF-8 is written with U+FFFD rather than refused at commit.
  return v.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace

std::string ManifestToJson(const Manifest& m) {
  const CheckpointLayout& l = m.layout;
  Json top;
  top["format"] = kFormatName;
  top["format_version"] = m.format_version;
  top["job"] = l.job;
  top["step"] = l.step;
  top["created"] = m.created;
  top["embedding_dim"] = l.dim;
  top["payload_floats"] = l.payload_floats;
  top["sparse_optimizer"] = l.sparse_optimizer;
  top["dense_optimizer"] = l.dense_optimizer;
  Json& tables = top["tables"] = Json::array();
  for (size_t t = 0; t < l.table_rows.size(); ++t) {
    const int i = static_cast<int>(t);
    tables.push_back({{"file", TableFileName(i)},
                      {"rows", l.table_rows[t]},
                      {"bytes", TableFileBytes(l, i)},
                      {"checksum", HexChecksum(m.table_checksums[t])}});
  }
  Json& dense = top["dense"] = Json::array();
  for (size_t d = 0; d < l.dense_sizes.size(); ++d) {
    const int i = static_cast<int>(d);
    dense.push_back({{"file", DenseFileName(i)},
                     {"size", l.dense_sizes[d]},
                     {"state_floats", l.dense_state_floats[d]},
                     {"version", m.dense[d].version},
                     {"bytes", DenseFileBytes(l, i)},
                     {"checksum", HexChecksum(m.dense[d].checksum)}});
  }
  top["reader_positions"] = m.reader_positions;

  // One field per line; an array of objects (tables, dense) one element per line.
  std::string out = "{\n";
  size_t field = 0;
  for (auto it = top.begin(); it != top.end(); ++it) {
    absl::StrAppend(&out, "  ", Json(it.key()).dump(), ": ");
    const Json& v = it.value();
    if (v.is_array() && !v.empty() && v.front().is_object()) {
      out += "[\n";
      for (size_t e = 0; e < v.size(); ++e) {
        absl::StrAppend(&out, "    ", OneLine(v[e]), e + 1 < v.size() ? ",\n" : "\n");
      }
      out += "  ]";
    } else {
      out += OneLine(v);
    }
    out += ++field < top.size() ? ",\n" : "\n";
  }
  out += "}\n";
  return out;
}

namespace {

// The file names and sizes a manifest lists, checked against its layout once all is read.
struct ListedFiles {
  std::vector<std::string> names;
  std::vector<int64_t> bytes;
};

// "tables": one object per embedding table, into m's layout and checksums.
absl::Status ReadTables(Fields* top, Manifest* m, ListedFiles* files) {
  const Json::array_t* tables = nullptr;
  RETURN_IF_ERROR(top->Array("tables", &tables));
  for (size_t t = 0; t < tables->size(); ++t) {
    std::string ctx = absl::StrCat("tables[", t, "]");
    RETURN_IF_ERROR(ExpectObject((*tables)[t], ctx));
    Fields f((*tables)[t], ctx);
    std::string file;
    int64_t rows, bytes;
    uint64_t checksum;
    RETURN_IF_ERROR(f.String("file", &file));
    RETURN_IF_ERROR(f.Int("rows", 1, &rows));
    RETURN_IF_ERROR(f.Int("bytes", 0, &bytes));
    RETURN_IF_ERROR(f.Checksum("checksum", &checksum));
    RETURN_IF_ERROR(f.NoOthers());
    m->layout.table_rows.push_back(rows);
    m->table_checksums.push_back(checksum);
    files->names.push_back(std::move(file));
    files->bytes.push_back(bytes);
  }
  return absl::OkStatus();
}

// "dense": one object per dense parameter block, into m's layout and entries.
absl::Status ReadDense(Fields* top, Manifest* m, ListedFiles* files) {
  const Json::array_t* dense = nullptr;
  RETURN_IF_ERROR(top->Array("dense", &dense));
  for (size_t d = 0; d < dense->size(); ++d) {
    std::string ctx = absl::StrCat("dense[", d, "]");
    RETURN_IF_ERROR(ExpectObject((*dense)[d], ctx));
    Fields f((*dense)[d], ctx);
    std::string file;
    int64_t size, state_floats, bytes;
    DenseEntry entry;
    RETURN_IF_ERROR(f.String("file", &file));
    RETURN_IF_ERROR(f.Int("size", 1, &size));
    RETURN_IF_ERROR(f.Int("state_floats", 0, &state_floats));
    RETURN_IF_ERROR(f.Int("version", 0, &entry.version));
    RETURN_IF_ERROR(f.Int("bytes", 0, &bytes));
    RETURN_IF_ERROR(f.Checksum("checksum", &entry.checksum));
    RETURN_IF_ERROR(f.NoOthers());
    m->layout.dense_sizes.push_back(size);
    m->layout.dense_state_floats.push_back(state_floats);
    m->dense.push_back(entry);
    files->names.push_back(std::move(file));
    files->bytes.push_back(bytes);
  }
  return absl::OkStatus();
}

absl::Status ReadReaderPositions(Fields* top, Manifest* m) {
  const Json::array_t* readers = nullptr;
  RETURN_IF_ERROR(top->Array("reader_positions", &readers));
  for (size_t w = 0; w < readers->size(); ++w) {
    const Json& v = (*readers)[w];
    if (!v.is_number_integer() || v.get<int64_t>() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("reader_positions[", w, "] must be an integer >= 0"));
    }
    m->reader_positions.push_back(v.get<int64_t>());
  }
  return absl::OkStatus();
}

// Every file name and size listed follows from the (validated) layout `l`.
absl::Status CheckListedFiles(const CheckpointLayout& l, const ListedFiles& tables,
                              const ListedFiles& dense) {
  for (size_t t = 0; t < tables.names.size(); ++t) {
    int i = static_cast<int>(t);
    if (tables.names[t] != TableFileName(i)) {
      return absl::InvalidArgumentError(absl::StrCat("tables[", t, "].file is \"", tables.names[t],
                                                     "\", expected \"", TableFileName(i), "\""));
    }
    if (tables.bytes[t] != TableFileBytes(l, i)) {
      return absl::InvalidArgumentError(absl::StrCat("tables[", t, "].bytes is ", tables.bytes[t],
                                                     " but rows * payload_floats * 4 is ",
                                                     TableFileBytes(l, i)));
    }
  }
  for (size_t d = 0; d < dense.names.size(); ++d) {
    int i = static_cast<int>(d);
    if (dense.names[d] != DenseFileName(i)) {
      return absl::InvalidArgumentError(absl::StrCat("dense[", d, "].file is \"", dense.names[d],
                                                     "\", expected \"", DenseFileName(i), "\""));
    }
    if (dense.bytes[d] != DenseFileBytes(l, i)) {
      return absl::InvalidArgumentError(absl::StrCat("dense[", d, "].bytes is ", dense.bytes[d],
                                                     " but header + (size + state_floats) * 4 is ",
                                                     DenseFileBytes(l, i)));
    }
  }
  return absl::OkStatus();
}

}  // namespace

// Parses the manifest text; errors are plain reasons (the caller adds the file name).
absl::StatusOr<Manifest> ParseManifest(absl::string_view text, const std::string& dir) {
  ASSIGN_OR_RETURN(Json root, ParseStrict(text));
  RETURN_IF_ERROR(ExpectObject(root, "the manifest"));
  Fields top(root, "");
  Manifest m;
  m.dir = dir;
  std::string format;
  RETURN_IF_ERROR(top.String("format", &format));
  if (format != kFormatName) {
    return absl::InvalidArgumentError(
        absl::StrCat("format is \"", format, "\", expected \"", kFormatName, "\""));
  }
  // The version comes before the schema check: a newer format may have other fields.
  RETURN_IF_ERROR(top.SmallInt("format_version", 1, &m.format_version));
  if (m.format_version != kCheckpointFormatVersion) {
    return absl::FailedPreconditionError(absl::StrCat("format_version ", m.format_version,
                                                      " is not supported (this build reads ",
                                                      kCheckpointFormatVersion, ")"));
  }
  CheckpointLayout& l = m.layout;
  RETURN_IF_ERROR(top.String("job", &l.job));
  RETURN_IF_ERROR(top.Int("step", 0, &l.step));
  RETURN_IF_ERROR(top.String("created", &m.created));
  RETURN_IF_ERROR(top.SmallInt("embedding_dim", 1, &l.dim));
  RETURN_IF_ERROR(top.SmallInt("payload_floats", 1, &l.payload_floats));
  RETURN_IF_ERROR(top.String("sparse_optimizer", &l.sparse_optimizer));
  RETURN_IF_ERROR(top.String("dense_optimizer", &l.dense_optimizer));

  ListedFiles tables, dense;
  RETURN_IF_ERROR(ReadTables(&top, &m, &tables));
  RETURN_IF_ERROR(ReadDense(&top, &m, &dense));
  RETURN_IF_ERROR(ReadReaderPositions(&top, &m));
  RETURN_IF_ERROR(top.NoOthers());

  // Cross-checks: the layout is sane and every file name and size follows from it.
  RETURN_IF_ERROR(ValidateLayout(l));
  RETURN_IF_ERROR(CheckListedFiles(l, tables, dense));
  return m;
}

namespace {

absl::StatusOr<std::string> ReadManifestText(const std::string& path, Env* env) {
  absl::StatusOr<int64_t> size = env->GetFileSize(path);
  if (absl::IsNotFound(size.status())) {
    return FileError(absl::StatusCode::kNotFound, path, "missing");
  }
  RETURN_IF_ERROR(size.status());
  if (static_cast<uint64_t>(*size) > kMaxManifestBytes) {
    return FileError(absl::StatusCode::kDataLoss, path,
                     absl::StrCat("not valid: ", *size, " bytes is too large for a manifest"));
  }
  return env->ReadFile(path);
}

}  // namespace

absl::StatusOr<Manifest> ReadManifest(const std::string& dir_arg, Env* env) {
  const std::string dir = StripTrailingSlashes(dir_arg);
  const std::string path = JoinPath(dir, kManifestName);
  ASSIGN_OR_RETURN(std::string text, ReadManifestText(path, env));
  absl::StatusOr<Manifest> m = ParseManifest(text, dir);
  if (!m.ok()) {
    if (m.status().code() == absl::StatusCode::kFailedPrecondition) {
      return FileError(absl::StatusCode::kFailedPrecondition, path, m.status().message());
    }
    return FileError(absl::StatusCode::kDataLoss, path,
                     absl::StrCat("not valid: ", m.status().message()));
  }
  return m;
}

absl::Status CheckLayoutMatches(const Manifest& manifest, const CheckpointLayout& expected) {
  RETURN_IF_ERROR(ValidateLayout(expected));
  const CheckpointLayout& got = manifest.layout;
  const std::string path = JoinPath(manifest.dir, kManifestName);
  auto mismatch = [&](absl::string_view field, const auto& in_checkpoint, const auto& want) {
    return FileError(absl::StatusCode::kFailedPrecondition, path,
                     absl::StrCat("checkpoint does not fit the model: ", field, " is ",
                                  in_checkpoint, " in the checkpoint, ", want, " expected"));
  };
  if (got.dim != expected.dim) return mismatch("embedding_dim", got.dim, expected.dim);
  if (got.payload_floats != expected.payload_floats) {
    return mismatch("payload_floats", got.payload_floats, expected.payload_floats);
  }
  if (got.sparse_optimizer != expected.sparse_optimizer) {
    return mismatch("sparse_optimizer", got.sparse_optimizer, expected.sparse_optimizer);
  }
  if (got.dense_optimizer != expected.dense_optimizer) {
    return mismatch("dense_optimizer", got.dense_optimizer, expected.dense_optimizer);
  }
  if (got.table_rows.size() != expected.table_rows.size()) {
    return mismatch("the number of tables", got.table_rows.size(), expected.table_rows.size());
  }
  for (size_t t = 0; t < got.table_rows.size(); ++t) {
    if (got.table_rows[t] != expected.table_rows[t]) {
      return mismatch(absl::StrCat("tables[", t, "].rows"), got.table_rows[t],
                      expected.table_rows[t]);
    }
  }
  if (got.dense_sizes.size() != expected.dense_sizes.size()) {
    return mismatch("the number of dense tensors", got.dense_sizes.size(),
                    expected.dense_sizes.size());
  }
  for (size_t d = 0; d < got.dense_sizes.size(); ++d) {
    if (got.dense_sizes[d] != expected.dense_sizes[d]) {
      return mismatch(absl::StrCat("dense[", d, "].size"), got.dense_sizes[d],
                      expected.dense_sizes[d]);
    }
    if (got.dense_state_floats[d] != expected.dense_state_floats[d]) {
      return mismatch(absl::StrCat("dense[", d, "].state_floats"), got.dense_state_floats[d],
                      expected.dense_state_floats[d]);
    }
  }
  return absl::OkStatus();
}

}  // namespace ecps
