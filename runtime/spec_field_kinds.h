// The kinds of field the spec's tables are made of (runtime/spec_fields.cc): for each value
// type, how a key is read into its member, rendered back and listed. Only spec_fields.cc
// includes it.
#ifndef ECPS_RUNTIME_SPEC_FIELD_KINDS_H_
#define ECPS_RUNTIME_SPEC_FIELD_KINDS_H_

#include <algorithm>
#include <iterator>
#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/spec_enum_names.h"
#include "runtime/spec_parser.h"

namespace ecps {
namespace spec_internal {

// String values that stay strings: they are handed on by name.
inline const std::vector<std::string>& CodecBackends() {
  static const auto* values = new std::vector<std::string>{
      "auto", "ecps", "ecps-avx512-gfni", "ecps-avx2-gfni", "ecps-avx2", "ecps-portable",
      "isal", "cuda"};  // codec::ErasureCode::Create's names
  return *values;
}
inline const std::vector<std::string>& LogLevels() {
  static const auto* values =
      new std::vector<std::string>{"trace", "debug", "info", "warn", "error"};
  return *values;
}
inline const std::vector<std::string>& ImagePullPolicies() {
  static const auto* values = new std::vector<std::string>{"IfNotPresent", "Always", "Never"};
  return *values;
}

constexpr int64_t kMaxInt = std::numeric_limits<int>::max();
constexpr int64_t kMaxInt64 = std::numeric_limits<int64_t>::max();
constexpr int64_t kMaxSteps = 1'000'000'000'000;
constexpr int64_t kMaxCheckpointsKept = 1'000'000;
constexpr double kInf = std::numeric_limits<double>::infinity();

// --- rendering ---

inline void Line(int indent, const std::string& key, const std::string& value,
                 std::string* out) {
  absl::StrAppend(out, std::string(indent, ' '), key, ": ", value, "\n");
}

template <typename T>
std::string FlowList(const std::vector<T>& v) {
  return absl::StrCat("[", absl::StrJoin(v, ", "), "]");
}

inline std::string QuotedList(const std::vector<std::string>& items) {
  std::vector<std::string> quoted;
  for (const std::string& item : items) quoted.push_back(YamlString(item));
  return FlowList(quoted);
}

// --- field kinds ---

// A scalar field: `read` parses into the member, `text` renders it.
template <typename S, typename T>
Field<S> Scalar(const char* key, T S::*member,
                std::function<void(SpecParser&, const Entry&, const std::string&, T*)> read,
                std::function<std::string(const T&)> text) {
  return {key,
          [member, read](SpecParser& p, const Entry& e, const std::string& f, S* s) {
            read(p, e, f, &(s->*member));
          },
          [key = std::string(key), member, text](const S& s, int indent, std::string* out) {
            Line(indent, key, text(s.*member), out);
          },
          nullptr};
}

template <typename S, typename T>
Field<S> IntField(const char* key, T S::*member, int64_t lo, int64_t hi) {
  return Scalar<S, T>(
      key, member,
      [lo, hi](SpecParser& p, const Entry& e, const std::string& f, T* out) {
        int64_t v = 0;
        if (p.Int(e, f, lo, hi, &v)) *out = static_cast<T>(v);
      },
      [](const T& v) { return absl::StrCat(v); });
}

template <typename S>
Field<S> UintField(const char* key, uint64_t S::*member) {
  return Scalar<S, uint64_t>(
      key, member,
      [](SpecParser& p, const Entry& e, const std::string& f, uint64_t* out) { p.Uint(e, f, out); },
      [](const uint64_t& v) { return absl::StrCat(v); });
}

// A number in (lo, hi), the ends open or closed as given.
template <typename S, typename F>
Field<S> RealField(const char* key, F S::*member, double lo, bool lo_open, double hi,
                   bool hi_open) {
  return Scalar<S, F>(
      key, member,
      [=](SpecParser& p, const Entry& e, const std::string& f, F* out) {
        p.Real(e, f, lo, lo_open, hi, hi_open, out);
      },
      [](const F& v) { return FormatFloat(v); });
}

template <typename S>
Field<S> BoolField(const char* key, bool S::*member) {
  return Scalar<S, bool>(
      key, member,
      [](SpecParser& p, const Entry& e, const std::string& f, bool* out) { p.Bool(e, f, out); },
      [](const bool& v) { return std::string(v ? "true" : "false"); });
}

template <typename S>
Field<S> StringField(const char* key, std::string S::*member) {
  return Scalar<S, std::string>(
      key, member,
      [](SpecParser& p, const Entry& e, const std::string& f, std::string* out) {
        p.String(e, f, out);
      },
      [](const std::string& v) { return YamlString(v); });
}

// A string that must be one of `allowed` (kept as the string).
template <typename S>
Field<S> ChoiceField(const char* key, std::string S::*member,
                     const std::vector<std::string>& (*allowed)()) {
  return Scalar<S, std::string>(
      key, member,
      [allowed](SpecParser& p, const Entry& e, const std::string& f, std::string* out) {
        size_t index = 0;
        if (p.Choice(e, f, allowed(), &index)) *out = allowed()[index];
      },
      [](const std::string& v) { return YamlString(v); });
}

// An enum, written by its name (EnumNames).
template <typename S, typename E>
Field<S> EnumField(const char* key, E S::*member) {
  return Scalar<S, E>(
      key, member,
      [](SpecParser& p, const Entry& e, const std::string& f, E* out) {
        size_t index = 0;
        if (p.Choice(e, f, AllNames<E>(), &index)) *out = static_cast<E>(index);
      },
      [](const E& v) { return YamlString(NameOf(v)); });
}

template <typename S>
Field<S> IntListField(const char* key, std::vector<int> S::*member, int64_t lo, int64_t hi,
                      size_t min_len, size_t max_len) {
  return Scalar<S, std::vector<int>>(
      key, member,
      [=](SpecParser& p, const Entry& e, const std::string& f, std::vector<int>* out) {
        p.IntList(e, f, lo, hi, min_len, max_len, out);
      },
      [](const std::vector<int>& v) { return FlowList(v); });
}

template <typename S>
Field<S> StringListField(const char* key, std::vector<std::string> S::*member, const char* what) {
  return Scalar<S, std::vector<std::string>>(
      key, member,
      [what](SpecParser& p, const Entry& e, const std::string& f, std::vector<std::string>* out) {
        p.StringList(e, f, what, out);
      },
      QuotedList);
}

// A key holding a section of its own (a map read with `table`).
template <typename S, typename Sub>
Field<S> SectionField(const char* key, Sub S::*member, const Table<Sub>& (*table)()) {
  return {key,
          [member, table](SpecParser& p, const Entry& e, const std::string& f, S* s) {
            ReadSection(p, e.value, f, f, table(), &(s->*member));
          },
          [key = std::string(key), member, table](const S& s, int indent, std::string* out) {
            absl::StrAppend(out, std::string(indent, ' '), key, ":\n");
            RenderSection(table(), s.*member, indent + 2, out);
          },
          [table](const std::string& path, std::vector<SectionKeys>* out) {
            AppendSections(table(), path, out);
          }};
}

}  // namespace spec_internal
}  // namespace ecps

#endif  // ECPS_RUNTIME_SPEC_FIELD_KINDS_H_
