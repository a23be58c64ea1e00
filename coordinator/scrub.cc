#include "coordinator/scrub.h"

#include <chrono>
#include <map>
#include <memory>

#include "absl/strings/str_cat.h"
#include "coordinator/frozen_servers.h"
#include "proto/ecps.grpc.pb.h"
#include "runtime/rpc.h"

namespace ecps {

v1::ScrubReport ScrubServers(const std::vector<std::string>& addresses, const std::string& token,
                             const CoordinatorStamp& stamp, int rpc_timeout_ms) {
  auto start = std::chrono::steady_clock::now();
  v1::ScrubReport report;
  std::vector<std::unique_ptr<v1::ParameterServer::Stub>> stubs;
  for (const std::string& a : addresses) {
    stubs.push_back(v1::ParameterServer::NewStub(MakeChannel(a, Role::kServer)));
  }
  RpcOptions options;
  options.deadline_ms = std::max(rpc_timeout_ms, 60000);
  FrozenServers frozen(stubs, token, stamp, "scrub", options);
  std::string error = frozen.error();
  // Parity.
  for (size_t s = 0; s < stubs.size() && error.empty(); ++s) {
    v1::ScrubParityRequest req;
    FillHeader(req.mutable_header(), token, stamp, "scrub");
    v1::ScrubParityResponse resp;
    absl::Status st = CallWithRetry(options, [&](grpc::ClientContext* ctx) {
      return stubs[s]->ScrubParity(ctx, req, &resp);
    });
    if (!st.ok()) {
      error = absl::StrCat("server ", s, " could not scrub: ", st.ToString());
      break;
    }
    report.set_stripes_checked(report.stripes_checked() + resp.stripes_checked());
    report.set_parity_mismatches(report.parity_mismatches() + resp.mismatches());
    for (const std::string& e : resp.examples()) {
      if (report.mismatches_size() < 20) report.add_mismatches(e);
    }
  }
  // Dense replicas: every holder's checksum and version must equal the primary's.
  std::map<int, std::vector<v1::DenseChecksum>> dense;
  for (size_t s = 0; s < stubs.size() && error.empty(); ++s) {
    v1::DenseChecksumsRequest req;
    FillHeader(req.mutable_header(), token, stamp, "scrub");
    v1::DenseChecksumsResponse resp;
    absl::Status st = CallWithRetry(options, [&](grpc::ClientContext* ctx) {
      return stubs[s]->DenseChecksums(ctx, req, &resp);
    });
    if (!st.ok()) {
      error = absl::StrCat("server ", s, " could not report dense checksums: ", st.ToString());
      break;
    }
    for (const auto& c : resp.tensors()) dense[c.tensor()].push_back(c);
  }
  for (const auto& [tensor, copies] : dense) {
    const v1::DenseChecksum* primary = nullptr;
    for (const auto& c : copies) {
      if (c.primary()) primary = &c;
    }
    if (primary == nullptr) continue;
    for (const auto& c : copies) {
      if (c.primary()) continue;
      report.set_dense_checked(report.dense_checked() + 1);
      if (c.checksum() != primary->checksum() || c.version() != primary->version()) {
        report.set_dense_mismatches(report.dense_mismatches() + 1);
        if (report.mismatches_size() < 20) {
          report.add_mismatches(absl::StrCat("dense tensor ", tensor, " replica version ",
                                             c.version(), " vs primary ", primary->version()));
        }
      }
    }
  }
  if (absl::Status st = frozen.Resume(); !st.ok() && error.empty()) error = st.ToString();
  report.set_error(error);
  report.set_done(true);
  report.set_clean(error.empty() && report.parity_mismatches() == 0 &&
                   report.dense_mismatches() == 0);
  report.set_seconds(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return report;
}

}  // namespace ecps
