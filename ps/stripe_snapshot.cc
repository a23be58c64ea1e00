#include "ps/stripe_snapshot.h"

#include <algorithm>

namespace ecps {

void StripeMembers::Reset(size_t stripes, int k_members, int n_members, size_t payload_bytes) {
  k = k_members;
  n = n_members;
  bytes = payload_bytes;
  const size_t slots = stripes * static_cast<size_t>(n);
  payloads.resize(slots * bytes);
  have.assign(slots, 0);
  settled.assign(slots, 1);
  versions.assign(slots * k, 0);
}

bool AgreedVersions(const StripeMembers& members, size_t i, int lost,
                    absl::Span<uint32_t> agreed) {
  const int k = members.k, n = members.n;
  bool consistent = true;
  for (int j = 0; j < k; ++j) {
    bool known = j != lost && members.read(i, j);
    if (known) agreed[j] = members.says(i, j, j);
    for (int m = k; m < n; ++m) {
      if (m == lost || !members.read(i, m)) continue;
      consistent &= members.settled[members.slot(i, m)] != 0;
      if (!known) {
        agreed[j] = members.says(i, m, j);
        known = true;
      } else if (members.says(i, m, j) != agreed[j]) {
        consistent = false;
      }
    }
    if (!known) agreed[j] = 0;
  }
  return consistent;
}

bool DecodePlan(const StripeMembers& members, size_t i, std::vector<int>* ids) {
  ids->clear();
  for (int m = 0; m < members.n && static_cast<int>(ids->size()) < members.k; ++m) {
    if (members.read(i, m)) ids->push_back(m);
  }
  return static_cast<int>(ids->size()) >= members.k;
}

}  // namespace ecps
