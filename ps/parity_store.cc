#include "ps/parity_store.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "kernels/optimizers.h"
#include "ps/valid_flag.h"
#include "runtime/huge_buffer.h"

namespace ecps {

void InitialStripeData(const Placement& placement, const SparseOptimizerConfig& optimizer,
                       uint64_t seed, int dim, int table, int64_t stripe,
                       std::vector<std::vector<uint8_t>>* data) {
  const int pf = dim + SparseStateFloats(optimizer, dim);
  data->resize(placement.k());
  std::vector<float> payload(pf);
  for (int j = 0; j < placement.k(); ++j) {
    (*data)[j].assign(static_cast<size_t>(pf) * sizeof(float), 0);
    int64_t row = stripe * placement.k() + j;
    if (row >= placement.rows(table)) continue;  // padding member of the last stripe
    InitSparseRow(optimizer, seed, table, row, dim, placement.rows(table), payload.data());
    std::memcpy((*data)[j].data(), payload.data(), (*data)[j].size());
  }
}

absl::StatusOr<std::unique_ptr<ParityStore>> ParityStore::Create(
    const Placement& placement, int server, int dim, const SparseOptimizerConfig& optimizer,
    uint64_t seed, const RowCode* code, bool lost, const StripeSource* source) {
  if (placement.r() < 1) return absl::InvalidArgumentError("placement has no parity");
  const size_t payload_bytes = sizeof(float) * (dim + SparseStateFloats(optimizer, dim));
  std::unique_ptr<ParityStore> store(new ParityStore(placement, server, payload_bytes, code));
  std::vector<size_t> table_bytes;
  for (int t = 0; t < placement.num_tables(); ++t) {
    table_bytes.push_back(static_cast<size_t>(placement.ParitySlots(t)) * payload_bytes);
  }
  store->storage_ = HugeBuffer::ForRegions(table_bytes, &store->tables_);
  std::vector<std::vector<uint8_t>> data;
  std::vector<std::vector<uint8_t>> parity(placement.r(), std::vector<uint8_t>(payload_bytes));
  std::vector<const uint8_t*> data_ptrs(placement.k());
  std::vector<uint8_t*> parity_ptrs(placement.r());
  for (int q = 0; q < placement.r(); ++q) parity_ptrs[q] = parity[q].data();
  for (int t = 0; t < placement.num_tables(); ++t) {
    store->stripes_.push_back(placement.stripes(t));
    store->table_mod_.push_back(t % placement.servers());
  }
  store->valid_.resize(placement.num_tables());
  store->versions_.resize(placement.num_tables());
  for (int t = 0; t < placement.num_tables(); ++t) {
    const size_t counters = static_cast<size_t>(placement.ParitySlots(t)) * placement.k();
    store->versions_[t] = std::make_unique<MemberVersion[]>(counters);  // zeros
    if (lost) store->installed_at_.push_back(std::make_unique<uint32_t[]>(counters));
    store->valid_[t].assign(static_cast<size_t>(placement.ParitySlots(t)), lost ? 0 : 1);
    int q = 0;
    for (int64_t slot = 0; slot < placement.ParitySlots(t); ++slot) {
      int64_t stripe = placement.StripeAtParitySlot(t, server, slot, &q);
      if (stripe < 0) continue;
      if (lost) {
        ++store->parity_rows_;
        continue;
      }
      if (source != nullptr) {
        absl::Status s = (*source)(t, stripe, &data);
        if (!s.ok()) return s;
        if (data.size() != static_cast<size_t>(placement.k())) {
          return absl::InternalError("stripe source returned a wrong number of rows");
        }
        for (const auto& d : data) {
          if (d.size() != payload_bytes) {
            return absl::InternalError("stripe source returned a wrong-sized row");
          }
        }
      } else {
        InitialStripeData(placement, optimizer, seed, dim, t, stripe, &data);
      }
      for (int j = 0; j < placement.k(); ++j) data_ptrs[j] = data[j].data();
      absl::Status s = code->Encode(data_ptrs, parity_ptrs, payload_bytes);
      if (!s.ok()) return s;
      std::memcpy(store->Row(t, slot), parity[q].data(), payload_bytes);
      ++store->parity_rows_;
    }
  }
  if (lost) store->invalid_rows_.store(store->parity_rows_);
  return store;
}

absl::StatusOr<int> ParityStore::ParityIndex(int table, int64_t stripe) const {
  if (table < 0 || table >= placement_.num_tables()) {
    return absl::InvalidArgumentError("table " + std::to_string(table) + " out of range");
  }
  if (stripe < 0 || stripe >= placement_.stripes(table)) {
    return absl::InvalidArgumentError("stripe " + std::to_string(stripe) + " of table " +
                                      std::to_string(table) + " out of range");
  }
  int m = placement_.MemberAt(table, stripe, server_);
  if (m < placement_.k()) {
    return absl::InvalidArgumentError("server " + std::to_string(server_) +
                                      " holds no parity of stripe " + std::to_string(stripe) +
                                      " of table " + std::to_string(table));
  }
  return m - placement_.k();
}

absl::Status ParityStore::ApplyBatch(absl::Span<const DeltaRef> deltas) {
  // The checks of ParityIndex and the slot of ParityLocation, inline and with one division
  // per delta: this runs for every delta of every batch, and the general lookups' StatusOr,
  // error strings and four divisions cost more than the rest of the apply.
  const int k = placement_.k(), r = placement_.r(), servers = placement_.servers();
  std::vector<std::pair<int64_t, int>> where(deltas.size());  // (slot, q)
  for (size_t i = 0; i < deltas.size(); ++i) {
    const DeltaRef& d = deltas[i];
    int q = -1;
    int64_t block = 0;
    if (d.table >= 0 && d.table < placement_.num_tables() && d.stripe >= 0 &&
        d.stripe < stripes_[d.table]) {
      block = d.stripe / servers;
      // Member (server - stripe - table) mod servers, as Placement::MemberAt.
      int m = server_ - table_mod_[d.table] - static_cast<int>(d.stripe - block * servers);
      while (m < 0) m += servers;
      q = m - k;
    }
    if (q < 0 || q >= r) return ParityIndex(d.table, d.stripe).status();  // the error it names
    if (d.j < 0 || d.j >= k) {
      return absl::InvalidArgumentError("bad data position " + std::to_string(d.j) +
                                        " in a parity delta for table " +
                                        std::to_string(d.table) + " stripe " +
                                        std::to_string(d.stripe));
    }
    where[i] = {block * r + q, q};  // Placement::ParityLocation's slot
  }
  constexpr size_t kAhead = 8;
  for (size_t i = 0; i < deltas.size(); ++i) {
    if (i + kAhead < deltas.size()) {
      // The row, its lock and its versions are each a cache line somewhere else.
      const DeltaRef& ahead = deltas[i + kAhead];
      const int64_t ahead_slot = where[i + kAhead].first;
      PrefetchForWrite(Row(ahead.table, ahead_slot), payload_bytes_);
      __builtin_prefetch(&LockFor(ahead.table, ahead_slot), 1, 3);
      __builtin_prefetch(Versions(ahead.table, ahead_slot) + ahead.j, 1, 3);
    }
    const DeltaRef& d = deltas[i];
    const int64_t slot = where[i].first;
    absl::MutexLock lock(&LockFor(d.table, slot));
    MemberVersion& v = Versions(d.table, slot)[d.j];
    const uint32_t newest = v.newest.load(std::memory_order_relaxed);
    if (!valid_[d.table][slot]) {
      // Rebuilt later from current data; remember how new that data must be.
      if (VersionAfter(d.to, newest)) v.newest.store(d.to, std::memory_order_relaxed);
      continue;
    }
    if (!installed_at_.empty()) {
      const uint32_t base = installed_at_[d.table][slot * placement_.k() + d.j];
      if (!VersionAfter(d.to, base)) continue;  // the rebuilt row already contains it
      if (VersionAfter(base, d.from)) version_gaps_.fetch_add(1, std::memory_order_relaxed);
    }
    v.count.store(v.count.load(std::memory_order_relaxed) + (d.to - d.from),
                  std::memory_order_relaxed);
    if (VersionAfter(d.to, newest)) v.newest.store(d.to, std::memory_order_relaxed);
    absl::Status s = code_->UpdateParity(where[i].second, d.j, d.data, Row(d.table, slot),
                                         payload_bytes_);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

std::vector<ParityStore::Hot> ParityStore::HotRows(int data_server, int max_rows) const {
  std::vector<Hot> hot;
  const int k = placement_.k();
  int q = 0;
  for (int t = 0; t < placement_.num_tables(); ++t) {
    for (int64_t slot = 0; slot < placement_.ParitySlots(t); ++slot) {
      const int64_t stripe = placement_.StripeAtParitySlot(t, server_, slot, &q);
      if (stripe < 0) continue;
      for (int j = 0; j < k; ++j) {
        const uint32_t heat = Versions(t, slot)[j].count.load(std::memory_order_relaxed);
        const int64_t row = stripe * k + j;
        if (heat == 0 || row >= placement_.rows(t)) continue;
        if (placement_.ServerOf(t, stripe, j) != data_server) continue;
        hot.push_back(Hot{t, row, heat});
      }
    }
  }
  auto hotter = [](const Hot& a, const Hot& b) { return a.heat > b.heat; };
  if (hot.size() > static_cast<size_t>(max_rows)) {
    std::nth_element(hot.begin(), hot.begin() + max_rows, hot.end(), hotter);
    hot.resize(max_rows);
  }
  std::stable_sort(hot.begin(), hot.end(), hotter);
  return hot;
}

absl::Status ParityStore::Read(int table, int64_t stripe, uint8_t* out, uint32_t* versions,
                               bool* settled) const {
  auto q = ParityIndex(table, stripe);
  if (!q.ok()) return q.status();
  int64_t slot = placement_.ParityLocation(table, stripe, *q).slot;
  absl::MutexLock lock(&LockFor(table, slot));
  if (!valid_[table][slot]) {
    return absl::UnavailableError("parity of stripe " + std::to_string(stripe) + " of table " +
                                  std::to_string(table) + " is not rebuilt yet on server " +
                                  std::to_string(server_));
  }
  std::memcpy(out, Row(table, slot), payload_bytes_);
  if (versions != nullptr) {
    bool all = true;
    for (int j = 0; j < placement_.k(); ++j) {
      const MemberVersion& v = Versions(table, slot)[j];
      versions[j] = v.count.load(std::memory_order_relaxed);
      all &= versions[j] == v.newest.load(std::memory_order_relaxed);
    }
    if (settled != nullptr) *settled = all;
  }
  return absl::OkStatus();
}

bool ParityStore::IsValid(int table, int64_t stripe) const {
  auto q = ParityIndex(table, stripe);
  if (!q.ok()) return false;
  return FlagSet(valid_[table][placement_.ParityLocation(table, stripe, *q).slot]);
}

ParityStore::Install ParityStore::InstallRow(int table, int64_t stripe, const uint8_t* payload,
                                             const uint32_t* versions) {
  auto q = ParityIndex(table, stripe);
  if (!q.ok()) return Install::kAlreadyValid;  // not a row of this server: nothing to do
  int64_t slot = placement_.ParityLocation(table, stripe, *q).slot;
  absl::MutexLock lock(&LockFor(table, slot));
  if (valid_[table][slot]) return Install::kAlreadyValid;
  MemberVersion* held = Versions(table, slot);
  for (int j = 0; j < placement_.k(); ++j) {
    if (VersionAfter(held[j].newest.load(std::memory_order_relaxed), versions[j])) {
      return Install::kStale;
    }
  }
  std::memcpy(Row(table, slot), payload, payload_bytes_);
  SetVersions(table, slot, versions);
  SetFlag(valid_[table][slot]);
  invalid_rows_.fetch_sub(1, std::memory_order_acq_rel);
  return Install::kInstalled;
}

absl::Status ParityStore::FlipBit(int table, int64_t stripe, int64_t bit) {
  auto q = ParityIndex(table, stripe);
  if (!q.ok()) return q.status();
  if (bit < 0 || bit >= int64_t{8} * static_cast<int64_t>(payload_bytes_)) {
    return absl::InvalidArgumentError("bit " + std::to_string(bit) + " is past a parity row's " +
                                      std::to_string(payload_bytes_) + " bytes");
  }
  int64_t slot = placement_.ParityLocation(table, stripe, *q).slot;
  absl::MutexLock lock(&LockFor(table, slot));
  Row(table, slot)[bit / 8] ^= uint8_t(1u << (bit % 8));
  return absl::OkStatus();
}

absl::Status ParityStore::Overwrite(int table, int64_t stripe, const uint8_t* payload,
                                    const uint32_t* versions) {
  auto q = ParityIndex(table, stripe);
  if (!q.ok()) return q.status();
  int64_t slot = placement_.ParityLocation(table, stripe, *q).slot;
  absl::MutexLock lock(&LockFor(table, slot));
  std::memcpy(Row(table, slot), payload, payload_bytes_);
  SetVersions(table, slot, versions);
  if (!valid_[table][slot]) {
    SetFlag(valid_[table][slot]);
    invalid_rows_.fetch_sub(1, std::memory_order_acq_rel);
  }
  return absl::OkStatus();
}

void ParityStore::SetVersions(int table, int64_t slot, const uint32_t* versions) {
  MemberVersion* held = Versions(table, slot);
  for (int j = 0; j < placement_.k(); ++j) {
    held[j].count.store(versions[j], std::memory_order_relaxed);
    held[j].newest.store(versions[j], std::memory_order_relaxed);
    if (!installed_at_.empty()) installed_at_[table][slot * placement_.k() + j] = versions[j];
  }
}

int64_t ParityStore::bytes() const {
  int64_t counters = 0;
  for (int t = 0; t < placement_.num_tables(); ++t) {
    counters += placement_.ParitySlots(t) * placement_.k() *
                static_cast<int64_t>(sizeof(MemberVersion) +
                                     (installed_at_.empty() ? 0 : sizeof(uint32_t)));
  }
  return static_cast<int64_t>(storage_.size()) + counters;
}

}  // namespace ecps
