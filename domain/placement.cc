#include "domain/placement.h"

#include <string>

namespace ecps {

absl::StatusOr<Placement> Placement::Create(int servers, int k, int r,
                                            std::vector<int64_t> table_rows) {
  if (k < 1 || r < 0) {
    return absl::InvalidArgumentError("placement needs k >= 1 and r >= 0, got k=" +
                                      std::to_string(k) + " r=" + std::to_string(r));
  }
  if (servers < k + r) {
    return absl::InvalidArgumentError("placement needs at least k + r = " +
                                      std::to_string(k + r) + " servers, got " +
                                      std::to_string(servers));
  }
  for (size_t t = 0; t < table_rows.size(); ++t) {
    if (table_rows[t] < 1) {
      return absl::InvalidArgumentError("table " + std::to_string(t) + " has no rows");
    }
  }
  return Placement(servers, k, r, std::move(table_rows));
}

int64_t Placement::RowAtDataSlot(int table, int server, int64_t slot) const {
  int64_t block = slot / k_;
  int m = static_cast<int>(slot % k_);
  int64_t offset = ((server - m - table) % servers_ + servers_) % servers_;
  int64_t stripe = block * servers_ + offset;
  int64_t row = stripe * k_ + m;
  return row < table_rows_[table] ? row : -1;
}

int64_t Placement::StripeAtParitySlot(int table, int server, int64_t slot, int* q) const {
  int64_t block = slot / r_;
  *q = static_cast<int>(slot % r_);
  int m = k_ + *q;
  int64_t offset = ((server - m - table) % servers_ + servers_) % servers_;
  int64_t stripe = block * servers_ + offset;
  return stripe < stripes(table) ? stripe : -1;
}

int64_t Placement::DataRowsOn(int table, int server) const {
  int64_t count = 0;
  for (int64_t slot = 0; slot < DataSlots(table); ++slot) {
    if (RowAtDataSlot(table, server, slot) >= 0) ++count;
  }
  return count;
}

int64_t Placement::ParityRowsOn(int table, int server) const {
  int64_t count = 0;
  int q = 0;
  for (int64_t slot = 0; slot < ParitySlots(table); ++slot) {
    if (StripeAtParitySlot(table, server, slot, &q) >= 0) ++count;
  }
  return count;
}

std::vector<Placement::Loss> Placement::Unrecoverable(const std::vector<int>& lost) const {
  std::vector<bool> gone(servers_, false);
  for (int s : lost) {
    if (s >= 0 && s < servers_) gone[s] = true;
  }
  // Stripe s of table t has its members on the n servers from (s + t) mod S on, so whether
  // it is lost depends only on that offset.
  std::vector<bool> bad_offset(servers_, false);
  bool any = false;
  for (int o = 0; o < servers_; ++o) {
    int missing = 0;
    for (int m = 0; m < n(); ++m) missing += gone[(o + m) % servers_] ? 1 : 0;
    bad_offset[o] = missing > r_;
    any |= bad_offset[o];
  }
  std::vector<Loss> out;
  if (!any) return out;
  for (int t = 0; t < num_tables(); ++t) {
    Loss loss;
    loss.table = t;
    loss.first_stripe = -1;
    const int64_t total = stripes(t);
    for (int o = 0; o < servers_; ++o) {
      if (!bad_offset[o]) continue;
      // The stripes s in [0, total) with (s + t) mod S == o: s = first, first + S, ...
      const int64_t first = ((o - t) % servers_ + servers_) % servers_;
      if (first >= total) continue;
      loss.stripes += (total - 1 - first) / servers_ + 1;
      if (loss.first_stripe < 0 || first < loss.first_stripe) loss.first_stripe = first;
    }
    if (loss.stripes > 0) out.push_back(loss);
  }
  return out;
}

}  // namespace ecps
