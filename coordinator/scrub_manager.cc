#include "coordinator/scrub_manager.h"

#include <string>
#include <utility>

#include "proto/coordinator_state.pb.h"
#include "spdlog/spdlog.h"

namespace ecps {

ScrubManager::ScrubManager(bool final_wanted, MembershipManager* membership)
    : membership_(membership), final_scrub_(final_wanted) {}

void ScrubManager::SetScrubber(Scrubber scrubber) {
  absl::MutexLock lock(&mu_);
  scrubber_ = std::move(scrubber);
}

absl::Status ScrubManager::Scrub(v1::ScrubReport* report) {
  Scrubber scrubber;
  {
    absl::MutexLock lock(&mu_);
    if (!scrubber_) return absl::FailedPreconditionError("this coordinator cannot scrub");
    scrubber = scrubber_;
  }
  v1::ClusterMap map;
  if (!membership_->View(&map).all_servers_active) {
    return absl::FailedPreconditionError("not every server is active: cannot scrub now");
  }
  *report = scrubber(map);
  Record(*report, nullptr);
  return absl::OkStatus();
}

void ScrubManager::RunPendingScrub() {
  Scrubber scrubber;
  {
    absl::MutexLock lock(&mu_);
    if (!final_scrub_.pending()) return;
    scrubber = scrubber_;
  }
  v1::ClusterMap map;
  const JobView job = membership_->View(&map);
  // A recovering server holds rows that are not rebuilt yet: scrub once it is ACTIVE.
  if (job.final || job.any_server_recovering) return;
  spdlog::info("every worker is done; scrubbing parity and replicas");
  const v1::ScrubReport report = scrubber(map);
  absl::Status verdict;
  Record(report, &verdict);
  spdlog::info("{}", FinalScrub::Summary(report));
  if (!verdict.ok()) {
    membership_->Fail(std::string(verdict.message()));
  } else {
    membership_->Advance();
  }
}

void ScrubManager::Record(const v1::ScrubReport& report, absl::Status* final_verdict) {
  membership_->SaveWith([&](const WorkerReports&) {
    absl::MutexLock lock(&mu_);
    last_scrub_ = std::make_unique<v1::ScrubReport>(report);
    if (final_verdict != nullptr) *final_verdict = final_scrub_.Finish(report);
    return absl::OkStatus();
  }).IgnoreError();  // the change above never fails
}

bool ScrubManager::FinalWanted() const {
  absl::MutexLock lock(&mu_);
  return scrubber_ && final_scrub_.wanted();
}

void ScrubManager::RequestFinal() {
  absl::MutexLock lock(&mu_);
  final_scrub_.Request();
}

void ScrubManager::Save(v1::CoordinatorState* state) const {
  absl::MutexLock lock(&mu_);
  if (last_scrub_ != nullptr) *state->mutable_last_scrub() = *last_scrub_;
}

void ScrubManager::Restore(const v1::CoordinatorState& state) {
  absl::MutexLock lock(&mu_);
  last_scrub_ =
      state.has_last_scrub() ? std::make_unique<v1::ScrubReport>(state.last_scrub()) : nullptr;
}

void ScrubManager::FillStatus(v1::StatusResponse* response) const {
  absl::MutexLock lock(&mu_);
  if (last_scrub_ != nullptr) *response->mutable_scrub() = *last_scrub_;
}

}  // namespace ecps
