// The parity rows (or replicas, in mode replication) one server holds, in dense local
// arrays: for stripe s of table t, parity member q lives at local slot (s / S) * r + q on
// server (s + t + k + q) mod S (domain/placement.h).
//
// At creation every parity row is encoded from the stripe's initial data rows, which any
// server can compute (a row's initial payload depends only on seed, table and row), so no
// stripe ever starts inconsistent. Deltas are applied under striped locks. Thread-safe.
//
// Versions: a data row's version counts its updates. Each parity row keeps, per data member
// j, how many of member j's updates it contains and the newest version any of them reached.
// Deltas of one member may arrive out of order (two pushes of one row, queued in the other
// order), so the two differ while an update is missing; when they are equal the parity
// contains exactly updates 1..version of the member. A rebuild reads data rows with their
// versions and parity rows with theirs: when all agree, the read is consistent without
// freezing anything (ps/rebuilder.h).
#ifndef ECPS_PS_PARITY_STORE_H_
#define ECPS_PS_PARITY_STORE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "kernels/optimizers.h"
#include "ps/row_code.h"
#include "runtime/huge_buffer.h"
#include "domain/placement.h"

namespace ecps {

// Whether row version `a` is newer than `b` (versions count updates and wrap at 2^32).
inline bool VersionAfter(uint32_t a, uint32_t b) { return static_cast<int32_t>(a - b) > 0; }

class ParityStore {
 public:
  // With `lost` set (a replacement server) nothing is encoded: every parity row is invalid
  // until InstallRow; deltas for an invalid row are dropped (the rebuild re-encodes it from
  // data that already includes them; the row remembers the newest version each dropped delta
  // reached, so an install from older data is refused) and reads of it get UNAVAILABLE.
  //
  // With `source` set (a job resuming from a checkpoint), each parity row is encoded from the
  // stripe's data rows as source(table, stripe, &data) gives them (k payloads as bytes, zero
  // rows past the table's end, as InitialStripeData) instead of from the initial rows.
  using StripeSource = std::function<absl::Status(int table, int64_t stripe,
                                                  std::vector<std::vector<uint8_t>>* data)>;
  static absl::StatusOr<std::unique_ptr<ParityStore>> Create(
      const Placement& placement, int server, int dim, const SparseOptimizerConfig& optimizer,
      uint64_t seed, const RowCode* code, bool lost = false, const StripeSource* source = nullptr);

  size_t payload_bytes() const { return payload_bytes_; }

  // The parity index q this server holds of (table, stripe), or INVALID_ARGUMENT (bad table,
  // stripe out of range, or this server holds no parity of it).
  absl::StatusOr<int> ParityIndex(int table, int64_t stripe) const;
  // One delta of payload_bytes() bytes for ApplyBatch: data member j's change from version
  // `from` to version `to`.
  struct DeltaRef {
    int table;
    int j;
    int64_t stripe;
    const uint8_t* data;
    uint32_t from = 0;
    uint32_t to = 0;
  };
  // parity ^= c[q][j] * delta, for every delta in order, on the parity this server holds of
  // (table, stripe), counting its updates of member j. On a row that a rebuild installed, a
  // delta the row already contains (`to` not after the version it was installed at) is
  // skipped; one that straddles it is applied but counted in version_gaps() (no correct
  // sender produces one: see DeltaStreams::StopCoalescing). Checks each as ParityIndex does,
  // plus j in [0, k), all before applying any, so a batch with a bad delta changes nothing.
  // Prefetches rows ahead: a batch's parity rows are scattered over the store and would
  // each miss the cache otherwise.
  absl::Status ApplyBatch(absl::Span<const DeltaRef> deltas);
  // Data rows of `data_server` whose deltas this store applied, hottest first (at most
  // `max_rows`; rows never updated are left out). A row's heat is its version here: the
  // updates of it this store applied.
  struct Hot {
    int table;
    int64_t row;
    uint32_t heat;
  };
  std::vector<Hot> HotRows(int data_server, int max_rows) const;
  // Copies the parity row this server holds of (table, stripe); with `versions` (k) set, also
  // the member versions it contains, and into *settled whether it is missing no update older
  // than one it has (else those versions say nothing exact).
  absl::Status Read(int table, int64_t stripe, uint8_t* out, uint32_t* versions = nullptr,
                    bool* settled = nullptr) const;

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
  // Puts a parity row rebuilt from data members at `versions` (k) in place. kStale, and no
  // change, when a delta newer than one of those versions was dropped meanwhile (the data
  // read was already stale: read again). A valid row is left alone.
  enum class Install { kInstalled, kAlreadyValid, kStale };
  Install InstallRow(int table, int64_t stripe, const uint8_t* payload, const uint32_t* versions);
  // Overwrites a valid parity row and its versions (a rebuilding server making every parity
  // of a stripe agree with its data, while the cluster is frozen).
  absl::Status Overwrite(int table, int64_t stripe, const uint8_t* payload,
                         const uint32_t* versions);
  // Fault injection (InjectFault): flips bit `bit` of the parity row held here of
  // (table, stripe), under its lock, versions untouched.
  absl::Status FlipBit(int table, int64_t stripe, int64_t bit);
  // Deltas that straddled the version their row was installed at.
  int64_t version_gaps() const { return version_gaps_.load(std::memory_order_relaxed); }

  int64_t parity_rows() const { return parity_rows_; }
  int64_t bytes() const;

 private:
  static constexpr int kLockStripes = 1024;
  ParityStore(const Placement& placement, int server, size_t payload_bytes, const RowCode* code)
      : placement_(placement),
        server_(server),
        payload_bytes_(payload_bytes),
        code_(code),
        locks_(std::make_unique<absl::Mutex[]>(kLockStripes)) {}
  // What a parity row knows of one data member; written under the slot's lock, atomic so
  // that HotRows can scan them without it.
  struct MemberVersion {
    std::atomic<uint32_t> count{0};   // updates of the member applied
    std::atomic<uint32_t> newest{0};  // the newest version they reached (a dropped one, for
                                      // an invalid row)
  };
  // Both versions of every member := versions[j] (under the slot's lock).
  void SetVersions(int table, int64_t slot, const uint32_t* versions);
  MemberVersion* Versions(int table, int64_t slot) const {
    return &versions_[table][static_cast<size_t>(slot) * placement_.k()];
  }
  uint8_t* Row(int table, int64_t slot) {
    return tables_[table] + static_cast<size_t>(slot) * payload_bytes_;
  }
  const uint8_t* Row(int table, int64_t slot) const {
    return tables_[table] + static_cast<size_t>(slot) * payload_bytes_;
  }
  absl::Mutex& LockFor(int table, int64_t slot) const {
    return locks_[(static_cast<uint64_t>(slot) * 31 + table) % kLockStripes];
  }

  const Placement placement_;
  const int server_;
  // Per table: its stripes, and its index mod the server count (ApplyBatch's arithmetic).
  std::vector<int64_t> stripes_;
  std::vector<int> table_mod_;
  const size_t payload_bytes_;
  const RowCode* code_;
  HugeBuffer storage_;            // every table's parity rows, back to back
  std::vector<uint8_t*> tables_;  // per table: ParitySlots * payload_bytes, inside storage_
  std::vector<std::vector<uint8_t>> valid_;  // per table per slot; set under the slot's
                                             // lock, read also without (valid_flag.h)
  // Per table, per (slot, data member j) at slot * k + j: what the row holds of the member.
  std::vector<std::unique_ptr<MemberVersion[]>> versions_;
  // Only in a replacement's store (`lost`): per (slot, j), the version each member had when
  // the rebuild installed the row; deltas up to it are already in the row. Under the lock.
  std::vector<std::unique_ptr<uint32_t[]>> installed_at_;
  std::atomic<int64_t> version_gaps_{0};
  std::atomic<int64_t> invalid_rows_{0};
  int64_t parity_rows_ = 0;
  // Striped row locks: which one guards a row is computed (LockFor), so the rows cannot be
  // annotated with it; the compiler still checks every lock is released.
  mutable std::unique_ptr<absl::Mutex[]> locks_;
};

// The initial payload of every member of a stripe (k data rows, zero rows past the table's
// end), as bytes: what ParityStore encodes at creation and recovery can check against.
void InitialStripeData(const Placement& placement, const SparseOptimizerConfig& optimizer,
                       uint64_t seed, int dim, int table, int64_t stripe,
                       std::vector<std::vector<uint8_t>>* data);

}  // namespace ecps

#endif  // ECPS_PS_PARITY_STORE_H_
