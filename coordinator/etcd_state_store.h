// EtcdStateStore: the coordinator's durable state (state_store.h) as one etcd key, written only
// while this coordinator holds the job's leader key (leader_lease.h). Each Save is one etcd
// transaction "if the leader key still holds our value, put the state": a coordinator that
// lost the lead, whatever it believes, cannot overwrite what its successor saved. A Save that
// finds the leader key not ours deposes the lease (leading() turns false) and returns
// FAILED_PRECONDITION. etcd keeps a value of up to 1.5 MiB by default (--max-request-bytes);
// a state is a few hundred bytes per node and failure.
//
// Keys, for job J under prefix P (coordinator.etcd_prefix): P J/leader, P J/state.
//
// Thread-safe.
#ifndef ECPS_COORDINATOR_ETCD_STATE_STORE_H_
#define ECPS_COORDINATOR_ETCD_STATE_STORE_H_

#include <string>

#include "coordinator/etcd_client.h"
#include "coordinator/leader_lease.h"
#include "coordinator/state_store.h"

namespace ecps {

struct EtcdJobKeys {
  std::string leader;
  std::string state;
};
// The keys of job `job` under `prefix` ("/ecps/" -> "/ecps/J/leader", "/ecps/J/state").
EtcdJobKeys JobKeys(const std::string& prefix, const std::string& job);

class EtcdStateStore : public StateStore {
 public:
  // `etcd` and `lease` (which must have won its campaign for keys.leader) outlive the store.
  EtcdStateStore(EtcdClient* etcd, LeaderLease* lease, EtcdJobKeys keys);

  absl::StatusOr<std::optional<std::string>> Load() override;
  absl::Status Save(absl::string_view state) override;
  std::string Describe() const override;

 private:
  EtcdClient* const etcd_;
  LeaderLease* const lease_;
  const EtcdJobKeys keys_;
};

}  // namespace ecps

#endif  // ECPS_COORDINATOR_ETCD_STATE_STORE_H_
