// The online scrub (docs/abft.md, "Online scrub"): while training runs, each parity holder
// checks the stripes it is the first parity member of against a fresh encode of their data
// rows, and each dense replica holder its copy against the primary's, rate-limited, a batch
// at a time. Part of CodedRedundancy (nothing to scrub without a code).
//
// A batch is first read without a freeze (every member of its stripes, with their versions,
// as a rebuild reads them: ps/stripe_snapshot.h). A stripe whose members agree on their
// versions and whose bytes equal the encode is clean. One caught mid-update (the versions
// disagree) is read once more without a freeze; one whose bytes differ, or that is still
// mid-update, is read again under a freeze of its stripes on every other member's server
// (owner: this process's instance, a short lease, always released), which rules out updates
// in flight. What still disagrees then is a confirmed corruption, repaired under that freeze:
// - r >= 2: the code locates the one bad member (LocateBadMember), which is rewritten (a
//   parity row with WriteParity, a data row with WriteRows, which keeps its version).
// - r = 1: a mismatch cannot say which member is wrong. The parity is re-derived from the data
//   rows (training reads the data rows: a flipped data row is already what it trains on, and
//   a parity that disagrees with it would turn any later rebuild of that stripe's members into
//   garbage), counted as unlocated and logged with the stripe.
// Dense: a replica whose checksum differs from the primary's at the same version is compared
// again; when it still differs it is replaced by the primary's copy (two copies cannot say
// which one flipped; the primary is the one training reads).
//
// Thread-safe; one thread of its own between Start() and destruction.
#ifndef ECPS_PS_ONLINE_SCRUB_H_
#define ECPS_PS_ONLINE_SCRUB_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "ps/dense_store.h"
#include "ps/parity_store.h"
#include "ps/redundancy.h"
#include "ps/row_code.h"
#include "ps/stripe_snapshot.h"
#include "ps/stripe_source.h"
#include "domain/placement.h"

namespace ecps {
namespace v1 {
class RequestHeader;
class ServerStats;
}  // namespace v1

// ---- The scrub's decisions, pure (tested alone) ----

// What one read of stripe i says.
enum class StripeVerdict {
  kClean,     // every member read, versions agree, parity == encode(data)
  kInFlight,  // versions disagree (or a parity row is not settled): maybe an update on its way
  kMismatch,  // versions agree and the bytes do not
};
// `members` holds every member of stripe i (k data, then r parity). `scratch` is resized.
StripeVerdict CheckStripe(const RowCode& code, const StripeMembers& members, size_t i,
                          std::vector<uint8_t>* scratch);

// With the n members of a stripe (members[m]: k data, then r parity; `bytes` each): -1 when
// they are a codeword; else the one member m whose replacement by *repaired makes them one;
// kUnlocatable when no single member does (r = 1, or more than one member is bad).
inline constexpr int kUnlocatable = -2;
int LocateBadMember(const RowCode& code, absl::Span<const uint8_t* const> members, size_t bytes,
                    std::vector<uint8_t>* repaired);

// The read rate cap: a read of `bytes` at `now` lets the next one start bytes / rate later
// than the later of `now` and the previous one's allowance (idle time banks no credit).
class ScrubPacer {
 public:
  using Clock = std::chrono::steady_clock;
  explicit ScrubPacer(double rate_mb_s) : rate_bytes_per_s_(rate_mb_s * 1e6) {}
  // When the next read may start, after one of `bytes` at `now`.
  Clock::time_point Account(Clock::time_point now, int64_t bytes);

 private:
  const double rate_bytes_per_s_;
  Clock::time_point next_{};
};

// ---- The scrubber ----

struct OnlineScrubOptions {
  int server = 0;
  std::string instance;     // this process's incarnation: the owner of the scrub's freezes
  double interval_s = 600;  // a full pass at most this often; the first one interval in
  double rate_mb_s = 8;
  int batch_stripes = 256;
  uint32_t lease_ms = 5000;  // how long members honour a confirm's freeze without release
  // Fills the header of a request to a peer (token, epoch, sender).
  std::function<void(v1::RequestHeader*)> header;
};

struct ScrubCounts {
  int64_t stripes_checked = 0;
  int64_t bytes_checked = 0;
  int64_t found = 0;      // differed on the optimistic read (stripes and dense replicas)
  // Still differed when read again (under a freeze, for stripes); a dense replica counts once
  // it is replaced (both copies still at the version it differed at twice).
  int64_t confirmed = 0;
  int64_t repaired = 0;
  int64_t unlocated = 0;  // confirmed with r = 1: parity re-derived from the data rows
  int64_t dense_checked = 0;
  int64_t passes = 0;
};

class OnlineScrub {
 public:
  // Every pointer must outlive the scrubber.
  OnlineScrub(OnlineScrubOptions options, const Placement& placement, const RowCode* code,
              ParityStore* parity, DenseStore* dense, StripeSource* peers);
  ~OnlineScrub();  // stops the thread

  // Starts the thread (a no-op with interval_s 0).
  void Start();
  // One pass over every stripe and replica held here, now, unpaced (tests); the first error
  // that stopped it (a peer down: the pass is abandoned, the next one starts over).
  absl::Status RunPass() ABSL_LOCKS_EXCLUDED(mu_);
  ScrubCounts counts() const ABSL_LOCKS_EXCLUDED(mu_);
  void FillStats(v1::ServerStats* stats) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  using Clock = std::chrono::steady_clock;
  void Loop();
  // Waits until `until` or Stop; false when stopping.
  bool WaitUntil(Clock::time_point until) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status ScrubStripes(absl::Span<const TableStripe> stripes, bool paced);
  // Reads every member of `stripes` into *out (my parity locally, the rest from the peers).
  absl::Status ReadMembers(absl::Span<const TableStripe> stripes, StripeMembers* out,
                           int64_t* bytes);
  // The frozen re-read and repair of `suspects`.
  absl::Status Confirm(absl::Span<const TableStripe> suspects);
  // Repairs stripe i of `got` (read under freeze `freeze_id`).
  absl::Status Repair(const TableStripe& ts, const StripeMembers& got, size_t i,
                      uint64_t freeze_id);
  absl::Status WriteParityMember(const TableStripe& ts, int q, const uint8_t* payload,
                                 const uint32_t* versions, uint64_t freeze_id);
  absl::Status ScrubDense(bool paced);
  absl::Status FreezeMembers(const std::vector<int>& servers, const std::vector<TableStripe>& s,
                             uint64_t freeze_id, bool on);
  void Pace(int64_t bytes) ABSL_LOCKS_EXCLUDED(mu_);
  void Count(const std::function<void(ScrubCounts*)>& fn) ABSL_LOCKS_EXCLUDED(mu_);

  const OnlineScrubOptions options_;
  const Placement& placement_;
  const RowCode* code_;
  ParityStore* parity_;
  DenseStore* dense_;
  StripeSource* peers_;
  const size_t bytes_;
  ScrubPacer pacer_;
  std::atomic<uint64_t> freeze_count_{0};

  mutable absl::Mutex mu_;
  absl::CondVar stop_cv_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  ScrubCounts counts_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace ecps

#endif  // ECPS_PS_ONLINE_SCRUB_H_
