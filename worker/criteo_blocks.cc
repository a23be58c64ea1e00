#include "worker/criteo_blocks.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "kernels/hash_rng.h"

namespace ecps {
namespace {

struct FileCloser {
  void operator()(FILE* f) const {
    if (f != nullptr) std::fclose(f);
  }
};
using File = std::unique_ptr<FILE, FileCloser>;

// getline's buffer, freed on every path out.
struct LineBuffer {
  ~LineBuffer() { std::free(data); }
  char* data = nullptr;
  size_t cap = 0;
};

absl::StatusOr<File> Open(const std::string& path) {
  File f(std::fopen(path.c_str(), "r"));
  if (f == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  }
  return f;
}

size_t Stripped(const char* line, ssize_t len) {
  size_t n = static_cast<size_t>(len);
  while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) --n;
  return n;
}

// Tags that keep the two kinds of order keys apart.
constexpr uint64_t kBlockOrderTag = 0xB10C0;
constexpr uint64_t kLineOrderTag = 0x11E0;

}  // namespace

absl::StatusOr<BlockIndex> IndexBlocks(const std::vector<std::string>& paths, bool csv,
                                       int64_t block_lines) {
  BlockIndex index;
  LineBuffer buf;
  for (size_t file = 0; file < paths.size(); ++file) {
    auto f = Open(paths[file]);
    if (!f.ok()) return f.status();
    int64_t line_no = 0;
    while (true) {
      const long offset = std::ftell(f->get());
      const ssize_t len = getline(&buf.data, &buf.cap, f->get());
      if (len < 0) break;
      ++line_no;
      if (IsCsvHeader(csv, line_no, std::string_view(buf.data, Stripped(buf.data, len)))) continue;
      if (index.data_lines % block_lines == 0) {
        index.starts.push_back({file, static_cast<int64_t>(offset), line_no - 1});
      }
      ++index.data_lines;
    }
    if (std::ferror(f->get())) {
      return absl::UnavailableError(absl::StrCat("read error in ", paths[file]));
    }
  }
  return index;
}

absl::Status ReadBlock(const std::vector<std::string>& paths, bool csv, const BlockIndex& index,
                       int64_t block_lines, int64_t block, std::string* text,
                       std::vector<BlockLine>* lines) {
  text->clear();
  lines->clear();
  const BlockStart& start = index.starts[block];
  const int64_t first_row = block * block_lines;
  const int64_t count = std::min(block_lines, index.data_lines - first_row);
  LineBuffer buf;
  size_t file = start.file;
  int64_t line_no = start.line_no;
  auto f = Open(paths[file]);
  if (!f.ok()) return f.status();
  if (std::fseek(f->get(), static_cast<long>(start.offset), SEEK_SET) != 0) {
    return absl::UnavailableError(absl::StrCat("cannot seek in ", paths[file]));
  }
  while (static_cast<int64_t>(lines->size()) < count) {
    const ssize_t len = getline(&buf.data, &buf.cap, f->get());
    if (len < 0) {
      if (std::ferror(f->get())) {
        return absl::UnavailableError(absl::StrCat("read error in ", paths[file]));
      }
      // The files changed since they were indexed: fewer lines than counted.
      if (file + 1 >= paths.size()) {
        return absl::UnavailableError(
            absl::StrCat(paths[file], " ended before data line ", first_row + count,
                         " of the blocks indexed when training started: was a data file changed?"));
      }
      ++file;
      line_no = 0;
      auto next = Open(paths[file]);
      if (!next.ok()) return next.status();
      *f = std::move(*next);
      continue;
    }
    ++line_no;
    const size_t n = Stripped(buf.data, len);
    if (IsCsvHeader(csv, line_no, std::string_view(buf.data, n))) continue;
    lines->push_back(
        {file, line_no, first_row + static_cast<int64_t>(lines->size()), text->size(), n});
    text->append(buf.data, n);
  }
  return absl::OkStatus();
}

std::vector<int64_t> SeededPermutation(int64_t n, uint64_t key) {
  std::vector<int64_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), 0);
  for (int64_t i = n - 1; i > 0; --i) {
    // A 64-bit hash modulo i + 1: the bias is below (i + 1) / 2^64.
    const int64_t j =
        static_cast<int64_t>(HashOf(key, static_cast<uint64_t>(i)) % static_cast<uint64_t>(i + 1));
    std::swap(p[i], p[j]);
  }
  return p;
}

uint64_t BlockOrderKey(uint64_t seed, int64_t epoch) {
  return HashOf(kBlockOrderTag, seed, static_cast<uint64_t>(epoch));
}

uint64_t LineOrderKey(uint64_t seed, int64_t epoch, int64_t block) {
  return HashOf(kLineOrderTag, seed, static_cast<uint64_t>(epoch), static_cast<uint64_t>(block));
}

int64_t TrainingRows(int64_t begin, int64_t end, int64_t eval_mod) {
  if (eval_mod <= 0) return end - begin;
  // Held out below x: the r < x with r % m == m - 1, which are floor(x / m).
  return (end - begin) - (end / eval_mod - begin / eval_mod);
}

int64_t PartitionShare(int64_t end, int partition, int num_partitions) {
  if (end <= partition) return 0;
  return (end - partition + num_partitions - 1) / num_partitions;
}

}  // namespace ecps
