// The embedding rows one parameter server holds, in dense local arrays
// (docs/architecture.md, "Parameter server").
//
// A row's payload is its `dim` weights followed by the sparse optimizer's state, as float32.
// Rows are initialised deterministically from (seed, table, row), so a row's initial value
// never depends on which server holds it. Thread-safe: pulls and pushes of different rows
// run in parallel; a row is guarded by one of a fixed set of striped locks (no global lock
// on the hot path). Every call validates all of its arguments before it changes anything.
#ifndef ECPS_PS_EMBEDDING_STORE_H_
#define ECPS_PS_EMBEDDING_STORE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "kernels/optimizers.h"
#include "runtime/huge_buffer.h"
#include "domain/placement.h"

namespace ecps {

class EmbeddingStore {
 public:
  // Allocates and initialises the data rows that `server` holds under `placement`.
  // With `lost` set (a replacement server), no row is initialised: every row is invalid until
  // InstallRow puts its rebuilt payload in place, and requests for invalid rows get
  // UNAVAILABLE.
  //
  // With `source` set (a job resuming from a checkpoint), rows are read from it instead of
  // initialised from the seed: source(table, rows, n, out) fills out[i * payload_floats ..]
  // with the payload of rows[i]; its error is returned.
  using RowSource =
      std::function<absl::Status(int table, const int64_t* rows, int64_t n, float* out)>;
  static absl::StatusOr<std::unique_ptr<EmbeddingStore>> Create(
      const Placement& placement, int server, int dim, const SparseOptimizerConfig& optimizer,
      uint64_t seed, bool lost = false, const RowSource* source = nullptr);

  int dim() const { return dim_; }
  int payload_floats() const { return payload_floats_; }
  const Placement& placement() const { return placement_; }

  // Copies the weights of `rows` of `table` into out (rows.size() * dim floats).
  // INVALID_ARGUMENT when the table or a row is out of range or a row is not on this server.
  absl::Status Pull(int table, absl::Span<const int64_t> rows, float* out) const;

  // A request's rows of one table, checked (the checks Pull and Push make: the table, each
  // row's range, and that this server holds it) and mapped to their local slots, once per
  // request: a push resolves its rows while it validates and updates them with the result.
  // `ids` points into the request.
  struct Rows {
    int table = 0;
    absl::Span<const int64_t> ids;
    std::vector<int64_t> slots;
  };
  absl::StatusOr<Rows> Resolve(int table, absl::Span<const int64_t> rows) const;

  // Applies the optimizer to each row with its gradient (rows.size() * dim floats, summed
  // over the batch). Rows are applied in the given order. Errors as for Pull; on error
  // nothing is applied.
  // When `on_delta` is set it is called for each row, under the row's lock, with the row's
  // change old XOR new over its payload bytes (what the parity holders apply) and its version
  // before and after (each update adds one).
  using DeltaSink = std::function<void(int64_t row, uint32_t from, uint32_t to,
                                       const uint8_t* delta, size_t len)>;
  absl::Status Push(int table, absl::Span<const int64_t> rows, const float* grads,
                    const DeltaSink& on_delta = nullptr);
  // Push for the parity path: `slot` is called for each row, under its lock and before the
  // update, with the row and its versions before and after; it returns where the row's
  // payload-sized delta (old XOR new) is to be written, and Push writes it there. The
  // delta is computed in place, in the outgoing message, with no copy of its own and no
  // std::function call per row.
  using DeltaSlot = absl::FunctionRef<uint8_t*(int64_t row, uint32_t from, uint32_t to)>;
  absl::Status PushWithDeltas(int table, absl::Span<const int64_t> rows, const float* grads,
                              DeltaSlot slot);
  // Push and PushWithDeltas of rows already resolved (no second look-up of their slots).
  absl::Status Push(const Rows& rows, const float* grads);
  absl::Status PushWithDeltas(const Rows& rows, const float* grads, DeltaSlot slot);

  // Checks that every row of `rows` is a row of `table` held here (the checks Pull and
  // Push make), without touching any row.
  absl::Status Validate(int table, absl::Span<const int64_t> rows) const {
    std::vector<int64_t> slots;
    return ResolveSlots(table, rows, &slots);
  }

  // Copies whole payloads (weights + optimizer state) of `rows` into out, and each row's
  // version (its count of updates) into `versions` when not null.
  absl::Status ReadPayloads(int table, absl::Span<const int64_t> rows, float* out,
                            uint32_t* versions = nullptr) const;

  // Reads the rows held in local slots [slot_begin, slot_begin + n) of `table` (clipped to
  // DataSlots): appends each non-padding slot's row id to *rows and its payload to *payloads,
  // each row under its lock (a checkpoint writer walks the whole store this way). Returns the
  // end slot. INVALID_ARGUMENT for a bad table; UNAVAILABLE when a row is not rebuilt yet.
  absl::StatusOr<int64_t> ReadSlots(int table, int64_t slot_begin, int64_t n,
                                    std::vector<int64_t>* rows, std::vector<float>* payloads) const;
  int64_t DataSlots(int table) const { return placement_.DataSlots(table); }

  // Replaces every row held here (and marks it valid) with its payload from `source`, in
  // local slot order, 16K rows per call. Each row is written under its lock; callers make sure
  // no update runs meanwhile (a rollback). On error some rows may already be replaced.
  absl::Status Load(const RowSource& source);

  // Recovery. all_valid() is true once no row is missing (always, for a server that was not
  // a replacement).
  bool all_valid() const { return invalid_rows_.load(std::memory_order_acquire) == 0; }
  int64_t invalid_rows() const { return invalid_rows_.load(std::memory_order_acquire); }
  // Appends to `invalid` the rows of `rows` that are still missing (rows must be valid ids
  // of this server: call Validate first).
  void MissingRows(int table, absl::Span<const int64_t> rows, std::vector<int64_t>* invalid) const;
  // Puts a rebuilt payload (payload_floats floats) at `version` in place and marks the row
  // valid; returns whether it did. A row that is already valid is left alone (it may have
  // been updated since).
  bool InstallRow(int table, int64_t row, const float* payload, uint32_t version);
  // The online scrub's repair of a corrupt row (ps/online_scrub.h): replaces the payload of
  // valid row `row`, keeping its version, if the row is still at `version`; else
  // FAILED_PRECONDITION and no change (it was updated after the repair was decoded).
  absl::Status RepairRow(int table, int64_t row, const float* payload, uint32_t version);
  // Fault injection (InjectFault): flips bit `bit` of the row's payload bytes under its lock;
  // no version moves and no delta is sent. INVALID_ARGUMENT for a row not held here or a bit
  // past the payload.
  absl::Status FlipBit(int table, int64_t row, int64_t bit);
  bool IsValid(int table, int64_t row) const;

  int64_t data_rows() const { return data_rows_; }
  int64_t bytes() const;
  int64_t pulls() const { return pulls_.load(std::memory_order_relaxed); }
  int64_t pushes() const { return pushes_.load(std::memory_order_relaxed); }

 private:
  // The delta path of Push and PushWithDeltas: `slot` gives each row's delta its place
  // before the update; `done`, when set, hears of the finished delta under the row's lock.
  absl::Status PushDeltas(const Rows& rows, const float* grads, DeltaSlot slot,
                          const DeltaSink* done);

  static constexpr int kLockStripes = 1024;
  // Rows are prefetched this far ahead in Pull and Push: they are scattered over the store.
  static constexpr size_t kPrefetchAhead = 8;

  EmbeddingStore(const Placement& placement, int server, int dim,
                 const SparseOptimizerConfig& optimizer);
  // Validates (table, rows) and writes each row's local slot to `slots`.
  absl::Status ResolveSlots(int table, absl::Span<const int64_t> rows,
                            std::vector<int64_t>* slots) const;
  absl::Status Missing(int table, int64_t row) const;
  absl::Mutex& LockFor(int table, int64_t slot) const {
    return locks_[(static_cast<uint64_t>(slot) * 31 + table) % kLockStripes];
  }
  float* Payload(int table, int64_t slot) {
    return tables_[table] + slot * payload_floats_;
  }
  const float* Payload(int table, int64_t slot) const {
    return tables_[table] + slot * payload_floats_;
  }

  const Placement placement_;
  const int server_;
  const int dim_;
  const SparseOptimizerConfig optimizer_;
  const int payload_floats_;
  HugeBuffer storage_;          // every table's rows, back to back
  std::vector<float*> tables_;  // per table: DataSlots * payload_floats, inside storage_
  std::vector<std::vector<uint64_t>> valid_;  // per table, a bit per row id (not slot); set
                                              // under the row's lock, read also without
                                              // (valid_flag.h)
  std::vector<std::vector<uint32_t>> versions_;  // per table per slot; under the slot's lock
  std::atomic<int64_t> invalid_rows_{0};
  int64_t data_rows_ = 0;
  // Striped row locks: which one guards a row is computed (LockFor), so the rows cannot be
  // annotated with it; the compiler still checks every lock is released.
  mutable std::unique_ptr<absl::Mutex[]> locks_;
  mutable std::atomic<int64_t> pulls_{0};
  std::atomic<int64_t> pushes_{0};
};

}  // namespace ecps

#endif  // ECPS_PS_EMBEDDING_STORE_H_
