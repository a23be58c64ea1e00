// Text helpers of the spec library: typo suggestions, value descriptions, number and string
// formatting (runtime/spec_parser.h).
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "runtime/spec_parser.h"

namespace ecps {
namespace spec_internal {
namespace {

template <typename F>
bool ParseFloatTextOf(std::string_view s, F* out) {
  if (!s.empty() && s[0] == '+') s.remove_prefix(1);
  if (s.empty()) return false;
  F value{};
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || ptr != s.data() + s.size()) return false;
  *out = value;
  return true;
}

template <typename F>
std::string FormatFloatOf(F value) {
  char buf[64];
  auto [ptr, ec] = std::to_chars(buf, buf + sizeof(buf), value);
  std::string s(buf, ptr);
  // Keep a float-looking token for integral values ("1" -> "1.0"); YAML readers agree.
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

}  // namespace

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

bool ParseFloatText(std::string_view s, float* out) { return ParseFloatTextOf(s, out); }
bool ParseFloatText(std::string_view s, double* out) { return ParseFloatTextOf(s, out); }

std::string FormatFloat(float value) { return FormatFloatOf(value); }
std::string FormatFloat(double value) { return FormatFloatOf(value); }

std::string FormatNumber(double v) {
  if (v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(static_cast<int64_t>(v));
  return FormatFloat(v);
}

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

}  // namespace spec_internal
}  // namespace ecps
