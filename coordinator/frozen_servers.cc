#include "coordinator/frozen_servers.h"

#include <random>

#include "absl/strings/str_cat.h"

namespace ecps {
namespace {

// The servers honour the coordinator's freeze this long without a release: longer than any
// scrub or checkpoint save, and a coordinator that dies ends the job anyway.
constexpr uint32_t kCoordinatorLeaseMs = 15 * 60 * 1000;

uint64_t NewFreezeId() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

}  // namespace

FrozenServers::FrozenServers(const std::vector<std::unique_ptr<v1::ParameterServer::Stub>>& stubs,
                             std::string token, CoordinatorStamp stamp, std::string sender,
                             RpcOptions options)
    : stubs_(stubs),
      token_(std::move(token)),
      stamp_(stamp),
      sender_(std::move(sender)),
      options_(options),
      freeze_id_(NewFreezeId()) {
  for (; frozen_ < stubs_.size(); ++frozen_) {
    if (absl::Status s = Freeze(frozen_, true); !s.ok()) {
      error_ = absl::StrCat("cannot freeze server ", frozen_, ": ", s.ToString());
      break;
    }
  }
}

absl::Status FrozenServers::Freeze(size_t server, bool on) {
  v1::FreezeRequest req;
  FillHeader(req.mutable_header(), token_, stamp_, sender_);
  req.set_freeze(on);
  req.set_freeze_id(freeze_id_);
  req.set_owner(kCoordinatorFreezeOwner);
  req.set_lease_ms(kCoordinatorLeaseMs);
  v1::FreezeResponse resp;
  return CallWithRetry(options_, [&](grpc::ClientContext* ctx) {
    return stubs_[server]->Freeze(ctx, req, &resp);
  });
}

absl::Status FrozenServers::Resume() {
  absl::Status first;
  for (size_t s = 0; s < frozen_; ++s) {
    if (absl::Status st = Freeze(s, false); !st.ok() && first.ok()) {
      first = absl::Status(st.code(), absl::StrCat("cannot resume server ", s, ": ",
                                                   st.message()));
    }
  }
  frozen_ = 0;
  return first;
}

}  // namespace ecps
