// The rebuild at a replacement server (docs/recovery.md, "Rebuild at the replacement"):
// every data and parity row the dead server held is rebuilt from any k surviving members of
// its stripe, rows that workers ask for first (on demand, on a thread of their own), the
// rest in the background in pipelined batches, hottest first (the parity holders know how
// often each data row they protect was updated); dense tensors are restored from another
// holder.
//
// Consistency without stopping training: every data row carries a version (its count of
// updates) and every parity row the versions of the data members it contains. A batch reads
// the surviving members of its stripes with their versions while updates go on; a stripe
// whose members all agree on every member's version is a consistent snapshot (the parity
// encodes exactly those data rows) and is decoded and installed at once. A stripe caught
// mid-update (a delta still on its way) is read again while its stripes are frozen on every
// other live server (new updates of its rows wait, updates in flight finish, parity delta
// streams drain). A parity row installed here remembers the data versions it was encoded
// from: deltas it already contains are skipped, and one that was dropped because it arrived
// before the install makes the install fail and the stripe is read again. When the lost
// member was a data row and r >= 2, the frozen path also re-encodes the survivors' parity
// rows from the rebuilt data and overwrites any that disagree (a delta the dead server sent
// to one parity holder but not another), so every stripe leaves the rebuild consistent.
// Thread-safe. The parts: RebuildQueue (what to rebuild first), StripeMembers and its pure
// functions (is a read consistent; what to decode from), StripeSource (the peers).
#ifndef ECPS_PS_REBUILDER_H_
#define ECPS_PS_REBUILDER_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "ps/dense_store.h"
#include "ps/embedding_store.h"
#include "ps/parity_store.h"
#include "ps/rebuild_queue.h"
#include "ps/row_code.h"
#include "ps/stripe_snapshot.h"
#include "ps/stripe_source.h"
#include "runtime/clock.h"
#include "runtime/retry_policy.h"
#include "runtime/task_pool.h"

namespace ecps {
namespace v1 {
class FreezeRequest;
}  // namespace v1

struct RebuildOptions {
  int server = 0;
  std::string instance;  // this process's incarnation: the owner of its freezes
  std::string token;
  std::function<uint64_t()> epoch;
  // Servers that hold nothing usable now (dead, or rebuilding themselves), besides this one.
  std::function<std::set<int>()> unusable;
  // Servers to freeze around a batch: every live server but this one.
  std::function<std::vector<int>()> live_peers;
  // Stripes per background batch (and at most per on-demand batch).
  int batch_stripes = 16384;
  // The background rebuild starts with the rows the parity holders saw updated most (at
  // most this many from each holder, hottest first); 0: plain slot order.
  int hot_rows = 65536;
  double rate_limit_mb_s = 0;  // background rebuild bandwidth cap; 0: none
  // How long a delta may take to reach its parity holder (async_linger_ms and then some,
  // with ack async): the last lock-free read of a stripe caught mid-update waits this long.
  int settle_ms = 20;
  // When set and true, the cap no longer applies (every worker has finished).
  std::function<bool()> training_done;
  // Rows hinted by workers (Prefetch) wait up to about 1.25 times the interval between hints,
  // and at most this long, so that two hints share one on-demand batch; rows a request waits
  // for (EnsureRows) start a batch at once. 0: every hint starts a batch.
  int max_hint_linger_ms = 50;
  // A drill aid (environment ECPS_DRILL_HOLD_FREEZE_MS): every freeze is held this much
  // longer, so that a test can kill a rebuilder while it holds freezes. 0 in production.
  int hold_freeze_ms = 0;
};

// The rows of one table that a request touches (a view of the request's ids).
struct TableRowsRef {
  int table;
  absl::Span<const int64_t> rows;
};

struct RebuildProgress {
  int64_t rows_done = 0;
  int64_t rows_total = 0;
  int64_t on_demand = 0;
  int64_t on_demand_batches = 0;  // batches that rebuilt rows on demand
  int64_t frozen_stripes = 0;  // stripes read again under a freeze (caught mid-update)
  double rows_per_s = 0;
  bool dense_ready = false;
  bool done = false;
};

class Rebuilder {
 public:
  // `peers` is where the rebuild reads and freezes (PeerClient in production); every pointer
  // must outlive the Rebuilder.
  Rebuilder(RebuildOptions options, const RowCode* code, EmbeddingStore* embeddings,
            ParityStore* parity, DenseStore* dense, StripeSource* peers);
  ~Rebuilder();

  // Starts the background rebuild thread.
  void Start();
  // Blocks until every row of `rows` (rows held here) is valid, rebuilding them first; all
  // missing rows are queued together, so one request's rows are rebuilt in one batch, not one
  // per table. DEADLINE_EXCEEDED after `timeout_ms`.
  absl::Status EnsureRows(absl::Span<const TableRowsRef> rows, int timeout_ms)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Queues the missing rows of `rows` for an on-demand rebuild without waiting for them (a
  // worker's hint for a batch it will pull soon). They may wait for the next hint (see
  // RebuildOptions::max_hint_linger_ms) unless a request needs rows first.
  void Prefetch(absl::Span<const TableRowsRef> rows);
  // Blocks until the dense tensors held here are restored.
  absl::Status EnsureDense(int timeout_ms) ABSL_LOCKS_EXCLUDED(mu_);
  bool dense_ready() const { return dense_ready_.load(std::memory_order_acquire); }
  bool done() const { return done_.load(std::memory_order_acquire); }
  RebuildProgress progress() const ABSL_LOCKS_EXCLUDED(mu_);
  // The first error that stopped the rebuild (OK while it runs or after it succeeded).
  absl::Status error() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  using Item = StripeId;
  // One server's members to read of one table: ids (rows of data members, stripes of parity
  // members) and where each one's answer goes (StripeMembers::slot).
  struct Want {
    std::vector<int64_t> ids;
    std::vector<size_t> slots;
    void clear() {
      ids.clear();
      slots.clear();
    }
  };
  struct ServerWants {
    std::vector<Want> data, parity;  // by table
  };
  // One read of a batch's stripes: what it gathered, and what it asked of each server.
  struct Members {
    StripeMembers got;
    std::vector<ServerWants> wants;  // by server
  };
  // Queues the missing rows of a request on demand; returns them. `urgent`: a request
  // waits for them (the next batch starts at once).
  std::vector<std::pair<int, int64_t>> QueueMissing(absl::Span<const TableRowsRef> rows,
                                                    bool urgent);
  void Loop();          // the background sweep
  void OnDemandLoop();  // the rows workers wait for
  // The rebuild's one line at the end: rows, time, on-demand batches.
  void LogDone() ABSL_LOCKS_EXCLUDED(mu_);
  // The background sweep's next stripes, hot ones first, then the slot cursor's.
  void NextSweepItems(bool background, std::vector<Item>* items)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A failed batch is tried again, whatever the error, for as long as the rebuild runs,
  // after a wait that grows by 50 ms per failure in a row up to 1 s.
  static RetryPolicy BatchRetry();
  // After a failed batch: counts it in `retrier`, logs now and then and waits its next
  // backoff, or less when the rebuild stops (then false).
  bool Backoff(Retrier* retrier, const absl::Status& status) ABSL_LOCKS_EXCLUDED(mu_);
  // Wakes EnsureRows/EnsureDense after installs. Taking mu_ first means no waiter checked
  // its rows before the installs and waits past the wake-up.
  void NotifyRebuilt() ABSL_LOCKS_EXCLUDED(mu_);
  // Asks the live parity holders for this server's hottest rows and queues them.
  void LoadHotRows();
  // Rebuilds the stripes of `items` still missing (their count into *rebuilt, when set).
  // `scratch` holds the reads; each calling thread keeps its own, so that the buffers are
  // allocated once, not per batch.
  absl::Status RunBatch(const std::vector<Item>& items, bool restore_dense, Members* scratch,
                        int64_t* rebuilt = nullptr);
  // Reads the batch under a freeze of its stripes (of everything, with restore_dense).
  absl::Status RunFrozen(const std::vector<Item>& items, bool restore_dense);
  // Freezes (or releases, `on` false) `request` at every server of `peers` at once.
  absl::Status FreezeAll(const std::vector<int>& peers, const v1::FreezeRequest& request,
                         uint64_t epoch, bool on);
  // Reads every surviving member of the items' stripes (telling the data servers that this
  // is a rebuild read).
  void ReadMembers(const std::vector<Item>& items, Members* out) const;
  // ReadMembers' steps: what to ask of each server (padding members set to zero at once),
  // one server's request, and that server's answer stored into `got` (nothing stored when
  // its sizes do not match what was asked).
  void PlanReads(const std::vector<Item>& items, const std::set<int>& unusable, Members* out) const;
  void FillReadRequest(const ServerWants& ws, uint64_t epoch, v1::ReadRowsRequest* req) const;
  void StoreAnswer(const ServerWants& ws, const v1::ReadRowsResponse& resp,
                   StripeMembers* got) const;
  // How many members `by_table` asks for.
  static size_t CountOf(const std::vector<Want>& by_table);
  // Decodes and installs every item whose members agree on the versions (every item, when
  // frozen); appends the others to `retry`. Frozen, it also writes back parity rows that
  // disagree with the rebuilt data.
  // `freeze_id`: the freeze the items are under when `frozen` (parity writes name it).
  absl::Status Install(const std::vector<Item>& items, const StripeMembers& members,
                       bool frozen, std::vector<Item>* retry, uint64_t freeze_id = 0);
  // Install's frozen step for a data member: when every data member of stripe `i` of `mem`
  // is known (`decoded`: this server's), encodes the stripe's parity into `parity` and
  // adds to `fixes` every survivor's parity row that disagrees with it.
  using ParityFixes = std::map<std::pair<int, int>, v1::WriteParityRequest>;  // (server, table)
  absl::Status CollectParityFixes(const Item& item, size_t i, int mine, const StripeMembers& mem,
                                  const uint8_t* decoded, const std::vector<uint32_t>& agreed,
                                  std::vector<std::vector<uint8_t>>* parity,
                                  ParityFixes* fixes) const;
  // Writes `fixes` to their servers under `freeze_id`, one line logged per write; stops at
  // the first write that fails and returns its error.
  absl::Status WriteParityFixes(uint64_t epoch, uint64_t freeze_id, ParityFixes* fixes);
  absl::Status RestoreDense();
  // The member position this server holds of (table, stripe).
  int MyMember(int table, int64_t stripe) const;
  bool ItemValid(const Item& item) const;

  RebuildOptions options_;
  const RowCode* code_;
  EmbeddingStore* embeddings_;
  ParityStore* parity_;
  DenseStore* dense_;
  StripeSource* peers_;
  const Placement& placement_;
  const size_t payload_bytes_;
  const std::string sender_;  // the header's sender on every request to a peer
  // The requests of a freeze go to every server at once, from these threads (a read's go
  // out together from the reading thread: StripeSource::ReadRowsFromEach).
  mutable TaskPool fanout_;
  // Rows workers ask for, and the hot rows the sweep takes first; hints linger on the steady
  // clock.
  const MonotonicClock hint_clock_;
  RebuildQueue queue_;

  mutable absl::Mutex mu_;
  // Separate waits, so that a wake-up goes only to threads that can act on it (a rebuild
  // notifies dozens of times a second).
  absl::CondVar rebuilt_cv_;  // rows or dense tensors installed: EnsureRows/Dense
  absl::CondVar stop_cv_;     // stopping_ set: the sweep's and Backoff's sleeps
  int64_t on_demand_count_ ABSL_GUARDED_BY(mu_) = 0;  // rows the on-demand thread rebuilt
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // The background position: data slots first, then parity slots, table by table.
  int64_t cursor_table_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t cursor_slot_ ABSL_GUARDED_BY(mu_) = 0;
  bool cursor_parity_ ABSL_GUARDED_BY(mu_) = false;
  std::chrono::steady_clock::time_point started_;
  std::chrono::steady_clock::time_point background_allowed_at_ ABSL_GUARDED_BY(mu_){};
  std::atomic<int64_t> rows_done_{0};
  int64_t rows_total_ = 0;
  std::atomic<bool> dense_ready_{false};
  std::atomic<uint64_t> freeze_count_{0};
  std::atomic<int64_t> frozen_stripes_{0};
  std::atomic<int64_t> reread_stripes_{0};  // stripes read again, caught mid-update
  // How long each on-demand batch took (for the log line at the end; a double per batch,
  // about 1,800 in bench-recovery).
  std::vector<double> on_demand_ms_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> done_{false};
  std::thread thread_;
  std::thread on_demand_thread_;
};

}  // namespace ecps

#endif  // ECPS_PS_REBUILDER_H_
