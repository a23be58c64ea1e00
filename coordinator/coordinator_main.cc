#include "coordinator/coordinator_main.h"

#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "coordinator/coordinator_process.h"
#include "coordinator/etcd_client.h"
#include "coordinator/etcd_state_store.h"
#include "coordinator/leader_lease.h"
#include "runtime/security.h"
#include "proto/ecps.pb.h"
#include "runtime/net.h"
#include "spdlog/spdlog.h"

namespace ecps {
namespace {

// Blocks SIGINT/SIGTERM in this thread for its lifetime and lets the owner wait for them.
class TerminationSignals {
 public:
  TerminationSignals() {
    sigemptyset(&set_);
    sigaddset(&set_, SIGINT);
    sigaddset(&set_, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set_, &old_);
  }
  ~TerminationSignals() {
    // Consume whatever is pending so that unblocking does not deliver it.
    timespec zero{0, 0};
    while (sigtimedwait(&set_, nullptr, &zero) > 0) {
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  // Waits up to `timeout` for SIGINT/SIGTERM; returns the signal, or 0 on timeout.
  int Wait(absl::Duration timeout) {
    const timespec ts = absl::ToTimespec(timeout);
    const int sig = sigtimedwait(&set_, nullptr, &ts);
    return sig > 0 ? sig : 0;
  }

 private:
  sigset_t set_;
  sigset_t old_;
};

// Who campaigns: the address this coordinator will serve on, and its pid.
std::string Candidate(const CoordinatorOptions& options) {
  absl::StatusOr<std::string> host = AdvertiseHost(options.listen_host, options.advertise);
  return absl::StrCat(host.ok() ? *host : options.listen_host, ":", options.port, " pid ",
                      getpid());
}

// The job's lead in etcd, once won: the lease and the client it renews through.
struct EtcdLead {
  std::unique_ptr<EtcdClient> client;
  std::unique_ptr<LeaderLease> lease;
};

// Campaigns (a standby until the active coordinator's lease lapses); CANCELLED on a signal.
absl::StatusOr<EtcdLead> WinTheLead(const CoordinatorOptions& options, TerminationSignals* signals,
                                    int* signal) {
  const CoordinatorSection& c = options.spec.coordinator;
  EtcdLead lead;
  // The state is saved under the coordinator's map lock, so a member that does not answer stalls
  // heartbeats for one attempt: keep it well inside the heartbeat timeout.
  const absl::Duration attempt =
      std::clamp(absl::Milliseconds(options.spec.cluster.heartbeat_timeout_ms) / 5,
                 absl::Milliseconds(100), absl::Seconds(1));
  absl::StatusOr<std::unique_ptr<EtcdClient>> client =
      EtcdClient::Create(c.etcd_endpoints, attempt, ProcessTls());
  if (!client.ok()) return client.status();
  lead.client = *std::move(client);
  LeaderLeaseOptions lease;
  lease.key = JobKeys(c.etcd_prefix, options.spec.job.name).leader;
  lease.candidate = Candidate(options);
  lease.ttl_s = c.lease_ttl_s;
  lead.lease = std::make_unique<LeaderLease>(lead.client.get(), lease);
  spdlog::info("coordinator {} campaigns for job '{}' in etcd ({})", lease.candidate,
               options.spec.job.name, absl::StrJoin(c.etcd_endpoints, ","));
  absl::Status won = lead.lease->Campaign([&] {
    *signal = signals->Wait(absl::ZeroDuration());
    return *signal != 0;
  });
  if (!won.ok()) return won;
  return lead;
}

}  // namespace

int RunCoordinator(const CoordinatorOptions& options) {
  TerminationSignals signals;  // before any gRPC thread starts, so they inherit the mask
  std::unique_ptr<StateStore> store;
  std::optional<EtcdLead> lead;
  if (options.spec.coordinator.state_store == StateStoreType::kEtcd) {
    int signal = 0;
    absl::StatusOr<EtcdLead> won = WinTheLead(options, &signals, &signal);
    if (!won.ok()) {
      if (signal != 0) {
        spdlog::info("coordinator: {} received while a standby; exiting",
                     signal == SIGINT ? "SIGINT" : "SIGTERM");
        return 0;
      }
      spdlog::error("coordinator: {}", won.status().ToString());
      return 1;
    }
    lead = *std::move(won);
    // A stop that came while it won: no takeover (nothing was acted on yet).
    if (const int sig = signals.Wait(absl::ZeroDuration()); sig != 0) {
      spdlog::info("coordinator: {} received as it won the lead; exiting",
                   sig == SIGINT ? "SIGINT" : "SIGTERM");
      return 0;
    }
    store = std::make_unique<EtcdStateStore>(
        lead->client.get(), lead->lease.get(),
        JobKeys(options.spec.coordinator.etcd_prefix, options.spec.job.name));
  }
  absl::StatusOr<std::unique_ptr<CoordinatorProcess>> process =
      CoordinatorProcess::Create(options, std::move(store));
  if (!process.ok()) {
    spdlog::error("coordinator: {}", process.status().ToString());
    return absl::IsDataLoss(process.status()) ? kExitStateDamaged : 1;
  }
  if (absl::Status started = (*process)->Start(); !started.ok()) {
    spdlog::error("coordinator: {}", started.ToString());
    return 1;
  }
  LeaderLease* lease = lead ? lead->lease.get() : nullptr;
  (*process)->Serve([&signals, lease](absl::Duration period) {
    if (lease != nullptr && !lease->leading()) return kLeadLost;
    return signals.Wait(lease != nullptr ? std::min(period, absl::Milliseconds(20)) : period);
  });
  const int code = (*process)->Stop();
  if (lease != nullptr && !lease->leading()) return kExitLeadLost;
  // A job that ended needs no successor: the lease lapses by itself (a standby would only take
  // the ended job over). One stopped mid-job hands over at once (the lease is revoked).
  const v1::JobPhase phase = (*process)->service()->phase();
  if (lease != nullptr && (phase == v1::JOB_FINISHED || phase == v1::JOB_FAILED)) {
    lease->Abandon();
  }
  return code;
}

}  // namespace ecps
