// Internal to the spec library (runtime/spec_*.cc); other modules include runtime/spec.h.
//
// The schema is written once, as one field table per section (spec_fields.cc): each Field
// names its key and says how to read it (type, range, the member it fills) and how to
// render it. The same tables give the known keys for unknown-key errors, SpecToYaml's output
// and SpecKeyPaths. Defaults are the struct initializers in spec.h. Checks that span fields,
// and derived defaults, are code (spec_check.cc).
#ifndef ECPS_RUNTIME_SPEC_PARSER_H_
#define ECPS_RUNTIME_SPEC_PARSER_H_

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/spec.h"

namespace ecps {
namespace spec_internal {

// --- text helpers (spec_text.cc) ---
size_t EditDistance(std::string_view a, std::string_view b);
// camelCase and kebab-case to snake_case, lower case.
std::string NormalizeKey(std::string_view key);
// The closest candidate to `word`, or "" when none is close enough to be a likely typo.
std::string ClosestMatch(std::string_view word, const std::vector<std::string>& candidates);
std::string Quoted(const std::string& s);
// Describes a node for "got ..." in messages.
std::string Describe(const YAML::Node& node);
bool IsIntegerText(std::string_view s);
bool ParseFloatText(std::string_view s, float* out);
bool ParseFloatText(std::string_view s, double* out);
// Shortest text that reads back to the same value, always float-looking ("1.0").
std::string FormatFloat(float value);
std::string FormatFloat(double value);
// An integral value without a fraction ("2"), else as FormatFloat.
std::string FormatNumber(double v);
// A double-quoted YAML string with escapes.
std::string YamlString(std::string_view s);

// The known keys of one map: "" for the top level, "optimizer.sparse", "faults[]" for a
// fault entry.
struct SectionKeys {
  std::string path;
  std::vector<std::string> keys;
};

struct Entry {
  YAML::Node key;
  YAML::Node value;
};
using Entries = std::map<std::string, Entry>;

// Reads a spec, collecting every error instead of stopping at the first (spec_parser.cc).
class SpecParser {
 public:
  SpecParser(std::string source, std::filesystem::path base_dir)
      : source_(std::move(source)), base_dir_(std::move(base_dir)) {}

  absl::StatusOr<JobSpec> Parse(const std::string& text);

  // --- error reporting ---
  void Error(int line, const std::string& path, const std::string& message);
  // The line of the first of `paths` that appears in the file (or of a parent section).
  int LineOf(std::initializer_list<std::string> paths) const;
  void ErrorAt(const std::string& path, std::initializer_list<std::string> line_paths,
               const std::string& message) {
    Error(LineOf(line_paths), path, message);
  }
  // Whether any of `paths` already has an error (checks that build on it are skipped).
  bool Bad(std::initializer_list<std::string> paths) const;
  void MarkBad(const std::string& path) { bad_.insert(path); }
  int LineOfKey(const std::string& path) { return lines_[path]; }
  void SetLine(const std::string& path, int line) { lines_[path] = line; }
  static int LineOfNode(const YAML::Node& node);

  // An input file named at `path` (a key path such as "data.paths[0]"): resolved against the
  // spec file's folder when relative, and required to exist and not be a folder. Returns the
  // resolved path, or "" after reporting the error at `line_paths`.
  std::string InputFile(const std::string& file, const std::string& path,
                        std::initializer_list<std::string> line_paths);

  // Checks that `node` is a map whose keys are all in `section`'s schema; fills *out with its
  // entries. A null node (a section with nothing under it) is an empty map.
  bool ReadMap(const YAML::Node& node, const std::string& path, const std::string& section,
               Entries* out);

  // --- values: each reads entry's value at key path `field` into *out, checking type and
  // range; false (with an error reported) when it does not fit, leaving *out alone ---
  bool Int(const Entry& entry, const std::string& field, int64_t lo, int64_t hi, int64_t* out);
  bool Uint(const Entry& entry, const std::string& field, uint64_t* out);
  template <typename F>
  bool Real(const Entry& entry, const std::string& field, double lo, bool lo_open, double hi,
            bool hi_open, F* out);
  bool Bool(const Entry& entry, const std::string& field, bool* out);
  bool String(const Entry& entry, const std::string& field, std::string* out);
  // The index of the value in `allowed`.
  bool Choice(const Entry& entry, const std::string& field, const std::vector<std::string>& allowed,
              size_t* out);
  bool IntList(const Entry& entry, const std::string& field, int64_t lo, int64_t hi, size_t min_len,
               size_t max_len, std::vector<int>* out);
  // A list of non-empty strings (a single string is a list of one); `what` names an item.
  bool StringList(const Entry& entry, const std::string& field, const char* what,
                  std::vector<std::string>* out);
  // model.table_rows: a scalar (every table) or a list (one per table); CrossCheck expands.
  bool TableRows(const Entry& entry, const std::string& field, std::vector<int64_t>* out);

 private:
  struct Issue {
    int line;  // 1-based; 0 when unknown
    std::string text;
  };

  void UnknownKey(const YAML::Node& key, const std::string& path, const std::string& name,
                  const std::string& section);
  bool RequireScalar(const YAML::Node& v, const std::string& field, int line, const char* expected);
  // Integer text -> value, or an error mentioning the range.
  bool ParseIntNode(const YAML::Node& v, const std::string& field, int line, int64_t lo, int64_t hi,
                    int64_t* out);
  // Cross-field checks and derived defaults (spec_check.cc), section by section in file order;
  // a check on a key that already has an error (Bad) is skipped.
  void CrossCheck(JobSpec* spec);
  // job: its name and token, the checkpoint it resumes from; derives job.output_dir.
  void CheckJob(JobSection* job_section);
  // cluster: where the workers' math runs.
  void CheckWorkerDevice(const ClusterSection& cluster);
  // slurm: the values land in #SBATCH lines of a shell script.
  void CheckSlurm(const SlurmSection& slurm);
  // cluster: the addresses it binds, advertises and dials, and the heartbeats' timing.
  void CheckClusterAddresses(const ClusterSection& cluster);
  // model: expands model.table_rows to one entry per table, and bounds the weights' size.
  void CheckModel(const ClusterSection& cluster, ModelSection* model_section);
  // data: the files a Criteo source reads (resolved in place), and what only files have.
  void CheckData(const ModelSection& model, DataSection* data_section);
  // fault_tolerance: the redundancy the servers can hold; derives the checkpoints' defaults.
  void CheckFaultTolerance(JobSpec* spec);
  // faults: each injected fault's step, target and duration.
  void CheckFaults(const JobSpec& spec);
  // security.tls: all or nothing, and every file there (resolved in place).
  void CheckTls(TlsSection* tls);

  std::string source_;
  std::filesystem::path base_dir_;  // input files are resolved against it when set
  std::vector<Issue> issues_;
  std::map<std::string, int> lines_;  // key path -> 1-based line of the key
  std::set<std::string> bad_;         // key paths that already have an error
  bool table_rows_scalar_ = false;
  bool table_rows_given_ = false;
};

// --- the field tables ---

// One key of a section S.
template <typename S>
struct Field {
  std::string key;
  // Reads the entry given for `key` at key path `field` into *s (errors go to the parser).
  std::function<void(SpecParser&, const Entry&, const std::string& field, S*)> read;
  // Appends the YAML lines of this key of `s`, indented by `indent` spaces.
  std::function<void(const S& s, int indent, std::string* out)> render;
  // For a key holding a section (or a list of them): appends that section's schema, and
  // those under it, as found at `path`. Empty for plain values.
  std::function<void(const std::string& path, std::vector<SectionKeys>* out)> sections;
};
template <typename S>
using Table = std::vector<Field<S>>;

template <typename S>
std::vector<std::string> KeysOf(const Table<S>& table) {
  std::vector<std::string> keys;
  for (const Field<S>& f : table) keys.push_back(f.key);
  return keys;
}

template <typename S>
void AppendSections(const Table<S>& table, const std::string& path, std::vector<SectionKeys>* out) {
  out->push_back({path, KeysOf(table)});
  for (const Field<S>& f : table) {
    if (f.sections) f.sections(path.empty() ? f.key : path + "." + f.key, out);
  }
}

// Reads the map `node` at key path `path` (schema `section`) into *s, field by field in
// table order.
template <typename S>
void ReadSection(SpecParser& parser, const YAML::Node& node, const std::string& path,
                 const std::string& section, const Table<S>& table, S* s) {
  Entries entries;
  if (!parser.ReadMap(node, path, section, &entries)) return;
  for (const Field<S>& f : table) {
    auto it = entries.find(f.key);
    if (it == entries.end()) continue;
    f.read(parser, it->second, path.empty() ? f.key : path + "." + f.key, s);
  }
}

template <typename S>
void RenderSection(const Table<S>& table, const S& s, int indent, std::string* out) {
  for (const Field<S>& f : table) f.render(s, indent, out);
}

// The top-level table, and every section's schema in file order (spec_fields.cc).
const Table<JobSpec>& SpecTable();
const std::vector<SectionKeys>& Schema();
const std::vector<std::string>& KeysOfSection(std::string_view section);

}  // namespace spec_internal
}  // namespace ecps

#endif  // ECPS_RUNTIME_SPEC_PARSER_H_
