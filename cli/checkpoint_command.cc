#include "cli/checkpoint_command.h"

#include <cstdio>

#include "cli/operator_call.h"
#include "proto/ecps.grpc.pb.h"
#include "runtime/rpc.h"

namespace ecps {

int RunCheckpointCommand(const std::string& address, const std::string& token) {
  OperatorCall coordinator(address);
  v1::CheckpointRequest request;
  FillHeader(request.mutable_header(), token, 0, "ecps-checkpoint");
  v1::CheckpointReport report;
  RpcOptions rpc;
  rpc.deadline_ms = 30 * 60 * 1000;
  rpc.max_attempts = 1;  // a save that may have begun is not asked for twice
  const absl::Status status = coordinator.Call(rpc, [&](grpc::ClientContext* context) {
    return coordinator.stub()->Checkpoint(context, request, &report);
  });
  if (!status.ok()) return coordinator.Fail("checkpoint", status);
  std::printf(
      "checkpoint           %s\nstep                 %lld\nbytes                %lld\n"
      "seconds              %.2f\nreader positions    ",
      report.dir().c_str(), static_cast<long long>(report.step()),
      static_cast<long long>(report.bytes()), report.seconds());
  for (int64_t p : report.reader_positions()) std::printf(" %lld", static_cast<long long>(p));
  std::printf("\n");
  return 0;
}

}  // namespace ecps
