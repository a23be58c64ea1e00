// The parameter server's request handlers, apart from any transport (the gRPC glue in
// grpc_parameter_server.h only adapts this class). Thread-safe. Its parts: UpdateGate
// (freezes and updates in flight), ParityReceiver (parity deltas and dense replicas from
// peers), Rebuilder (on a replacement). parameter_server.cc holds the data path and
// checkpoints, parameter_server_peers.cc what peers and the coordinator ask.
//
// The gRPC glue first admits the caller (Admit: its role may call the method, else
// PERMISSION_DENIED; runtime/security.h). Every handler then checks the request header
// (token: UNAUTHENTICATED; epoch older than
// the server's: FAILED_PRECONDITION), then validates the whole request (tables, row ids,
// ownership, sizes, finite gradients: INVALID_ARGUMENT; more ids or reply bytes than the
// limits: RESOURCE_EXHAUSTED), and only then changes state, so a bad request changes
// nothing. Before Install() every data request gets UNAVAILABLE (still initialising).
//
// Peer requests, which only servers and the coordinator may send, are also checked for
// consistency: parity deltas only from a current member (the id, instance and epoch the
// cluster map gives, once FollowMap has been called) holding the data rows they change,
// with sequence numbers that neither skip nor wrap; parity writes only under the caller's
// own freeze; dense replica updates only from the tensor's primary; checkpoint writes only
// into an uncommitted step-N.tmp directory. Each refusal is logged and counted
// (ServerStats.refused_requests).
//
// The core is: admit, validate (a push's rows are resolved to their slots once, here), gate
// (UpdateGate), then the store and the server's Redundancy (ps/redundancy.h), which makes the
// update durable as the job's fault tolerance says (parity deltas to the row's r parity
// holders, dense updates to the replicas) and serves the peer side of it.
#ifndef ECPS_PS_PARAMETER_SERVER_H_
#define ECPS_PS_PARAMETER_SERVER_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "ps/dense_store.h"
#include "ps/embedding_store.h"
#include "ps/rebuilder.h"
#include "ps/redundancy.h"
#include "ps/update_gate.h"
#include "runtime/clock.h"
#include "runtime/coordinator_term.h"
#include "runtime/security.h"

namespace ecps {
namespace v1 {
class PullRequest;
class PullResponse;
class PushRequest;
class PullDenseRequest;
class PullDenseResponse;
class PushDenseRequest;
class ReadRowsRequest;
class ReadRowsResponse;
class HealthResponse;
class RequestHeader;
class ServerStats;
class ParityDeltaBatch;
class ParityDeltaAck;
class ReplicateDenseRequest;
class FreezeRequest;
class ScrubParityRequest;
class ScrubParityResponse;
class DenseChecksumsRequest;
class DenseChecksumsResponse;
class ReadParityRequest;
class ReadParityResponse;
class HotRowsRequest;
class HotRowsResponse;
class WriteParityRequest;
class ReadDenseRequest;
class ReadDenseResponse;
class SaveCheckpointRequest;
class SaveCheckpointResponse;
class LoadCheckpointRequest;
class WriteRowsRequest;
class InjectFaultRequest;
class ClusterMap;
}  // namespace v1


// Everything a ready server holds.
struct ServerParts {
  int server = 0;
  std::string instance;  // this process's incarnation (what peers' maps say holds `server`)
  std::unique_ptr<EmbeddingStore> embeddings;
  std::unique_ptr<DenseStore> dense;
  // How what this server holds survives its loss (ps/redundancy.h): NoRedundancy, or the row
  // code's parity and dense replicas (CodedRedundancy). Never null once built.
  std::unique_ptr<Redundancy> redundancy;
  // Set on a replacement server: rebuilds the lost rows; requests for rows not rebuilt yet
  // wait for an on-demand rebuild. It reads from `redundancy`'s parts: declared after it, so
  // destroyed before it.
  std::unique_ptr<Rebuilder> rebuilder;
  int rebuild_wait_ms = 120000;
  // Request limits (spec cluster.max_request_ids, max_reply_mb).
  int64_t max_request_ids = 4 << 20;
  int64_t max_reply_bytes = int64_t{128} << 20;
  // fault_tolerance.checkpoint.dir: checkpoint writes go only into its step-N.tmp folders
  // (empty: any step-N.tmp folder).
  std::string checkpoint_root;
};

class ParameterServerCore {
 public:
  // `secret`: the job secret, from which every role's token is derived (security.h).
  explicit ParameterServerCore(std::string secret) : gatekeeper_(std::move(secret)) {}
  ~ParameterServerCore();

  // Makes the server ready with its initialised parts (called once).
  void Install(ServerParts parts);
  bool ready() const { return ready_.load(std::memory_order_acquire); }
  // The token this server presents to its peers and the coordinator.
  const std::string& token() const { return gatekeeper_.token(Role::kServer); }

  // The glue's first check of every call: the caller's credential belongs to the job and its
  // role may call `method`. A refusal is logged and counted like every other.
  absl::Status Admit(const grpc::ServerContext* context, const v1::RequestHeader& header,
                     RoleSet allowed, std::string_view method) const;

  // Whether `mac` signs `message` with a key of the job's servers (the server token or the
  // job secret): the parity listener's check of a frame head (ps/tcp_deltas.h).
  bool CheckPeerMac(std::string_view message, std::string_view mac) const {
    return gatekeeper_.CheckMac(Role::kServer, message, mac);
  }
  // Counts and logs (rate limited) a refusal made outside the request handlers: `what` names
  // the request, `from` who sent it.
  void CountRefusal(const absl::Status& why, const char* what, const std::string& from) const;

  // This process was declared dead: every request is refused from now on (fencing).
  void Fence() { fenced_.store(true, std::memory_order_release); }
  bool fenced() const { return fenced_.load(std::memory_order_acquire); }

  // Requests from an epoch older than this are refused (fencing).
  void SetEpoch(uint64_t epoch) { epoch_.store(epoch, std::memory_order_release); }
  uint64_t epoch() const { return epoch_.load(std::memory_order_acquire); }

  // The coordinator's term seen in a heartbeat answer or a cluster map (0: none given).
  // Requests that carry a lower term than the highest seen (a deposed coordinator's freezes,
  // scrubs, checkpoint saves and reloads) are refused: CheckCoordinatorTerm.
  void ObserveCoordinatorTerm(uint64_t term) { coordinator_term_.Check(term).IgnoreError(); }
  uint64_t coordinator_term() const { return coordinator_term_.highest(); }
  // For the methods only the coordinator calls (and Freeze): FAILED_PRECONDITION when the
  // header's term is lower than the highest seen (a deposed coordinator's request), which it
  // raises otherwise. Term 0 (a server's freeze) passes.
  absl::Status CheckCoordinatorTerm(const v1::RequestHeader& header) const;

  absl::Status Pull(const v1::PullRequest& request, v1::PullResponse* response) const;
  absl::Status Push(const v1::PushRequest& request);
  absl::Status PullDense(const v1::PullDenseRequest& request,
                         v1::PullDenseResponse* response) const;
  absl::Status PushDense(const v1::PushDenseRequest& request);
  // Data rows with their versions, and (request.parity) parity rows held here, in one read.
  absl::Status ReadRows(const v1::ReadRowsRequest& request, v1::ReadRowsResponse* response) const;
  absl::Status Health(const v1::RequestHeader& header, v1::HealthResponse* response) const;

  // Parity holder side of a delta stream: applies each sequence number exactly once (a
  // resend of an applied batch is acknowledged again, nothing applied); a gap in the
  // sequence is FAILED_PRECONDITION. The whole batch is validated before any delta applies.
  absl::Status ApplyParityDeltas(const v1::ParityDeltaBatch& batch, v1::ParityDeltaAck* ack);
  // The port this server takes parity batches on over TCP (ps/tcp_deltas.h), told to every
  // sender in its acks; 0 (the default): none.
  void set_tcp_delta_port(int port) { tcp_delta_port_.store(port); }
  absl::Status ReplicateDense(const v1::ReplicateDenseRequest& request);
  // freeze=true: new pushes wait, in-flight pushes finish, every delta stream drains; then
  // returns (a consistent point for scrubbing). freeze=false resumes.
  absl::Status Freeze(const v1::FreezeRequest& request);
  // Checks every parity row held here against a fresh encode of its stripe's data rows, read
  // from their servers. Meaningful only while every server is frozen.
  absl::Status ScrubParity(const v1::ScrubParityRequest& request,
                           v1::ScrubParityResponse* response);
  absl::Status DenseChecksums(const v1::DenseChecksumsRequest& request,
                              v1::DenseChecksumsResponse* response) const;
  // Recovery: the parity rows this server holds of some stripes; overwriting them (only a
  // rebuilding server does, while every server is frozen); a dense tensor with its state.
  absl::Status ReadParity(const v1::ReadParityRequest& request,
                          v1::ReadParityResponse* response) const;
  // The hottest rows of a data server among the stripes this server holds parity of.
  absl::Status HotRows(const v1::HotRowsRequest& request, v1::HotRowsResponse* response) const;
  absl::Status WriteParity(const v1::WriteParityRequest& request);
  absl::Status ReadDense(const v1::ReadDenseRequest& request,
                         v1::ReadDenseResponse* response) const;
  // The online scrub's repair of data rows it found corrupt (ps/online_scrub.h): only under
  // the caller's live freeze of their stripes, and only rows still at the versions named.
  absl::Status WriteRows(const v1::WriteRowsRequest& request);
  // Fault injection (tests, drills): flips one bit of a data row, a parity row or a dense
  // tensor held here, outside the update path. FAILED_PRECONDITION (and counted as a refusal)
  // unless this process was started with ECPS_FAULT_INJECTION=1; the gRPC glue admits only
  // the admin role.
  absl::Status InjectFault(const v1::InjectFaultRequest& request);

  // Checkpoint writer (checkpoint/checkpoint.h): writes every data row held here into the
  // pre-sized table files of request.tmp_dir at their logical offsets (TableWriter), and each
  // dense tensor this server is primary of (WriteDense); reports per-table partial checksums
  // and row counts and the dense entries. Call while frozen (the coordinator freezes every
  // server first), so the rows are a consistent cut. FAILED_PRECONDITION on a server that is
  // still rebuilding; file errors name the file.
  absl::Status SaveCheckpoint(const v1::SaveCheckpointRequest& request,
                              v1::SaveCheckpointResponse* response) const;

  // Rollback (mode checkpoint): replaces every data row and dense tensor held here with the
  // checkpoint in request.dir (read by logical row id: any layout wrote it). The caller
  // guarantees no worker pushes meanwhile. FAILED_PRECONDITION on a server with parity
  // (rollback is for modes without it); errors about the checkpoint name the file.
  absl::Status LoadCheckpoint(const v1::LoadCheckpointRequest& request);

  // Points the peer client and delta streams at a server's new address (a replacement).
  void UpdatePeerAddress(int server, const std::string& address);

  // The cluster map as this server follows it: who holds each server id now (what peer
  // requests are checked against), and the coordinator's word on deaths: the freezes of an
  // owner the map says is dead or replaced are dropped here. Before the first call peer
  // requests are checked without it (servers started outside a job, in tests).
  void FollowMap(const v1::ClusterMap& map) ABSL_LOCKS_EXCLUDED(map_mu_);

  // Starts the rebuild of a replacement server (a no-op otherwise).
  void StartRebuild();
  // True once every row and dense tensor held here is valid (always, unless a replacement).
  bool rebuilt() const;

  void FillStats(v1::ServerStats* stats) const;

  // The parity row this server holds of (table, stripe) (tests; recovery reads).
  absl::Status ReadParityRow(int table, int64_t stripe, std::vector<uint8_t>* out) const;

 private:
  // Token, fencing, readiness and (unless `any_epoch`) the sender's epoch: an older one is
  // FAILED_PRECONDITION of kind kStaleEpoch (runtime/error_kind.h).
  absl::Status CheckRequest(const v1::RequestHeader& header, bool any_epoch = false) const;
  // Whether `instance` is server `server`'s current holder, as far as this server can tell
  // for a request of epoch `epoch`: FAILED_PRECONDITION when the map (at least that new)
  // gives the id to another instance or says it is dead; UNAVAILABLE when the map is older
  // than the request and does not know the instance yet (the sender retries).
  absl::Status CheckPeer(int server, const std::string& instance, uint64_t epoch,
                         const char* what) const ABSL_LOCKS_EXCLUDED(map_mu_);
  // Counts and logs a refused peer request; returns `status`.
  absl::Status Refuse(absl::Status status, const v1::RequestHeader& header,
                      const char* what) const;
  // Ids and reply bytes against the limits (RESOURCE_EXHAUSTED).
  absl::Status CheckLimits(int64_t ids, int64_t reply_bytes, const char* what) const;
  // Waits while a freeze covers the update (whole-server freezes for a dense update when
  // `push` is null; for a push, whole-server freezes and freezes of stripes its rows are in),
  // then counts it in flight; EndUpdate undoes it.
  // Returns the generation the update is counted in (pass it to EndUpdate).
  absl::StatusOr<uint64_t> BeginUpdate(const v1::PushRequest* push = nullptr);
  void EndUpdate(uint64_t generation);
  // On a replacement: waits until the rows of every table in `tables` are rebuilt.
  template <typename Tables>
  absl::Status EnsureRebuilt(const Tables& tables) const;

  const Gatekeeper gatekeeper_;
  std::atomic<uint64_t> epoch_{0};
  std::atomic<bool> ready_{false};
  std::atomic<bool> fenced_{false};
  // The highest coordinator term seen; raised by requests of a higher term too.
  mutable CoordinatorTermFence coordinator_term_;
  std::atomic<int> tcp_delta_port_{0};
  ServerParts parts_;

  // Freezes (leases; several rebuilders and the coordinator may freeze at once) and the
  // updates in flight. Leases run on the steady clock, whatever the wall clock does.
  const MonotonicClock lease_clock_;
  UpdateGate gate_{&lease_clock_};

  // The map FollowMap was last given: each server id's holder and state.
  struct Member {
    std::string instance;
    int state = 0;  // v1::NodeState
  };
  mutable absl::Mutex map_mu_;
  std::vector<Member> members_ ABSL_GUARDED_BY(map_mu_);
  uint64_t members_epoch_ ABSL_GUARDED_BY(map_mu_) = 0;  // 0: no map yet

  mutable std::atomic<int64_t> refused_{0};
};

}  // namespace ecps

#endif  // ECPS_PS_PARAMETER_SERVER_H_
