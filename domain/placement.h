// Row placement: which server holds each member of each stripe, and at which local slot.
//
// Each table is coded on its own. Row i of a table is data position j = i % k of stripe
// s = i / k. A stripe has n = k + r members (k data rows, then r parity rows) on n distinct
// servers. Member m of stripe s of table t lives on server (s + t + m) mod S, so data and
// parity rotate RAID-5 style over all S servers whatever S and n are. Within one block of S
// consecutive stripes a server holds each member position exactly once, which gives dense
// local arrays with O(1) arithmetic both ways and no per-row table:
//   local data slot   = (s / S) * k + m          (m < k)
//   local parity slot = (s / S) * r + (m - k)    (m >= k)
// Mode none/checkpoint uses k = 1, r = 0; replication uses k = 1, r = copies, so the same
// arithmetic places replicas. Thread-safe: immutable after construction.
#ifndef ECPS_DOMAIN_PLACEMENT_H_
#define ECPS_DOMAIN_PLACEMENT_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace ecps {

struct MemberLocation {
  int server = -1;
  int64_t slot = -1;  // index into the server's local data or parity array of the table
};

class Placement {
 public:
  // Returns INVALID_ARGUMENT unless servers >= k + r, k >= 1, r >= 0, every table has rows.
  static absl::StatusOr<Placement> Create(int servers, int k, int r,
                                          std::vector<int64_t> table_rows);

  int servers() const { return servers_; }
  int k() const { return k_; }
  int r() const { return r_; }
  int n() const { return k_ + r_; }
  int num_tables() const { return static_cast<int>(table_rows_.size()); }
  int64_t rows(int table) const { return table_rows_[table]; }
  int64_t stripes(int table) const { return (table_rows_[table] + k_ - 1) / k_; }

  // Server of member `m` (0..n-1) of stripe `stripe` of `table`.
  int ServerOf(int table, int64_t stripe, int m) const {
    return static_cast<int>((stripe + table + m) % servers_);
  }
  // Where data row `row` lives.
  MemberLocation DataLocation(int table, int64_t row) const {
    int64_t s = row / k_;
    int m = static_cast<int>(row % k_);
    return {ServerOf(table, s, m), (s / servers_) * k_ + m};
  }
  // Where parity member q (0..r-1) of `stripe` lives.
  MemberLocation ParityLocation(int table, int64_t stripe, int q) const {
    return {ServerOf(table, stripe, k_ + q), (stripe / servers_) * r_ + q};
  }
  // Member position that `server` holds of `stripe` (0..n-1), or -1 when it holds none.
  int MemberAt(int table, int64_t stripe, int server) const {
    int m = static_cast<int>(((server - stripe - table) % servers_ + servers_) % servers_);
    return m < n() ? m : -1;
  }
  // Inverse of DataLocation: the row at `server`'s local data slot, or -1 for a padding slot.
  int64_t RowAtDataSlot(int table, int server, int64_t slot) const;
  // Inverse of ParityLocation: the stripe of `server`'s local parity slot (-1: padding); sets
  // *q to the parity index.
  int64_t StripeAtParitySlot(int table, int server, int64_t slot, int* q) const;

  // Sizes of a server's dense local arrays for a table (including a few padding slots).
  int64_t DataSlots(int table) const { return BlocksOf(table) * k_; }
  int64_t ParitySlots(int table) const { return BlocksOf(table) * r_; }
  // Real (non-padding) rows a server holds: used for balance checks and status.
  int64_t DataRowsOn(int table, int server) const;
  int64_t ParityRowsOn(int table, int server) const;

  // The stripes of each table that more than r of the servers in `lost` hold members of:
  // those cannot be rebuilt. Empty when nothing is lost. O(tables * servers).
  struct Loss {
    int table = 0;
    int64_t stripes = 0;       // how many
    int64_t first_stripe = 0;  // the lowest
  };
  std::vector<Loss> Unrecoverable(const std::vector<int>& lost) const;

 private:
  Placement(int servers, int k, int r, std::vector<int64_t> table_rows)
      : servers_(servers), k_(k), r_(r), table_rows_(std::move(table_rows)) {}
  int64_t BlocksOf(int table) const { return (stripes(table) + servers_ - 1) / servers_; }

  int servers_;
  int k_;
  int r_;
  std::vector<int64_t> table_rows_;
};

}  // namespace ecps

#endif  // ECPS_DOMAIN_PLACEMENT_H_
