// The stripes a replacement server rebuilds ahead of its background sweep (ps/rebuilder.h):
// rows workers ask for (on demand), and the rows the parity holders saw updated most before
// the failure (hot, swept first). Thread-safe; time comes from an injected clock so that
// hint lingering is testable.
//
// On-demand rows come two ways. A request that needs rows now (EnsureRows) makes the queue
// urgent: the next batch is due at once. A worker's hint for a batch it will pull soon
// (Prefetch) may wait, so that the next hint shares its batch: a queue of hinted rows only is
// due 1.25 times the mean interval between hints after its oldest row arrived, and at most
// `max_hint_linger_ms` after (0: at once). Hints come a step or more before their pulls, so
// waiting a little over one interval still leaves most of a step before the first hint's pull.
#ifndef ECPS_PS_REBUILD_QUEUE_H_
#define ECPS_PS_REBUILD_QUEUE_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "runtime/clock.h"

namespace ecps {

// One stripe of one table.
struct StripeId {
  int table = 0;
  int64_t stripe = 0;
};

class RebuildQueue {
 public:
  // `clock` (not owned; it must outlive the queue) times hints and lingering: a
  // MonotonicClock in production, a FakeClock in tests.
  RebuildQueue(int max_hint_linger_ms, const Clock* clock);

  // A worker's hint arrived (whether or not it names rows still missing): the cadence of
  // hints sets how long hinted rows linger.
  void NoteHint() ABSL_LOCKS_EXCLUDED(mu_);
  // Queues stripes to rebuild on demand. `urgent`: a request waits for them.
  void Add(absl::Span<const StripeId> stripes, bool urgent) ABSL_LOCKS_EXCLUDED(mu_);
  // Puts the stripes of a batch that failed back at the front; they are due at once
  // (requests may wait for them).
  void PutBack(absl::Span<const StripeId> stripes) ABSL_LOCKS_EXCLUDED(mu_);

  // When a batch is due now (urgent stripes queued, or hinted ones past their deadline),
  // moves up to `max` stripes, oldest first, into *batch and returns true. What a full
  // batch leaves behind is due at once (its first hint is old).
  bool TakeDue(int max, std::vector<StripeId>* batch) ABSL_LOCKS_EXCLUDED(mu_);
  // Blocks until a batch is due and takes it as TakeDue does; false once Close was called.
  bool WaitAndTake(int max, std::vector<StripeId>* batch) ABSL_LOCKS_EXCLUDED(mu_);
  // From now on WaitAndTake returns false (the rebuild is over or stopping).
  void Close() ABSL_LOCKS_EXCLUDED(mu_);

  // When a queue of hinted stripes only is due.
  absl::Time HintDeadline() const ABSL_LOCKS_EXCLUDED(mu_);
  size_t on_demand() const ABSL_LOCKS_EXCLUDED(mu_);  // stripes queued on demand

  // The hot stripes, hottest first (replaces any set before).
  void SetHot(std::vector<StripeId> hottest_first) ABSL_LOCKS_EXCLUDED(mu_);
  // Moves hot stripes, hottest first, into *out until it holds `max` stripes or none is
  // left, dropping those `keep` is false for (rebuilt already).
  void TakeHot(size_t max, const std::function<bool(const StripeId&)>& keep,
               std::vector<StripeId>* out) ABSL_LOCKS_EXCLUDED(mu_);
  size_t hot() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  bool DueLocked(absl::Time now) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Time HintDeadlineLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void TakeLocked(int max, std::vector<StripeId>* batch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int max_hint_linger_ms_;
  const Clock* const clock_;
  mutable absl::Mutex mu_;
  absl::CondVar queued_;  // stripes queued, or closed
  std::deque<StripeId> on_demand_ ABSL_GUARDED_BY(mu_);
  std::deque<StripeId> hot_ ABSL_GUARDED_BY(mu_);
  // A request waits for stripes in on_demand_.
  bool urgent_ ABSL_GUARDED_BY(mu_) = false;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  // When the oldest stripe still queued arrived; when the last hint arrived (InfinitePast:
  // none yet), and the mean interval between hints (0: unknown).
  absl::Time first_hint_ ABSL_GUARDED_BY(mu_);
  absl::Time last_hint_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  double hint_interval_ms_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace ecps

#endif  // ECPS_PS_REBUILD_QUEUE_H_
