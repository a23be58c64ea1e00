// Reading a spec: the YAML text, maps and their keys, and every kind of value, with errors
// that name the file, the line and the key path (runtime/spec_parser.h).
#include "runtime/spec_parser.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>
#include <system_error>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace ecps {

namespace fs = std::filesystem;

namespace spec_internal {

void SpecParser::Error(int line, const std::string& path, const std::string& message) {
  std::string where = line > 0 ? absl::StrCat(source_, ":", line) : source_;
  std::string text = path.empty() ? absl::StrCat(where, ": ", message)
                                  : absl::StrCat(where, ": ", path, ": ", message);
  issues_.push_back({line, std::move(text)});
  if (!path.empty()) bad_.insert(path);
}

int SpecParser::LineOf(std::initializer_list<std::string> paths) const {
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

bool SpecParser::Bad(std::initializer_list<std::string> paths) const {
  for (const auto& p : paths) {
    if (bad_.count(p)) return true;
  }
  return false;
}

int SpecParser::LineOfNode(const YAML::Node& node) {
  YAML::Mark m = node.Mark();
  return m.is_null() ? 0 : m.line + 1;
}

void SpecParser::UnknownKey(const YAML::Node& key, const std::string& path, const std::string& name,
                            const std::string& section) {
  const auto& keys = KeysOfSection(section);
  std::string msg = "unknown key";
  std::string near = ClosestMatch(name, keys);
  if (!near.empty()) {
    absl::StrAppend(&msg, "; did you mean ", Quoted(near), "?");
  } else {
    // Perhaps it belongs in another section ("batch_size" under model).
    std::string norm = NormalizeKey(name);
    std::string elsewhere;
    for (const auto& s : Schema()) {
      if (s.path == section || s.path == "faults[]") continue;
      for (const auto& k : s.keys) {
        if (k == norm || (norm.size() >= 5 && EditDistance(norm, k) <= 1)) {
          elsewhere = s.path.empty() ? k : absl::StrCat(s.path, ".", k);
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
          absl::StrCat("expected a map of keys (", absl::StrJoin(KeysOfSection(section), ", "),
                       "), got ", Describe(node)));
    return false;
  }
  const auto& keys = KeysOfSection(section);
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

static std::string RangeText(int64_t lo, int64_t hi) {
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

bool SpecParser::Int(const Entry& entry, const std::string& field, int64_t lo, int64_t hi,
                     int64_t* out) {
  return ParseIntNode(entry.value, field, lines_[field], lo, hi, out);
}

bool SpecParser::Uint(const Entry& entry, const std::string& field, uint64_t* out) {
  int line = lines_[field];
  const YAML::Node& v = entry.value;
  if (!RequireScalar(v, field, line, "an integer")) return false;
  const std::string& text = v.Scalar();
  if (v.Tag() == "!" || !IsIntegerText(text)) {
    Error(line, field, absl::StrCat("expected an integer, got ", Describe(v)));
    return false;
  }
  uint64_t value = 0;
  if (text[0] == '-' || !absl::SimpleAtoi(text, &value)) {
    Error(line, field,
          absl::StrCat("must be between 0 and ", std::numeric_limits<uint64_t>::max(), ", got ",
                       text));
    return false;
  }
  *out = value;
  return true;
}

template <typename F>
bool SpecParser::Real(const Entry& entry, const std::string& field, double lo, bool lo_open,
                      double hi, bool hi_open, F* out) {
  int line = lines_[field];
  const YAML::Node& v = entry.value;
  if (!RequireScalar(v, field, line, "a number")) return false;
  F value{};
  if (v.Tag() == "!" || !ParseFloatText(v.Scalar(), &value)) {
    double wide = 0;
    if (v.Tag() != "!" && ParseFloatText(v.Scalar(), &wide)) {
      Error(line, field, absl::StrCat("is out of range for a 32-bit float, got ", v.Scalar()));
    } else {
      Error(line, field, absl::StrCat("expected a number, got ", Describe(v)));
    }
    return false;
  }
  if (!std::isfinite(value)) {
    Error(line, field, absl::StrCat("must be a finite number, got ", v.Scalar()));
    return false;
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
    return false;
  }
  *out = value;
  return true;
}
template bool SpecParser::Real(const Entry&, const std::string&, double, bool, double, bool,
                               float*);
template bool SpecParser::Real(const Entry&, const std::string&, double, bool, double, bool,
                               double*);

bool SpecParser::Bool(const Entry& entry, const std::string& field, bool* out) {
  int line = lines_[field];
  const YAML::Node& v = entry.value;
  if (!RequireScalar(v, field, line, "true or false")) return false;
  const std::string& s = v.Scalar();
  if (v.Tag() != "!" && (s == "true" || s == "True" || s == "TRUE")) {
    *out = true;
  } else if (v.Tag() != "!" && (s == "false" || s == "False" || s == "FALSE")) {
    *out = false;
  } else {
    Error(line, field, absl::StrCat("expected true or false, got ", Describe(v)));
    return false;
  }
  return true;
}

bool SpecParser::String(const Entry& entry, const std::string& field, std::string* out) {
  if (!RequireScalar(entry.value, field, lines_[field], "a string")) return false;
  *out = entry.value.Scalar();
  return true;
}

bool SpecParser::Choice(const Entry& entry, const std::string& field,
                        const std::vector<std::string>& allowed, size_t* out) {
  int line = lines_[field];
  if (!RequireScalar(entry.value, field, line, "a string")) return false;
  const std::string& s = entry.value.Scalar();
  if (std::find(allowed.begin(), allowed.end(), s) == allowed.end()) {
    std::string msg =
        absl::StrCat("must be one of ", absl::StrJoin(allowed, ", "), "; got ", Quoted(s));
    std::string near = ClosestMatch(s, allowed);
    if (!near.empty()) absl::StrAppend(&msg, " (did you mean ", Quoted(near), "?)");
    Error(line, field, msg);
    return false;
  }
  *out = static_cast<size_t>(std::find(allowed.begin(), allowed.end(), s) - allowed.begin());
  return true;
}

bool SpecParser::IntList(const Entry& entry, const std::string& field, int64_t lo, int64_t hi,
                         size_t min_len, size_t max_len, std::vector<int>* out) {
  int line = lines_[field];
  const YAML::Node& v = entry.value;
  if (!v.IsSequence()) {
    Error(line, field,
          absl::StrCat("expected a list of integers (e.g. [64, 16]), got ", Describe(v)));
    return false;
  }
  if (v.size() < min_len || v.size() > max_len) {
    Error(
        line, field,
        absl::StrCat("must have between ", min_len, " and ", max_len, " entries, got ", v.size()));
    return false;
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
  if (!ok) {
    bad_.insert(field);
    return false;
  }
  *out = std::move(values);
  return true;
}

bool SpecParser::StringList(const Entry& entry, const std::string& field, const char* what,
                            std::vector<std::string>* out) {
  const int line = lines_[field];
  const YAML::Node& v = entry.value;
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
    if (!ok) {
      bad_.insert(field);
      return false;
    }
    *out = std::move(items);
  } else {
    Error(line, field, absl::StrCat("expected a list (each ", what, "), got ", Describe(v)));
    return false;
  }
  return true;
}

bool SpecParser::TableRows(const Entry& entry, const std::string& field,
                           std::vector<int64_t>* out) {
  table_rows_given_ = true;
  const int line = lines_[field];
  const YAML::Node& v = entry.value;
  constexpr int64_t kMaxRows = 100'000'000'000;
  if (v.IsScalar()) {
    int64_t rows = 0;
    if (!ParseIntNode(v, field, line, 1, kMaxRows, &rows)) return false;
    *out = {rows};
    table_rows_scalar_ = true;
    return true;
  }
  if (!v.IsSequence()) {
    Error(line, field,
          absl::StrCat("expected an integer (rows of every table) or a list with one row count "
                       "per sparse feature, got ",
                       Describe(v)));
    return false;
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
  if (!ok) {
    bad_.insert(field);
    return false;
  }
  *out = std::move(rows);
  return true;
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
    if (!root.IsMap()) {
      Error(LineOfNode(root), "",
            absl::StrCat("the spec must be a map of sections (",
                         absl::StrJoin(KeysOfSection(""), ", "), "), got ", Describe(root)));
    } else {
      ReadSection(*this, root, "", "", SpecTable(), &spec);
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

}  // namespace spec_internal

absl::StatusOr<JobSpec> ParseSpec(const std::string& yaml_text, const std::string& source_name) {
  spec_internal::SpecParser parser(source_name, fs::path());
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
  spec_internal::SpecParser parser(path, base);
  auto spec = parser.Parse(buffer.str());
  if (!spec.ok()) return spec.status();
  spec->path = path;
  return spec;
}

}  // namespace ecps
