// What one read of a batch's stripes gathered at a replacement server, and the pure
// decisions the rebuild takes from it (ps/rebuilder.h): whether the members of a stripe
// agree on their versions (a consistent snapshot, which may be decoded at once) or were
// caught mid-update (read again, under a freeze if need be), and which members the lost one
// is decoded from. No locks, no I/O; not thread-safe (each reading thread keeps its own).
#ifndef ECPS_PS_STRIPE_SNAPSHOT_H_
#define ECPS_PS_STRIPE_SNAPSHOT_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace ecps {

// For stripe i of the read (0..stripes-1) and member m (0..n-1: k data members, then the
// parity members): its payload, whether it was read (`have`), and what it says of data
// member j's version (a data member knows only its own, a parity member all k; a parity
// member missing an update older than one it has is not `settled`, and its versions then
// say nothing exact).
struct StripeMembers {
  int k = 0;
  int n = 0;
  size_t bytes = 0;                // payload bytes of one member
  std::vector<uint8_t> payloads;   // (i * n + m) * bytes; meaningful only where `have`
  std::vector<uint8_t> have;       // i * n + m
  std::vector<uint8_t> settled;    // i * n + m
  std::vector<uint32_t> versions;  // (i * n + m) * k + j

  // Sizes the read for `stripes` stripes, nothing read yet (every member settled, every
  // version 0). The payload buffer keeps its bytes: they are read only where `have` says.
  void Reset(size_t stripes, int k, int n, size_t bytes);
  size_t slot(size_t i, int m) const { return i * static_cast<size_t>(n) + m; }
  uint8_t* payload(size_t i, int m) { return payloads.data() + slot(i, m) * bytes; }
  const uint8_t* payload(size_t i, int m) const { return payloads.data() + slot(i, m) * bytes; }
  bool read(size_t i, int m) const { return have[slot(i, m)] != 0; }
  // What member m of stripe i says of data member j's version.
  uint32_t says(size_t i, int m, int j) const { return versions[slot(i, m) * k + j]; }
};

// The versions of stripe i's data members as the read saw them: agreed[j] (k entries) is
// what data member j said of itself, or else what the first parity member read says of it,
// or 0 when no member read knows it. `lost` is the member being rebuilt (never read).
// Returns true when the read is a consistent snapshot: every parity member read is settled
// and every member read that knows a version says the same, so the parity read encodes
// exactly the data read.
bool AgreedVersions(const StripeMembers& members, size_t i, int lost, absl::Span<uint32_t> agreed);

// The members to decode stripe i from into *ids: the k lowest-numbered members read (data
// before parity, so the fewest parity rows), in increasing order. Returns false, with *ids
// holding every member read, when fewer than k were read.
bool DecodePlan(const StripeMembers& members, size_t i, std::vector<int>* ids);

}  // namespace ecps

#endif  // ECPS_PS_STRIPE_SNAPSHOT_H_
