// The parity rows (or replicas, in mode replication) one server holds, in dense local
// arrays: for stripe s of table t, parity member q lives at local slot (s / S) * r + q on
// server (s + t + k + q) mod S (runtime/placement.h).
//
// At creation every parity row is encoded from the stripe's initial data rows, which any
// server can compute (a row's initial payload depends only on seed, table and row), so no
// stripe ever starts inconsistent. Deltas are applied under striped locks. Thread-safe.
#ifndef ECPS_PS_PARITY_STORE_H_
#define ECPS_PS_PARITY_STORE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "ps/row_code.h"
#include "runtime/huge_buffer.h"
#include "runtime/placement.h"
#include "runtime/spec.h"

namespace ecps {

class ParityStore {
 public:
  // With `lost` set (a replacement server) nothing is encoded: every parity row is invalid
  // until InstallRow; deltas for an invalid row are dropped (the rebuild re-encodes it from
  // data that already includes them) and reads of it get UNAVAILABLE.
  //
  // With `source` set (a job resuming from a checkpoint), each parity row is encoded from the
  // stripe's data rows as source(table, stripe, &data) gives them (k payloads as bytes, zero
  // rows past the table's end, as InitialStripeData) instead of from the initial rows.
  using StripeSource = std::function<absl::Status(int table, int64_t stripe,
                                                  std::vector<std::vector<uint8_t>>* data)>;
  static absl::StatusOr<std::unique_ptr<ParityStore>> Create(
      const Placement& placement, int server, int dim, const SparseOptimizer& optimizer,
      uint64_t seed, const RowCode* code, bool lost = false, const StripeSource* source = nullptr);

  size_t payload_bytes() const { return payload_bytes_; }

  // The parity index q this server holds of (table, stripe), or INVALID_ARGUMENT (bad table,
  // stripe out of range, or this server holds no parity of it).
  absl::StatusOr<int> ParityIndex(int table, int64_t stripe) const;
  // One delta of payload_bytes() bytes for ApplyBatch.
  struct DeltaRef {
    int table;
    int j;
    int64_t stripe;
    const uint8_t* data;
  };
  // parity ^= c[q][j] * delta, for every delta in order, on the parity this server holds of
  // (table, stripe). Checks each as ParityIndex does, plus j in [0, k), all before applying
  // any, so a batch with a bad delta changes nothing. Prefetches rows ahead: a batch's parity rows are
  // scattered over the store and would each miss the cache otherwise.
  absl::Status ApplyBatch(absl::Span<const DeltaRef> deltas);
  // Data rows of `data_server` whose deltas this store applied, hottest first (at most
  // `max_rows`; rows never updated are left out). Heat counts applied deltas per data
  // member of each parity row, saturating at 255.
  struct Hot {
    int table;
    int64_t row;
    uint32_t heat;
  };
  std::vector<Hot> HotRows(int data_server, int max_rows) const;
  // Copies the parity row this server holds of (table, stripe).
  absl::Status Read(int table, int64_t stripe, uint8_t* out) const;

  // Every (table, stripe) this server holds parity of, for scrubbing: calls fn(table, stripe).
  template <typename Fn>
  void ForEachStripe(Fn fn) const {
    int q = 0;
    for (int t = 0; t < placement_.num_tables(); ++t) {
      for (int64_t slot = 0; slot < placement_.ParitySlots(t); ++slot) {
        int64_t stripe = placement_.StripeAtParitySlot(t, server_, slot, &q);
        if (stripe >= 0) fn(t, stripe);
      }
    }
  }

  bool all_valid() const { return invalid_rows_.load(std::memory_order_acquire) == 0; }
  int64_t invalid_rows() const { return invalid_rows_.load(std::memory_order_acquire); }
  bool IsValid(int table, int64_t stripe) const;
  // Puts a rebuilt parity row in place (a valid row is left alone).
  void InstallRow(int table, int64_t stripe, const uint8_t* payload);
  // Overwrites a valid parity row (a rebuilding server making every parity of a stripe agree
  // with its data, while the cluster is frozen).
  absl::Status Overwrite(int table, int64_t stripe, const uint8_t* payload);

  int64_t parity_rows() const { return parity_rows_; }
  int64_t bytes() const;

 private:
  static constexpr int kLockStripes = 1024;
  ParityStore(const Placement& placement, int server, size_t payload_bytes, const RowCode* code)
      : placement_(placement),
        server_(server),
        payload_bytes_(payload_bytes),
        code_(code),
        locks_(new std::mutex[kLockStripes]) {}
  void Heat(int table, int64_t slot, int j) {
    std::atomic<uint8_t>& h = heat_[table][slot * placement_.k() + j];
    const uint8_t v = h.load(std::memory_order_relaxed);
    if (v < 255) h.store(v + 1, std::memory_order_relaxed);  // under the slot's lock
  }
  uint8_t* Row(int table, int64_t slot) {
    return tables_[table] + static_cast<size_t>(slot) * payload_bytes_;
  }
  const uint8_t* Row(int table, int64_t slot) const {
    return tables_[table] + static_cast<size_t>(slot) * payload_bytes_;
  }
  std::mutex& LockFor(int table, int64_t slot) const {
    return locks_[(static_cast<uint64_t>(slot) * 31 + table) % kLockStripes];
  }

  const Placement placement_;
  const int server_;
  const size_t payload_bytes_;
  const RowCode* code_;
  HugeBuffer storage_;            // every table's parity rows, back to back
  std::vector<uint8_t*> tables_;  // per table: ParitySlots * payload_bytes, inside storage_
  std::vector<std::vector<uint8_t>> valid_;  // per table per slot; under the slot's lock
  // Per table, per (slot, data member j) at slot * k + j: deltas applied, saturating.
  std::vector<std::unique_ptr<std::atomic<uint8_t>[]>> heat_;
  std::atomic<int64_t> invalid_rows_{0};
  int64_t parity_rows_ = 0;
  mutable std::unique_ptr<std::mutex[]> locks_;
};

// The initial payload of every member of a stripe (k data rows, zero rows past the table's
// end), as bytes: what ParityStore encodes at creation and recovery can check against.
void InitialStripeData(const Placement& placement, const SparseOptimizer& optimizer,
                       uint64_t seed, int dim, int table, int64_t stripe,
                       std::vector<std::vector<uint8_t>>* data);

}  // namespace ecps

#endif  // ECPS_PS_PARITY_STORE_H_
