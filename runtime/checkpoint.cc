#include "runtime/checkpoint.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <system_error>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "runtime/status_macros.h"

namespace ecps {
namespace {

namespace fs = std::filesystem;

static_assert(std::endian::native == std::endian::little,
              "the checkpoint format is little-endian; add byte swapping for this host");
static_assert(sizeof(float) == 4);

constexpr char kManifestName[] = "MANIFEST.json";
constexpr char kFormatName[] = "ecps-checkpoint";
constexpr char kDenseMagic[8] = {'E', 'C', 'P', 'S', 'D', 'N', 'S', '1'};
constexpr size_t kMaxManifestBytes = size_t{256} << 20;
// Reads of ascending row ids merge into one pread when the gap between two ids is at most
// this many bytes (a pread costs about as much as copying a few KiB from the page cache)...
constexpr int64_t kMaxReadGapBytes = 8 << 10;
// ...and the merged span stays within this many bytes.
constexpr int64_t kMaxReadSpanBytes = 4 << 20;
// Whole-table verification reads this much at a time.
constexpr int64_t kVerifyChunkBytes = 8 << 20;

// ---- Small helpers -----------------------------------------------------------------------

std::string Join(const std::string& dir, const std::string& name) {
  return (fs::path(dir) / name).string();
}

std::string StripTrailingSlashes(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

absl::Status FileError(absl::StatusCode code, const std::string& path, absl::string_view what) {
  return absl::Status(code, absl::StrCat(path, ": ", what));
}

absl::Status ErrnoError(const std::string& path, absl::string_view op, int err) {
  absl::StatusCode code = err == ENOENT ? absl::StatusCode::kNotFound : absl::StatusCode::kInternal;
  return FileError(code, path, absl::StrCat(op, " failed: ", std::strerror(err)));
}

// Closes a file descriptor on scope exit unless released.
class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  ~FdCloser() {
    if (fd_ >= 0) ::close(fd_);
  }
  FdCloser(const FdCloser&) = delete;
  FdCloser& operator=(const FdCloser&) = delete;
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

absl::Status PwriteAll(int fd, const std::string& path, const void* data, int64_t bytes,
                       int64_t offset) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = ::pwrite(fd, p, static_cast<size_t>(bytes), offset);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(path, "write", errno);
    }
    if (n == 0) return FileError(absl::StatusCode::kInternal, path, "write made no progress");
    p += n;
    bytes -= n;
    offset += n;
  }
  return absl::OkStatus();
}

// Reads exactly `bytes` at `offset`; DATA_LOSS when the file ends first.
absl::Status PreadExact(int fd, const std::string& path, void* data, int64_t bytes,
                        int64_t offset) {
  char* p = static_cast<char*>(data);
  while (bytes > 0) {
    ssize_t n = ::pread(fd, p, static_cast<size_t>(bytes), offset);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(path, "read", errno);
    }
    if (n == 0) {
      return FileError(absl::StatusCode::kDataLoss, path,
                       absl::StrCat("truncated: ends before byte ", offset + bytes));
    }
    p += n;
    bytes -= n;
    offset += n;
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> FileSize(int fd, const std::string& path) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return ErrnoError(path, "stat", errno);
  return static_cast<int64_t>(st.st_size);
}

absl::Status FsyncFd(int fd, const std::string& path) {
  if (::fsync(fd) != 0) return ErrnoError(path, "fsync", errno);
  return absl::OkStatus();
}

// fsyncs a file or directory by path (so its contents or entries are durable).
absl::Status FsyncPath(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError(path, "open", errno);
  FdCloser closer(fd);
  return FsyncFd(fd, path);
}

// Opens `path` read-only; a missing file is reported with `missing_code`.
absl::StatusOr<int> OpenForRead(const std::string& path, absl::StatusCode missing_code) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return FileError(missing_code, path, "missing");
    return ErrnoError(path, "open", errno);
  }
  return fd;
}

// ---- XXH64 -------------------------------------------------------------------------------

constexpr uint64_t kP1 = 0x9E3779B185EBCA87ULL;
constexpr uint64_t kP2 = 0xC2B2AE3D27D4EB4FULL;
constexpr uint64_t kP3 = 0x165667B19E3779F9ULL;
constexpr uint64_t kP4 = 0x85EBCA77C2B2AE63ULL;
constexpr uint64_t kP5 = 0x27D4EB2F165667C5ULL;

inline uint64_t Load64(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
inline uint32_t Load32(const unsigned char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline uint64_t Round(uint64_t acc, uint64_t input) {
  acc += input * kP2;
  acc = std::rotl(acc, 31);
  return acc * kP1;
}
inline uint64_t MergeRound(uint64_t acc, uint64_t val) {
  acc ^= Round(0, val);
  return acc * kP1 + kP4;
}
inline uint64_t Avalanche(uint64_t h) {
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  h *= kP3;
  h ^= h >> 32;
  return h;
}
// The tail (< 32 bytes) and final mix shared by the one-shot and streaming forms.
inline uint64_t Finalize(uint64_t h, const unsigned char* p, size_t len) {
  while (len >= 8) {
    h ^= Round(0, Load64(p));
    h = std::rotl(h, 27) * kP1 + kP4;
    p += 8;
    len -= 8;
  }
  if (len >= 4) {
    h ^= static_cast<uint64_t>(Load32(p)) * kP1;
    h = std::rotl(h, 23) * kP2 + kP3;
    p += 4;
    len -= 4;
  }
  while (len > 0) {
    h ^= (*p) * kP5;
    h = std::rotl(h, 11) * kP1;
    ++p;
    --len;
  }
  return Avalanche(h);
}
inline uint64_t Converge(uint64_t v1, uint64_t v2, uint64_t v3, uint64_t v4) {
  uint64_t h = std::rotl(v1, 1) + std::rotl(v2, 7) + std::rotl(v3, 12) + std::rotl(v4, 18);
  h = MergeRound(h, v1);
  h = MergeRound(h, v2);
  h = MergeRound(h, v3);
  return MergeRound(h, v4);
}

// Streaming XXH64, for files written or read in several pieces (dense files).
class Hash64Stream {
 public:
  explicit Hash64Stream(uint64_t seed)
      : seed_(seed), v1_(seed + kP1 + kP2), v2_(seed + kP2), v3_(seed), v4_(seed - kP1) {}

  void Update(const void* data, size_t len) {
    const auto* p = static_cast<const unsigned char*>(data);
    total_ += len;
    if (buffered_ + len < 32) {
      std::memcpy(buffer_ + buffered_, p, len);
      buffered_ += len;
      return;
    }
    if (buffered_ > 0) {
      size_t fill = 32 - buffered_;
      std::memcpy(buffer_ + buffered_, p, fill);
      Stripe(buffer_);
      p += fill;
      len -= fill;
      buffered_ = 0;
    }
    while (len >= 32) {
      Stripe(p);
      p += 32;
      len -= 32;
    }
    std::memcpy(buffer_, p, len);
    buffered_ = len;
  }

  uint64_t Digest() const {
    uint64_t h = total_ >= 32 ? Converge(v1_, v2_, v3_, v4_) : seed_ + kP5;
    h += total_;
    return Finalize(h, buffer_, buffered_);
  }

 private:
  void Stripe(const unsigned char* p) {
    v1_ = Round(v1_, Load64(p));
    v2_ = Round(v2_, Load64(p + 8));
    v3_ = Round(v3_, Load64(p + 16));
    v4_ = Round(v4_, Load64(p + 24));
  }

  uint64_t seed_, v1_, v2_, v3_, v4_;
  uint64_t total_ = 0;
  unsigned char buffer_[32];
  size_t buffered_ = 0;
};

// ---- Minimal strict JSON (objects, arrays, strings, integers, true/false/null) ------------

struct Json {
  enum class Kind { kNull, kBool, kInt, kString, kArray, kObject };
  Kind kind = Kind::kNull;
  bool boolean = false;
  int64_t integer = 0;
  std::string string;
  std::vector<Json> array;
  std::vector<std::string> keys;  // an object: keys[i] maps to values[i]
  std::vector<Json> values;
};

const char* KindName(Json::Kind kind) {
  switch (kind) {
    case Json::Kind::kNull:
      return "null";
    case Json::Kind::kBool:
      return "a boolean";
    case Json::Kind::kInt:
      return "an integer";
    case Json::Kind::kString:
      return "a string";
    case Json::Kind::kArray:
      return "an array";
    case Json::Kind::kObject:
      return "an object";
  }
  return "?";
}

class JsonParser {
 public:
  explicit JsonParser(absl::string_view text) : text_(text) {}

  absl::StatusOr<Json> Parse() {
    Json value;
    RETURN_IF_ERROR(ParseValue(&value, 0));
    SkipSpace();
    if (pos_ != text_.size()) return Error("unexpected text after the top-level value");
    return value;
  }

 private:
  static constexpr int kMaxDepth = 16;

  absl::Status Error(absl::string_view what) const {
    int64_t line =
        1 + std::count(text_.begin(), text_.begin() + std::min(pos_, text_.size()), '\n');
    return absl::InvalidArgumentError(absl::StrCat("line ", line, ": ", what));
  }
  void SkipSpace() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\n' || text_[pos_] == '\r')) {
      ++pos_;
    }
  }
  bool Consume(char c) {
    SkipSpace();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool ConsumeWord(absl::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  absl::Status ParseValue(Json* out, int depth) {
    if (depth > kMaxDepth) return Error("nested too deeply");
    SkipSpace();
    if (pos_ >= text_.size()) return Error("unexpected end of text");
    char c = text_[pos_];
    if (c == '{') return ParseObject(out, depth);
    if (c == '[') return ParseArray(out, depth);
    if (c == '"') {
      out->kind = Json::Kind::kString;
      return ParseString(&out->string);
    }
    if (c == '-' || (c >= '0' && c <= '9')) return ParseInteger(out);
    if (ConsumeWord("true")) {
      out->kind = Json::Kind::kBool;
      out->boolean = true;
      return absl::OkStatus();
    }
    if (ConsumeWord("false")) {
      out->kind = Json::Kind::kBool;
      out->boolean = false;
      return absl::OkStatus();
    }
    if (ConsumeWord("null")) {
      out->kind = Json::Kind::kNull;
      return absl::OkStatus();
    }
    return Error(absl::StrCat("unexpected character '", std::string(1, c), "'"));
  }

  absl::Status ParseObject(Json* out, int depth) {
    out->kind = Json::Kind::kObject;
    ++pos_;  // '{'
    if (Consume('}')) return absl::OkStatus();
    while (true) {
      SkipSpace();
      if (pos_ >= text_.size() || text_[pos_] != '"') return Error("expected a field name");
      std::string key;
      RETURN_IF_ERROR(ParseString(&key));
      for (const std::string& existing : out->keys) {
        if (existing == key) return Error(absl::StrCat("duplicate field \"", key, "\""));
      }
      if (!Consume(':')) return Error(absl::StrCat("expected ':' after \"", key, "\""));
      Json value;
      RETURN_IF_ERROR(ParseValue(&value, depth + 1));
      out->keys.push_back(std::move(key));
      out->values.push_back(std::move(value));
      if (Consume(',')) continue;
      if (Consume('}')) return absl::OkStatus();
      return Error("expected ',' or '}'");
    }
  }

  absl::Status ParseArray(Json* out, int depth) {
    out->kind = Json::Kind::kArray;
    ++pos_;  // '['
    if (Consume(']')) return absl::OkStatus();
    while (true) {
      Json value;
      RETURN_IF_ERROR(ParseValue(&value, depth + 1));
      out->array.push_back(std::move(value));
      if (Consume(',')) continue;
      if (Consume(']')) return absl::OkStatus();
      return Error("expected ',' or ']'");
    }
  }

  absl::Status ParseInteger(Json* out) {
    size_t start = pos_;
    bool negative = text_[pos_] == '-';
    if (negative) ++pos_;
    size_t digits = pos_;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') ++pos_;
    if (pos_ == digits) return Error("expected digits");
    if (pos_ - digits > 1 && text_[digits] == '0') return Error("number with a leading zero");
    if (pos_ < text_.size() && (text_[pos_] == '.' || text_[pos_] == 'e' || text_[pos_] == 'E')) {
      return Error("numbers must be integers");
    }
    // Accumulate negatively so that INT64_MIN parses too.
    int64_t value = 0;
    for (size_t i = digits; i < pos_; ++i) {
      int d = text_[i] - '0';
      if (value < (std::numeric_limits<int64_t>::min() + d) / 10) {
        pos_ = start;
        return Error("integer out of range");
      }
      value = value * 10 - d;
    }
    if (!negative) {
      if (value == std::numeric_limits<int64_t>::min()) {
        pos_ = start;
        return Error("integer out of range");
      }
      value = -value;
    }
    out->kind = Json::Kind::kInt;
    out->integer = value;
    return absl::OkStatus();
  }

  static void AppendUtf8(uint32_t cp, std::string* out) {
    if (cp < 0x80) {
      out->push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }

  absl::Status ParseHex4(uint32_t* out) {
    if (pos_ + 4 > text_.size()) return Error("truncated \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      char c = text_[pos_++];
      v <<= 4;
      if (c >= '0' && c <= '9') {
        v |= c - '0';
      } else if (c >= 'a' && c <= 'f') {
        v |= c - 'a' + 10;
      } else if (c >= 'A' && c <= 'F') {
        v |= c - 'A' + 10;
      } else {
        return Error("bad \\u escape");
      }
    }
    *out = v;
    return absl::OkStatus();
  }

  absl::Status ParseString(std::string* out) {
    ++pos_;  // '"'
    out->clear();
    while (true) {
      if (pos_ >= text_.size()) return Error("unterminated string");
      char c = text_[pos_++];
      if (c == '"') return absl::OkStatus();
      if (static_cast<unsigned char>(c) < 0x20) return Error("control character in a string");
      if (c != '\\') {
        out->push_back(c);
        continue;
      }
      if (pos_ >= text_.size()) return Error("unterminated string");
      char e = text_[pos_++];
      switch (e) {
        case '"':
          out->push_back('"');
          break;
        case '\\':
          out->push_back('\\');
          break;
        case '/':
          out->push_back('/');
          break;
        case 'b':
          out->push_back('\b');
          break;
        case 'f':
          out->push_back('\f');
          break;
        case 'n':
          out->push_back('\n');
          break;
        case 'r':
          out->push_back('\r');
          break;
        case 't':
          out->push_back('\t');
          break;
        case 'u': {
          uint32_t cp = 0;
          RETURN_IF_ERROR(ParseHex4(&cp));
          if (cp >= 0xD800 && cp < 0xDC00) {
            uint32_t low = 0;
            if (!ConsumeWord("\\u")) return Error("unpaired surrogate in \\u escape");
            RETURN_IF_ERROR(ParseHex4(&low));
            if (low < 0xDC00 || low >= 0xE000) return Error("unpaired surrogate in \\u escape");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          } else if (cp >= 0xDC00 && cp < 0xE000) {
            return Error("unpaired surrogate in \\u escape");
          }
          AppendUtf8(cp, out);
          break;
        }
        default:
          return Error(absl::StrCat("bad escape '\\", std::string(1, e), "'"));
      }
    }
  }

  absl::string_view text_;
  size_t pos_ = 0;
};

std::string JsonString(absl::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (static_cast<unsigned char>(c) < 0x20) {
      absl::StrAppendFormat(&out, "\\u%04x", static_cast<unsigned char>(c));
    } else {
      out.push_back(c);
    }
  }
  out.push_back('"');
  return out;
}

std::string HexChecksum(uint64_t v) { return absl::StrFormat("%016x", v); }

// Strict access to the fields of one JSON object: each field read once, then NoOthers()
// refuses anything left. Errors name the field by its path ("tables[2].rows").
class Fields {
 public:
  Fields(const Json& object, std::string context) : object_(object), context_(std::move(context)) {}

  absl::Status Int(const char* key, int64_t min, int64_t* out) {
    const Json* v;
    RETURN_IF_ERROR(Get(key, Json::Kind::kInt, &v));
    if (v->integer < min) {
      return absl::InvalidArgumentError(
          absl::StrCat(Path(key), " is ", v->integer, ", must be >= ", min));
    }
    *out = v->integer;
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
    RETURN_IF_ERROR(Get(key, Json::Kind::kString, &v));
    *out = v->string;
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
  absl::Status Array(const char* key, const std::vector<Json>** out) {
    const Json* v;
    RETURN_IF_ERROR(Get(key, Json::Kind::kArray, &v));
    *out = &v->array;
    return absl::OkStatus();
  }
  absl::Status NoOthers() const {
    for (const std::string& key : object_.keys) {
      if (std::find(used_.begin(), used_.end(), key) == used_.end()) {
        return absl::InvalidArgumentError(absl::StrCat("unknown field ", Path(key)));
      }
    }
    return absl::OkStatus();
  }
  std::string Path(absl::string_view key) const {
    return context_.empty() ? std::string(key) : absl::StrCat(context_, ".", key);
  }

 private:
  absl::Status Get(const char* key, Json::Kind kind, const Json** out) {
    for (size_t i = 0; i < object_.keys.size(); ++i) {
      if (object_.keys[i] != key) continue;
      const Json& value = object_.values[i];
      if (value.kind != kind) {
        return absl::InvalidArgumentError(
            absl::StrCat(Path(key), " must be ", KindName(kind), ", not ", KindName(value.kind)));
      }
      used_.push_back(key);
      *out = &value;
      return absl::OkStatus();
    }
    return absl::InvalidArgumentError(absl::StrCat("missing field ", Path(key)));
  }

  const Json& object_;
  const std::string context_;
  std::vector<std::string> used_;
};

absl::Status ExpectObject(const Json& v, const std::string& what) {
  if (v.kind != Json::Kind::kObject) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " must be an object, not ", KindName(v.kind)));
  }
  return absl::OkStatus();
}

std::string ManifestToJson(const Manifest& m) {
  const CheckpointLayout& l = m.layout;
  std::string out = "{\n";
  absl::StrAppend(&out, "  \"format\": ", JsonString(kFormatName), ",\n");
  absl::StrAppend(&out, "  \"format_version\": ", m.format_version, ",\n");
  absl::StrAppend(&out, "  \"job\": ", JsonString(l.job), ",\n");
  absl::StrAppend(&out, "  \"step\": ", l.step, ",\n");
  absl::StrAppend(&out, "  \"created\": ", JsonString(m.created), ",\n");
  absl::StrAppend(&out, "  \"embedding_dim\": ", l.dim, ",\n");
  absl::StrAppend(&out, "  \"payload_floats\": ", l.payload_floats, ",\n");
  absl::StrAppend(&out, "  \"sparse_optimizer\": ", JsonString(l.sparse_optimizer), ",\n");
  absl::StrAppend(&out, "  \"dense_optimizer\": ", JsonString(l.dense_optimizer), ",\n");
  out += "  \"tables\": [";
  for (size_t t = 0; t < l.table_rows.size(); ++t) {
    int i = static_cast<int>(t);
    absl::StrAppend(&out, t == 0 ? "\n" : ",\n", "    {\"file\": ", JsonString(TableFileName(i)),
                    ", \"rows\": ", l.table_rows[t], ", \"bytes\": ", TableFileBytes(l, i),
                    ", \"checksum\": \"", HexChecksum(m.table_checksums[t]), "\"}");
  }
  out += l.table_rows.empty() ? "],\n" : "\n  ],\n";
  out += "  \"dense\": [";
  for (size_t d = 0; d < l.dense_sizes.size(); ++d) {
    int i = static_cast<int>(d);
    absl::StrAppend(&out, d == 0 ? "\n" : ",\n", "    {\"file\": ", JsonString(DenseFileName(i)),
                    ", \"size\": ", l.dense_sizes[d],
                    ", \"state_floats\": ", l.dense_state_floats[d],
                    ", \"version\": ", m.dense[d].version, ", \"bytes\": ", DenseFileBytes(l, i),
                    ", \"checksum\": \"", HexChecksum(m.dense[d].checksum), "\"}");
  }
  out += l.dense_sizes.empty() ? "],\n" : "\n  ],\n";
  out += "  \"reader_positions\": [";
  for (size_t w = 0; w < m.reader_positions.size(); ++w) {
    absl::StrAppend(&out, w == 0 ? "" : ", ", m.reader_positions[w]);
  }
  out += "]\n}\n";
  return out;
}

}  // namespace

// Parses the manifest text; errors are plain reasons (the caller adds the file name).
absl::StatusOr<Manifest> ParseManifest(absl::string_view text, const std::string& dir) {
  ASSIGN_OR_RETURN(Json root, JsonParser(text).Parse());
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

  const std::vector<Json>* tables;
  RETURN_IF_ERROR(top.Array("tables", &tables));
  std::vector<int64_t> table_bytes, dense_bytes;
  std::vector<std::string> table_files, dense_files;
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
    l.table_rows.push_back(rows);
    m.table_checksums.push_back(checksum);
    table_files.push_back(std::move(file));
    table_bytes.push_back(bytes);
  }

  const std::vector<Json>* dense;
  RETURN_IF_ERROR(top.Array("dense", &dense));
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
    l.dense_sizes.push_back(size);
    l.dense_state_floats.push_back(state_floats);
    m.dense.push_back(entry);
    dense_files.push_back(std::move(file));
    dense_bytes.push_back(bytes);
  }

  const std::vector<Json>* readers;
  RETURN_IF_ERROR(top.Array("reader_positions", &readers));
  for (size_t w = 0; w < readers->size(); ++w) {
    const Json& v = (*readers)[w];
    if (v.kind != Json::Kind::kInt || v.integer < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("reader_positions[", w, "] must be an integer >= 0"));
    }
    m.reader_positions.push_back(v.integer);
  }
  RETURN_IF_ERROR(top.NoOthers());

  // Cross-checks: the layout is sane and every file name and size follows from it.
  RETURN_IF_ERROR(ValidateLayout(l));
  for (size_t t = 0; t < table_files.size(); ++t) {
    int i = static_cast<int>(t);
    if (table_files[t] != TableFileName(i)) {
      return absl::InvalidArgumentError(absl::StrCat("tables[", t, "].file is \"", table_files[t],
                                                     "\", expected \"", TableFileName(i), "\""));
    }
    if (table_bytes[t] != TableFileBytes(l, i)) {
      return absl::InvalidArgumentError(absl::StrCat("tables[", t, "].bytes is ", table_bytes[t],
                                                     " but rows * payload_floats * 4 is ",
                                                     TableFileBytes(l, i)));
    }
  }
  for (size_t d = 0; d < dense_files.size(); ++d) {
    int i = static_cast<int>(d);
    if (dense_files[d] != DenseFileName(i)) {
      return absl::InvalidArgumentError(absl::StrCat("dense[", d, "].file is \"", dense_files[d],
                                                     "\", expected \"", DenseFileName(i), "\""));
    }
    if (dense_bytes[d] != DenseFileBytes(l, i)) {
      return absl::InvalidArgumentError(absl::StrCat("dense[", d, "].bytes is ", dense_bytes[d],
                                                     " but header + (size + state_floats) * 4 is ",
                                                     DenseFileBytes(l, i)));
    }
  }
  return m;
}

namespace {

absl::StatusOr<std::string> ReadWholeFile(const std::string& path, absl::StatusCode missing) {
  ASSIGN_OR_RETURN(int fd, OpenForRead(path, missing));
  FdCloser closer(fd);
  ASSIGN_OR_RETURN(int64_t size, FileSize(fd, path));
  if (static_cast<uint64_t>(size) > kMaxManifestBytes) {
    return FileError(absl::StatusCode::kDataLoss, path,
                     absl::StrCat("not valid: ", size, " bytes is too large for a manifest"));
  }
  std::string text(static_cast<size_t>(size), '\0');
  RETURN_IF_ERROR(PreadExact(fd, path, text.data(), size, 0));
  return text;
}

// Writes `contents` to PATH durably and atomically: PATH.tmp, fsync, rename, fsync the dir.
absl::Status WriteFileAtomically(const std::string& path, const std::string& contents) {
  std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError(tmp, "create", errno);
  {
    FdCloser closer(fd);
    RETURN_IF_ERROR(PwriteAll(fd, tmp, contents.data(), static_cast<int64_t>(contents.size()), 0));
    RETURN_IF_ERROR(FsyncFd(fd, tmp));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) return ErrnoError(path, "rename", errno);
  return FsyncPath(fs::path(path).parent_path().string());
}

// The 48-byte header of a dense file (all fields little-endian).
struct DenseHeader {
  char magic[8];
  uint32_t format_version;
  uint32_t tensor;
  int64_t size;
  int64_t state_floats;
  int64_t version;
  uint64_t reserved;  // 0
};
static_assert(sizeof(DenseHeader) == kDenseHeaderBytes);

// Parses "step-<digits>" (exactly); -1 for anything else.
int64_t StepOfDirName(absl::string_view name) {
  constexpr absl::string_view kPrefix = "step-";
  if (name.substr(0, kPrefix.size()) != kPrefix || name.size() == kPrefix.size() ||
      name.size() > kPrefix.size() + 18) {
    return -1;
  }
  int64_t step = 0;
  for (char c : name.substr(kPrefix.size())) {
    if (c < '0' || c > '9') return -1;
    step = step * 10 + (c - '0');
  }
  return step;
}

}  // namespace

// ---- Names, sizes, layout ------------------------------------------------------------------

std::string CheckpointDirName(int64_t step) { return absl::StrFormat("step-%09d", step); }
std::string TableFileName(int table) { return absl::StrFormat("table-%03d.rows", table); }
std::string DenseFileName(int tensor) { return absl::StrFormat("dense-%03d.bin", tensor); }

int64_t TableFileBytes(const CheckpointLayout& layout, int table) {
  return layout.table_rows[table] * layout.payload_floats * 4;
}
int64_t DenseFileBytes(const CheckpointLayout& layout, int tensor) {
  return kDenseHeaderBytes + (layout.dense_sizes[tensor] + layout.dense_state_floats[tensor]) * 4;
}

absl::Status ValidateLayout(const CheckpointLayout& l) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max() / 8;
  if (l.step < 0) return absl::InvalidArgumentError(absl::StrCat("step is ", l.step, " < 0"));
  if (l.dim < 1) return absl::InvalidArgumentError(absl::StrCat("embedding_dim is ", l.dim));
  if (l.payload_floats < l.dim) {
    return absl::InvalidArgumentError(
        absl::StrCat("payload_floats is ", l.payload_floats, ", less than embedding_dim ", l.dim));
  }
  if (l.table_rows.size() > INT_MAX || l.dense_sizes.size() > INT_MAX) {
    return absl::InvalidArgumentError("too many tables or dense tensors");
  }
  for (size_t t = 0; t < l.table_rows.size(); ++t) {
    if (l.table_rows[t] < 1 || l.table_rows[t] > kMax / l.payload_floats) {
      return absl::InvalidArgumentError(
          absl::StrCat("table ", t, " has ", l.table_rows[t], " rows"));
    }
  }
  if (l.dense_state_floats.size() != l.dense_sizes.size()) {
    return absl::InvalidArgumentError(absl::StrCat(l.dense_sizes.size(), " dense tensors but ",
                                                   l.dense_state_floats.size(),
                                                   " optimizer-state sizes"));
  }
  for (size_t d = 0; d < l.dense_sizes.size(); ++d) {
    if (l.dense_sizes[d] < 1 || l.dense_sizes[d] > kMax || l.dense_state_floats[d] < 0 ||
        l.dense_state_floats[d] > kMax - l.dense_sizes[d]) {
      return absl::InvalidArgumentError(absl::StrCat("dense tensor ", d, " has size ",
                                                     l.dense_sizes[d], " and state_floats ",
                                                     l.dense_state_floats[d]));
    }
  }
  return absl::OkStatus();
}

// ---- Checksums -----------------------------------------------------------------------------

uint64_t Hash64(const void* data, size_t len, uint64_t seed) {
  const auto* p = static_cast<const unsigned char*>(data);
  const size_t total = len;
  uint64_t h;
  if (len >= 32) {
    uint64_t v1 = seed + kP1 + kP2, v2 = seed + kP2, v3 = seed, v4 = seed - kP1;
    do {
      v1 = Round(v1, Load64(p));
      v2 = Round(v2, Load64(p + 8));
      v3 = Round(v3, Load64(p + 16));
      v4 = Round(v4, Load64(p + 24));
      p += 32;
      len -= 32;
    } while (len >= 32);
    h = Converge(v1, v2, v3, v4);
  } else {
    h = seed + kP5;
  }
  h += total;
  return Finalize(h, p, len);
}

uint64_t RowChecksum(int64_t row, const float* payload, int payload_floats) {
  return Hash64(payload, static_cast<size_t>(payload_floats) * 4, static_cast<uint64_t>(row));
}

uint64_t CombineChecksums(const std::vector<uint64_t>& partials) {
  uint64_t c = 0;
  for (uint64_t p : partials) c ^= p;
  return c;
}

// ---- Coordinator side ----------------------------------------------------------------------

absl::StatusOr<std::string> BeginCheckpoint(const std::string& root,
                                            const CheckpointLayout& layout) {
  RETURN_IF_ERROR(ValidateLayout(layout));
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) return FileError(absl::StatusCode::kInternal, root, "mkdir failed: " + ec.message());
  const std::string final_dir = Join(root, CheckpointDirName(layout.step));
  if (fs::exists(final_dir, ec)) {
    return FileError(absl::StatusCode::kAlreadyExists, final_dir, "already committed");
  }
  const std::string tmp_dir = final_dir + ".tmp";
  fs::remove_all(tmp_dir, ec);  // a leftover of an earlier, unfinished attempt
  if (ec) return FileError(absl::StatusCode::kInternal, tmp_dir, "remove failed: " + ec.message());
  if (::mkdir(tmp_dir.c_str(), 0755) != 0) return ErrnoError(tmp_dir, "mkdir", errno);
  for (size_t t = 0; t < layout.table_rows.size(); ++t) {
    int i = static_cast<int>(t);
    std::string path = Join(tmp_dir, TableFileName(i));
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return ErrnoError(path, "create", errno);
    FdCloser closer(fd);
    // Blocks are allocated now, so that a full disk is an error here and not a SIGBUS in a
    // server writing rows through its mapping of the file.
    if (int err = ::posix_fallocate(fd, 0, TableFileBytes(layout, i)); err != 0) {
      return ErrnoError(path, "fallocate", err);
    }
  }
  return tmp_dir;
}

absl::Status CommitCheckpoint(const std::string& tmp_dir_arg, const CheckpointLayout& layout,
                              const std::vector<uint64_t>& table_checksums,
                              const std::vector<DenseEntry>& dense,
                              const std::vector<int64_t>& reader_positions,
                              std::string* final_dir) {
  RETURN_IF_ERROR(ValidateLayout(layout));
  const std::string tmp_dir = StripTrailingSlashes(tmp_dir_arg);
  const fs::path tmp_path(tmp_dir);
  const std::string expected_name = CheckpointDirName(layout.step) + ".tmp";
  if (tmp_path.filename() != expected_name) {
    return absl::InvalidArgumentError(
        absl::StrCat(tmp_dir, ": not the directory BeginCheckpoint made for step ", layout.step,
                     " (expected a directory named ", expected_name, ")"));
  }
  if (table_checksums.size() != layout.table_rows.size()) {
    return absl::InvalidArgumentError(absl::StrCat(table_checksums.size(), " table checksums for ",
                                                   layout.table_rows.size(), " tables"));
  }
  if (dense.size() != layout.dense_sizes.size()) {
    return absl::InvalidArgumentError(absl::StrCat(dense.size(), " dense entries for ",
                                                   layout.dense_sizes.size(), " dense tensors"));
  }
  for (size_t d = 0; d < dense.size(); ++d) {
    if (dense[d].version < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("dense tensor ", d, " has version ", dense[d].version));
    }
  }
  for (size_t w = 0; w < reader_positions.size(); ++w) {
    if (reader_positions[w] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("reader position of worker ", w, " is ", reader_positions[w]));
    }
  }

  // Every file must be there with its exact size; make its data durable.
  auto check_file = [](const std::string& path, int64_t bytes) -> absl::Status {
    ASSIGN_OR_RETURN(int fd, OpenForRead(path, absl::StatusCode::kFailedPrecondition));
    FdCloser closer(fd);
    ASSIGN_OR_RETURN(int64_t size, FileSize(fd, path));
    if (size != bytes) {
      return FileError(absl::StatusCode::kFailedPrecondition, path,
                       absl::StrCat("size is ", size, " bytes, expected ", bytes));
    }
    return FsyncFd(fd, path);
  };
  for (size_t t = 0; t < layout.table_rows.size(); ++t) {
    int i = static_cast<int>(t);
    RETURN_IF_ERROR(check_file(Join(tmp_dir, TableFileName(i)), TableFileBytes(layout, i)));
  }
  for (size_t d = 0; d < layout.dense_sizes.size(); ++d) {
    int i = static_cast<int>(d);
    RETURN_IF_ERROR(check_file(Join(tmp_dir, DenseFileName(i)), DenseFileBytes(layout, i)));
  }

  const fs::path root = tmp_path.parent_path().empty() ? fs::path(".") : tmp_path.parent_path();
  const std::string final_path = (root / CheckpointDirName(layout.step)).string();
  std::error_code ec;
  if (fs::exists(final_path, ec)) {
    return FileError(absl::StatusCode::kAlreadyExists, final_path, "already committed");
  }

  Manifest m;
  m.format_version = kCheckpointFormatVersion;
  m.created = absl::FormatTime(absl::RFC3339_sec, absl::Now(), absl::UTCTimeZone());
  m.layout = layout;
  m.table_checksums = table_checksums;
  m.dense = dense;
  m.reader_positions = reader_positions;
  // WriteFileAtomically fsyncs tmp_dir, which also makes the data files' entries durable.
  RETURN_IF_ERROR(WriteFileAtomically(Join(tmp_dir, kManifestName), ManifestToJson(m)));
  if (::rename(tmp_dir.c_str(), final_path.c_str()) != 0) {
    return ErrnoError(final_path, "rename", errno);
  }
  RETURN_IF_ERROR(FsyncPath(root.string()));
  if (final_dir != nullptr) *final_dir = final_path;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> ListCheckpoints(const std::string& root) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  if (!fs::exists(root, ec)) return std::vector<std::string>{};
  fs::directory_iterator it(root, ec);
  if (ec) return FileError(absl::StatusCode::kInternal, root, "listing failed: " + ec.message());
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    int64_t step = StepOfDirName(it->path().filename().string());
    if (step < 0 || !it->is_directory(ec)) continue;
    if (!fs::is_regular_file(it->path() / kManifestName, ec)) continue;
    found.emplace_back(step, it->path().string());
  }
  if (ec) return FileError(absl::StatusCode::kInternal, root, "listing failed: " + ec.message());
  std::sort(found.begin(), found.end(), std::greater<>());
  std::vector<std::string> dirs;
  for (auto& [step, dir] : found) dirs.push_back(std::move(dir));
  return dirs;
}

absl::StatusOr<std::string> LatestCheckpoint(const std::string& root) {
  ASSIGN_OR_RETURN(std::vector<std::string> dirs, ListCheckpoints(root));
  if (dirs.empty()) {
    return FileError(absl::StatusCode::kNotFound, root, "no committed checkpoint");
  }
  return dirs.front();
}

absl::StatusOr<std::vector<std::string>> PruneCheckpoints(const std::string& root, int keep,
                                                          int64_t keep_step) {
  if (keep < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("keep is ", keep, ": at least one checkpoint must be kept"));
  }
  struct Found {
    int64_t step;
    std::string dir;
    bool committed;  // step-N with a MANIFEST.json; otherwise step-N.tmp or step-N without one
  };
  std::vector<Found> found;
  std::error_code ec;
  if (!fs::exists(root, ec)) return std::vector<std::string>{};
  fs::directory_iterator it(root, ec);
  if (ec) return FileError(absl::StatusCode::kInternal, root, "listing failed: " + ec.message());
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    std::string name = it->path().filename().string();
    const bool tmp = absl::EndsWith(name, ".tmp");
    if (tmp) name.resize(name.size() - 4);
    const int64_t step = StepOfDirName(name);
    if (step < 0 || !it->is_directory(ec)) continue;
    const bool committed = !tmp && fs::is_regular_file(it->path() / kManifestName, ec);
    found.push_back(Found{step, it->path().string(), committed});
  }
  if (ec) return FileError(absl::StatusCode::kInternal, root, "listing failed: " + ec.message());

  // Newest first; the kept ones: keep_step's, then the newest others.
  std::sort(found.begin(), found.end(),
            [](const Found& a, const Found& b) { return a.step > b.step; });
  int64_t newest = -1;
  int kept = 0;
  for (const Found& f : found) {
    if (!f.committed) continue;
    newest = std::max(newest, f.step);
    if (f.step == keep_step) ++kept;
  }
  if (newest < 0) return std::vector<std::string>{};  // nothing committed: nothing to judge by
  std::vector<const Found*> doomed;
  for (const Found& f : found) {
    if (f.committed) {
      if (f.step == keep_step) continue;
      if (kept < keep) {
        ++kept;
        continue;
      }
      doomed.push_back(&f);
    } else if (f.step < newest) {
      doomed.push_back(&f);  // a leftover: a crashed save's step-N.tmp, an interrupted prune
    }
  }

  std::vector<std::string> removed;
  for (auto d = doomed.rbegin(); d != doomed.rend(); ++d) {  // oldest first
    const Found& f = **d;
    if (f.committed) {
      // Unpublish first: whatever happens next, readers no longer take it for a checkpoint.
      const std::string manifest = Join(f.dir, kManifestName);
      if (::unlink(manifest.c_str()) != 0) return ErrnoError(manifest, "unlink", errno);
      RETURN_IF_ERROR(FsyncPath(f.dir));
    }
    fs::remove_all(f.dir, ec);
    if (ec) return FileError(absl::StatusCode::kInternal, f.dir, "remove failed: " + ec.message());
    removed.push_back(f.dir);
  }
  if (!removed.empty()) RETURN_IF_ERROR(FsyncPath(root));
  return removed;
}

// ---- Writer side ---------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<TableWriter>> TableWriter::Open(const std::string& tmp_dir,
                                                               int table, int64_t rows,
                                                               int payload_floats) {
  if (table < 0 || rows < 1 || payload_floats < 1 ||
      rows > std::numeric_limits<int64_t>::max() / 8 / payload_floats) {
    return absl::InvalidArgumentError(absl::StrCat("TableWriter: table ", table, ", rows ", rows,
                                                   ", payload_floats ", payload_floats));
  }
  std::string path = Join(tmp_dir, TableFileName(table));
  int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) {
      return FileError(absl::StatusCode::kFailedPrecondition, path,
                       "missing (BeginCheckpoint creates it)");
    }
    return ErrnoError(path, "open", errno);
  }
  FdCloser closer(fd);
  ASSIGN_OR_RETURN(int64_t size, FileSize(fd, path));
  const int64_t expected = rows * payload_floats * 4;
  if (size != expected) {
    return FileError(absl::StatusCode::kFailedPrecondition, path,
                     absl::StrCat("size is ", size, " bytes, expected ", expected, " (", rows,
                                  " rows of ", payload_floats, " floats)"));
  }
  // Rows go through a shared mapping: a server's rows are interleaved with the other servers'
  // in the file, and one pwrite per row would cost a system call per row.
  void* map = ::mmap(nullptr, static_cast<size_t>(expected), PROT_READ | PROT_WRITE, MAP_SHARED,
                     fd, 0);
  if (map == MAP_FAILED) return ErrnoError(path, "mmap", errno);
  return std::unique_ptr<TableWriter>(new TableWriter(
      std::move(path), closer.release(), static_cast<char*>(map), rows, payload_floats));
}

TableWriter::~TableWriter() {
  if (map_ != nullptr) ::munmap(map_, MapBytes());
  if (fd_ >= 0) ::close(fd_);
}

absl::Status TableWriter::WriteRows(const int64_t* rows, const float* payloads, int64_t n) {
  if (fd_ < 0) return FileError(absl::StatusCode::kFailedPrecondition, path_, "already finished");
  if (n < 0 || (n > 0 && (rows == nullptr || payloads == nullptr))) {
    return absl::InvalidArgumentError(absl::StrCat("WriteRows: n is ", n));
  }
  for (int64_t i = 0; i < n; ++i) {
    if (rows[i] < 0 || rows[i] >= rows_) {
      return FileError(absl::StatusCode::kInvalidArgument, path_,
                       absl::StrCat("row ", rows[i], " out of range [0, ", rows_, ")"));
    }
  }
  const int64_t row_bytes = int64_t{payload_floats_} * 4;
  int64_t i = 0;
  while (i < n) {
    int64_t j = i + 1;
    while (j < n && rows[j] == rows[j - 1] + 1) ++j;
    const float* src = payloads + i * payload_floats_;
    std::memcpy(map_ + rows[i] * row_bytes, src, static_cast<size_t>((j - i) * row_bytes));
    for (int64_t k = i; k < j; ++k) {
      checksum_ ^= RowChecksum(rows[k], payloads + k * payload_floats_, payload_floats_);
    }
    rows_written_ += j - i;
    i = j;
  }
  return absl::OkStatus();
}

absl::Status TableWriter::Finish() {
  if (fd_ < 0) return FileError(absl::StatusCode::kFailedPrecondition, path_, "already finished");
  int fd = std::exchange(fd_, -1);
  FdCloser closer(fd);
  const size_t bytes = MapBytes();
  char* map = std::exchange(map_, nullptr);
  const bool synced = ::msync(map, bytes, MS_SYNC) == 0;
  const int sync_errno = errno;
  ::munmap(map, bytes);
  if (!synced) return ErrnoError(path_, "msync", sync_errno);
  if (::fdatasync(fd) != 0) return ErrnoError(path_, "fdatasync", errno);
  if (::close(closer.release()) != 0) return ErrnoError(path_, "close", errno);
  return absl::OkStatus();
}

absl::StatusOr<DenseEntry> WriteDense(const std::string& tmp_dir, int tensor, int64_t version,
                                      const std::vector<float>& weights,
                                      const std::vector<float>& state) {
  if (tensor < 0 || weights.empty() || version < 0) {
    return absl::InvalidArgumentError(absl::StrCat("WriteDense: tensor ", tensor, ", size ",
                                                   weights.size(), ", version ", version));
  }
  DenseHeader header{};
  std::memcpy(header.magic, kDenseMagic, sizeof(kDenseMagic));
  header.format_version = kCheckpointFormatVersion;
  header.tensor = static_cast<uint32_t>(tensor);
  header.size = static_cast<int64_t>(weights.size());
  header.state_floats = static_cast<int64_t>(state.size());
  header.version = version;
  header.reserved = 0;

  std::string path = Join(tmp_dir, DenseFileName(tensor));
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    if (errno == ENOENT) {
      return FileError(absl::StatusCode::kFailedPrecondition, tmp_dir,
                       "missing (BeginCheckpoint creates it)");
    }
    return ErrnoError(path, "create", errno);
  }
  FdCloser closer(fd);
  const int64_t weight_bytes = header.size * 4;
  const int64_t state_bytes = header.state_floats * 4;
  Hash64Stream hash(0);
  hash.Update(&header, sizeof(header));
  hash.Update(weights.data(), static_cast<size_t>(weight_bytes));
  hash.Update(state.data(), static_cast<size_t>(state_bytes));
  RETURN_IF_ERROR(PwriteAll(fd, path, &header, sizeof(header), 0));
  RETURN_IF_ERROR(PwriteAll(fd, path, weights.data(), weight_bytes, kDenseHeaderBytes));
  RETURN_IF_ERROR(PwriteAll(fd, path, state.data(), state_bytes, kDenseHeaderBytes + weight_bytes));
  if (::fdatasync(fd) != 0) return ErrnoError(path, "fdatasync", errno);
  if (::close(closer.release()) != 0) return ErrnoError(path, "close", errno);
  return DenseEntry{version, hash.Digest()};
}

// ---- Reader side ---------------------------------------------------------------------------

absl::StatusOr<Manifest> ReadManifest(const std::string& dir_arg) {
  const std::string dir = StripTrailingSlashes(dir_arg);
  const std::string path = Join(dir, kManifestName);
  ASSIGN_OR_RETURN(std::string text, ReadWholeFile(path, absl::StatusCode::kNotFound));
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
  const std::string path = Join(manifest.dir, kManifestName);
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

absl::StatusOr<std::unique_ptr<TableReader>> TableReader::Open(const Manifest& manifest,
                                                               int table) {
  const CheckpointLayout& l = manifest.layout;
  if (table < 0 || table >= static_cast<int>(l.table_rows.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("table ", table, " out of range [0, ", l.table_rows.size(), ")"));
  }
  std::string path = Join(manifest.dir, TableFileName(table));
  ASSIGN_OR_RETURN(int fd, OpenForRead(path, absl::StatusCode::kDataLoss));
  FdCloser closer(fd);
  ASSIGN_OR_RETURN(int64_t size, FileSize(fd, path));
  const int64_t expected = TableFileBytes(l, table);
  if (size != expected) {
    return FileError(absl::StatusCode::kDataLoss, path,
                     absl::StrCat("size is ", size, " bytes, the manifest says ", expected,
                                  size < expected ? " (truncated)" : ""));
  }
  return std::unique_ptr<TableReader>(
      new TableReader(std::move(path), closer.release(), l.table_rows[table], l.payload_floats));
}

TableReader::~TableReader() { ::close(fd_); }

absl::Status TableReader::ReadRows(const int64_t* rows, int64_t n, float* out) const {
  if (n < 0 || (n > 0 && (rows == nullptr || out == nullptr))) {
    return absl::InvalidArgumentError(absl::StrCat("ReadRows: n is ", n));
  }
  for (int64_t i = 0; i < n; ++i) {
    if (rows[i] < 0 || rows[i] >= rows_) {
      return FileError(absl::StatusCode::kInvalidArgument, path_,
                       absl::StrCat("row ", rows[i], " out of range [0, ", rows_, ")"));
    }
  }
  const int64_t row_bytes = int64_t{payload_floats_} * 4;
  std::vector<float> scratch;
  int64_t i = 0;
  while (i < n) {
    // Grow a window of ascending ids: consecutive ids without limit, and across small gaps
    // while the span stays small.
    const int64_t first = rows[i];
    bool consecutive = true;
    int64_t j = i;
    while (j + 1 < n && rows[j + 1] > rows[j]) {
      if (consecutive && rows[j + 1] == rows[j] + 1) {
        ++j;
        continue;
      }
      if ((rows[j + 1] - rows[j] - 1) * row_bytes > kMaxReadGapBytes ||
          (rows[j + 1] - first + 1) * row_bytes > kMaxReadSpanBytes) {
        break;
      }
      consecutive = false;
      ++j;
    }
    const int64_t span_rows = rows[j] - first + 1;
    if (consecutive) {
      RETURN_IF_ERROR(PreadExact(fd_, path_, out + i * payload_floats_, span_rows * row_bytes,
                                 first * row_bytes));
    } else {
      scratch.resize(static_cast<size_t>(span_rows * payload_floats_));
      RETURN_IF_ERROR(
          PreadExact(fd_, path_, scratch.data(), span_rows * row_bytes, first * row_bytes));
      for (int64_t k = i; k <= j; ++k) {
        std::memcpy(out + k * payload_floats_, scratch.data() + (rows[k] - first) * payload_floats_,
                    static_cast<size_t>(row_bytes));
      }
    }
    i = j + 1;
  }
  return absl::OkStatus();
}

absl::Status VerifyTable(const Manifest& manifest, int table) {
  ASSIGN_OR_RETURN(std::unique_ptr<TableReader> reader, TableReader::Open(manifest, table));
  const std::string path = Join(manifest.dir, TableFileName(table));
  const int pf = reader->payload_floats();
  const int64_t rows = reader->rows();
  const int64_t chunk_rows = std::max<int64_t>(1, kVerifyChunkBytes / (int64_t{pf} * 4));
  std::vector<float> buffer(static_cast<size_t>(std::min(chunk_rows, rows) * pf));
  std::vector<int64_t> ids;
  uint64_t checksum = 0;
  for (int64_t start = 0; start < rows; start += chunk_rows) {
    const int64_t count = std::min(chunk_rows, rows - start);
    ids.resize(static_cast<size_t>(count));
    for (int64_t k = 0; k < count; ++k) ids[k] = start + k;
    RETURN_IF_ERROR(reader->ReadRows(ids.data(), count, buffer.data()));
    for (int64_t k = 0; k < count; ++k) {
      checksum ^= RowChecksum(start + k, buffer.data() + k * pf, pf);
    }
  }
  if (checksum != manifest.table_checksums[table]) {
    return FileError(
        absl::StatusCode::kDataLoss, path,
        absl::StrCat("checksum mismatch: contents hash to ", HexChecksum(checksum),
                     ", the manifest says ", HexChecksum(manifest.table_checksums[table]),
                     " (corrupt, or rows missing or written twice)"));
  }
  return absl::OkStatus();
}

absl::Status ReadDense(const Manifest& manifest, int tensor, std::vector<float>* weights,
                       std::vector<float>* state, int64_t* version) {
  const CheckpointLayout& l = manifest.layout;
  if (tensor < 0 || tensor >= static_cast<int>(l.dense_sizes.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("dense tensor ", tensor, " out of range [0, ", l.dense_sizes.size(), ")"));
  }
  const std::string path = Join(manifest.dir, DenseFileName(tensor));
  ASSIGN_OR_RETURN(int fd, OpenForRead(path, absl::StatusCode::kDataLoss));
  FdCloser closer(fd);
  ASSIGN_OR_RETURN(int64_t size, FileSize(fd, path));
  const int64_t expected = DenseFileBytes(l, tensor);
  if (size != expected) {
    return FileError(absl::StatusCode::kDataLoss, path,
                     absl::StrCat("size is ", size, " bytes, the manifest says ", expected,
                                  size < expected ? " (truncated)" : ""));
  }
  DenseHeader header;
  std::vector<float> w(static_cast<size_t>(l.dense_sizes[tensor]));
  std::vector<float> s(static_cast<size_t>(l.dense_state_floats[tensor]));
  const int64_t weight_bytes = l.dense_sizes[tensor] * 4;
  const int64_t state_bytes = l.dense_state_floats[tensor] * 4;
  RETURN_IF_ERROR(PreadExact(fd, path, &header, sizeof(header), 0));
  RETURN_IF_ERROR(PreadExact(fd, path, w.data(), weight_bytes, kDenseHeaderBytes));
  RETURN_IF_ERROR(PreadExact(fd, path, s.data(), state_bytes, kDenseHeaderBytes + weight_bytes));
  Hash64Stream hash(0);
  hash.Update(&header, sizeof(header));
  hash.Update(w.data(), static_cast<size_t>(weight_bytes));
  hash.Update(s.data(), static_cast<size_t>(state_bytes));
  const DenseEntry& entry = manifest.dense[tensor];
  if (hash.Digest() != entry.checksum) {
    return FileError(
        absl::StatusCode::kDataLoss, path,
        absl::StrCat("checksum mismatch: contents hash to ", HexChecksum(hash.Digest()),
                     ", the manifest says ", HexChecksum(entry.checksum)));
  }
  // The checksum matched, so a bad header means the writer and the manifest disagree.
  if (std::memcmp(header.magic, kDenseMagic, sizeof(kDenseMagic)) != 0 ||
      header.format_version != kCheckpointFormatVersion ||
      header.tensor != static_cast<uint32_t>(tensor) || header.size != l.dense_sizes[tensor] ||
      header.state_floats != l.dense_state_floats[tensor] || header.version != entry.version ||
      header.reserved != 0) {
    return FileError(absl::StatusCode::kDataLoss, path,
                     absl::StrCat("header disagrees with the manifest (tensor ", header.tensor,
                                  ", size ", header.size, ", state_floats ", header.state_floats,
                                  ", version ", header.version, ")"));
  }
  *weights = std::move(w);
  *state = std::move(s);
  *version = header.version;
  return absl::OkStatus();
}

absl::Status VerifyCheckpoint(const std::string& dir) {
  ASSIGN_OR_RETURN(Manifest manifest, ReadManifest(dir));
  for (size_t t = 0; t < manifest.layout.table_rows.size(); ++t) {
    RETURN_IF_ERROR(VerifyTable(manifest, static_cast<int>(t)));
  }
  std::vector<float> weights, state;
  int64_t version;
  for (size_t d = 0; d < manifest.layout.dense_sizes.size(); ++d) {
    RETURN_IF_ERROR(ReadDense(manifest, static_cast<int>(d), &weights, &state, &version));
  }
  return absl::OkStatus();
}

}  // namespace ecps
