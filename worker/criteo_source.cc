#include "worker/criteo_source.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/status_macros.h"
#include "worker/criteo_blocks.h"

namespace ecps {
namespace {

constexpr int kCriteoDense = 13;
constexpr int kCriteoSparse = 26;
constexpr int kMaxExamples = 5;

struct FileCloser {
  void operator()(FILE* f) const {
    if (f != nullptr) std::fclose(f);
  }
};

// A partition of the Criteo files, over data.epochs passes. position() counts the lines
// consumed over all passes, so a checkpoint's single reader position names the epoch too
// (epoch = position / lines per pass): every pass holds the same lines of the partition
// (shuffled: the same number of lines).
class CriteoSource : public DataSource {
 public:
  CriteoSource(const DataSection& data, const ModelSection& model, uint64_t seed, int partition,
               int num_partitions, bool eval, int64_t max_samples)
      : paths_(data.paths),
        csv_(data.source == DataSourceType::kCriteoCsv),
        rows_(model.table_rows),
        partition_(partition),
        num_partitions_(num_partitions),
        eval_(eval),
        max_bad_(data.max_bad_lines),
        max_samples_(max_samples),
        // Evaluation reads the held-out split once, in file order.
        epochs_(eval ? 1 : data.epochs),
        shuffle_(!eval && data.shuffle),
        block_lines_(data.shuffle_block_lines),
        seed_(seed) {
    if (data.eval_fraction > 0) {
      eval_mod_ = std::max<int64_t>(1, std::llround(1.0 / data.eval_fraction));
    }
  }
  ~CriteoSource() override { std::free(line_); }

  absl::Status Open() {
    if (shuffle_) {
      ASSIGN_OR_RETURN(index_, IndexBlocks(paths_, csv_, block_lines_));
      per_epoch_ = PartitionShare(TrainingRows(0, index_.data_lines, eval_mod_), partition_,
                                  num_partitions_);
    }
    return Reset();
  }

  absl::StatusOr<bool> Next(int batch_size, Batch* out) override {
    out->size = 0;
    out->dense.resize(static_cast<size_t>(std::max(batch_size, 0)) * kCriteoDense);
    out->sparse.resize(static_cast<size_t>(std::max(batch_size, 0)) * kCriteoSparse);
    out->labels.resize(std::max(batch_size, 0));
    while (out->size < batch_size) {
      std::string_view line;
      bool got;
      {
        auto r = NextOwnLine(&line);
        if (!r.ok()) return r.status();
        got = *r;
      }
      if (!got) {
        Shrink(out);
        return false;
      }
      std::string reason;
      const int i = out->size;
      if (Parse(line, out->dense.data() + static_cast<size_t>(i) * kCriteoDense,
                out->sparse.data() + static_cast<size_t>(i) * kCriteoSparse, &out->labels[i],
                &reason)) {
        ++out->size;
        continue;
      }
      // A malformed line is met again in every epoch: it counts once, in the first.
      if (epoch_ > 0) continue;
      ++bad_lines_;
      std::string where = absl::StrCat(paths_[line_file_], ":", line_no_of_line_, ": ", reason);
      if (static_cast<int>(examples_.size()) < kMaxExamples) examples_.push_back(where);
      if (bad_lines_ > max_bad_) {
        return absl::InvalidArgumentError(absl::StrCat(where, " (", bad_lines_,
                                                       " malformed lines, more than "
                                                       "data.max_bad_lines = ",
                                                       max_bad_, ")"));
      }
    }
    Shrink(out);
    return true;
  }

  int64_t position() const override { return position_; }
  int64_t epoch() const override { return epoch_; }

  absl::Status Seek(int64_t position) override {
    if (position < 0) return absl::OutOfRangeError("negative seek");
    RETURN_IF_ERROR(Reset());
    if (shuffle_) {
      RETURN_IF_ERROR(SeekShuffled(position));
    } else {
      RETURN_IF_ERROR(SkipTo(position));
    }
    bad_lines_ = 0;
    examples_.clear();
    return absl::OkStatus();
  }

  int64_t bad_lines() const override { return bad_lines_; }
  std::vector<std::string> bad_line_examples() const override { return examples_; }

 private:
  static void Shrink(Batch* out) {
    out->dense.resize(static_cast<size_t>(out->size) * kCriteoDense);
    out->sparse.resize(static_cast<size_t>(out->size) * kCriteoSparse);
    out->labels.resize(out->size);
  }

  absl::Status Reset() {
    position_ = 0;
    epoch_ = 0;
    return StartEpoch();
  }

  // The reader at the start of epoch_ (position_ already counts the epochs before it).
  absl::Status StartEpoch() {
    file_ = 0;
    line_no_ = 0;
    row_ = 0;
    split_index_ = 0;
    if (shuffle_) {
      block_order_ = SeededPermutation(static_cast<int64_t>(index_.starts.size()),
                                       BlockOrderKey(seed_, epoch_));
      slot_ = -1;  // no block loaded: the next line loads block_order_[0]
      block_lines_read_.clear();
      cursor_ = 0;
      return absl::OkStatus();
    }
    return OpenFile();
  }

  absl::Status OpenFile() {
    fp_.reset(std::fopen(paths_[file_].c_str(), "r"));
    line_no_ = 0;
    if (fp_ == nullptr) {
      return absl::NotFoundError(absl::StrCat("cannot open ", paths_[file_]));
    }
    return absl::OkStatus();
  }

  // The end of a pass: the next epoch starts, or (after the last) the partition is over.
  absl::StatusOr<bool> NextEpoch() {
    if (per_epoch_ < 0) per_epoch_ = position_ / (epoch_ + 1);
    // An empty partition stays empty: no pass over the files again to find nothing.
    if (epoch_ + 1 >= epochs_ || per_epoch_ == 0) return false;
    ++epoch_;
    RETURN_IF_ERROR(StartEpoch());
    return true;
  }

  // Reads the next line of this partition's split (advancing position_); false at the end of
  // the last epoch.
  absl::StatusOr<bool> NextOwnLine(std::string_view* line) {
    if (max_samples_ > 0 && position_ >= max_samples_) return false;
    while (true) {
      int64_t r;
      if (shuffle_) {
        if (cursor_ >= block_lines_read_.size()) {
          if (slot_ + 1 >= static_cast<int64_t>(block_order_.size())) {
            ASSIGN_OR_RETURN(const bool more, NextEpoch());
            if (!more) return false;
          }
          RETURN_IF_ERROR(LoadSlot(slot_ + 1));
          continue;
        }
        const BlockLine& l = block_lines_read_[cursor_++];
        r = l.row;
        line_file_ = l.file;
        line_no_of_line_ = l.line_no;
        *line = std::string_view(block_text_).substr(l.offset, l.length);
      } else {
        if (fp_ == nullptr) return false;
        const ssize_t len = getline(&line_, &cap_, fp_.get());
        if (len < 0) {
          if (std::ferror(fp_.get())) {
            return absl::UnavailableError(absl::StrCat("read error in ", paths_[file_]));
          }
          if (file_ + 1 < paths_.size()) {
            ++file_;
            RETURN_IF_ERROR(OpenFile());
            continue;
          }
          fp_.reset();
          ASSIGN_OR_RETURN(const bool more, NextEpoch());
          if (!more) return false;
          continue;
        }
        ++line_no_;
        size_t n = static_cast<size_t>(len);
        while (n > 0 && (line_[n - 1] == '\n' || line_[n - 1] == '\r')) --n;
        *line = std::string_view(line_, n);
        if (IsCsvHeader(csv_, line_no_, *line)) continue;
        r = row_++;
        line_file_ = file_;
        line_no_of_line_ = line_no_;
      }
      const bool held_out = eval_mod_ > 0 && r % eval_mod_ == eval_mod_ - 1;
      if (held_out != eval_) continue;
      if (split_index_++ % num_partitions_ != partition_) continue;
      ++position_;
      return true;
    }
  }

  // Loads the block in slot `slot` of this epoch's order, its lines in their seeded order.
  absl::Status LoadSlot(int64_t slot) {
    slot_ = slot;
    const int64_t block = block_order_[slot];
    std::vector<BlockLine> lines;
    RETURN_IF_ERROR(ReadBlock(paths_, csv_, index_, block_lines_, block, &block_text_, &lines));
    const std::vector<int64_t> order =
        SeededPermutation(static_cast<int64_t>(lines.size()), LineOrderKey(seed_, epoch_, block));
    block_lines_read_.resize(lines.size());
    for (size_t i = 0; i < lines.size(); ++i) block_lines_read_[i] = lines[order[i]];
    cursor_ = 0;
    return absl::OkStatus();
  }

  // In file order: reads forward to `position` without parsing; once the first end of the
  // files told how many lines a pass holds, jumps to the epoch `position` lies in.
  absl::Status SkipTo(int64_t position) {
    std::string_view line;
    while (position_ < position) {
      if (per_epoch_ > 0) {
        const int64_t epoch = std::min(position / per_epoch_, epochs_ - 1);
        if (epoch > epoch_) {
          epoch_ = epoch;
          position_ = epoch * per_epoch_;
          RETURN_IF_ERROR(StartEpoch());
          continue;
        }
      }
      auto r = NextOwnLine(&line);
      if (!r.ok()) return r.status();
      if (!*r) return PastTheEnd(position);
    }
    return absl::OkStatus();
  }

  // Shuffled: the epoch by arithmetic, whole blocks by their share of training lines, then
  // the lines of one block.
  absl::Status SeekShuffled(int64_t position) {
    if (position == 0) return absl::OkStatus();
    if (position > per_epoch_ * epochs_) return PastTheEnd(position);
    epoch_ = std::min(position / per_epoch_, epochs_ - 1);
    position_ = epoch_ * per_epoch_;
    RETURN_IF_ERROR(StartEpoch());
    if (position_ == position) return absl::OkStatus();
    for (int64_t slot = 0; slot < static_cast<int64_t>(block_order_.size()); ++slot) {
      const int64_t block = block_order_[slot];
      const int64_t begin = block * block_lines_;
      const int64_t end = std::min(begin + block_lines_, index_.data_lines);
      const int64_t split_end = split_index_ + TrainingRows(begin, end, eval_mod_);
      const int64_t share = PartitionShare(split_end, partition_, num_partitions_) -
                            PartitionShare(split_index_, partition_, num_partitions_);
      if (position_ + share < position) {
        position_ += share;
        split_index_ = split_end;
        continue;
      }
      RETURN_IF_ERROR(LoadSlot(slot));
      std::string_view line;
      while (position_ < position) {
        auto r = NextOwnLine(&line);
        if (!r.ok()) return r.status();
        if (!*r) return PastTheEnd(position);
      }
      return absl::OkStatus();
    }
    return PastTheEnd(position);
  }

  absl::Status PastTheEnd(int64_t position) const {
    return absl::OutOfRangeError(
        absl::StrCat("seek to ", position, " past the partition's end (", position_, ")"));
  }

  bool Parse(std::string_view line, float* dense, int64_t* sparse, float* label,
             std::string* reason) const {
    return ParseCriteoLine(line, csv_, rows_, dense, sparse, label, reason);
  }

  std::vector<std::string> paths_;
  bool csv_;
  std::vector<int64_t> rows_;
  int partition_, num_partitions_;
  bool eval_;
  int64_t max_bad_, max_samples_;
  int64_t epochs_;
  bool shuffle_;
  int64_t block_lines_;
  uint64_t seed_;
  int64_t eval_mod_ = 0;

  int64_t epoch_ = 0;
  // The partition's lines per epoch; -1 until known (in file order: at the first end of the
  // files; shuffled: from the index).
  int64_t per_epoch_ = -1;
  // In file order: the open file and where in it.
  std::unique_ptr<FILE, FileCloser> fp_;
  char* line_ = nullptr;
  size_t cap_ = 0;
  size_t file_ = 0;
  int64_t line_no_ = 0;  // 1-based line number in paths_[file_]
  int64_t row_ = 0;      // data lines seen across files
  // Shuffled: the blocks, this epoch's order of them, and the block read (its lines in their
  // order for this epoch).
  BlockIndex index_;
  std::vector<int64_t> block_order_;
  int64_t slot_ = -1;
  std::string block_text_;
  std::vector<BlockLine> block_lines_read_;
  size_t cursor_ = 0;
  // Both: the line last returned (for the messages on a malformed one), the split's lines of
  // this epoch seen, the partition's lines consumed over every epoch.
  size_t line_file_ = 0;
  int64_t line_no_of_line_ = 0;
  int64_t split_index_ = 0;
  int64_t position_ = 0;
  int64_t bad_lines_ = 0;
  std::vector<std::string> examples_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<DataSource>> MakeCriteoSource(const DataSection& data,
                                                             const ModelSection& model,
                                                             uint64_t seed, int partition,
                                                             int num_partitions, bool eval,
                                                             int64_t max_samples) {
  auto src = std::make_unique<CriteoSource>(data, model, seed, partition, num_partitions, eval,
                                            max_samples);
  RETURN_IF_ERROR(src->Open());
  return std::unique_ptr<DataSource>(std::move(src));
}

}  // namespace ecps
