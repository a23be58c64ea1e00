// EtcdClient: the few etcd v3 calls the coordinator's etcd state store and its leader election
// need (docs/recovery.md, "The etcd state store"), over the project's gRPC with its own
// minimal copy of etcd's API (proto/etcd_rpc.proto). Plaintext: etcd's client URLs are
// expected on the cluster's private network (docs/deploy.md).
//
// Endpoints: every call goes to one member and, when that member does not answer
// (UNAVAILABLE, DEADLINE_EXCEEDED: killed, partitioned, no raft leader), moves on to the next
// member of the list and tries again, each member at most twice per call, so that one dead
// member costs a call one attempt timeout at most. Any member serves any call (etcd forwards
// to its raft leader) and reads are linearizable. A call that timed out may or may not have
// taken effect: the calls below are written so that trying again is safe.
//
// Thread-safe: every method may be called from any thread.
#ifndef ECPS_COORDINATOR_ETCD_CLIENT_H_
#define ECPS_COORDINATOR_ETCD_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace grpc {
class Channel;
class ChannelCredentials;
class ClientContext;
class Status;
}  // namespace grpc

namespace ecps {

struct TlsIdentity;

struct EtcdKeyValue {
  std::string key;
  std::string value;
  int64_t create_revision = 0;  // etcd revision of the key's creation
  int64_t mod_revision = 0;     // of its last change
  int64_t lease = 0;            // the lease it is attached to (0: none)
};

struct EtcdLease {
  int64_t id = 0;
  int64_t ttl_s = 0;  // what etcd granted or renewed (at least its minimum TTL)
};

struct EtcdCreateResult {
  bool created = false;  // the key was absent and now holds the value
  EtcdKeyValue current;  // the key as it is now (when it exists)
};

class EtcdClient {
 public:
  // `endpoints`: host:port of each member (an http:// prefix is accepted and dropped); at
  // least one. `tls`: the process's identity (ProcessTls(), from security.tls) to speak mutual
  // TLS to every member with, its endpoints then https:// or host:port; null: plaintext.
  // INVALID_ARGUMENT naming a bad endpoint (no port, empty, a scheme the transport is not).
  // Connects lazily.
  static absl::StatusOr<std::unique_ptr<EtcdClient>> Create(
      const std::vector<std::string>& endpoints, absl::Duration attempt_timeout = absl::Seconds(1),
      const TlsIdentity* tls = nullptr);
  ~EtcdClient();
  EtcdClient(const EtcdClient&) = delete;
  EtcdClient& operator=(const EtcdClient&) = delete;

  // The key, or nullopt when absent.
  absl::StatusOr<std::optional<EtcdKeyValue>> Get(const std::string& key);
  // Sets the key (attached to `lease`, 0: none); returns the revision of the write.
  absl::StatusOr<int64_t> Put(const std::string& key, const std::string& value, int64_t lease = 0);
  // Removes every key that starts with `prefix`; returns how many went.
  absl::StatusOr<int64_t> DeletePrefix(const std::string& prefix);

  // One transaction: when `key` is absent, sets it to `value` attached to `lease`. A retry
  // after a timeout that did take effect reports created (the key holds `value` with `lease`),
  // so `value` should be unique to the caller.
  absl::StatusOr<EtcdCreateResult> CreateIfAbsent(const std::string& key, const std::string& value,
                                                  int64_t lease);
  // One transaction: sets `key` to `value` only while `guard_key` holds `guard_value`. True
  // when it did; false (nothing written) when the guard no longer holds.
  absl::StatusOr<bool> PutIfEqual(const std::string& guard_key, const std::string& guard_value,
                                  const std::string& key, const std::string& value);
  // One transaction: removes `key` only while it holds `value`. True when it did.
  absl::StatusOr<bool> DeleteIfEqual(const std::string& key, const std::string& value);

  // A lease of `ttl_s` seconds (etcd raises it to its minimum).
  absl::StatusOr<EtcdLease> GrantLease(int64_t ttl_s);
  // Renews the lease once; NOT_FOUND when it has expired or was revoked.
  absl::StatusOr<EtcdLease> KeepAlive(int64_t lease);
  // Ends the lease: every key attached to it goes at once. NOT_FOUND when it is already gone.
  absl::Status RevokeLease(int64_t lease);

  const std::vector<std::string>& endpoints() const { return endpoints_; }

 private:
  EtcdClient(std::vector<std::string> endpoints, absl::Duration attempt_timeout,
             const TlsIdentity* tls);
  // Runs `call` against one member after another, as described above; `what` names the call
  // in the error.
  using Channel = std::shared_ptr<grpc::Channel>;
  absl::Status Call(const std::string& what,
                    const std::function<grpc::Status(const Channel&, grpc::ClientContext*)>& call);

  const std::vector<std::string> endpoints_;
  const absl::Duration attempt_timeout_;
  std::vector<Channel> channels_;   // one per endpoint
  std::atomic<size_t> current_{0};  // the member tried first
};

}  // namespace ecps

#endif  // ECPS_COORDINATOR_ETCD_CLIENT_H_
