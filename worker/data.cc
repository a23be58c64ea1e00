#include "worker/data.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kernels/hash_rng.h"
#include "kernels/row_hash.h"
#include "runtime/status_macros.h"
#include "worker/criteo_blocks.h"
#include "worker/criteo_source.h"
#include "worker/metrics.h"
#include "worker/synthetic_source.h"

namespace ecps {

DataSource::~DataSource() = default;

namespace {

constexpr int kCriteoDense = 13;
constexpr int kCriteoSparse = 26;

// ---------------------------------------------------------------------------------------
// Criteo readers.

struct FileCloser {
  void operator()(FILE* f) const {
    if (f != nullptr) std::fclose(f);
  }
};

// A field of a malformed line as it appears in a reason: at most 32 bytes, and bytes that
// are not printable ASCII as \xNN. Reasons travel in progress reports and errors, whose
// protobuf strings must be valid UTF-8, and end up on a terminal.
std::string Quote(std::string_view f) {
  constexpr size_t kMax = 32;
  std::string out = "'";
  for (size_t i = 0; i < f.size() && i < kMax; ++i) {
    const unsigned char c = static_cast<unsigned char>(f[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      absl::StrAppendFormat(&out, "\\x%02x", c);
    }
  }
  out += f.size() > kMax ? "'..." : "'";
  return out;
}

bool ParseDouble(std::string_view f, double* v) {
  auto [p, ec] = std::from_chars(f.data(), f.data() + f.size(), *v);
  return ec == std::errc() && p == f.data() + f.size() && std::isfinite(*v);
}

enum class IntegerField { kOk, kNotANumber, kOutOfRange };

// An integer column (I1..I13, counts). The CSV form writes them as floats ("260.0"), so a
// fraction or an exponent is accepted; a magnitude past int64 is not: no count is that large,
// and as a double it would train as a silently rounded value.
IntegerField ParseIntegerField(std::string_view f, double* v) {
  const char* end = f.data() + f.size();
  int64_t i = 0;
  auto [p, ec] = std::from_chars(f.data(), end, i);
  if (ec == std::errc() || ec == std::errc::result_out_of_range) {
    // "123" or "123.000": judged exactly, also at the ends of the range where a double
    // would round.
    const char* q = p;
    if (q != end && *q == '.') {
      ++q;
      while (q != end && *q == '0') ++q;
    }
    if (q == end) {
      if (ec != std::errc()) return IntegerField::kOutOfRange;
      *v = static_cast<double>(i);
      return IntegerField::kOk;
    }
  }
  auto [dp, dec] = std::from_chars(f.data(), end, *v);
  if (dec == std::errc::result_out_of_range && dp == end) {
    // Past double's range (1e400: out of int64's too) or below its smallest (1e-400: zero).
    const double d = std::strtod(std::string(f).c_str(), nullptr);
    if (std::isinf(d)) return IntegerField::kOutOfRange;
    *v = 0;
    return IntegerField::kOk;
  }
  if (dec != std::errc() || dp != end || !std::isfinite(*v)) return IntegerField::kNotANumber;
  constexpr double kTwo63 = 9223372036854775808.0;
  if (*v >= kTwo63 || *v < -kTwo63) return IntegerField::kOutOfRange;
  return IntegerField::kOk;
}

}  // namespace

bool ParseCriteoLine(std::string_view line, bool csv, const std::vector<int64_t>& rows,
                     float* dense, int64_t* sparse, float* label, std::string* reason) {
  const char sep = csv ? ',' : '\t';
  std::string_view fields[1 + kCriteoDense + kCriteoSparse];
  int count = 0;
  size_t start = 0;
  while (true) {
    const size_t end = line.find(sep, start);
    if (count < 1 + kCriteoDense + kCriteoSparse) {
      fields[count] = line.substr(start, end == std::string_view::npos ? end : end - start);
    }
    ++count;
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  if (count != 1 + kCriteoDense + kCriteoSparse) {
    *reason = absl::StrCat("expected 40 columns, found ", count);
    return false;
  }
  double v;
  if (!ParseDouble(fields[0], &v) || (v != 0.0 && v != 1.0)) {
    *reason = absl::StrCat("label ", Quote(fields[0]), " is not 0 or 1");
    return false;
  }
  *label = static_cast<float>(v);
  for (int j = 0; j < kCriteoDense; ++j) {
    const std::string_view f = fields[1 + j];
    if (f.empty()) {
      dense[j] = 0.0f;
      continue;
    }
    switch (ParseIntegerField(f, &v)) {
      case IntegerField::kOk:
        break;
      case IntegerField::kNotANumber:
        *reason = absl::StrCat("I", j + 1, " ", Quote(f), " is not a number");
        return false;
      case IntegerField::kOutOfRange:
        *reason = absl::StrCat("I", j + 1, " ", Quote(f), " is past the 64-bit integer range");
        return false;
    }
    dense[j] = static_cast<float>(std::log1p(std::max(v, 0.0)));
  }
  for (int t = 0; t < kCriteoSparse; ++t) {
    const std::string_view f = fields[1 + kCriteoDense + t];
    if (f.empty()) {
      sparse[t] = 0;
      continue;
    }
    uint64_t raw = 0;
    auto [p, ec] = std::from_chars(f.data(), f.data() + f.size(), raw, 16);
    const bool all_hex = p == f.data() + f.size();
    if (all_hex && (ec == std::errc::result_out_of_range || f.size() > 16)) {
      *reason = absl::StrCat("C", t + 1, " ", Quote(f),
                             " has more than 16 hex digits (a categorical is at most 64 bits)");
      return false;
    }
    if (ec != std::errc() || !all_hex) {
      *reason = absl::StrCat("C", t + 1, " ", Quote(f), " is not hexadecimal");
      return false;
    }
    sparse[t] = CriteoRowId(raw, t, rows[t]);
  }
  return true;
}

namespace {

// ---------------------------------------------------------------------------------------
// The checks of a data file before anything reads it: a job given the wrong file (a
// folder, a compressed file, a binary, a file with nothing to train on, any text that is not
// Criteo data) fails at once and says why, instead of skipping every line and finishing
// with zero samples.

constexpr size_t kSniffBytes = 4096;  // the head checked for compression and binary data
constexpr int kSniffLines = 100;      // data lines tried until one parses
constexpr double kMaxNonText = 0.3;   // share of non-text bytes in the head that is binary

// The format a compressed file or an archive starts with (and what to do about it), or
// nullptr.
const char* CompressedFormat(std::string_view head, const char** fix) {
  struct Magic {
    std::string_view bytes;
    const char* what;
    const char* fix;
  };
  static const Magic kMagics[] = {
      {std::string_view("\x1f\x8b", 2), "gzip-compressed", "decompress it first (gunzip)"},
      {std::string_view("\xfd\x37\x7a\x58\x5a\x00", 6), "xz-compressed",
       "decompress it first (unxz)"},
      {std::string_view("\x28\xb5\x2f\xfd", 4), "zstd-compressed", "decompress it first (unzstd)"},
      {std::string_view("PK\x03\x04", 4), "a zip archive", "extract it first (unzip)"},
  };
  for (const Magic& m : kMagics) {
    if (head.substr(0, m.bytes.size()) == m.bytes) {
      *fix = m.fix;
      return m.what;
    }
  }
  // "BZh" and the block size digit: a Criteo line starts with its label, never with "BZh".
  if (head.size() >= 4 && head.substr(0, 3) == "BZh" && head[3] >= '1' && head[3] <= '9') {
    *fix = "decompress it first (bunzip2)";
    return "bzip2-compressed";
  }
  return nullptr;
}

// The error for the data file `name` ("data.paths: <path>"), followed by `what`.
template <typename... Parts>
absl::Status Refuse(const std::string& name, const Parts&... what) {
  return absl::InvalidArgumentError(absl::StrCat(name, what...));
}

// `path` exists and is a regular file (which can be read twice).
absl::Status CheckRegularFile(const std::string& path, const std::string& name) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT) return Refuse(name, " does not exist");
    return Refuse(name, " cannot be read: ", std::strerror(err));
  }
  if (S_ISDIR(st.st_mode)) return Refuse(name, " is a directory, not a data file");
  if (!S_ISREG(st.st_mode)) {
    // Opening a FIFO could block here; and a stream cannot be read twice, which this check,
    // Seek and every evaluation do.
    const char* kind = S_ISFIFO(st.st_mode)   ? "a FIFO"
                       : S_ISCHR(st.st_mode)  ? "a character device"
                       : S_ISBLK(st.st_mode)  ? "a block device"
                       : S_ISSOCK(st.st_mode) ? "a socket"
                                              : "not a plain file";
    return Refuse(name, " is ", kind, ", not a regular file: the readers re-read their files");
  }
  return absl::OkStatus();
}

// The file's first bytes are text: not compressed, not an executable, not mostly binary.
absl::Status CheckHeadIsText(std::string_view head, const std::string& name) {
  const char* fix = nullptr;
  if (const char* format = CompressedFormat(head, &fix); format != nullptr) {
    return Refuse(name, " is ", format, ": ", fix);
  }
  if (head.substr(0, 4) == "\x7f" "ELF") {
    return Refuse(name, " is a binary file (an ELF executable or library), not Criteo text");
  }
  // A NUL or another stray byte is a malformed line, counted against data.max_bad_lines as
  // any other (real logs have such lines); only a head that is mostly not text is binary.
  size_t non_text = 0;
  for (size_t i = 0; i < head.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(head[i]);
    const bool text =
        (c >= 0x20 && c < 0x7f) || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
    non_text += !text;
  }
  if (non_text > kMaxNonText * head.size()) {
    return Refuse(name, absl::StrFormat(" is a binary file (%.0f%% of its first %d bytes are not "
                                        "text), not Criteo text",
                                        100.0 * non_text / head.size(), head.size()));
  }
  return absl::OkStatus();
}

// Text: at least one of the first data lines (read from where `f` is) must be a Criteo line.
// Malformed lines are tolerated up to data.max_bad_lines, but a file with none that parses is
// the wrong file.
absl::Status CheckSomeLineParses(FILE* f, const std::string& name, bool csv,
                                 const std::vector<int64_t>& rows) {
  char* buf = nullptr;
  size_t cap = 0;
  int64_t line_no = 0, data_lines = 0, first_bad = 0;
  std::string first_reason, reason;
  float dense[kCriteoDense], label;
  int64_t sparse[kCriteoSparse];
  bool parsed = false, header = false;
  size_t first_commas = 0, first_tabs = 0;
  ssize_t len;
  while (!parsed && data_lines < kSniffLines && (len = getline(&buf, &cap, f)) >= 0) {
    ++line_no;
    size_t n = static_cast<size_t>(len);
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r')) --n;
    const std::string_view line(buf, n);
    if (IsCsvHeader(csv, line_no, line)) {
      header = true;
      continue;
    }
    if (line.empty()) continue;
    ++data_lines;
    if (ParseCriteoLine(line, csv, rows, dense, sparse, &label, &reason)) {
      parsed = true;
    } else if (first_reason.empty()) {
      first_bad = line_no;
      first_reason = reason;
      first_commas = std::count(line.begin(), line.end(), ',');
      first_tabs = std::count(line.begin(), line.end(), '\t');
    }
  }
  const bool at_end = std::feof(f) != 0;
  const bool read_error = std::ferror(f) != 0;
  std::free(buf);
  if (read_error) return Refuse(name, " cannot be read: ", std::strerror(errno));
  if (parsed) return absl::OkStatus();
  if (data_lines == 0) {
    return Refuse(name, " has no data rows (", header ? "only a header line" : "only blank lines",
                  ")");
  }
  // The other form's separator: a likely mix-up of criteo_tsv and criteo_csv.
  std::string hint;
  if (!csv && first_commas == kCriteoDense + kCriteoSparse) {
    hint = "; it looks comma-separated: data.source criteo_csv?";
  } else if (csv && first_tabs == kCriteoDense + kCriteoSparse) {
    hint = "; it looks tab-separated: data.source criteo_tsv?";
  }
  return Refuse(name, " is not ", csv ? "criteo_csv" : "criteo_tsv", " data: none of its ",
                at_end ? "" : "first ", data_lines,
                data_lines == 1 ? " line parses" : " lines parse", " (line ", first_bad, ": ",
                first_reason, ")", hint);
}

absl::Status CheckCriteoFile(const std::string& path, bool csv, const std::vector<int64_t>& rows) {
  const std::string name = absl::StrCat("data.paths: ", path);
  RETURN_IF_ERROR(CheckRegularFile(path, name));
  std::unique_ptr<FILE, FileCloser> f(std::fopen(path.c_str(), "r"));
  if (f == nullptr) return Refuse(name, " cannot be read: ", std::strerror(errno));
  char head_buf[kSniffBytes];
  const size_t head_len = std::fread(head_buf, 1, sizeof(head_buf), f.get());
  if (std::ferror(f.get())) return Refuse(name, " cannot be read: ", std::strerror(errno));
  if (head_len == 0) return Refuse(name, " is empty: it has no data rows");
  const std::string_view head(head_buf, head_len);
  RETURN_IF_ERROR(CheckHeadIsText(head, name));
  std::rewind(f.get());
  return CheckSomeLineParses(f.get(), name, csv, rows);
}

absl::Status ValidateCommon(const DataSection& data, const ModelSection& model, int partition,
                            int num_partitions) {
  if (model.num_dense < 1 || model.num_sparse < 1) {
    return absl::InvalidArgumentError("model.num_dense and model.num_sparse must be >= 1");
  }
  if (static_cast<int>(model.table_rows.size()) != model.num_sparse) {
    return absl::InvalidArgumentError(absl::StrCat("model.table_rows has ", model.table_rows.size(),
                                                   " entries; model.num_sparse is ",
                                                   model.num_sparse));
  }
  for (int64_t r : model.table_rows) {
    if (r < 1) return absl::InvalidArgumentError("model.table_rows: every entry must be >= 1");
  }
  if (num_partitions < 1 || partition < 0 || partition >= num_partitions) {
    return absl::InvalidArgumentError(
        absl::StrCat("partition ", partition, " not in [0, ", num_partitions, ")"));
  }
  if (data.synthetic.zipf_s <= 0) {
    return absl::InvalidArgumentError("data.synthetic.zipf_s must be > 0");
  }
  if (data.synthetic.label_noise < 0 || data.synthetic.label_noise > 1) {
    return absl::InvalidArgumentError("data.synthetic.label_noise must be in [0, 1]");
  }
  if (data.eval_fraction < 0 || data.eval_fraction >= 1) {
    return absl::InvalidArgumentError("data.eval_fraction must be in [0, 1)");
  }
  return absl::OkStatus();
}

}  // namespace

int64_t CriteoRowId(uint64_t raw, int table, int64_t table_rows) {
  return CategoricalRow(raw, table, table_rows);
}

absl::StatusOr<std::unique_ptr<DataSource>> MakeDataSource(const DataSection& data,
                                                           const ModelSection& model, uint64_t seed,
                                                           int partition, int num_partitions,
                                                           bool eval, int64_t max_samples) {
  absl::Status st = ValidateCommon(data, model, partition, num_partitions);
  if (!st.ok()) return st;
  if (data.source == DataSourceType::kSynthetic) {
    return MakeSyntheticSource(data, model, seed, partition, num_partitions, eval, max_samples);
  }
  // criteo_tsv or criteo_csv
  if (model.num_dense != kCriteoDense || model.num_sparse != kCriteoSparse) {
    return absl::InvalidArgumentError(
        "criteo data needs model.num_dense = 13 and model.num_sparse = 26");
  }
  if (data.paths.empty()) return absl::InvalidArgumentError("data.paths is empty");
  for (const auto& p : data.paths) {
    RETURN_IF_ERROR(
        CheckCriteoFile(p, data.source == DataSourceType::kCriteoCsv, model.table_rows));
  }
  return MakeCriteoSource(data, model, seed, partition, num_partitions, eval, max_samples);
}

absl::StatusOr<double> SyntheticCeilingAuc(const DataSection& data, const ModelSection& model,
                                           uint64_t seed, int64_t samples) {
  absl::Status st = ValidateCommon(data, model, 0, 1);
  if (!st.ok()) return st;
  return SyntheticAucOfItsOwnProbabilities(data, model, seed, samples);
}

}  // namespace ecps
