// StateLog: the coordinator's durable state, an append-only log of records with one snapshot,
// in a folder of its own (under the job's folder: a shared filesystem under Slurm, a
// PersistentVolumeClaim on Kubernetes). The coordinator writes what it must not forget before
// it acts on it; a restarted coordinator opens the folder, loads the snapshot and the records
// after it, and takes the job over (docs/recovery.md, "The coordinator's state log").
//
// Records and the snapshot are opaque bytes to the log (the coordinator puts serialized
// protobuf messages in them). Every record gets a sequence number: 1, 2, 3 ... for the life of
// the folder, across snapshots and reopenings.
//
// Files (all integers little-endian; checksums are XXH64, runtime/hash.h, seed 0):
//   LOCK        the writer's lock (below); holds "pid P on host H" or the owner given
//   SNAPSHOT    32-byte header {magic "ECPSSNP1", last_seq, length, checksum} + `length`
//               bytes; last_seq is the last record the snapshot includes (0: none), the
//               checksum covers last_seq, length and the bytes. Replaced atomically
//               (SNAPSHOT.tmp, fsync, rename, fsync of the folder).
//   log-<20-digit first seq>
//               a segment: 16-byte header {magic "ECPSLOG1", first_seq}, created atomically
//               the same way, then records, each a 24-byte header {checksum, seq, length,
//               reserved 0} + `length` bytes; the checksum covers seq, length, reserved and
//               the bytes. Records in a segment are numbered first_seq, first_seq + 1, ...
// WriteSnapshot(S) creates segment log-(S+1) first, then replaces SNAPSHOT, then removes the
// segments before it; a crash between any two steps leaves a folder that loads as before the
// snapshot or as after it. Segments that start at or below the snapshot's last_seq are stale
// and removed on open; the others must chain without a gap from last_seq + 1.
//
// Damage policy (Open and Load):
// - A torn last record, from a writer that died mid-append, is dropped with a warning naming
//   the file and the offset, and Open truncates it before appending. A bad record is torn when
//   it is at the end of the last segment (its header is incomplete, or its length runs to or
//   past the end of the file, or everything from it to the end is zero bytes: an unwritten
//   extent after a power loss) AND no good record with the next sequence number starts
//   anywhere after it, so that a corrupted length field cannot pass acknowledged records off
//   as a torn tail. Limit: a last record whose bytes were corrupted after it was acknowledged
//   looks like a torn one, and is dropped the same way (with the warning).
// - Every other bad record (a checksum mismatch or a wrong sequence number anywhere else, or
//   in any segment but the last), a bad snapshot, a bad segment header or a missing segment
//   is DATA_LOSS naming the file and, for a record, its sequence number and byte offset; Open
//   then changes nothing in the folder.
//
// One writer at a time: Open takes an exclusive flock(2) on DIR/LOCK, held until the StateLog
// is destroyed, and writes the owner's identity into it. A second opener, in this process or
// another, gets FAILED_PRECONDITION naming the folder and the owner. The kernel releases the
// lock when its holder dies, however it dies. On NFS, Linux emulates flock with a whole-file
// fcntl lock that the server enforces across hosts (unless the mount says local_lock=flock or
// all: then it is one host's only); a client host that dies holds it until its NFSv4 lease
// expires (90 s by default), or under NFSv3 until it reboots. Lustre needs the `flock` mount
// option, else Open fails naming DIR/LOCK. The lock's descriptor is close-on-exec, but a child
// made by fork() without exec() shares the lock. The coordinator's term or epoch is its own
// business, not the log's.
//
// Thread-safe: every method may be called from any thread.
#ifndef ECPS_COORDINATOR_STATE_LOG_H_
#define ECPS_COORDINATOR_STATE_LOG_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "runtime/env.h"

namespace ecps {

// The largest record Append takes (a snapshot has no such limit).
inline constexpr int64_t kMaxStateLogRecordBytes = int64_t{64} << 20;

// The steps that change the folder, in the order they happen, for fault injection.
enum class StateLogStep {
  kAppendWrite,    // a record's bytes are written at the end of the segment
  kAppendSync,     // the segment is fsynced
  kSegmentCreate,  // WriteSnapshot (or Open of an empty folder) creates the next segment
  kSnapshotWrite,  // WriteSnapshot replaces SNAPSHOT
  kRemoveStale,    // a stale file (a segment older than the snapshot, a leftover .tmp) goes
};

struct StateLogOptions {
  // Written into DIR/LOCK and named to a refused opener; empty: "pid P on host H".
  std::string owner;
  // Tests: called before each step with the file it is about; a non-OK status fails the step
  // with it before it happens, leaving the folder as a crash at that point would.
  std::function<absl::Status(StateLogStep step, const std::string& path)> before_step;
  // Every file but LOCK is read and written through it (runtime/env.h; tests inject faults
  // with one). Not owned; it must outlive the log. Null: Env::Default().
  Env* env = Env::Default();
};

struct StateLogRecord {
  uint64_t seq = 0;
  std::string bytes;
};

// What Load returns: the state to start from.
struct StateLogContents {
  std::optional<std::string> snapshot;  // the latest snapshot; none before the first
  uint64_t snapshot_seq = 0;            // the last record the snapshot includes (0: none)
  std::vector<StateLogRecord> records;  // every record after it, seq snapshot_seq + 1, + 2 ...
};

class StateLog {
 public:
  // Opens (and creates, if missing) the log in `dir`, which belongs to the log alone. Takes the
  // lock, reads the folder by the damage policy above, truncates a torn tail and removes stale
  // files. FAILED_PRECONDITION when another writer holds the lock; DATA_LOSS when the folder
  // is damaged (nothing is changed then); other codes for file-system errors.
  static absl::StatusOr<std::unique_ptr<StateLog>> Open(const std::string& dir,
                                                        StateLogOptions options = {});

  ~StateLog();  // releases the lock
  StateLog(const StateLog&) = delete;
  StateLog& operator=(const StateLog&) = delete;

  // Reads the folder again: the latest snapshot and every record after it, in order. DATA_LOSS
  // as Open.
  absl::StatusOr<StateLogContents> Load() const;

  // Appends `record` and returns its sequence number once it is durable (written and fsynced).
  // An error means the record may or may not be in the log; the log then refuses every later
  // Append and WriteSnapshot (FAILED_PRECONDITION with the first error): reopen it, which
  // settles which. INVALID_ARGUMENT, with no such effect, for a record over
  // kMaxStateLogRecordBytes.
  absl::StatusOr<uint64_t> Append(absl::string_view record);

  // Replaces the snapshot with `state`, which must include every record appended so far, and
  // starts a new segment after it, durably; the older segments are removed (a failure to
  // remove one is only logged: the next Open removes it). An error leaves the old snapshot or
  // the new one in place and makes the log refuse later writes, as Append's.
  absl::Status WriteSnapshot(absl::string_view state);

  // The sequence number the next Append gets.
  uint64_t next_seq() const;
  const std::string& dir() const { return dir_; }

 private:
  StateLog(std::string dir, StateLogOptions options, int lock_fd);

  // Open's work once the lock is held: read the folder, settle its tail, remove stale files.
  absl::Status Recover();
  // Makes segment `first_seq` the one appends go to, at `end`; truncates it there when it is
  // `size` > `end` bytes long (a torn last record).
  absl::Status OpenSegment(uint64_t first_seq, int64_t end, int64_t size)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CreateSegment(uint64_t first_seq) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RemoveStaleFiles(uint64_t snapshot_seq) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Step(StateLogStep step, const std::string& path) const;
  // FAILED_PRECONDITION after a failed write (Fail records it), else OK.
  absl::Status CheckWritable() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records `s`, the error of a write, and returns it.
  absl::Status Fail(absl::Status s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string dir_;
  const StateLogOptions options_;
  Env* const env_;
  const int lock_fd_;

  mutable absl::Mutex mu_;
  // The last segment, where the next record goes (at its end).
  std::unique_ptr<WritableFile> segment_ ABSL_GUARDED_BY(mu_);
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 1;
  absl::Status failed_ ABSL_GUARDED_BY(mu_);  // the first write error; OK while none
};

}  // namespace ecps

#endif  // ECPS_COORDINATOR_STATE_LOG_H_
