#include "cli/scrub_command.h"

#include <cstdio>

#include "proto/ecps.grpc.pb.h"
#include "runtime/rpc.h"

namespace ecps {

int RunScrubCommand(const std::string& address, const std::string& token) {
  auto stub = v1::Coordinator::NewStub(MakeChannel(address, Role::kCoordinator));
  v1::ScrubRequest request;
  FillHeader(request.mutable_header(), token, 0, "ecps-scrub");
  v1::ScrubReport report;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(10));
  grpc::Status status = stub->Scrub(&context, request, &report);
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE) {
    std::fprintf(stderr, "ecps scrub: cannot reach coordinator at %s: %s%s\n", address.c_str(),
                 status.error_message().c_str(), UnreachableHint().c_str());
    return 2;
  }
  if (status.error_code() == grpc::StatusCode::UNAUTHENTICATED) {
    std::fprintf(stderr, "ecps scrub: the coordinator refused the job token (set --token or "
                         "ECPS_TOKEN)\n");
    return 3;
  }
  if (!status.ok()) {
    std::fprintf(stderr, "ecps scrub: %s\n", status.error_message().c_str());
    return 1;
  }
  std::printf("stripes checked      %lld\nparity mismatches    %lld\n"
              "dense replicas       %lld\ndense mismatches     %lld\nseconds              %.2f\n",
              static_cast<long long>(report.stripes_checked()),
              static_cast<long long>(report.parity_mismatches()),
              static_cast<long long>(report.dense_checked()),
              static_cast<long long>(report.dense_mismatches()), report.seconds());
  for (const std::string& m : report.mismatches()) std::printf("mismatch: %s\n", m.c_str());
  if (!report.error().empty()) std::printf("error: %s\n", report.error().c_str());
  std::printf("%s\n", report.clean() ? "clean" : "NOT CLEAN");
  return report.clean() ? 0 : 1;
}

}  // namespace ecps
