// The online scrub's counters in ServerStats (the scrub_* fields, ps/online_scrub.h), as one
// table: whoever sums them (the run report over the servers, the coordinator over replaced
// server instances) walks the table instead of naming each field, so a counter added to the
// proto and to the table is summed and reported everywhere. runtime/scrub_counters_test.cc
// checks, by the proto's descriptor, that the table holds every scrub_* field exactly once.
#ifndef ECPS_RUNTIME_SCRUB_COUNTERS_H_
#define ECPS_RUNTIME_SCRUB_COUNTERS_H_

#include <cstdint>

#include "proto/ecps.pb.h"

namespace ecps {

struct ScrubCounter {
  const char* name;  // the field's name without "scrub_": the run report's key
  int64_t (v1::ServerStats::*get)() const;
  void (v1::ServerStats::*set)(int64_t);
};

// In the order the run report lists them.
inline constexpr ScrubCounter kScrubCounters[] = {
    {"passes", &v1::ServerStats::scrub_passes, &v1::ServerStats::set_scrub_passes},
    {"stripes_checked", &v1::ServerStats::scrub_stripes_checked,
     &v1::ServerStats::set_scrub_stripes_checked},
    {"bytes_checked", &v1::ServerStats::scrub_bytes_checked,
     &v1::ServerStats::set_scrub_bytes_checked},
    {"dense_checked", &v1::ServerStats::scrub_dense_checked,
     &v1::ServerStats::set_scrub_dense_checked},
    {"mismatches_found", &v1::ServerStats::scrub_mismatches_found,
     &v1::ServerStats::set_scrub_mismatches_found},
    {"mismatches_confirmed", &v1::ServerStats::scrub_mismatches_confirmed,
     &v1::ServerStats::set_scrub_mismatches_confirmed},
    {"repaired", &v1::ServerStats::scrub_repaired, &v1::ServerStats::set_scrub_repaired},
    {"unlocated", &v1::ServerStats::scrub_unlocated, &v1::ServerStats::set_scrub_unlocated},
};

// Adds each scrub counter of `from` to the same counter of `*into`; leaves every other field
// of `*into` as it is (the rest of ServerStats holds gauges, which do not add up).
inline void AddScrubCounts(const v1::ServerStats& from, v1::ServerStats* into) {
  for (const ScrubCounter& c : kScrubCounters) {
    (into->*c.set)((into->*c.get)() + (from.*c.get)());
  }
}

}  // namespace ecps

#endif  // ECPS_RUNTIME_SCRUB_COUNTERS_H_
