#include "ps/embedding_store.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "kernels/optimizers.h"
#include "ps/row_code.h"
#include "ps/valid_flag.h"

namespace ecps {

EmbeddingStore::EmbeddingStore(const Placement& placement, int server, int dim,
                               const SparseOptimizerConfig& optimizer)
    : placement_(placement),
      server_(server),
      dim_(dim),
      optimizer_(optimizer),
      payload_floats_(dim + SparseStateFloats(optimizer, dim)),
      locks_(std::make_unique<absl::Mutex[]>(kLockStripes)) {}

absl::StatusOr<std::unique_ptr<EmbeddingStore>> EmbeddingStore::Create(
    const Placement& placement, int server, int dim, const SparseOptimizerConfig& optimizer,
    uint64_t seed, bool lost, const RowSource* source) {
  if (server < 0 || server >= placement.servers()) {
    return absl::InvalidArgumentError("server id " + std::to_string(server) +
                                      " out of range");
  }
  if (dim < 1) return absl::InvalidArgumentError("embedding dim must be positive");
  std::unique_ptr<EmbeddingStore> store(new EmbeddingStore(placement, server, dim, optimizer));
  std::vector<size_t> table_bytes;
  for (int t = 0; t < placement.num_tables(); ++t) {
    table_bytes.push_back(sizeof(float) * placement.DataSlots(t) * store->payload_floats_);
  }
  store->storage_ = HugeBuffer::ForRegions(table_bytes, &store->tables_);
  store->valid_.resize(placement.num_tables());
  store->versions_.resize(placement.num_tables());
  for (int t = 0; t < placement.num_tables(); ++t) {
    int64_t slots = placement.DataSlots(t);
    store->valid_[t].assign(static_cast<size_t>((placement.rows(t) + 63) / 64),
                            lost ? 0 : ~uint64_t{0});
    store->versions_[t].assign(static_cast<size_t>(slots), 0);
    for (int64_t slot = 0; slot < slots; ++slot) {
      int64_t row = placement.RowAtDataSlot(t, server, slot);
      if (row < 0) continue;  // padding slot of a partial block
      ++store->data_rows_;
      if (lost || source != nullptr) continue;
      InitSparseRow(optimizer, seed, t, row, dim, placement.rows(t), store->Payload(t, slot));
    }
  }
  if (source != nullptr && !lost) {
    if (absl::Status s = store->Load(*source); !s.ok()) return s;
  }
  if (lost) store->invalid_rows_.store(store->data_rows_);
  return store;
}

absl::StatusOr<EmbeddingStore::Rows> EmbeddingStore::Resolve(
    int table, absl::Span<const int64_t> rows) const {
  Rows resolved;
  resolved.table = table;
  resolved.ids = rows;
  if (absl::Status s = ResolveSlots(table, rows, &resolved.slots); !s.ok()) return s;
  return resolved;
}

absl::Status EmbeddingStore::ResolveSlots(int table, absl::Span<const int64_t> rows,
                                          std::vector<int64_t>* slots) const {
  if (table < 0 || table >= placement_.num_tables()) {
    return absl::InvalidArgumentError("table " + std::to_string(table) + " out of range [0, " +
                                      std::to_string(placement_.num_tables()) + ")");
  }
  slots->resize(rows.size());
  const int64_t num_rows = placement_.rows(table);
  for (size_t i = 0; i < rows.size(); ++i) {
    int64_t row = rows[i];
    if (row < 0 || row >= num_rows) {
      return absl::InvalidArgumentError("row " + std::to_string(row) + " of table " +
                                        std::to_string(table) + " out of range [0, " +
                                        std::to_string(num_rows) + ")");
    }
    MemberLocation loc = placement_.DataLocation(table, row);
    if (loc.server != server_) {
      return absl::InvalidArgumentError("row " + std::to_string(row) + " of table " +
                                        std::to_string(table) + " belongs to server " +
                                        std::to_string(loc.server) + ", not server " +
                                        std::to_string(server_));
    }
    (*slots)[i] = loc.slot;
  }
  return absl::OkStatus();
}

absl::Status EmbeddingStore::Pull(int table, absl::Span<const int64_t> rows, float* out) const {
  std::vector<int64_t> slots;
  if (absl::Status s = ResolveSlots(table, rows, &slots); !s.ok()) return s;
  for (size_t i = 0; i < slots.size(); ++i) {
    if (i + kPrefetchAhead < slots.size()) {
      __builtin_prefetch(Payload(table, slots[i + kPrefetchAhead]), 0, 3);
    }
    absl::MutexLock lock(&LockFor(table, slots[i]));
    if (!BitSet(valid_[table], rows[i])) return Missing(table, rows[i]);
    std::memcpy(out + i * dim_, Payload(table, slots[i]), sizeof(float) * dim_);
  }
  pulls_.fetch_add(static_cast<int64_t>(rows.size()), std::memory_order_relaxed);
  return absl::OkStatus();
}

absl::Status EmbeddingStore::Push(int table, absl::Span<const int64_t> rows,
                                  const float* grads, const DeltaSink& on_delta) {
  absl::StatusOr<Rows> resolved = Resolve(table, rows);
  if (!resolved.ok()) return resolved.status();
  if (on_delta) {
    std::vector<uint8_t> delta(sizeof(float) * payload_floats_);
    return PushDeltas(
        *resolved, grads, [&](int64_t, uint32_t, uint32_t) { return delta.data(); },
        &on_delta);
  }
  return Push(*resolved, grads);
}

absl::Status EmbeddingStore::Push(const Rows& rows, const float* grads) {
  const int table = rows.table;
  const std::vector<int64_t>& slots = rows.slots;
  const size_t bytes = sizeof(float) * payload_floats_;
  for (size_t i = 0; i < slots.size(); ++i) {
    if (i + kPrefetchAhead < slots.size()) {
      PrefetchForWrite(Payload(table, slots[i + kPrefetchAhead]), bytes);
      __builtin_prefetch(&LockFor(table, slots[i + kPrefetchAhead]), 1, 3);
    }
    absl::MutexLock lock(&LockFor(table, slots[i]));
    if (!BitSet(valid_[table], rows.ids[i])) return Missing(table, rows.ids[i]);
    ApplySparseUpdate(optimizer_, dim_, grads + i * dim_, Payload(table, slots[i]));
  }
  pushes_.fetch_add(static_cast<int64_t>(slots.size()), std::memory_order_relaxed);
  return absl::OkStatus();
}

absl::Status EmbeddingStore::PushWithDeltas(int table, absl::Span<const int64_t> rows,
                                            const float* grads, DeltaSlot slot) {
  absl::StatusOr<Rows> resolved = Resolve(table, rows);
  if (!resolved.ok()) return resolved.status();
  return PushDeltas(*resolved, grads, slot, nullptr);
}

absl::Status EmbeddingStore::PushWithDeltas(const Rows& rows, const float* grads,
                                            DeltaSlot slot) {
  return PushDeltas(rows, grads, slot, nullptr);
}

absl::Status EmbeddingStore::PushDeltas(const Rows& rows, const float* grads, DeltaSlot slot,
                                        const DeltaSink* done) {
  const int table = rows.table;
  const std::vector<int64_t>& slots = rows.slots;
  const size_t bytes = sizeof(float) * payload_floats_;
  for (size_t i = 0; i < slots.size(); ++i) {
    if (i + kPrefetchAhead < slots.size()) {
      PrefetchForWrite(Payload(table, slots[i + kPrefetchAhead]), bytes);
      __builtin_prefetch(&LockFor(table, slots[i + kPrefetchAhead]), 1, 3);
      __builtin_prefetch(&versions_[table][slots[i + kPrefetchAhead]], 1, 3);
    }
    absl::MutexLock lock(&LockFor(table, slots[i]));
    const int64_t row = rows.ids[i];
    if (!BitSet(valid_[table], row)) return Missing(table, row);
    float* payload = Payload(table, slots[i]);
    uint32_t& version = versions_[table][slots[i]];
    uint8_t* delta = slot(row, version, version + 1);
    ++version;
    std::memcpy(delta, payload, bytes);
    ApplySparseUpdate(optimizer_, dim_, grads + i * dim_, payload);
    RowCode::XorInto(delta, reinterpret_cast<const uint8_t*>(payload), bytes);
    if (done != nullptr) (*done)(row, version - 1, version, delta, bytes);
  }
  pushes_.fetch_add(static_cast<int64_t>(slots.size()), std::memory_order_relaxed);
  return absl::OkStatus();
}

absl::Status EmbeddingStore::ReadPayloads(int table, absl::Span<const int64_t> rows,
                                          float* out, uint32_t* versions) const {
  std::vector<int64_t> slots;
  if (absl::Status s = ResolveSlots(table, rows, &slots); !s.ok()) return s;
  for (size_t i = 0; i < slots.size(); ++i) {
    absl::MutexLock lock(&LockFor(table, slots[i]));
    if (!BitSet(valid_[table], rows[i])) return Missing(table, rows[i]);
    std::memcpy(out + i * payload_floats_, Payload(table, slots[i]),
                sizeof(float) * payload_floats_);
    if (versions != nullptr) versions[i] = versions_[table][slots[i]];
  }
  return absl::OkStatus();
}

absl::Status EmbeddingStore::Missing(int table, int64_t row) const {
  return absl::UnavailableError("row " + std::to_string(row) + " of table " +
                                std::to_string(table) + " is not rebuilt yet on server " +
                                std::to_string(server_));
}

void EmbeddingStore::MissingRows(int table, absl::Span<const int64_t> rows,
                                 std::vector<int64_t>* invalid) const {
  if (all_valid()) return;
  for (int64_t row : rows) {
    if (!IsValid(table, row)) invalid->push_back(row);
  }
}

absl::Status EmbeddingStore::Load(const RowSource& source) {
  constexpr int64_t kChunk = 16384;
  std::vector<int64_t> rows, chunk_slots;
  std::vector<float> buffer;
  for (int t = 0; t < placement_.num_tables(); ++t) {
    const int64_t slots = placement_.DataSlots(t);
    for (int64_t begin = 0; begin < slots; begin += kChunk) {
      rows.clear();
      chunk_slots.clear();
      for (int64_t slot = begin; slot < std::min(slots, begin + kChunk); ++slot) {
        int64_t row = placement_.RowAtDataSlot(t, server_, slot);
        if (row < 0) continue;
        rows.push_back(row);
        chunk_slots.push_back(slot);
      }
      if (rows.empty()) continue;
      buffer.resize(rows.size() * payload_floats_);
      absl::Status s = source(t, rows.data(), static_cast<int64_t>(rows.size()), buffer.data());
      if (!s.ok()) return s;
      for (size_t i = 0; i < rows.size(); ++i) {
        absl::MutexLock lock(&LockFor(t, chunk_slots[i]));
        std::memcpy(Payload(t, chunk_slots[i]), buffer.data() + i * payload_floats_,
                    sizeof(float) * payload_floats_);
        if (!BitSet(valid_[t], rows[i])) {
          SetBit(valid_[t], rows[i]);
          invalid_rows_.fetch_sub(1, std::memory_order_acq_rel);
        }
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> EmbeddingStore::ReadSlots(int table, int64_t slot_begin, int64_t n,
                                                  std::vector<int64_t>* rows,
                                                  std::vector<float>* payloads) const {
  if (table < 0 || table >= placement_.num_tables()) {
    return absl::InvalidArgumentError("table " + std::to_string(table) + " out of range");
  }
  const int64_t end = std::min(placement_.DataSlots(table), slot_begin + std::max<int64_t>(n, 0));
  for (int64_t slot = std::max<int64_t>(slot_begin, 0); slot < end; ++slot) {
    int64_t row = placement_.RowAtDataSlot(table, server_, slot);
    if (row < 0) continue;
    absl::MutexLock lock(&LockFor(table, slot));
    if (!BitSet(valid_[table], row)) return Missing(table, row);
    rows->push_back(row);
    const float* p = Payload(table, slot);
    payloads->insert(payloads->end(), p, p + payload_floats_);
  }
  return end;
}

bool EmbeddingStore::IsValid(int table, int64_t row) const {
  return BitSet(valid_[table], row);
}

absl::Status EmbeddingStore::RepairRow(int table, int64_t row, const float* payload,
                                       uint32_t version) {
  std::vector<int64_t> slots;
  const int64_t rows[] = {row};
  if (absl::Status s = ResolveSlots(table, rows, &slots); !s.ok()) return s;
  absl::MutexLock lock(&LockFor(table, slots[0]));
  if (!BitSet(valid_[table], row)) return Missing(table, row);
  if (versions_[table][slots[0]] != version) {
    return absl::FailedPreconditionError(
        "row " + std::to_string(row) + " of table " + std::to_string(table) + " is at version " +
        std::to_string(versions_[table][slots[0]]) + ", not " + std::to_string(version));
  }
  std::memcpy(Payload(table, slots[0]), payload, sizeof(float) * payload_floats_);
  return absl::OkStatus();
}

absl::Status EmbeddingStore::FlipBit(int table, int64_t row, int64_t bit) {
  std::vector<int64_t> slots;
  const int64_t rows[] = {row};
  if (absl::Status s = ResolveSlots(table, rows, &slots); !s.ok()) return s;
  if (bit < 0 || bit >= int64_t{8} * static_cast<int64_t>(sizeof(float)) * payload_floats_) {
    return absl::InvalidArgumentError("bit " + std::to_string(bit) + " is past a row's " +
                                      std::to_string(sizeof(float) * payload_floats_) +
                                      " payload bytes");
  }
  absl::MutexLock lock(&LockFor(table, slots[0]));
  reinterpret_cast<uint8_t*>(Payload(table, slots[0]))[bit / 8] ^= uint8_t(1u << (bit % 8));
  return absl::OkStatus();
}

bool EmbeddingStore::InstallRow(int table, int64_t row, const float* payload,
                                uint32_t version) {
  int64_t slot = placement_.DataLocation(table, row).slot;
  absl::MutexLock lock(&LockFor(table, slot));
  if (BitSet(valid_[table], row)) return false;
  std::memcpy(Payload(table, slot), payload, sizeof(float) * payload_floats_);
  versions_[table][slot] = version;
  SetBit(valid_[table], row);
  invalid_rows_.fetch_sub(1, std::memory_order_acq_rel);
  return true;
}

int64_t EmbeddingStore::bytes() const {
  int64_t versions = 0;
  for (const auto& v : versions_) versions += static_cast<int64_t>(v.size() * sizeof(uint32_t));
  return static_cast<int64_t>(storage_.size()) + versions;
}

}  // namespace ecps
