#include "ps/update_gate.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "spdlog/spdlog.h"

namespace ecps {
namespace {

constexpr size_t kEndedKept = 256;

}  // namespace

UpdateGate::UpdateGate(const Clock* clock, std::chrono::milliseconds poll)
    : clock_(clock), poll_(poll) {}

bool UpdateGate::CoveredLocked(const Touches* touches) const {
  if (whole_ > 0) return true;
  if (touches == nullptr || stripe_frozen_.empty()) return false;
  // Called by `touches` before it returns, so mu_ is still held.
  return (*touches)([this](uint64_t key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stripe_frozen_.count(key) > 0;
  });
}

absl::StatusOr<uint64_t> UpdateGate::Begin(const Touches* touches,
                                           std::chrono::milliseconds timeout) {
  absl::MutexLock lock(&mu_);
  const absl::Time deadline = clock_->Now() + absl::FromChrono(timeout);
  while (true) {
    ReapLocked(clock_->Now());
    if (!CoveredLocked(touches)) break;
    if (clock_->Now() >= deadline) {
      return absl::UnavailableError(absl::StrCat("server frozen for over ",
                                                 timeout.count() / 1000, " s"));
    }
    cv_.WaitWithTimeout(&mu_, absl::FromChrono(poll_));
  }
  ++in_flight_[generation_];
  return generation_;
}

void UpdateGate::End(uint64_t generation) {
  {
    absl::MutexLock lock(&mu_);
    auto it = in_flight_.find(generation);
    if (it != in_flight_.end() && --it->second == 0) in_flight_.erase(it);
  }
  cv_.SignalAll();
}

absl::Status UpdateGate::Freeze(Lease lease, std::chrono::milliseconds timeout) {
  absl::ReleasableMutexLock lock(&mu_);
  const absl::Time now = clock_->Now();
  ReapLocked(now);
  const uint64_t id = lease.id;
  auto it = leases_.find(id);
  if (it != leases_.end()) {
    if (it->second.lease.owner != lease.owner) {
      return absl::AlreadyExistsError(absl::StrCat("freeze ", id, " is held by ",
                                                   it->second.lease.owner, ", not ",
                                                   lease.owner));
    }
    it->second.expiry = now + absl::FromChrono(lease.duration);  // a retried request: renew
  } else {
    std::sort(lease.stripes.begin(), lease.stripes.end());
    if (lease.stripes.empty()) {
      ++whole_;
    } else {
      for (uint64_t key : lease.stripes) ++stripe_frozen_[key];
    }
    const absl::Time expiry = now + absl::FromChrono(lease.duration);
    leases_.emplace(id, Held{std::move(lease), expiry});
  }
  // Wait for the updates that started before this freeze; later ones either wait for it or
  // touch none of its stripes.
  const uint64_t generation = ++generation_;
  const absl::Time deadline = now + absl::FromChrono(timeout);
  while (!(in_flight_.empty() || in_flight_.begin()->first >= generation)) {
    if (leases_.count(id) == 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("freeze ", id, " lapsed before the updates in flight finished"));
    }
    if (clock_->Now() >= deadline) {
      auto held = leases_.find(id);
      if (held != leases_.end()) DropLocked(held, /*lapsed=*/false);
      lock.Release();
      cv_.SignalAll();
      return absl::DeadlineExceededError(absl::StrCat(
          "updates in flight did not finish within ", timeout.count() / 1000, " s"));
    }
    cv_.WaitWithTimeout(&mu_, absl::FromChrono(poll_));
    ReapLocked(clock_->Now());
  }
  return absl::OkStatus();
}

absl::Status UpdateGate::Release(uint64_t id, const std::string& owner) {
  absl::ReleasableMutexLock lock(&mu_);
  ReapLocked(clock_->Now());
  auto it = leases_.find(id);
  if (it != leases_.end()) {
    if (it->second.lease.owner != owner) {
      return absl::PermissionDeniedError(absl::StrCat(
          "freeze ", id, " is held by ", it->second.lease.owner, ", not ", owner));
    }
    DropLocked(it, /*lapsed=*/false);
    lock.Release();
    cv_.SignalAll();
    return absl::OkStatus();
  }
  for (auto e = ended_.rbegin(); e != ended_.rend(); ++e) {
    if (e->id != id) continue;
    if (e->owner != owner) {
      return absl::PermissionDeniedError(
          absl::StrCat("freeze ", id, " was held by ", e->owner, ", not ", owner));
    }
    if (e->lapsed) {
      return absl::FailedPreconditionError(absl::StrCat(
          "freeze ", id, " of ", owner,
          " lapsed before its release (its lease ran out, or its owner was declared dead)"));
    }
    return absl::OkStatus();  // released already: a retried release
  }
  return absl::NotFoundError(absl::StrCat("no freeze ", id));
}

bool UpdateGate::Holds(uint64_t id, const std::string& owner,
                       absl::Span<const uint64_t> stripes) {
  absl::MutexLock lock(&mu_);
  ReapLocked(clock_->Now());
  auto it = leases_.find(id);
  if (it == leases_.end() || it->second.lease.owner != owner) return false;
  const std::vector<uint64_t>& held = it->second.lease.stripes;
  if (held.empty()) return true;
  for (uint64_t key : stripes) {
    if (!std::binary_search(held.begin(), held.end(), key)) return false;
  }
  return true;
}

std::vector<UpdateGate::Lease> UpdateGate::ReleaseIf(
    const std::function<bool(const Lease&)>& dead) {
  std::vector<Lease> dropped;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = leases_.begin(); it != leases_.end();) {
      auto next = std::next(it);
      if (dead(it->second.lease)) {
        dropped.push_back(it->second.lease);
        DropLocked(it, /*lapsed=*/true);
        ++expired_;
      }
      it = next;
    }
  }
  if (!dropped.empty()) cv_.SignalAll();
  return dropped;
}

int64_t UpdateGate::expired() const {
  absl::MutexLock lock(&mu_);
  return expired_;
}

int UpdateGate::active() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(leases_.size());
}

void UpdateGate::ReapLocked(absl::Time now) {
  bool any = false;
  for (auto it = leases_.begin(); it != leases_.end();) {
    auto next = std::next(it);
    if (it->second.expiry <= now) {
      spdlog::warn("freeze {} of {} lapsed: its {} ms lease ran out before a release",
                   it->first, it->second.lease.owner, it->second.lease.duration.count());
      DropLocked(it, /*lapsed=*/true);
      ++expired_;
      any = true;
    }
    it = next;
  }
  if (any) cv_.SignalAll();
}

void UpdateGate::DropLocked(std::unordered_map<uint64_t, Held>::iterator it, bool lapsed) {
  const Lease& lease = it->second.lease;
  if (lease.stripes.empty()) {
    --whole_;
  } else {
    for (uint64_t key : lease.stripes) {
      auto f = stripe_frozen_.find(key);
      if (f != stripe_frozen_.end() && --f->second == 0) stripe_frozen_.erase(f);
    }
  }
  RememberLocked(it->first, lease.owner, lapsed);
  leases_.erase(it);
}

void UpdateGate::RememberLocked(uint64_t id, const std::string& owner, bool lapsed) {
  ended_.push_back(Ended{id, owner, lapsed});
  if (ended_.size() > kEndedKept) ended_.pop_front();
}

}  // namespace ecps
