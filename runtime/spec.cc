#include "runtime/spec.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <string_view>
#include <system_error>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "runtime/net.h"

namespace ecps {
namespace {

namespace fs = std::filesystem;

// ---------------------------------------------------------------------------------------
// Schema: the known keys of every map, used for unknown-key errors and suggestions.

constexpr int64_t kDefaultTableRows = 100000;
constexpr int kCriteoDense = 13;
constexpr int kCriteoSparse = 26;

struct SectionKeys {
  const char* path;  // "" for the top level, "faults[]" for a fault entry
  std::vector<std::string> keys;
};

const std::vector<SectionKeys>& Schema() {
  static const auto* schema = new std::vector<SectionKeys>{
      {"",
       {"job", "cluster", "model", "optimizer", "data", "fault_tolerance", "faults", "monitoring",
        "slurm"}},
      {"job",
       {"name", "output_dir", "steps", "eval_every", "eval_samples", "seed", "token", "resume_from",
        "synchronous"}},
      {"cluster",
       {"servers", "spares", "workers", "host", "advertise", "coordinator_port", "coordinator",
        "connect_timeout_s", "heartbeat_interval_ms",
        "heartbeat_timeout_ms", "rpc_timeout_ms", "worker_threads", "server_threads",
        "max_request_ids", "max_reply_mb"}},
      {"model",
       {"num_dense", "num_sparse", "embedding_dim", "table_rows", "bottom_mlp", "top_mlp",
        "pooling"}},
      {"optimizer", {"sparse", "dense"}},
      {"optimizer.sparse", {"type", "lr", "eps", "initial_accumulator"}},
      {"optimizer.dense", {"type", "lr", "beta1", "beta2", "eps"}},
      {"data", {"source", "paths", "batch_size", "eval_fraction", "max_bad_lines", "synthetic"}},
      {"data.synthetic", {"num_samples", "zipf_s", "hidden_seed", "label_noise"}},
      {"fault_tolerance",
       {"mode", "k", "r", "ack", "async_window", "async_linger_ms", "dense_replicas",
        "codec_backend", "rebuild_rate_mb_s", "checkpoint"}},
      {"fault_tolerance.checkpoint",
       {"dir", "interval_steps", "interval_seconds", "save_final", "keep"}},
      {"faults[]", {"at_step", "action", "target", "duration_s"}},
      {"monitoring", {"progress", "metrics_interval_ms", "report_every_steps", "log_level"}},
      {"slurm", {"partition", "nodes", "time", "account", "sbatch_options", "binary"}},
  };
  return *schema;
}

const std::vector<std::string>& KeysOf(std::string_view section) {
  for (const auto& s : Schema()) {
    if (section == s.path) return s.keys;
  }
  static const auto* empty = new std::vector<std::string>();
  return *empty;
}

// Enumerated values.
const std::vector<std::string>& Poolings() {
  static const auto* values = new std::vector<std::string>{"sum", "mean"};
  return *values;
}
const std::vector<std::string>& SparseOptimizers() {
  static const auto* values = new std::vector<std::string>{"sgd", "adagrad", "rowwise_adagrad"};
  return *values;
}
const std::vector<std::string>& DenseOptimizers() {
  static const auto* values = new std::vector<std::string>{"sgd", "adagrad", "adam"};
  return *values;
}
const std::vector<std::string>& Sources() {
  static const auto* values = new std::vector<std::string>{"synthetic", "criteo_tsv", "criteo_csv"};
  return *values;
}
const std::vector<std::string>& Modes() {
  static const auto* values =
      new std::vector<std::string>{"none", "erasure_code", "replication", "checkpoint"};
  return *values;
}
const std::vector<std::string>& Acks() {
  static const auto* values = new std::vector<std::string>{"after_parity", "async"};
  return *values;
}
const std::vector<std::string>& CodecBackends() {
  static const auto* values = new std::vector<std::string>{
      "auto", "ecps", "ecps-avx512-gfni", "ecps-avx2-gfni", "ecps-avx2", "ecps-portable",
      "isal", "cuda"};  // codec::ErasureCode::Create's names
  return *values;
}
const std::vector<std::string>& FaultActions() {
  static const auto* values =
      new std::vector<std::string>{"kill_server", "stop_server", "kill_worker"};
  return *values;
}
const std::vector<std::string>& LogLevels() {
  static const auto* values =
      new std::vector<std::string>{"trace", "debug", "info", "warn", "error"};
  return *values;
}

// ---------------------------------------------------------------------------------------
// Small helpers.

size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

// camelCase and kebab-case to snake_case, lower case.
std::string NormalizeKey(std::string_view key) {
  std::string out;
  for (size_t i = 0; i < key.size(); ++i) {
    char c = key[i];
    if (std::isupper(static_cast<unsigned char>(c))) {
      if (i > 0 && key[i - 1] != '_' && key[i - 1] != '-' &&
          !std::isupper(static_cast<unsigned char>(key[i - 1]))) {
        out.push_back('_');
      }
      out.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
    } else if (c == '-' || c == ' ') {
      out.push_back('_');
    } else {
      out.push_back(c);
    }
  }
  return out;
}

// The closest candidate to `word`, or "" when none is close enough to be a likely typo.
std::string ClosestMatch(std::string_view word, const std::vector<std::string>& candidates) {
  std::string norm = NormalizeKey(word);
  std::string best;
  size_t best_distance = std::numeric_limits<size_t>::max();
  for (const auto& c : candidates) {
    if (norm == c) return c;
    size_t d = EditDistance(norm, c);
    if (d < best_distance) {
      best_distance = d;
      best = c;
    }
  }
  size_t limit = std::max<size_t>(2, std::max(norm.size(), best.size()) / 3);
  if (best_distance <= limit) return best;
  // A prefix or part of a longer key ("interval" -> "interval_steps").
  if (norm.size() >= 4) {
    for (const auto& c : candidates) {
      if (c.find(norm) != std::string::npos || norm.find(c) != std::string::npos) return c;
    }
  }
  return "";
}

std::string Quoted(const std::string& s) { return absl::StrCat("\"", s, "\""); }

// Describes a node for "got ..." in messages.
std::string Describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
      return "an empty value";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a map";
    case YAML::NodeType::Scalar:
      if (node.Tag() == "!") return absl::StrCat("the string ", Quoted(node.Scalar()));
      return node.Scalar();
    default:
      return "an undefined value";
  }
}

bool IsIntegerText(std::string_view s) {
  size_t i = (!s.empty() && (s[0] == '+' || s[0] == '-')) ? 1 : 0;
  if (i >= s.size()) return false;
  for (; i < s.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(s[i]))) return false;
  }
  return true;
}

template <typename F>
bool ParseFloatText(std::string_view s, F* out) {
  if (!s.empty() && s[0] == '+') s.remove_prefix(1);
  if (s.empty()) return false;
  F value{};
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || ptr != s.data() + s.size()) return false;
  *out = value;
  return true;
}

template <typename F>
std::string FormatFloat(F value) {
  char buf[64];
  auto [ptr, ec] = std::to_chars(buf, buf + sizeof(buf), value);
  std::string s(buf, ptr);
  // Keep a float-looking token for integral values ("1" -> "1.0"); YAML readers agree.
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

std::string FormatNumber(double v) {
  if (v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(static_cast<int64_t>(v));
  return FormatFloat(v);
}

bool IsValidJobName(std::string_view name) {
  if (name.empty() || name.size() > 128 || name == "." || name == "..") return false;
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') {
      return false;
    }
  }
  return true;
}

// ---------------------------------------------------------------------------------------
// The parser: reads every section, collecting every error instead of stopping at the first.

struct Entry {
  YAML::Node key;
  YAML::Node value;
};
using Entries = std::map<std::string, Entry>;

class SpecParser {
 public:
  SpecParser(std::string source, fs::path base_dir)
      : source_(std::move(source)), base_dir_(std::move(base_dir)) {}

  absl::StatusOr<JobSpec> Parse(const std::string& text);

 private:
  struct Issue {
    int line;  // 1-based; 0 when unknown
    std::string text;
  };

  // --- error reporting ---
  void Error(int line, const std::string& path, const std::string& message) {
    std::string where = line > 0 ? absl::StrCat(source_, ":", line) : source_;
    std::string text = path.empty() ? absl::StrCat(where, ": ", message)
                                    : absl::StrCat(where, ": ", path, ": ", message);
    issues_.push_back({line, std::move(text)});
    if (!path.empty()) bad_.insert(path);
  }
  // The line of the first of `paths` that appears in the file (or of a parent section).
  int LineOf(std::initializer_list<std::string> paths) const {
    for (const auto& p : paths) {
      auto it = lines_.find(p);
      if (it != lines_.end()) return it->second;
    }
    for (const auto& p : paths) {
      std::string parent = p;
      while (true) {
        size_t dot = parent.find_last_of(".[");
        if (dot == std::string::npos) break;
        parent = parent.substr(0, dot);
        auto it = lines_.find(parent);
        if (it != lines_.end()) return it->second;
      }
    }
    return 0;
  }
  void ErrorAt(const std::string& path, std::initializer_list<std::string> line_paths,
               const std::string& message) {
    Error(LineOf(line_paths), path, message);
  }
  bool Bad(std::initializer_list<std::string> paths) const {
    for (const auto& p : paths) {
      if (bad_.count(p)) return true;
    }
    return false;
  }
  bool Present(const std::string& path) const { return lines_.count(path) > 0; }

  static int LineOfNode(const YAML::Node& node) {
    YAML::Mark m = node.Mark();
    return m.is_null() ? 0 : m.line + 1;
  }

  // --- maps ---
  // Checks that `node` is a map whose keys are all in `section`'s schema; returns its entries.
  // A null node (a section with nothing under it) is an empty map.
  bool ReadMap(const YAML::Node& node, const std::string& path, const std::string& section,
               Entries* out);
  void UnknownKey(const YAML::Node& key, const std::string& path, const std::string& name,
                  const std::string& section);

  // --- scalar fields: each reads entries[key] into *out if present, checking type and range ---
  const Entry* Find(const Entries& e, const std::string& path, const char* key,
                    std::string* field_path);
  void Int(const Entries& e, const std::string& path, const char* key, int64_t lo, int64_t hi,
           int64_t* out);
  void Int(const Entries& e, const std::string& path, const char* key, int64_t lo, int64_t hi,
           int* out) {
    int64_t v = *out;
    Int(e, path, key, lo, hi, &v);
    *out = static_cast<int>(v);
  }
  void Uint(const Entries& e, const std::string& path, const char* key, uint64_t* out);
  template <typename F>
  void Real(const Entries& e, const std::string& path, const char* key, double lo, bool lo_open,
            double hi, bool hi_open, F* out);
  void Bool(const Entries& e, const std::string& path, const char* key, bool* out);
  void String(const Entries& e, const std::string& path, const char* key, std::string* out);
  void Enum(const Entries& e, const std::string& path, const char* key,
            const std::vector<std::string>& allowed, std::string* out);
  void IntList(const Entries& e, const std::string& path, const char* key, int64_t lo, int64_t hi,
               size_t min_len, size_t max_len, std::vector<int>* out);

  // Integer text -> value, or an error mentioning the range.
  bool ParseIntNode(const YAML::Node& v, const std::string& field, int line, int64_t lo, int64_t hi,
                    int64_t* out);
  bool RequireScalar(const YAML::Node& v, const std::string& field, int line, const char* expected);

  // --- sections ---
  void ReadJob(const YAML::Node& n, JobSection* job);
  void ReadCluster(const YAML::Node& n, ClusterSection* c);
  void ReadModel(const YAML::Node& n, ModelSection* m);
  void ReadOptimizer(const YAML::Node& n, OptimizerSection* o);
  void ReadData(const YAML::Node& n, DataSection* d);
  void ReadFaultTolerance(const YAML::Node& n, FaultToleranceSection* f);
  void ReadFaults(const YAML::Node& n, std::vector<FaultSpec>* faults);
  void ReadMonitoring(const YAML::Node& n, MonitoringSection* m);
  void ReadSlurm(const YAML::Node& n, SlurmSection* s);
  // A list of non-empty strings (a single string is a list of one).
  void StringList(const Entries& e, const std::string& p, const char* key, const char* what,
                  std::vector<std::string>* out);
  void CrossCheck(JobSpec* spec);

  std::string source_;
  fs::path base_dir_;  // data paths are resolved against it when set
  std::vector<Issue> issues_;
  std::map<std::string, int> lines_;  // key path -> 1-based line of the key
  std::set<std::string> bad_;         // key paths that already have an error
  bool table_rows_scalar_ = false;
  bool table_rows_given_ = false;
};

void SpecParser::UnknownKey(const YAML::Node& key, const std::string& path, const std::string& name,
                            const std::string& section) {
  const auto& keys = KeysOf(section);
  std::string msg = "unknown key";
  std::string near = ClosestMatch(name, keys);
  if (!near.empty()) {
    absl::StrAppend(&msg, "; did you mean ", Quoted(near), "?");
  } else {
    // Perhaps it belongs in another section ("batch_size" under model).
    std::string norm = NormalizeKey(name);
    std::string elsewhere;
    for (const auto& s : Schema()) {
      if (s.path == section || std::string_view(s.path) == "faults[]") continue;
      for (const auto& k : s.keys) {
        if (k == norm || (norm.size() >= 5 && EditDistance(norm, k) <= 1)) {
          elsewhere = std::string(s.path).empty() ? k : absl::StrCat(s.path, ".", k);
          break;
        }
      }
      if (!elsewhere.empty()) break;
    }
    if (!elsewhere.empty()) {
      absl::StrAppend(&msg, "; did you mean ", Quoted(elsewhere), " (in another section)?");
    } else {
      absl::StrAppend(&msg, "; known keys ", section.empty() ? "at the top level" : "here", ": ",
                      absl::StrJoin(keys, ", "));
    }
  }
  Error(LineOfNode(key), path.empty() ? name : absl::StrCat(path, ".", name), msg);
}

bool SpecParser::ReadMap(const YAML::Node& node, const std::string& path,
                         const std::string& section, Entries* out) {
  out->clear();
  if (!node || node.IsNull()) return true;
  if (!node.IsMap()) {
    Error(lines_.count(path) ? lines_[path] : LineOfNode(node), path,
          absl::StrCat("expected a map of keys (", absl::StrJoin(KeysOf(section), ", "), "), got ",
                       Describe(node)));
    return false;
  }
  const auto& keys = KeysOf(section);
  for (auto it = node.begin(); it != node.end(); ++it) {
    // A copy: yaml-cpp's iterator hands out a temporary pair, so a reference to its member
    // would dangle past this line (AddressSanitizer: stack-use-after-scope).
    const YAML::Node key = it->first;
    if (!key.IsScalar()) {
      Error(LineOfNode(key), path, "keys must be plain names, got " + Describe(key));
      continue;
    }
    const std::string name = key.Scalar();
    std::string field = path.empty() ? name : absl::StrCat(path, ".", name);
    if (std::find(keys.begin(), keys.end(), name) == keys.end()) {
      UnknownKey(key, path, name, section);
      continue;
    }
    auto [pos, inserted] = out->emplace(name, Entry{key, it->second});
    if (!inserted) {
      Error(LineOfNode(key), field,
            absl::StrCat("duplicate key (first given on line ", LineOfNode(pos->second.key), ")"));
      continue;
    }
    lines_[field] = LineOfNode(key);
  }
  return true;
}

const Entry* SpecParser::Find(const Entries& e, const std::string& path, const char* key,
                              std::string* field_path) {
  *field_path = path.empty() ? key : absl::StrCat(path, ".", key);
  auto it = e.find(key);
  return it == e.end() ? nullptr : &it->second;
}

bool SpecParser::RequireScalar(const YAML::Node& v, const std::string& field, int line,
                               const char* expected) {
  if (v.IsScalar()) return true;
  if (v.IsNull()) {
    Error(line, field,
          absl::StrCat("has no value; give ", expected, " or remove the key to use the default"));
  } else {
    Error(line, field, absl::StrCat("expected ", expected, ", got ", Describe(v)));
  }
  return false;
}

std::string RangeText(int64_t lo, int64_t hi) {
  if (hi == std::numeric_limits<int64_t>::max()) return absl::StrCat("must be at least ", lo);
  return absl::StrCat("must be between ", lo, " and ", hi);
}

bool SpecParser::ParseIntNode(const YAML::Node& v, const std::string& field, int line, int64_t lo,
                              int64_t hi, int64_t* out) {
  if (!RequireScalar(v, field, line, "an integer")) return false;
  const std::string& text = v.Scalar();
  if (v.Tag() == "!" || !IsIntegerText(text)) {
    Error(line, field, absl::StrCat("expected an integer, got ", Describe(v)));
    return false;
  }
  int64_t value = 0;
  if (!absl::SimpleAtoi(text, &value) || value < lo || value > hi) {
    Error(line, field, absl::StrCat(RangeText(lo, hi), ", got ", text));
    return false;
  }
  *out = value;
  return true;
}

void SpecParser::Int(const Entries& e, const std::string& path, const char* key, int64_t lo,
                     int64_t hi, int64_t* out) {
  std::string field;
  const Entry* entry = Find(e, path, key, &field);
  if (entry == nullptr) return;
  ParseIntNode(entry->value, field, lines_[field], lo, hi, out);
}

void SpecParser::Uint(const Entries& e, const std::string& path, const char* key, uint64_t* out) {
  std::string field;
  const Entry* entry = Find(e, path, key, &field);
  if (entry == nullptr) return;
  int line = lines_[field];
  const YAML::Node& v = entry->value;
  if (!RequireScalar(v, field, line, "an integer")) return;
  const std::string& text = v.Scalar();
  if (v.Tag() == "!" || !IsIntegerText(text)) {
    Error(line, field, absl::StrCat("expected an integer, got ", Describe(v)));
    return;
  }
  uint64_t value = 0;
  if (text[0] == '-' || !absl::SimpleAtoi(text, &value)) {
    Error(line, field,
          absl::StrCat("must be between 0 and ", std::numeric_limits<uint64_t>::max(), ", got ",
                       text));
    return;
  }
  *out = value;
}

template <typename F>
void SpecParser::Real(const Entries& e, const std::string& path, const char* key, double lo,
                      bool lo_open, double hi, bool hi_open, F* out) {
  std::string field;
  const Entry* entry = Find(e, path, key, &field);
  if (entry == nullptr) return;
  int line = lines_[field];
  const YAML::Node& v = entry->value;
  if (!RequireScalar(v, field, line, "a number")) return;
  F value{};
  if (v.Tag() == "!" || !ParseFloatText(v.Scalar(), &value)) {
    double wide = 0;
    if (v.Tag() != "!" && ParseFloatText(v.Scalar(), &wide)) {
      Error(line, field, absl::StrCat("is out of range for a 32-bit float, got ", v.Scalar()));
    } else {
      Error(line, field, absl::StrCat("expected a number, got ", Describe(v)));
    }
    return;
  }
  if (!std::isfinite(value)) {
    Error(line, field, absl::StrCat("must be a finite number, got ", v.Scalar()));
    return;
  }
  bool ok = (lo_open ? value > lo : value >= lo) && (hi_open ? value < hi : value <= hi);
  if (!ok) {
    std::string range;
    if (std::isinf(hi)) {
      range =
          absl::StrCat(lo_open ? "must be greater than " : "must be at least ", FormatNumber(lo));
    } else if (!lo_open && !hi_open) {
      range = absl::StrCat("must be between ", FormatNumber(lo), " and ", FormatNumber(hi));
    } else {
      range = absl::StrCat("must be ", lo_open ? "greater than " : "at least ", FormatNumber(lo),
                           " and ", hi_open ? "less than " : "at most ", FormatNumber(hi));
    }
    Error(line, field, absl::StrCat(range, ", got ", v.Scalar()));
    return;
  }
  *out = value;
}

void SpecParser::Bool(const Entries& e, const std::string& path, const char* key, bool* out) {
  std::string field;
  const Entry* entry = Find(e, path, key, &field);
  if (entry == nullptr) return;
  int line = lines_[field];
  const YAML::Node& v = entry->value;
  if (!RequireScalar(v, field, line, "true or false")) return;
  const std::string& s = v.Scalar();
  if (v.Tag() != "!" && (s == "true" || s == "True" || s == "TRUE")) {
    *out = true;
  } else if (v.Tag() != "!" && (s == "false" || s == "False" || s == "FALSE")) {
    *out = false;
  } else {
    Error(line, field, absl::StrCat("expected true or false, got ", Describe(v)));
  }
}

void SpecParser::String(const Entries& e, const std::string& path, const char* key,
                        std::string* out) {
  std::string field;
  const Entry* entry = Find(e, path, key, &field);
  if (entry == nullptr) return;
  if (!RequireScalar(entry->value, field, lines_[field], "a string")) return;
  *out = entry->value.Scalar();
}

void SpecParser::Enum(const Entries& e, const std::string& path, const char* key,
                      const std::vector<std::string>& allowed, std::string* out) {
  std::string field;
  const Entry* entry = Find(e, path, key, &field);
  if (entry == nullptr) return;
  int line = lines_[field];
  if (!RequireScalar(entry->value, field, line, "a string")) return;
  const std::string& s = entry->value.Scalar();
  if (std::find(allowed.begin(), allowed.end(), s) == allowed.end()) {
    std::string msg =
        absl::StrCat("must be one of ", absl::StrJoin(allowed, ", "), "; got ", Quoted(s));
    std::string near = ClosestMatch(s, allowed);
    if (!near.empty()) absl::StrAppend(&msg, " (did you mean ", Quoted(near), "?)");
    Error(line, field, msg);
    return;
  }
  *out = s;
}

void SpecParser::IntList(const Entries& e, const std::string& path, const char* key, int64_t lo,
                         int64_t hi, size_t min_len, size_t max_len, std::vector<int>* out) {
  std::string field;
  const Entry* entry = Find(e, path, key, &field);
  if (entry == nullptr) return;
  int line = lines_[field];
  const YAML::Node& v = entry->value;
  if (!v.IsSequence()) {
    Error(line, field,
          absl::StrCat("expected a list of integers (e.g. [64, 16]), got ", Describe(v)));
    return;
  }
  if (v.size() < min_len || v.size() > max_len) {
    Error(
        line, field,
        absl::StrCat("must have between ", min_len, " and ", max_len, " entries, got ", v.size()));
    return;
  }
  std::vector<int> values;
  bool ok = true;
  for (size_t i = 0; i < v.size(); ++i) {
    std::string item = absl::StrCat(field, "[", i, "]");
    int item_line = LineOfNode(v[i]) > 0 ? LineOfNode(v[i]) : line;
    int64_t x = 0;
    if (!ParseIntNode(v[i], item, item_line, lo, hi, &x)) {
      ok = false;
      continue;
    }
    values.push_back(static_cast<int>(x));
  }
  if (ok) {
    *out = std::move(values);
  } else {
    bad_.insert(field);
  }
}

// ---------------------------------------------------------------------------------------
// Sections.

constexpr int64_t kMaxInt = std::numeric_limits<int>::max();
constexpr int64_t kMaxSteps = 1'000'000'000'000;
constexpr int64_t kMaxCheckpointsKept = 1'000'000;
constexpr double kInf = std::numeric_limits<double>::infinity();

void SpecParser::ReadJob(const YAML::Node& n, JobSection* job) {
  Entries e;
  if (!ReadMap(n, "job", "job", &e)) return;
  const std::string p = "job";
  String(e, p, "name", &job->name);
  String(e, p, "output_dir", &job->output_dir);
  Int(e, p, "steps", 1, kMaxSteps, &job->steps);
  Int(e, p, "eval_every", 0, kMaxSteps, &job->eval_every);
  Int(e, p, "eval_samples", 1, 100'000'000, &job->eval_samples);
  Uint(e, p, "seed", &job->seed);
  String(e, p, "token", &job->token);
  String(e, p, "resume_from", &job->resume_from);
  Bool(e, p, "synchronous", &job->synchronous);
}

void SpecParser::ReadCluster(const YAML::Node& n, ClusterSection* c) {
  Entries e;
  if (!ReadMap(n, "cluster", "cluster", &e)) return;
  const std::string p = "cluster";
  Int(e, p, "servers", 1, 1024, &c->servers);
  Int(e, p, "spares", 0, 1024, &c->spares);
  Int(e, p, "workers", 1, 1024, &c->workers);
  String(e, p, "host", &c->host);
  String(e, p, "advertise", &c->advertise);
  Int(e, p, "coordinator_port", 0, 65535, &c->coordinator_port);
  String(e, p, "coordinator", &c->coordinator);
  Int(e, p, "connect_timeout_s", 1, 86'400, &c->connect_timeout_s);
  Int(e, p, "heartbeat_interval_ms", 1, 60'000, &c->heartbeat_interval_ms);
  Int(e, p, "heartbeat_timeout_ms", 1, 600'000, &c->heartbeat_timeout_ms);
  Int(e, p, "rpc_timeout_ms", 1, 3'600'000, &c->rpc_timeout_ms);
  Int(e, p, "worker_threads", 1, 256, &c->worker_threads);
  Int(e, p, "server_threads", 1, 256, &c->server_threads);
  Int(e, p, "max_request_ids", 1, 1 << 28, &c->max_request_ids);
  Int(e, p, "max_reply_mb", 1, 240, &c->max_reply_mb);
}

void SpecParser::ReadModel(const YAML::Node& n, ModelSection* m) {
  Entries e;
  if (!ReadMap(n, "model", "model", &e)) return;
  const std::string p = "model";
  Int(e, p, "num_dense", 1, 4096, &m->num_dense);
  Int(e, p, "num_sparse", 1, 1024, &m->num_sparse);
  Int(e, p, "embedding_dim", 1, 1024, &m->embedding_dim);
  IntList(e, p, "bottom_mlp", 1, 65536, 1, 16, &m->bottom_mlp);
  IntList(e, p, "top_mlp", 1, 65536, 0, 16, &m->top_mlp);
  Enum(e, p, "pooling", Poolings(), &m->pooling);

  // table_rows: a scalar (every table) or a list (one per table); expanded in CrossCheck.
  std::string field;
  const Entry* entry = Find(e, p, "table_rows", &field);
  if (entry == nullptr) return;
  table_rows_given_ = true;
  const int line = lines_[field];
  const YAML::Node& v = entry->value;
  constexpr int64_t kMaxRows = 100'000'000'000;
  if (v.IsScalar()) {
    int64_t rows = 0;
    if (ParseIntNode(v, field, line, 1, kMaxRows, &rows)) {
      m->table_rows = {rows};
      table_rows_scalar_ = true;
    }
    return;
  }
  if (!v.IsSequence()) {
    Error(line, field,
          absl::StrCat("expected an integer (rows of every table) or a list with one row count "
                       "per sparse feature, got ",
                       Describe(v)));
    return;
  }
  std::vector<int64_t> rows;
  bool ok = true;
  for (size_t i = 0; i < v.size(); ++i) {
    int64_t x = 0;
    int item_line = LineOfNode(v[i]) > 0 ? LineOfNode(v[i]) : line;
    if (!ParseIntNode(v[i], absl::StrCat(field, "[", i, "]"), item_line, 1, kMaxRows, &x)) {
      ok = false;
      continue;
    }
    rows.push_back(x);
  }
  if (ok) {
    m->table_rows = std::move(rows);
  } else {
    bad_.insert(field);
  }
}

void SpecParser::ReadOptimizer(const YAML::Node& n, OptimizerSection* o) {
  Entries e;
  if (!ReadMap(n, "optimizer", "optimizer", &e)) return;
  Entries s;
  if (e.count("sparse") && ReadMap(e["sparse"].value, "optimizer.sparse", "optimizer.sparse", &s)) {
    const std::string p = "optimizer.sparse";
    Enum(s, p, "type", SparseOptimizers(), &o->sparse.type);
    Real(s, p, "lr", 0, true, kInf, false, &o->sparse.lr);
    Real(s, p, "eps", 0, true, kInf, false, &o->sparse.eps);
    Real(s, p, "initial_accumulator", 0, false, kInf, false, &o->sparse.initial_accumulator);
  }
  Entries d;
  if (e.count("dense") && ReadMap(e["dense"].value, "optimizer.dense", "optimizer.dense", &d)) {
    const std::string p = "optimizer.dense";
    Enum(d, p, "type", DenseOptimizers(), &o->dense.type);
    Real(d, p, "lr", 0, true, kInf, false, &o->dense.lr);
    Real(d, p, "beta1", 0, false, 1, true, &o->dense.beta1);
    Real(d, p, "beta2", 0, false, 1, true, &o->dense.beta2);
    Real(d, p, "eps", 0, true, kInf, false, &o->dense.eps);
  }
}

void SpecParser::ReadData(const YAML::Node& n, DataSection* d) {
  Entries e;
  if (!ReadMap(n, "data", "data", &e)) return;
  const std::string p = "data";
  Enum(e, p, "source", Sources(), &d->source);
  Int(e, p, "batch_size", 1, 1'000'000, &d->batch_size);
  Real(e, p, "eval_fraction", 0, false, 1, true, &d->eval_fraction);
  Int(e, p, "max_bad_lines", 0, std::numeric_limits<int64_t>::max(), &d->max_bad_lines);

  StringList(e, p, "paths", "a file path", &d->paths);

  Entries s;
  if (e.count("synthetic") &&
      ReadMap(e["synthetic"].value, "data.synthetic", "data.synthetic", &s)) {
    const std::string q = "data.synthetic";
    Int(s, q, "num_samples", 0, std::numeric_limits<int64_t>::max(), &d->synthetic.num_samples);
    Real(s, q, "zipf_s", 0, true, 10, false, &d->synthetic.zipf_s);
    Uint(s, q, "hidden_seed", &d->synthetic.hidden_seed);
    Real(s, q, "label_noise", 0, false, 1, false, &d->synthetic.label_noise);
  }
}

void SpecParser::ReadFaultTolerance(const YAML::Node& n, FaultToleranceSection* f) {
  Entries e;
  if (!ReadMap(n, "fault_tolerance", "fault_tolerance", &e)) return;
  const std::string p = "fault_tolerance";
  Enum(e, p, "mode", Modes(), &f->mode);
  Int(e, p, "k", 1, 254, &f->k);
  Int(e, p, "r", 1, 254, &f->r);
  Enum(e, p, "ack", Acks(), &f->ack);
  Int(e, p, "async_window", 1, 1'000'000, &f->async_window);
  Int(e, p, "async_linger_ms", 0, 10'000, &f->async_linger_ms);
  Int(e, p, "dense_replicas", -1, 1023, &f->dense_replicas);
  Enum(e, p, "codec_backend", CodecBackends(), &f->codec_backend);
  Real(e, p, "rebuild_rate_mb_s", 0, false, kInf, false, &f->rebuild_rate_mb_s);
  Entries c;
  if (e.count("checkpoint") && ReadMap(e["checkpoint"].value, "fault_tolerance.checkpoint",
                                       "fault_tolerance.checkpoint", &c)) {
    const std::string q = "fault_tolerance.checkpoint";
    String(c, q, "dir", &f->checkpoint.dir);
    Int(c, q, "interval_steps", 0, kMaxSteps, &f->checkpoint.interval_steps);
    Real(c, q, "interval_seconds", 0, false, kInf, false, &f->checkpoint.interval_seconds);
    Bool(c, q, "save_final", &f->checkpoint.save_final);
    Int(c, q, "keep", 1, kMaxCheckpointsKept, &f->checkpoint.keep);
  }
}

void SpecParser::ReadFaults(const YAML::Node& n, std::vector<FaultSpec>* faults) {
  faults->clear();
  if (!n || n.IsNull()) return;
  if (!n.IsSequence()) {
    Error(
        lines_["faults"], "faults",
        absl::StrCat("expected a list of faults (- at_step: ..., action: ...), got ", Describe(n)));
    return;
  }
  for (size_t i = 0; i < n.size(); ++i) {
    const std::string p = absl::StrCat("faults[", i, "]");
    const YAML::Node& item = n[i];
    lines_[p] = LineOfNode(item) > 0 ? LineOfNode(item) : lines_["faults"];
    FaultSpec fault;
    Entries e;
    if (item.IsNull() || !item.IsMap()) {
      Error(lines_[p], p,
            absl::StrCat("expected a map with at_step, action, target, duration_s; got ",
                         Describe(item)));
      bad_.insert(p);
      faults->push_back(fault);
      continue;
    }
    ReadMap(item, p, "faults[]", &e);
    Int(e, p, "at_step", -kMaxSteps, kMaxSteps, &fault.at_step);
    Enum(e, p, "action", FaultActions(), &fault.action);
    Int(e, p, "target", -kMaxInt, kMaxInt, &fault.target);
    Real(e, p, "duration_s", 0, false, kInf, false, &fault.duration_s);
    if (!e.count("at_step")) {
      Error(lines_[p], p + ".at_step", "missing; every fault needs the step it happens at");
    }
    if (!e.count("action")) {
      Error(lines_[p], p + ".action",
            absl::StrCat("missing; must be one of ", absl::StrJoin(FaultActions(), ", ")));
    }
    faults->push_back(fault);
  }
}

void SpecParser::ReadMonitoring(const YAML::Node& n, MonitoringSection* m) {
  Entries e;
  if (!ReadMap(n, "monitoring", "monitoring", &e)) return;
  const std::string p = "monitoring";
  Bool(e, p, "progress", &m->progress);
  Int(e, p, "metrics_interval_ms", 10, 3'600'000, &m->metrics_interval_ms);
  Int(e, p, "report_every_steps", 1, 1'000'000, &m->report_every_steps);
  Enum(e, p, "log_level", LogLevels(), &m->log_level);
}

void SpecParser::ReadSlurm(const YAML::Node& n, SlurmSection* s) {
  Entries e;
  if (!ReadMap(n, "slurm", "slurm", &e)) return;
  const std::string p = "slurm";
  String(e, p, "partition", &s->partition);
  Int(e, p, "nodes", 1, 100'000, &s->nodes);
  String(e, p, "time", &s->time);
  String(e, p, "account", &s->account);
  StringList(e, p, "sbatch_options", "an sbatch option", &s->sbatch_options);
  String(e, p, "binary", &s->binary);
}

void SpecParser::StringList(const Entries& e, const std::string& p, const char* key,
                            const char* what, std::vector<std::string>* out) {
  std::string field;
  const Entry* entry = Find(e, p, key, &field);
  if (entry == nullptr) return;
  const int line = lines_[field];
  const YAML::Node& v = entry->value;
  if (v.IsNull()) {
    out->clear();
  } else if (v.IsScalar()) {
    *out = {v.Scalar()};  // a single item
  } else if (v.IsSequence()) {
    std::vector<std::string> items;
    bool ok = true;
    for (size_t i = 0; i < v.size(); ++i) {
      int item_line = LineOfNode(v[i]) > 0 ? LineOfNode(v[i]) : line;
      if (!v[i].IsScalar() || v[i].Scalar().empty()) {
        Error(item_line, absl::StrCat(field, "[", i, "]"),
              absl::StrCat("expected ", what, ", got ", Describe(v[i])));
        ok = false;
        continue;
      }
      items.push_back(v[i].Scalar());
      lines_[absl::StrCat(field, "[", i, "]")] = item_line;
    }
    if (ok) {
      *out = std::move(items);
    } else {
      bad_.insert(field);
    }
  } else {
    Error(line, field, absl::StrCat("expected a list (each ", what, "), got ", Describe(v)));
  }
}

// ---------------------------------------------------------------------------------------
// Cross-field checks and derived defaults.

void SpecParser::CrossCheck(JobSpec* spec) {
  JobSection& job = spec->job;
  ClusterSection& cluster = spec->cluster;
  ModelSection& model = spec->model;
  DataSection& data = spec->data;
  FaultToleranceSection& ft = spec->fault_tolerance;

  // job
  if (!Bad({"job.name"}) && !IsValidJobName(job.name)) {
    ErrorAt("job.name", {"job.name"},
            absl::StrCat("must be 1 to 128 characters from A-Z a-z 0-9 . _ - (and not . or ..), "
                         "got ",
                         Quoted(job.name)));
  }
  if (job.output_dir.empty()) job.output_dir = "runs/" + job.name;
  if (!Bad({"job.token"})) {
    bool printable = job.token.size() <= 256;
    for (char c : job.token) printable = printable && c > 0x20 && c < 0x7f;
    if (!printable) {
      ErrorAt("job.token", {"job.token"},
              "must be at most 256 printable ASCII characters without spaces (it travels in "
              "RPC metadata)");
    }
  }
  if (!job.resume_from.empty() && !Bad({"job.resume_from"})) {
    std::error_code ec;
    if (!fs::is_directory(job.resume_from, ec)) {
      ErrorAt("job.resume_from", {"job.resume_from"},
              absl::StrCat("no such checkpoint directory: ", job.resume_from));
    }
  }

  // slurm: the values land in #SBATCH lines of a shell script
  for (auto [key, value] : {std::pair<const char*, const std::string*>{"partition",
                                                                        &spec->slurm.partition},
                            {"time", &spec->slurm.time},
                            {"account", &spec->slurm.account}}) {
    const std::string path = absl::StrCat("slurm.", key);
    if (Bad({path}) || value->empty()) continue;
    if (value->find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                 "0123456789_.:,-") != std::string::npos) {
      ErrorAt(path, {path},
              absl::StrCat("must hold only letters, digits and _.:,- (as sbatch takes it), got '",
                           *value, "'"));
    }
  }
  for (size_t i = 0; i < spec->slurm.sbatch_options.size() && !Bad({"slurm.sbatch_options"});
       ++i) {
    const std::string& option = spec->slurm.sbatch_options[i];
    const std::string path = absl::StrCat("slurm.sbatch_options[", i, "]");
    if (option.rfind("--", 0) != 0 || option.find_first_of("'\"`$\\") != std::string::npos) {
      ErrorAt(path, {path, "slurm.sbatch_options"},
              absl::StrCat("must be one long sbatch option such as --mem=8G (no quotes, $ or "
                           "backslashes), got '", option, "'"));
    }
  }

  // cluster
  if (!Bad({"cluster.host"}) && cluster.host.find_first_of(" \t/") != std::string::npos) {
    ErrorAt("cluster.host", {"cluster.host"},
            absl::StrCat("must be a host name or address (e.g. 0.0.0.0), got '", cluster.host,
                         "'"));
  }
  // What CheckDialAddress accepts as a host (a wildcard is not: nobody can dial it).
  if (!Bad({"cluster.advertise"}) && !cluster.advertise.empty() &&
      !CheckDialAddress(cluster.advertise + ":1").ok()) {
    ErrorAt("cluster.advertise", {"cluster.advertise"},
            absl::StrCat("must be a host name or address peers can dial, got '",
                         cluster.advertise, "'"));
  }
  if (!Bad({"cluster.coordinator"}) && !cluster.coordinator.empty()) {
    if (absl::Status s = CheckDialAddress(cluster.coordinator); !s.ok()) {
      ErrorAt("cluster.coordinator", {"cluster.coordinator"}, std::string(s.message()));
    }
  }
  if (!Bad({"cluster.heartbeat_timeout_ms", "cluster.heartbeat_interval_ms"}) &&
      cluster.heartbeat_timeout_ms <= cluster.heartbeat_interval_ms) {
    ErrorAt("cluster.heartbeat_timeout_ms",
            {"cluster.heartbeat_timeout_ms", "cluster.heartbeat_interval_ms"},
            absl::StrCat("must be greater than cluster.heartbeat_interval_ms (",
                         cluster.heartbeat_interval_ms, "), got ", cluster.heartbeat_timeout_ms));
  }

  // model
  if (!Bad({"model.table_rows", "model.num_sparse"})) {
    if (!table_rows_given_) {
      model.table_rows.assign(model.num_sparse, kDefaultTableRows);
    } else if (table_rows_scalar_) {
      int64_t rows = model.table_rows.at(0);
      model.table_rows.assign(model.num_sparse, rows);
    } else if (model.table_rows.size() != static_cast<size_t>(model.num_sparse)) {
      ErrorAt("model.table_rows", {"model.table_rows"},
              absl::StrCat("must have one entry per sparse feature (model.num_sparse = ",
                           model.num_sparse, "), got ", model.table_rows.size(),
                           " entries; or give one number for every table"));
    }
  }
  if (!Bad({"model.bottom_mlp", "model.embedding_dim"}) && !model.bottom_mlp.empty() &&
      model.bottom_mlp.back() != model.embedding_dim) {
    ErrorAt(
        "model.bottom_mlp", {"model.bottom_mlp", "model.embedding_dim"},
        absl::StrCat("last layer must equal model.embedding_dim (", model.embedding_dim,
                     ") so dense and sparse features can interact, got ", model.bottom_mlp.back()));
  }

  // data
  const bool criteo = data.source != "synthetic";
  if (!Bad({"data.source"}) && criteo) {
    if (!Bad({"model.num_dense"}) && model.num_dense != kCriteoDense) {
      ErrorAt("model.num_dense", {"model.num_dense", "data.source"},
              absl::StrCat("must be ", kCriteoDense, " when data.source is ", data.source,
                           " (Criteo rows have 13 integer features), got ", model.num_dense));
    }
    if (!Bad({"model.num_sparse"}) && model.num_sparse != kCriteoSparse) {
      ErrorAt("model.num_sparse", {"model.num_sparse", "data.source"},
              absl::StrCat("must be ", kCriteoSparse, " when data.source is ", data.source,
                           " (Criteo rows have 26 categorical features), got ", model.num_sparse));
    }
    if (!Bad({"data.paths"})) {
      if (data.paths.empty()) {
        ErrorAt(
            "data.paths", {"data.paths", "data.source"},
            absl::StrCat("must list at least one input file when data.source is ", data.source));
      }
      for (size_t i = 0; i < data.paths.size(); ++i) {
        fs::path path(data.paths[i]);
        if (path.is_relative() && !base_dir_.empty()) {
          std::error_code ec;
          fs::path abs = fs::absolute(base_dir_ / path, ec);
          path = ec ? base_dir_ / path : abs;
          path = path.lexically_normal();
        }
        std::error_code ec;
        std::string item = absl::StrCat("data.paths[", i, "]");
        if (!fs::exists(path, ec)) {
          ErrorAt(item, {item, "data.paths"},
                  absl::StrCat("no such file: ", path.string(),
                               base_dir_.empty() ? ""
                                                 : " (relative paths are resolved against "
                                                   "the spec file's folder)"));
        } else if (fs::is_directory(path, ec)) {
          ErrorAt(item, {item, "data.paths"},
                  absl::StrCat("is a directory, expected a file: ", path.string()));
        } else {
          data.paths[i] = path.string();
        }
      }
    }
  } else if (!Bad({"data.source", "data.paths"}) && !data.paths.empty()) {
    ErrorAt("data.paths", {"data.paths"},
            "is only used when data.source is criteo_tsv or criteo_csv (data.source is "
            "synthetic); remove it");
  }

  // fault tolerance
  const bool ft_ok =
      !Bad({"fault_tolerance.mode", "fault_tolerance.k", "fault_tolerance.r", "cluster.servers"});
  if (ft_ok && ft.mode == "erasure_code") {
    if (ft.k + ft.r > 255) {
      ErrorAt("fault_tolerance.k", {"fault_tolerance.k", "fault_tolerance.r"},
              absl::StrCat("k + r must be at most 255 (GF(2^8) codes), got k + r = ", ft.k + ft.r));
    } else if (ft.k + ft.r > cluster.servers) {
      ErrorAt("fault_tolerance.k",
              {"fault_tolerance.k", "fault_tolerance.r", "fault_tolerance.mode"},
              absl::StrCat("k + r must be at most cluster.servers (", cluster.servers,
                           ") so every stripe member is on its own server, got k + r = ", ft.k,
                           " + ", ft.r, " = ", ft.k + ft.r));
    }
  }
  if (ft_ok && ft.mode == "replication" && 1 + ft.r > cluster.servers) {
    ErrorAt("fault_tolerance.r", {"fault_tolerance.r", "fault_tolerance.mode"},
            absl::StrCat("replication keeps 1 + r copies on distinct servers, so 1 + r must be "
                         "at most cluster.servers (",
                         cluster.servers, "), got r = ", ft.r));
  }
  if (!Bad({"fault_tolerance.dense_replicas", "fault_tolerance.mode", "fault_tolerance.r",
            "cluster.servers"})) {
    if (ft.dense_replicas == -1) {
      const bool redundant = ft.mode == "erasure_code" || ft.mode == "replication";
      ft.dense_replicas = redundant ? std::min(ft.r, cluster.servers - 1) : 0;
    } else if (ft.dense_replicas > cluster.servers - 1) {
      ErrorAt("fault_tolerance.dense_replicas", {"fault_tolerance.dense_replicas"},
              absl::StrCat("must be between -1 and cluster.servers - 1 (", cluster.servers - 1,
                           "): each backup lives on another server, got ", ft.dense_replicas));
    }
  }
  if (ft.checkpoint.dir.empty()) ft.checkpoint.dir = job.output_dir + "/checkpoints";
  if (ft.mode == "checkpoint" && ft.checkpoint.interval_steps == 0 &&
      ft.checkpoint.interval_seconds == 0 &&
      !Bad({"fault_tolerance.checkpoint.interval_steps",
            "fault_tolerance.checkpoint.interval_seconds", "job.steps"})) {
    ft.checkpoint.interval_steps = std::max<int64_t>(1, job.steps / 10);
  }

  // faults
  for (size_t i = 0; i < spec->faults.size(); ++i) {
    const std::string p = absl::StrCat("faults[", i, "]");
    if (Bad({p})) continue;
    FaultSpec& f = spec->faults[i];
    if (!Bad({p + ".at_step", "job.steps"}) && (f.at_step < 1 || f.at_step > job.steps)) {
      ErrorAt(p + ".at_step", {p + ".at_step", p},
              absl::StrCat("must be between 1 and job.steps (", job.steps, "), got ", f.at_step));
    }
    if (Bad({p + ".action"}) || f.action.empty()) continue;
    const bool on_server = f.action != "kill_worker";
    const int count = on_server ? cluster.servers : cluster.workers;
    const char* what = on_server ? "cluster.servers" : "cluster.workers";
    if (!Bad({p + ".target", on_server ? "cluster.servers" : "cluster.workers"}) &&
        (f.target < 0 || f.target >= count)) {
      ErrorAt(p + ".target", {p + ".target", p},
              absl::StrCat("must be a ", on_server ? "server" : "worker", " index between 0 and ",
                           count - 1, " (", what, " = ", count, "), got ", f.target));
    }
    if (!Bad({p + ".duration_s"})) {
      if (f.action == "stop_server" && f.duration_s <= 0) {
        ErrorAt(p + ".duration_s", {p + ".duration_s", p},
                absl::StrCat("stop_server needs duration_s greater than 0 (seconds the server "
                             "stays stopped), got ",
                             FormatNumber(f.duration_s)));
      } else if (f.action != "stop_server" && f.duration_s != 0) {
        ErrorAt(p + ".duration_s", {p + ".duration_s", p},
                absl::StrCat("is only used by stop_server; ", f.action,
                             " is immediate (remove duration_s)"));
      }
    }
  }
}

absl::StatusOr<JobSpec> SpecParser::Parse(const std::string& text) {
  JobSpec spec;
  // A spec is a small text file. Refused before yaml-cpp sees them: control characters (a
  // NUL byte made yaml-cpp 0.7 run for minutes and take gigabytes: found by fuzz/spec) and
  // anything larger than any spec needs.
  constexpr size_t kMaxSpecBytes = 1 << 20;
  if (text.size() > kMaxSpecBytes) {
    return absl::InvalidArgumentError(absl::StrCat(source_, ": ", text.size(),
                                                   " bytes; a spec is at most ", kMaxSpecBytes,
                                                   " bytes of YAML text"));
  }
  int line = 1;
  bool line_start = true;  // only blanks so far on this line
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c == '\n') {
      ++line;
      line_start = true;
      continue;
    }
    if (line_start && c == ',') {
      // Never valid at the start of a block line, and a document that begins so sends
      // yaml-cpp 0.7 into an endless loop (found by fuzz/spec).
      return absl::InvalidArgumentError(absl::StrCat(
          source_, ":", line, ": a line cannot start with ','; write a list as [a, b]"));
    }
    if (c != ' ' && c != '\t') line_start = false;
    if ((c < 0x20 && c != '\n' && c != '\r' && c != '\t') || c == 0x7f) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s:%d: control character 0x%02x at byte %d: a spec is YAML text (is this the "
          "right file?)",
          source_, line, c, i));
    }
  }
  std::vector<YAML::Node> docs;
  try {
    docs = YAML::LoadAll(text);
  } catch (const YAML::ParserException& e) {
    std::string where = e.mark.is_null() ? source_ : absl::StrCat(source_, ":", e.mark.line + 1);
    return absl::InvalidArgumentError(absl::StrCat(where, ": YAML syntax error: ", e.msg));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(source_, ": cannot read YAML: ", e.what()));
  }
  if (docs.empty() || docs[0].IsNull()) {
    return absl::InvalidArgumentError(absl::StrCat(
        source_, ": the spec is empty; write at least one section (use {} for all defaults)"));
  }
  if (docs.size() > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(source_, ":", LineOfNode(docs[1]),
                     ": a spec is one YAML document, found a second one (remove the '---')"));
  }
  try {
    const YAML::Node& root = docs[0];
    Entries top;
    if (!root.IsMap()) {
      Error(LineOfNode(root), "",
            absl::StrCat("the spec must be a map of sections (", absl::StrJoin(KeysOf(""), ", "),
                         "), got ", Describe(root)));
    } else {
      ReadMap(root, "", "", &top);
      auto section = [&](const char* name) {
        auto it = top.find(name);
        return it == top.end() ? YAML::Node() : it->second.value;
      };
      ReadJob(section("job"), &spec.job);
      ReadCluster(section("cluster"), &spec.cluster);
      ReadModel(section("model"), &spec.model);
      ReadOptimizer(section("optimizer"), &spec.optimizer);
      ReadData(section("data"), &spec.data);
      ReadFaultTolerance(section("fault_tolerance"), &spec.fault_tolerance);
      ReadFaults(section("faults"), &spec.faults);
      ReadMonitoring(section("monitoring"), &spec.monitoring);
      ReadSlurm(section("slurm"), &spec.slurm);
      CrossCheck(&spec);
    }
  } catch (const std::exception& e) {  // yaml-cpp throws on some malformed trees
    Error(0, "", absl::StrCat("cannot read the spec: ", e.what()));
  }
  if (!issues_.empty()) {
    std::stable_sort(issues_.begin(), issues_.end(), [](const Issue& a, const Issue& b) {
      int la = a.line > 0 ? a.line : std::numeric_limits<int>::max();
      int lb = b.line > 0 ? b.line : std::numeric_limits<int>::max();
      return la < lb;
    });
    std::vector<std::string> lines;
    lines.reserve(issues_.size());
    for (const auto& issue : issues_) lines.push_back(issue.text);
    return absl::InvalidArgumentError(absl::StrJoin(lines, "\n"));
  }
  return spec;
}

// ---------------------------------------------------------------------------------------
// SpecToYaml.

std::string YamlString(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    unsigned char u = static_cast<unsigned char>(c);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (u < 0x20 || u == 0x7f) {
          static const char* hex = "0123456789abcdef";
          out += "\\x";
          out += hex[u >> 4];
          out += hex[u & 15];
        } else {
          out += c;
        }
    }
  }
  out += "\"";
  return out;
}

std::string BoolText(bool b) { return b ? "true" : "false"; }

template <typename T>
std::string FlowList(const std::vector<T>& v) {
  return absl::StrCat("[", absl::StrJoin(v, ", "), "]");
}

}  // namespace

absl::StatusOr<JobSpec> ParseSpec(const std::string& yaml_text, const std::string& source_name) {
  SpecParser parser(source_name, fs::path());
  return parser.Parse(yaml_text);
}

absl::StatusOr<JobSpec> LoadSpecFile(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    return absl::NotFoundError(absl::StrCat("spec file not found: ", path));
  }
  if (fs::is_directory(path, ec)) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec path is a directory, expected a YAML file: ", path));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::PermissionDeniedError(absl::StrCat("cannot open spec file: ", path));
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat("cannot read spec file: ", path));

  fs::path base = fs::path(path).parent_path();
  if (base.empty()) base = ".";
  SpecParser parser(path, base);
  auto spec = parser.Parse(buffer.str());
  if (!spec.ok()) return spec.status();
  spec->path = path;
  return spec;
}

std::string SpecToYaml(const JobSpec& spec) {
  std::string o;
  auto line = [&o](int indent, const char* key, const std::string& value) {
    absl::StrAppend(&o, std::string(indent, ' '), key, ": ", value, "\n");
  };
  auto section = [&o](int indent, const char* key) {
    absl::StrAppend(&o, std::string(indent, ' '), key, ":\n");
  };
  o += "# ecps job spec, every key written out (SpecToYaml)\n";

  const JobSection& j = spec.job;
  section(0, "job");
  line(2, "name", YamlString(j.name));
  line(2, "output_dir", YamlString(j.output_dir));
  line(2, "steps", absl::StrCat(j.steps));
  line(2, "eval_every", absl::StrCat(j.eval_every));
  line(2, "eval_samples", absl::StrCat(j.eval_samples));
  line(2, "seed", absl::StrCat(j.seed));
  line(2, "token", YamlString(j.token));
  line(2, "resume_from", YamlString(j.resume_from));
  line(2, "synchronous", BoolText(j.synchronous));

  const ClusterSection& c = spec.cluster;
  section(0, "cluster");
  line(2, "servers", absl::StrCat(c.servers));
  line(2, "spares", absl::StrCat(c.spares));
  line(2, "workers", absl::StrCat(c.workers));
  line(2, "host", YamlString(c.host));
  line(2, "advertise", YamlString(c.advertise));
  line(2, "coordinator_port", absl::StrCat(c.coordinator_port));
  line(2, "coordinator", YamlString(c.coordinator));
  line(2, "connect_timeout_s", absl::StrCat(c.connect_timeout_s));
  line(2, "heartbeat_interval_ms", absl::StrCat(c.heartbeat_interval_ms));
  line(2, "heartbeat_timeout_ms", absl::StrCat(c.heartbeat_timeout_ms));
  line(2, "rpc_timeout_ms", absl::StrCat(c.rpc_timeout_ms));
  line(2, "worker_threads", absl::StrCat(c.worker_threads));
  line(2, "server_threads", absl::StrCat(c.server_threads));
  line(2, "max_request_ids", absl::StrCat(c.max_request_ids));
  line(2, "max_reply_mb", absl::StrCat(c.max_reply_mb));

  const ModelSection& m = spec.model;
  section(0, "model");
  line(2, "num_dense", absl::StrCat(m.num_dense));
  line(2, "num_sparse", absl::StrCat(m.num_sparse));
  line(2, "embedding_dim", absl::StrCat(m.embedding_dim));
  if (!m.table_rows.empty()) {
    bool uniform = std::all_of(m.table_rows.begin(), m.table_rows.end(),
                               [&](int64_t r) { return r == m.table_rows[0]; });
    if (uniform && m.table_rows.size() == static_cast<size_t>(m.num_sparse)) {
      line(2, "table_rows", absl::StrCat(m.table_rows[0]));
    } else {
      line(2, "table_rows", FlowList(m.table_rows));
    }
  }
  line(2, "bottom_mlp", FlowList(m.bottom_mlp));
  line(2, "top_mlp", FlowList(m.top_mlp));
  line(2, "pooling", YamlString(m.pooling));

  const OptimizerSection& opt = spec.optimizer;
  section(0, "optimizer");
  section(2, "sparse");
  line(4, "type", YamlString(opt.sparse.type));
  line(4, "lr", FormatFloat(opt.sparse.lr));
  line(4, "eps", FormatFloat(opt.sparse.eps));
  line(4, "initial_accumulator", FormatFloat(opt.sparse.initial_accumulator));
  section(2, "dense");
  line(4, "type", YamlString(opt.dense.type));
  line(4, "lr", FormatFloat(opt.dense.lr));
  line(4, "beta1", FormatFloat(opt.dense.beta1));
  line(4, "beta2", FormatFloat(opt.dense.beta2));
  line(4, "eps", FormatFloat(opt.dense.eps));

  const DataSection& d = spec.data;
  section(0, "data");
  line(2, "source", YamlString(d.source));
  std::vector<std::string> paths;
  for (const auto& p : d.paths) paths.push_back(YamlString(p));
  line(2, "paths", FlowList(paths));
  line(2, "batch_size", absl::StrCat(d.batch_size));
  line(2, "eval_fraction", FormatFloat(d.eval_fraction));
  line(2, "max_bad_lines", absl::StrCat(d.max_bad_lines));
  section(2, "synthetic");
  line(4, "num_samples", absl::StrCat(d.synthetic.num_samples));
  line(4, "zipf_s", FormatFloat(d.synthetic.zipf_s));
  line(4, "hidden_seed", absl::StrCat(d.synthetic.hidden_seed));
  line(4, "label_noise", FormatFloat(d.synthetic.label_noise));

  const FaultToleranceSection& f = spec.fault_tolerance;
  section(0, "fault_tolerance");
  line(2, "mode", YamlString(f.mode));
  line(2, "k", absl::StrCat(f.k));
  line(2, "r", absl::StrCat(f.r));
  line(2, "ack", YamlString(f.ack));
  line(2, "async_window", absl::StrCat(f.async_window));
  line(2, "async_linger_ms", absl::StrCat(f.async_linger_ms));
  line(2, "dense_replicas", absl::StrCat(f.dense_replicas));
  line(2, "codec_backend", YamlString(f.codec_backend));
  line(2, "rebuild_rate_mb_s", FormatFloat(f.rebuild_rate_mb_s));
  section(2, "checkpoint");
  line(4, "dir", YamlString(f.checkpoint.dir));
  line(4, "interval_steps", absl::StrCat(f.checkpoint.interval_steps));
  line(4, "interval_seconds", FormatFloat(f.checkpoint.interval_seconds));
  line(4, "save_final", BoolText(f.checkpoint.save_final));
  line(4, "keep", absl::StrCat(f.checkpoint.keep));

  if (spec.faults.empty()) {
    o += "faults: []\n";
  } else {
    section(0, "faults");
    for (const auto& fault : spec.faults) {
      absl::StrAppend(&o, "  - at_step: ", fault.at_step, "\n");
      line(4, "action", YamlString(fault.action));
      line(4, "target", absl::StrCat(fault.target));
      line(4, "duration_s", FormatFloat(fault.duration_s));
    }
  }

  const MonitoringSection& mon = spec.monitoring;
  section(0, "monitoring");
  line(2, "progress", BoolText(mon.progress));
  line(2, "metrics_interval_ms", absl::StrCat(mon.metrics_interval_ms));
  line(2, "report_every_steps", absl::StrCat(mon.report_every_steps));
  line(2, "log_level", YamlString(mon.log_level));

  const SlurmSection& sl = spec.slurm;
  section(0, "slurm");
  line(2, "partition", YamlString(sl.partition));
  line(2, "nodes", absl::StrCat(sl.nodes));
  line(2, "time", YamlString(sl.time));
  line(2, "account", YamlString(sl.account));
  {
    std::vector<std::string> options;
    for (const std::string& option : sl.sbatch_options) options.push_back(YamlString(option));
    line(2, "sbatch_options", FlowList(options));
  }
  line(2, "binary", YamlString(sl.binary));
  return o;
}

}  // namespace ecps
