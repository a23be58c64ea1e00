#include "ps/rebuild_queue.h"

#include <algorithm>

#include "absl/time/time.h"

namespace ecps {

RebuildQueue::RebuildQueue(int max_hint_linger_ms, const Clock* clock)
    : max_hint_linger_ms_(max_hint_linger_ms), clock_(clock) {}

void RebuildQueue::NoteHint() {
  const absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  const double ms = absl::ToDoubleMilliseconds(now - last_hint_);
  if (last_hint_ != absl::InfinitePast() && ms < 1000) {
    hint_interval_ms_ = hint_interval_ms_ == 0 ? ms : 0.8 * hint_interval_ms_ + 0.2 * ms;
  }
  last_hint_ = now;
}

void RebuildQueue::Add(absl::Span<const StripeId> stripes, bool urgent) {
  if (stripes.empty()) return;
  const absl::Time now = clock_->Now();
  {
    absl::MutexLock lock(&mu_);
    if (on_demand_.empty()) first_hint_ = now;
    urgent_ |= urgent;
    on_demand_.insert(on_demand_.end(), stripes.begin(), stripes.end());
  }
  queued_.Signal();
}

void RebuildQueue::PutBack(absl::Span<const StripeId> stripes) {
  absl::MutexLock lock(&mu_);
  on_demand_.insert(on_demand_.begin(), stripes.begin(), stripes.end());
  urgent_ = true;
}

absl::Time RebuildQueue::HintDeadlineLocked() const {
  const double linger_ms = std::min<double>(max_hint_linger_ms_, 1.25 * hint_interval_ms_);
  return first_hint_ + absl::Microseconds(static_cast<int64_t>(linger_ms * 1000));
}

absl::Time RebuildQueue::HintDeadline() const {
  absl::MutexLock lock(&mu_);
  return HintDeadlineLocked();
}

bool RebuildQueue::DueLocked(absl::Time now) const {
  return !on_demand_.empty() && (urgent_ || now >= HintDeadlineLocked());
}

void RebuildQueue::TakeLocked(int max, std::vector<StripeId>* batch) {
  while (!on_demand_.empty() && static_cast<int>(batch->size()) < max) {
    batch->push_back(on_demand_.front());
    on_demand_.pop_front();
  }
  // What is left (a batch was full) goes next, at once: its first hint is old.
  if (on_demand_.empty()) urgent_ = false;
}

bool RebuildQueue::TakeDue(int max, std::vector<StripeId>* batch) {
  const absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  if (!DueLocked(now)) return false;
  TakeLocked(max, batch);
  return true;
}

bool RebuildQueue::WaitAndTake(int max, std::vector<StripeId>* batch) {
  absl::MutexLock lock(&mu_);
  while (true) {
    if (closed_) return false;
    if (on_demand_.empty()) {
      queued_.Wait(&mu_);
      continue;
    }
    // Rows a request waits for go at once; hinted rows only at their deadline.
    const absl::Time now = clock_->Now();
    if (DueLocked(now)) break;
    queued_.WaitWithTimeout(&mu_, HintDeadlineLocked() - now);
  }
  TakeLocked(max, batch);
  return true;
}

void RebuildQueue::Close() {
  {
    absl::MutexLock lock(&mu_);
    closed_ = true;
  }
  queued_.SignalAll();
}

size_t RebuildQueue::on_demand() const {
  absl::MutexLock lock(&mu_);
  return on_demand_.size();
}

void RebuildQueue::SetHot(std::vector<StripeId> hottest_first) {
  absl::MutexLock lock(&mu_);
  hot_.assign(hottest_first.begin(), hottest_first.end());
}

void RebuildQueue::TakeHot(size_t max, const std::function<bool(const StripeId&)>& keep,
                           std::vector<StripeId>* out) {
  absl::MutexLock lock(&mu_);
  while (out->size() < max && !hot_.empty()) {
    const StripeId stripe = hot_.front();
    hot_.pop_front();
    if (keep(stripe)) out->push_back(stripe);
  }
}

size_t RebuildQueue::hot() const {
  absl::MutexLock lock(&mu_);
  return hot_.size();
}

}  // namespace ecps
