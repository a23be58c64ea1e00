// The row a raw categorical value maps to in its embedding table: the one definition the
// Criteo readers (worker/data.h, CriteoRowId) train with and `ecps export` documents in its
// manifest.json (row_mapping, docs/model.md "Exporting a model"), so that a serving stack can
// reproduce it.
//
//   row = 1 + HashOf(kCategoricalRowSeed, table, raw) mod (table_rows - 1)
//   row 0: a missing value (and every value when table_rows == 1)
//
// HashOf is kernels/hash_rng.h's (SplitMix64 finaliser over the tuple), all in uint64
// arithmetic modulo 2^64.
#ifndef ECPS_KERNELS_ROW_HASH_H_
#define ECPS_KERNELS_ROW_HASH_H_

#include <cstdint>

#include "kernels/hash_rng.h"

namespace ecps {

// The name the export's manifest gives this mapping; a change of the formula is a new name.
inline constexpr char kCategoricalRowHashName[] = "ecps-splitmix64-v1";
inline constexpr uint64_t kCategoricalRowSeed = 0xC817E0ull;

// The part of the hash that depends on the table only: HashOf(seed, table, raw) equals
// Mix64(Mix64(salt) ^ (raw + 0x632BE59BD9B4E019 + (salt << 6))) with this salt.
inline uint64_t CategoricalRowSalt(int table) {
  return Mix64(kCategoricalRowSeed) ^
         (static_cast<uint64_t>(table) + 0x632BE59BD9B4E019ull + (kCategoricalRowSeed << 6));
}

inline int64_t CategoricalRow(uint64_t raw, int table, int64_t table_rows) {
  if (table_rows <= 1) return 0;
  return 1 + static_cast<int64_t>(HashOf(kCategoricalRowSeed, static_cast<uint64_t>(table), raw) %
                                  static_cast<uint64_t>(table_rows - 1));
}

}  // namespace ecps

#endif  // ECPS_KERNELS_ROW_HASH_H_
