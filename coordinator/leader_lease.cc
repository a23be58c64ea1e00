#include "coordinator/leader_lease.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "spdlog/spdlog.h"

namespace ecps {
namespace {

absl::Duration QuarterOf(int64_t ttl_s) { return absl::Seconds(ttl_s) / 4; }

}  // namespace

LeaderLease::LeaderLease(EtcdClient* etcd, LeaderLeaseOptions options)
    : etcd_(etcd),
      options_(std::move(options)),
      margin_(options_.margin > absl::ZeroDuration() ? options_.margin : QuarterOf(options_.ttl_s)),
      renew_every_(options_.renew_every > absl::ZeroDuration() ? options_.renew_every
                                                               : QuarterOf(options_.ttl_s)) {}

LeaderLease::~LeaderLease() { Resign(); }

absl::Status LeaderLease::Campaign(const std::function<bool()>& stop) {
  auto next_note = Clock::now();
  std::string holder;
  while (!stop()) {
    absl::Status failed;
    absl::StatusOr<std::optional<EtcdKeyValue>> current = etcd_->Get(options_.key);
    failed = current.status();
    if (current.ok() && current->has_value()) {
      if ((*current)->value != holder) {
        holder = (*current)->value;
        spdlog::info("standby: the job's coordinator is {} ({}); waiting for its lease to lapse",
                     holder, options_.key);
      }
    } else if (current.ok()) {
      const Clock::time_point asked = Clock::now();
      absl::StatusOr<EtcdLease> lease = etcd_->GrantLease(options_.ttl_s);
      failed = lease.status();
      if (lease.ok()) {
        const std::string value = absl::StrFormat("%s lease %x", options_.candidate, lease->id);
        absl::StatusOr<EtcdCreateResult> created =
            etcd_->CreateIfAbsent(options_.key, value, lease->id);
        failed = created.status();
        if (created.ok() && created->created) {
          absl::MutexLock lock(&mu_);
          leading_ = true;
          lease_ = lease->id;
          value_ = value;
          valid_until_ = asked + absl::ToChronoNanoseconds(absl::Seconds(lease->ttl_s) - margin_);
          renewer_ = std::thread([this] { RenewLoop(); });
          spdlog::info("coordinator leads: {} holds {} (lease {:x}, {} s)", options_.candidate,
                       options_.key, lease->id, lease->ttl_s);
          return absl::OkStatus();
        }
        // Another candidate was quicker (or etcd did not answer): this lease is of no use.
        etcd_->RevokeLease(lease->id).IgnoreError();
      }
    }
    if (!failed.ok() && Clock::now() >= next_note) {
      spdlog::warn("standby: cannot campaign for {} yet: {}", options_.key, failed.ToString());
      next_note = Clock::now() + std::chrono::seconds(10);
    }
    absl::SleepFor(options_.poll);
  }
  return absl::CancelledError("the campaign for " + options_.key + " was stopped");
}

void LeaderLease::RenewLoop() {
  while (true) {
    int64_t lease = 0;
    {
      absl::MutexLock lock(&mu_);
      const absl::Duration wait = renew_every_;
      auto stopping = [this]()
                          ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || !leading_; };
      mu_.AwaitWithTimeout(absl::Condition(&stopping), wait);
      if (stopping()) return;
      if (Clock::now() >= valid_until_) {
        Lose("no renewal of its lease was answered in time");
        return;
      }
      lease = lease_;
    }
    const Clock::time_point asked = Clock::now();
    absl::StatusOr<EtcdLease> renewed = etcd_->KeepAlive(lease);
    absl::MutexLock lock(&mu_);
    if (!leading_) return;
    if (renewed.ok()) {
      valid_until_ = std::max(
          valid_until_, asked + absl::ToChronoNanoseconds(absl::Seconds(renewed->ttl_s) - margin_));
    } else if (absl::IsNotFound(renewed.status())) {
      Lose(std::string(renewed.status().message()));
      return;
    } else {
      // A renewal can fail after the lead already ran out (it waited on dead members): the
      // watch below has stopped serving by then, and says so.
      const int64_t left_ms =
          std::chrono::duration_cast<std::chrono::milliseconds>(valid_until_ - Clock::now())
              .count();
      spdlog::warn("coordinator: cannot renew its lease ({}): {}",
                   left_ms >= 0 ? absl::StrCat("it stays leader for ", left_ms, " ms more")
                                : absl::StrCat("its lead ran out ", -left_ms, " ms ago"),
                   renewed.status().ToString());
    }
  }
}

void LeaderLease::Lose(const std::string& why) {
  if (!leading_) return;
  leading_ = false;
  spdlog::error("coordinator: no longer leads ({}): {}", options_.key, why);
}

bool LeaderLease::leading() const {
  absl::MutexLock lock(&mu_);
  return leading_ && Clock::now() < valid_until_;
}

void LeaderLease::Depose(const std::string& why) {
  absl::MutexLock lock(&mu_);
  Lose(why);
}

void LeaderLease::StopRenewing() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (renewer_.joinable()) renewer_.join();
}

void LeaderLease::Resign() {
  StopRenewing();
  int64_t lease = 0;
  {
    absl::MutexLock lock(&mu_);
    if (lease_ == 0) return;
    lease = lease_;
    lease_ = 0;
    if (leading_) spdlog::info("coordinator: resigns the lead ({})", options_.key);
    leading_ = false;
  }
  if (absl::Status revoked = etcd_->RevokeLease(lease);
      !revoked.ok() && !absl::IsNotFound(revoked)) {
    spdlog::warn("coordinator: cannot revoke its lease (a standby waits for it to lapse): {}",
                 revoked.ToString());
  }
}

void LeaderLease::Abandon() {
  StopRenewing();
  absl::MutexLock lock(&mu_);
  leading_ = false;
  lease_ = 0;  // nothing for Resign to revoke
}

std::string LeaderLease::value() const {
  absl::MutexLock lock(&mu_);
  return value_;
}

int64_t LeaderLease::lease_id() const {
  absl::MutexLock lock(&mu_);
  return lease_;
}

}  // namespace ecps
