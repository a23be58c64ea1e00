#include "cli/checkpoint_command.h"

#include <cstdio>

#include "proto/ecps.grpc.pb.h"
#include "runtime/rpc.h"

namespace ecps {

int RunCheckpointCommand(const std::string& address, const std::string& token) {
  auto stub = v1::Coordinator::NewStub(MakeChannel(address, Role::kCoordinator));
  v1::CheckpointRequest request;
  FillHeader(request.mutable_header(), token, 0, "ecps-checkpoint");
  v1::CheckpointReport report;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(30));
  grpc::Status status = stub->Checkpoint(&context, request, &report);
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE) {
    std::fprintf(stderr, "ecps checkpoint: cannot reach coordinator at %s: %s%s\n",
                 address.c_str(), status.error_message().c_str(), UnreachableHint().c_str());
    return 2;
  }
  if (status.error_code() == grpc::StatusCode::UNAUTHENTICATED) {
    std::fprintf(stderr,
                 "ecps checkpoint: the coordinator refused the job token (set --token "
                 "or ECPS_TOKEN)\n");
    return 3;
  }
  if (!status.ok()) {
    std::fprintf(stderr, "ecps checkpoint: %s\n", status.error_message().c_str());
    return 1;
  }
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
