#include "coordinator/state_log.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <optional>
#include <utility>
#include <vector>

#include "absl/memory/memory.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "runtime/hash.h"
#include "runtime/posix_file.h"
#include "runtime/status_macros.h"
#include "spdlog/spdlog.h"

namespace ecps {

namespace {

namespace fs = std::filesystem;

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the state log's files are little-endian");

constexpr char kLockName[] = "LOCK";
constexpr char kSnapshotName[] = "SNAPSHOT";
constexpr char kSegmentPrefix[] = "log-";
constexpr char kTmpSuffix[] = ".tmp";  // WriteFileDurably's temporary
constexpr int kSegmentDigits = 20;
constexpr uint64_t kChecksumSeed = 0;

// ---- The on-disk layout (the header comment of state_log.h) -----------------------------

struct SegmentHeader {
  char magic[8];  // kSegmentMagic
  uint64_t first_seq;
};
static_assert(sizeof(SegmentHeader) == 16);
constexpr char kSegmentMagic[8] = {'E', 'C', 'P', 'S', 'L', 'O', 'G', '1'};

struct RecordHeader {
  uint64_t checksum;  // of everything after it: the rest of the header and the bytes
  uint64_t seq;
  uint32_t length;
  uint32_t reserved;  // 0
};
static_assert(sizeof(RecordHeader) == 24);

struct SnapshotHeader {
  char magic[8];  // kSnapshotMagic
  uint64_t last_seq;
  uint64_t length;
  uint64_t checksum;  // of last_seq, length and the bytes
};
static_assert(sizeof(SnapshotHeader) == 32);
constexpr char kSnapshotMagic[8] = {'E', 'C', 'P', 'S', 'S', 'N', 'P', '1'};

constexpr int64_t kSegmentHeaderBytes = sizeof(SegmentHeader);
constexpr int64_t kRecordHeaderBytes = sizeof(RecordHeader);

uint64_t RecordChecksum(const RecordHeader& h, absl::string_view bytes) {
  Hash64Stream hash(kChecksumSeed);
  hash.Update(&h.seq, sizeof(h) - offsetof(RecordHeader, seq));
  hash.Update(bytes.data(), bytes.size());
  return hash.Digest();
}

uint64_t SnapshotChecksum(const SnapshotHeader& h, absl::string_view bytes) {
  Hash64Stream hash(kChecksumSeed);
  hash.Update(&h.last_seq, offsetof(SnapshotHeader, checksum) - offsetof(SnapshotHeader, last_seq));
  hash.Update(bytes.data(), bytes.size());
  return hash.Digest();
}

template <typename Header>
std::string Frame(const Header& h, absl::string_view bytes) {
  std::string out(sizeof(h) + bytes.size(), '\0');
  std::memcpy(out.data(), &h, sizeof(h));
  std::memcpy(out.data() + sizeof(h), bytes.data(), bytes.size());
  return out;
}

std::string SegmentName(uint64_t first_seq) {
  return absl::StrFormat("%s%0*d", kSegmentPrefix, kSegmentDigits, first_seq);
}

std::optional<uint64_t> ParseSegmentName(absl::string_view name) {
  if (!absl::ConsumePrefix(&name, kSegmentPrefix) || name.size() != kSegmentDigits ||
      !std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return std::nullopt;
  }
  uint64_t seq = 0;
  if (!absl::SimpleAtoi(name, &seq)) return std::nullopt;
  return seq;
}

// ---- Reading the folder ----------------------------------------------------------------

// The files of a log folder that the log knows.
struct FolderListing {
  bool has_snapshot = false;
  std::vector<uint64_t> segments;  // first sequence numbers, ascending
  std::vector<std::string> temporaries;
};

absl::StatusOr<FolderListing> ListFolder(const std::string& dir, Env* env) {
  FolderListing out;
  ASSIGN_OR_RETURN(std::vector<DirEntry> entries, env->ListDir(dir));
  for (const DirEntry& entry : entries) {
    const std::string& name = entry.name;
    if (name == kSnapshotName) {
      out.has_snapshot = true;
    } else if (std::optional<uint64_t> seq = ParseSegmentName(name)) {
      out.segments.push_back(*seq);
    } else if (absl::EndsWith(name, kTmpSuffix)) {
      out.temporaries.push_back(name);
    }
  }
  std::sort(out.segments.begin(), out.segments.end());
  return out;
}

// A file the listing named: its going missing since is DATA_LOSS.
absl::StatusOr<std::string> ReadWholeFile(const std::string& path, Env* env) {
  absl::StatusOr<std::string> data = env->ReadFile(path);
  if (absl::IsNotFound(data.status())) {
    return FileError(absl::StatusCode::kDataLoss, path, "missing");
  }
  return data;
}

// The snapshot `data` read from `path`, checked.
absl::Status ParseSnapshot(const std::string& path, absl::string_view data,
                           StateLogContents* out) {
  auto damaged = [&](absl::string_view what) {
    return FileError(absl::StatusCode::kDataLoss, path,
                     absl::StrCat("damaged snapshot (it is replaced atomically, so no crash "
                                  "leaves it so): ",
                                  what));
  };
  SnapshotHeader h;
  if (data.size() < sizeof(h)) {
    return damaged(absl::StrCat(data.size(), " bytes, less than its header"));
  }
  std::memcpy(&h, data.data(), sizeof(h));
  if (std::memcmp(h.magic, kSnapshotMagic, sizeof(h.magic)) != 0) return damaged("bad magic");
  const absl::string_view bytes = data.substr(sizeof(h));
  if (h.length != bytes.size()) {
    return damaged(
        absl::StrCat("its header says ", h.length, " bytes, the file holds ", bytes.size()));
  }
  if (SnapshotChecksum(h, bytes) != h.checksum) return damaged("checksum mismatch");
  out->snapshot = std::string(bytes);
  out->snapshot_seq = h.last_seq;
  return absl::OkStatus();
}

absl::Status ReadSnapshot(const std::string& path, Env* env, StateLogContents* out) {
  ASSIGN_OR_RETURN(std::string data, ReadWholeFile(path, env));
  return ParseSnapshot(path, data, out);
}

// What is at `offset` of a segment's bytes, where record `seq` belongs.
struct RecordAt {
  absl::string_view bytes;  // the record's bytes when it is good
  int64_t end = 0;          // where it ends by its length field (maybe past the data)
  std::string problem;      // empty when it is good
  bool wrong_seq = false;   // intact, but another record: never a torn tail
};

RecordAt ReadRecordAt(absl::string_view data, int64_t offset, uint64_t seq) {
  RecordAt r;
  const int64_t size = static_cast<int64_t>(data.size());
  if (size - offset < kRecordHeaderBytes) {
    r.end = offset + kRecordHeaderBytes;
    r.problem = absl::StrCat("only ", size - offset, " bytes, less than a record header");
    return r;
  }
  RecordHeader h;
  std::memcpy(&h, data.data() + offset, sizeof(h));
  r.end = offset + kRecordHeaderBytes + h.length;
  if (r.end > size) {
    r.problem = absl::StrCat("its length, ", h.length, " bytes, runs past the end of the file");
    return r;
  }
  const absl::string_view bytes = data.substr(offset + kRecordHeaderBytes, h.length);
  if (RecordChecksum(h, bytes) != h.checksum) {
    r.problem = "checksum mismatch";
  } else if (h.seq != seq) {
    r.wrong_seq = true;
    r.problem = absl::StrCat("it holds record ", h.seq, " instead");
  } else {
    r.bytes = bytes;
  }
  return r;
}

// Whether a good record `seq` starts anywhere after `offset`.
bool GoodRecordAfter(absl::string_view data, int64_t offset, uint64_t seq) {
  const int64_t size = static_cast<int64_t>(data.size());
  for (int64_t p = offset + 1; p + kRecordHeaderBytes <= size; ++p) {
    uint64_t at_seq;
    std::memcpy(&at_seq, data.data() + p + offsetof(RecordHeader, seq), sizeof(at_seq));
    if (at_seq == seq && ReadRecordAt(data, p, seq).problem.empty()) return true;
  }
  return false;
}

// Whether the bad record `seq` at `offset` of the last segment is a torn append (the damage
// policy in state_log.h).
bool IsTornTail(absl::string_view data, int64_t offset, const RecordAt& bad, uint64_t seq) {
  if (bad.wrong_seq) return false;
  const bool reaches_end = bad.end >= static_cast<int64_t>(data.size());
  const bool zeros = data.find_first_not_of('\0', offset) == absl::string_view::npos;
  return (reaches_end || zeros) && !GoodRecordAfter(data, offset, seq + 1);
}

// One segment's good records, read by the damage policy.
struct SegmentScan {
  std::vector<StateLogRecord> records;
  int64_t end = 0;   // the end of its last good record
  int64_t size = 0;  // its size: more than `end` when its last record is torn
};

absl::StatusOr<SegmentScan> ScanSegment(const std::string& path, uint64_t first_seq, bool last,
                                        Env* env) {
  ASSIGN_OR_RETURN(std::string data, ReadWholeFile(path, env));
  SegmentHeader h;
  if (data.size() < sizeof(h) || std::memcmp(data.data(), kSegmentMagic, sizeof(h.magic)) != 0) {
    return FileError(absl::StatusCode::kDataLoss, path,
                     "damaged segment header (segments are created atomically)");
  }
  std::memcpy(&h, data.data(), sizeof(h));
  if (h.first_seq != first_seq) {
    return FileError(absl::StatusCode::kDataLoss, path,
                     absl::StrCat("its header says it starts at record ", h.first_seq));
  }
  SegmentScan scan;
  scan.size = static_cast<int64_t>(data.size());
  int64_t offset = kSegmentHeaderBytes;
  for (uint64_t seq = first_seq; offset < scan.size; ++seq) {
    RecordAt r = ReadRecordAt(data, offset, seq);
    if (r.problem.empty()) {
      scan.records.push_back({seq, std::string(r.bytes)});
      offset = r.end;
      continue;
    }
    if (last && IsTornTail(data, offset, r, seq)) {
      spdlog::warn(
          "state log: dropping a torn last record, {} from byte {} ({} bytes: {}): its "
          "writer died mid-append, or its host lost power",
          path, offset, scan.size - offset, r.problem);
      break;
    }
    return FileError(
        absl::StatusCode::kDataLoss, path,
        absl::StrCat("record ", seq, " at byte ", offset, " is damaged (", r.problem,
                     ") and is not a torn last record: records from ", seq, " on are lost"));
  }
  scan.end = offset;
  return scan;
}

absl::Status MissingSegment(const std::string& dir, uint64_t first_seq, absl::string_view found) {
  return FileError(
      absl::StatusCode::kDataLoss, JoinPath(dir, SegmentName(first_seq)),
      absl::StrCat("missing: the records from ", first_seq, " on are lost (", found, ")"));
}

// The folder read by the damage policy: what Load returns, and where appends go on.
struct FolderState {
  StateLogContents contents;
  uint64_t next_seq = 1;
  std::optional<uint64_t> tail_segment;  // the first seq of the last segment, if any
  int64_t tail_end = 0;                  // the end of its last good record
  int64_t tail_size = 0;                 // its size: more than tail_end when torn
};

absl::StatusOr<FolderState> ReadFolder(const std::string& dir, Env* env) {
  FolderState state;
  ASSIGN_OR_RETURN(FolderListing listing, ListFolder(dir, env));
  if (listing.has_snapshot) {
    RETURN_IF_ERROR(ReadSnapshot(JoinPath(dir, kSnapshotName), env, &state.contents));
  }
  uint64_t expected = state.contents.snapshot_seq + 1;
  std::vector<uint64_t> live;  // segments the snapshot does not make stale
  for (uint64_t first : listing.segments) {
    if (first >= expected) live.push_back(first);
  }
  if (live.empty() && state.contents.snapshot.has_value()) {
    return MissingSegment(dir, expected,
                          absl::StrCat("SNAPSHOT includes the records up to ", expected - 1,
                                       " and no segment follows it"));
  }
  for (size_t i = 0; i < live.size(); ++i) {
    if (live[i] != expected) {
      return MissingSegment(dir, expected,
                            absl::StrCat("the next segment present is ", SegmentName(live[i])));
    }
    const bool last = i + 1 == live.size();
    ASSIGN_OR_RETURN(SegmentScan scan,
                     ScanSegment(JoinPath(dir, SegmentName(live[i])), live[i], last, env));
    expected += scan.records.size();
    std::move(scan.records.begin(), scan.records.end(), std::back_inserter(state.contents.records));
    if (last) {
      state.tail_segment = live[i];
      state.tail_end = scan.end;
      state.tail_size = scan.size;
    }
  }
  state.next_seq = expected;
  return state;
}

// ---- The lock --------------------------------------------------------------------------

std::string DefaultOwner() {
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  return absl::StrCat("pid ", ::getpid(), " on host ", host[0] != '\0' ? host : "(unknown)");
}

// Who holds the lock, as the lock file says.
std::string LockHolder(int fd) {
  char text[512] = {};
  ssize_t n = ::pread(fd, text, sizeof(text) - 1, 0);
  std::string holder(text, n > 0 ? static_cast<size_t>(n) : 0);
  absl::StripTrailingAsciiWhitespace(&holder);
  return holder.empty() ? "another writer, which has not written its name yet" : holder;
}

// Takes the exclusive lock on DIR/LOCK and writes `owner` into it; returns its descriptor.
absl::StatusOr<int> TakeLock(const std::string& dir, const std::string& owner) {
  const std::string path = JoinPath(dir, kLockName);
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError(path, "open", errno);
  FdCloser closer(fd);
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if (err != EWOULDBLOCK) return ErrnoError(path, "flock", err);
    return absl::FailedPreconditionError(
        absl::StrCat(dir, ": the state log is held by ", LockHolder(fd),
                     " (one writer at a time: is another coordinator of this job running?)"));
  }
  if (::ftruncate(fd, 0) != 0) return ErrnoError(path, "truncate", errno);
  const std::string text = owner + "\n";
  RETURN_IF_ERROR(PwriteAll(fd, path, text.data(), static_cast<int64_t>(text.size()), 0));
  return closer.release();
}

absl::Status CreateFolder(const std::string& dir, Env* env) {
  ASSIGN_OR_RETURN(bool created, env->CreateDirs(dir));
  if (!created) return absl::OkStatus();
  const std::string parent = fs::path(dir).parent_path().string();
  return env->SyncPath(parent.empty() ? "." : parent);  // the folder's entry is durable too
}

}  // namespace

// ---- StateLog --------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<StateLog>> StateLog::Open(const std::string& dir_arg,
                                                         StateLogOptions options) {
  const std::string dir = StripTrailingSlashes(dir_arg);
  if (options.env == nullptr) options.env = Env::Default();
  RETURN_IF_ERROR(CreateFolder(dir, options.env));
  if (options.owner.empty()) options.owner = DefaultOwner();
  ASSIGN_OR_RETURN(int lock_fd, TakeLock(dir, options.owner));
  auto log = absl::WrapUnique(new StateLog(dir, std::move(options), lock_fd));
  RETURN_IF_ERROR(log->Recover());
  return log;
}

StateLog::StateLog(std::string dir, StateLogOptions options, int lock_fd)
    : dir_(std::move(dir)), options_(std::move(options)), env_(options_.env), lock_fd_(lock_fd) {}

StateLog::~StateLog() {
  absl::MutexLock lock(&mu_);
  segment_.reset();
  ::close(lock_fd_);  // releases the flock
}

absl::Status StateLog::Recover() {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(FolderState state, ReadFolder(dir_, env_));
  const uint64_t snapshot_seq = state.contents.snapshot_seq;
  RemoveStaleFiles(snapshot_seq);
  if (state.tail_segment.has_value()) {
    RETURN_IF_ERROR(OpenSegment(*state.tail_segment, state.tail_end, state.tail_size));
  } else {
    RETURN_IF_ERROR(CreateSegment(snapshot_seq + 1));
    RETURN_IF_ERROR(OpenSegment(snapshot_seq + 1, kSegmentHeaderBytes, kSegmentHeaderBytes));
  }
  next_seq_ = state.next_seq;
  spdlog::info("state log {} opened: {}, records after it: {}", dir_,
               state.contents.snapshot.has_value()
                   ? absl::StrCat("snapshot through record ", snapshot_seq)
                   : std::string("no snapshot"),
               state.contents.records.size());
  return absl::OkStatus();
}

absl::Status StateLog::Step(StateLogStep step, const std::string& path) const {
  return options_.before_step ? options_.before_step(step, path) : absl::OkStatus();
}

absl::Status StateLog::CreateSegment(uint64_t first_seq) {
  const std::string path = JoinPath(dir_, SegmentName(first_seq));
  RETURN_IF_ERROR(Step(StateLogStep::kSegmentCreate, path));
  SegmentHeader h;
  std::memcpy(h.magic, kSegmentMagic, sizeof(h.magic));
  h.first_seq = first_seq;
  return WriteFileDurably(path, Frame(h, ""), env_);
}

absl::Status StateLog::OpenSegment(uint64_t first_seq, int64_t end, int64_t size) {
  const std::string path = JoinPath(dir_, SegmentName(first_seq));
  ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file, env_->NewAppendableFile(path));
  if (size > end) {  // a torn last record
    RETURN_IF_ERROR(file->Truncate(end));
    RETURN_IF_ERROR(file->Sync());
  }
  segment_ = std::move(file);  // appends go at `end`, the file's end
  return absl::OkStatus();
}

void StateLog::RemoveStaleFiles(uint64_t snapshot_seq) {
  absl::StatusOr<FolderListing> listing = ListFolder(dir_, env_);
  if (!listing.ok()) {
    spdlog::warn("state log: stale files not removed: {}", listing.status().ToString());
    return;
  }
  std::vector<std::string> stale = listing->temporaries;
  for (uint64_t first : listing->segments) {
    if (first <= snapshot_seq) stale.push_back(SegmentName(first));
  }
  if (stale.empty()) return;
  for (const std::string& name : stale) {
    const std::string path = JoinPath(dir_, name);
    absl::Status s = Step(StateLogStep::kRemoveStale, path);
    if (s.ok()) s = env_->RemoveFile(path);
    if (!s.ok())
      spdlog::warn("state log: stale file not removed (the next open tries again): {}",
                   s.ToString());
  }
  absl::Status synced = env_->SyncPath(dir_);
  if (!synced.ok()) spdlog::warn("state log: {}", synced.ToString());
}

absl::Status StateLog::CheckWritable() const {
  if (failed_.ok()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      dir_, ": the state log takes no more writes until it is reopened: ", failed_.ToString()));
}

absl::Status StateLog::Fail(absl::Status s) {
  spdlog::error("state log {}: {}; no more writes until it is reopened", dir_, s.ToString());
  failed_ = s;
  return s;
}

absl::StatusOr<StateLogContents> StateLog::Load() const {
  absl::ReaderMutexLock lock(&mu_);
  ASSIGN_OR_RETURN(FolderState state, ReadFolder(dir_, env_));
  return std::move(state.contents);
}

absl::StatusOr<uint64_t> StateLog::Append(absl::string_view record) {
  if (static_cast<int64_t>(record.size()) > kMaxStateLogRecordBytes) {
    return absl::InvalidArgumentError(absl::StrCat("a state log record of ", record.size(),
                                                   " bytes is over the limit of ",
                                                   kMaxStateLogRecordBytes));
  }
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(CheckWritable());
  RecordHeader h{0, next_seq_, static_cast<uint32_t>(record.size()), 0};
  h.checksum = RecordChecksum(h, record);
  const std::string frame = Frame(h, record);
  const std::string& path = segment_->path();
  absl::Status s = Step(StateLogStep::kAppendWrite, path);
  if (s.ok()) s = segment_->Append(frame);
  if (s.ok()) s = Step(StateLogStep::kAppendSync, path);
  if (s.ok()) s = segment_->Sync();
  if (!s.ok()) return Fail(std::move(s));
  return next_seq_++;
}

absl::Status StateLog::WriteSnapshot(absl::string_view state) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(CheckWritable());
  const uint64_t last_seq = next_seq_ - 1;
  const std::string path = JoinPath(dir_, kSnapshotName);
  SnapshotHeader h;
  std::memcpy(h.magic, kSnapshotMagic, sizeof(h.magic));
  h.last_seq = last_seq;
  h.length = state.size();
  h.checksum = SnapshotChecksum(h, state);
  absl::Status s = CreateSegment(last_seq + 1);
  if (s.ok()) s = Step(StateLogStep::kSnapshotWrite, path);
  if (s.ok()) s = WriteFileDurably(path, Frame(h, state), env_);
  if (s.ok()) s = OpenSegment(last_seq + 1, kSegmentHeaderBytes, kSegmentHeaderBytes);
  if (!s.ok()) return Fail(std::move(s));
  RemoveStaleFiles(last_seq);
  return absl::OkStatus();
}

uint64_t StateLog::next_seq() const {
  absl::ReaderMutexLock lock(&mu_);
  return next_seq_;
}

}  // namespace ecps
