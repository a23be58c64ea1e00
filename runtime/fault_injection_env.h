// FaultInjectionEnv: an Env for tests (as leveldb's fault_injection_test.cc) that wraps another
// one, normally Env::Default(), and makes its writer meet the faults of a real disk and a real
// death, deterministically:
//   - an fsync (a file's Sync or a SyncPath) that fails: FailSync(n);
//   - a torn write, where only the first half of an Append reaches the file, after which the
//     call fails or the writer dies: TearWrite(n, ...);
//   - the writer dying before an operation, between a write and a rename say: CrashAt(n). A
//     dead writer does nothing more: every later call of the Env and of its files fails
//     (INTERNAL "PATH: the writer is dead (simulated crash)") and changes nothing;
//   - the power failing after that: DropUnsyncedData() puts every file this Env wrote back to
//     what it held at its last successful fsync, as the disk would have it. A file never
//     fsynced since this Env created (or truncated) it becomes empty.
// Operations are counted from 1 in the order they happen, by kind: syncs(), appends(),
// operations() (every call that changes the folder or makes it durable: file creation and
// opening for writing, Append, Truncate, Allocate, Sync, Close, SyncPath, RenameFile, RemoveFile,
// RemoveAll, CreateDir, CreateDirs). A test runs a save once to count them, then once per
// fault position.
//
// Model limits: the contents of files are rolled back, directory entries are not (a create,
// rename or remove that happened stays, synced or not). Files written only through another Env
// (another process) are not rolled back. Thread-safe.
#ifndef ECPS_RUNTIME_FAULT_INJECTION_ENV_H_
#define ECPS_RUNTIME_FAULT_INJECTION_ENV_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "runtime/env.h"

namespace ecps {

class FaultInjectionEnv : public Env {
 public:
  // What a torn write does after the first half of its bytes reached the file.
  enum class AfterTear {
    kFail,   // the Append returns INTERNAL and the writer goes on (it may clean up)
    kCrash,  // the writer dies there: that Append and every later call fail
  };

  // `base` (not owned) does the work; it must outlive this Env.
  explicit FaultInjectionEnv(Env* base = Env::Default()) : base_(base) {}

  // The n-th sync from now on (1: the next), counting file Syncs and SyncPaths, fails with
  // INTERNAL "PATH: fsync failed: injected fault", and makes nothing durable.
  void FailSync(int n);
  // The n-th Append from now on writes only the first half of its bytes, then does `after`.
  void TearWrite(int n, AfterTear after);
  // The writer dies just before the n-th operation from now on (1: the next), which fails.
  void CrashAt(int n);
  // The writer dies now.
  void Crash();

  // Puts every file this Env wrote back to what it held at its last successful sync (see
  // above). Works on a dead writer's files: it is what "restart after a power failure" does.
  absl::Status DropUnsyncedData();

  bool crashed() const;
  int syncs() const;       // syncs so far (attempted, failed ones included)
  int appends() const;     // Appends so far
  int operations() const;  // operations so far (see above)

  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override;
  absl::StatusOr<std::unique_ptr<WritableFile>> NewAppendableFile(const std::string& path) override;
  absl::StatusOr<std::unique_ptr<MappedFile>> NewMappedFile(const std::string& path,
                                                            int64_t size) override;
  absl::Status SyncPath(const std::string& path) override;
  absl::Status RenameFile(const std::string& from, const std::string& to) override;
  absl::Status RemoveFile(const std::string& path) override;
  absl::Status RemoveAll(const std::string& path) override;
  absl::Status CreateDir(const std::string& path) override;
  absl::StatusOr<bool> CreateDirs(const std::string& path) override;
  absl::StatusOr<std::string> ReadFile(const std::string& path) override;
  absl::StatusOr<int64_t> GetFileSize(const std::string& path) override;
  absl::StatusOr<FileKind> GetFileKind(const std::string& path) override;
  absl::StatusOr<std::vector<DirEntry>> ListDir(const std::string& dir) override;

 private:
  friend class FaultInjectionWritableFile;
  friend class FaultInjectionMappedFile;

  // Counts an operation on `path`: an error when the writer is dead, or dies now.
  absl::Status BeginOperation(const std::string& path);
  // A sync of `path` is about to run: BeginOperation, then the injected failure if it is due.
  absl::Status BeginSync(const std::string& path);
  // An Append of `bytes` bytes to `path` is about to run: BeginOperation, then how many of the
  // bytes to write (fewer when it is torn).
  struct AppendPlan {
    int64_t bytes = 0;
    bool torn = false;
    AfterTear after = AfterTear::kFail;
  };
  absl::StatusOr<AppendPlan> BeginAppend(const std::string& path, int64_t bytes);
  // What a torn Append returns once its prefix is written; kCrash kills the writer.
  absl::Status EndTornAppend(const std::string& path, const AppendPlan& plan, int64_t of);
  // `path` was synced: what it holds now is durable.
  absl::Status RecordSynced(const std::string& path);
  // `path` is written through this Env from now on. A new (or truncated) file's durable
  // contents are empty; an existing file's are what it holds now, unless already known.
  absl::Status Track(const std::string& path, bool is_new);
  // Fails every call once the writer is dead.
  absl::Status CheckAlive(const std::string& path) const;

  Env* const base_;
  mutable absl::Mutex mu_;
  bool crashed_ ABSL_GUARDED_BY(mu_) = false;
  int sync_countdown_ ABSL_GUARDED_BY(mu_) = 0;
  int tear_countdown_ ABSL_GUARDED_BY(mu_) = 0;
  AfterTear tear_after_ ABSL_GUARDED_BY(mu_) = AfterTear::kFail;
  int crash_countdown_ ABSL_GUARDED_BY(mu_) = 0;
  int syncs_ ABSL_GUARDED_BY(mu_) = 0;
  int appends_ ABSL_GUARDED_BY(mu_) = 0;
  int operations_ ABSL_GUARDED_BY(mu_) = 0;
  // The files written through this Env, by current path: their contents at the last sync.
  std::map<std::string, std::string> durable_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ecps

#endif  // ECPS_RUNTIME_FAULT_INJECTION_ENV_H_
