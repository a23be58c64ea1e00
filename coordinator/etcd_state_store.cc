#include "coordinator/etcd_state_store.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ecps {

EtcdJobKeys JobKeys(const std::string& prefix, const std::string& job) {
  const std::string base = absl::StrCat(prefix, job, "/");
  return {base + "leader", base + "state"};
}

EtcdStateStore::EtcdStateStore(EtcdClient* etcd, LeaderLease* lease, EtcdJobKeys keys)
    : etcd_(etcd), lease_(lease), keys_(std::move(keys)) {}

absl::StatusOr<std::optional<std::string>> EtcdStateStore::Load() {
  absl::StatusOr<std::optional<EtcdKeyValue>> kv = etcd_->Get(keys_.state);
  if (!kv.ok()) return kv.status();
  if (!kv->has_value()) return std::optional<std::string>();
  return std::optional<std::string>((*kv)->value);
}

absl::Status EtcdStateStore::Save(absl::string_view state) {
  if (!lease_->leading()) {
    return absl::FailedPreconditionError(
        absl::StrCat("not saved to ", keys_.state, ": this coordinator no longer leads"));
  }
  absl::StatusOr<bool> saved =
      etcd_->PutIfEqual(keys_.leader, lease_->value(), keys_.state, std::string(state));
  if (!saved.ok()) return saved.status();
  if (!*saved) {
    lease_->Depose(keys_.leader + " is no longer this coordinator's");
    return absl::FailedPreconditionError(
        absl::StrCat("not saved to ", keys_.state, ": ", keys_.leader,
                     " is no longer this coordinator's (another took the job over)"));
  }
  return absl::OkStatus();
}

std::string EtcdStateStore::Describe() const {
  return absl::StrCat("etcd key ", keys_.state, " (", absl::StrJoin(etcd_->endpoints(), ","), ")");
}

}  // namespace ecps
