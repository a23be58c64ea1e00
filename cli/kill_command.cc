#include "cli/kill_command.h"

#include <iostream>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "cli/operator_call.h"
#include "proto/ecps.grpc.pb.h"
#include "runtime/rpc.h"

namespace ecps {

int RunKillCommand(const std::string& address, const std::string& token, const std::string& role,
                   const std::string& id) {
  v1::KillRequest request;
  FillHeader(request.mutable_header(), token, 0, "ecps-kill");
  if (role == "server") {
    request.set_role(v1::ROLE_SERVER);
  } else if (role == "worker") {
    request.set_role(v1::ROLE_WORKER);
  } else {
    std::cerr << "ecps kill: the role must be server or worker, got '" << role << "'" << std::endl;
    return kStatusError;
  }
  int n = 0;
  if (!absl::SimpleAtoi(id, &n) || n < 0) {
    std::cerr << "ecps kill: the id must be a non-negative integer, got '" << id << "'"
              << std::endl;
    return kStatusError;
  }
  request.set_id(n);

  OperatorCall coordinator(address);
  RpcOptions rpc;
  rpc.deadline_ms = 5000;
  rpc.max_attempts = 3;
  v1::KillResponse response;
  const absl::Status status = coordinator.Call(rpc, [&](grpc::ClientContext* context) {
    response.Clear();
    return coordinator.stub()->Kill(context, request, &response);
  });
  if (!status.ok()) return coordinator.Fail("kill", status);
  std::cout << "kill requested: " << role << " " << n << " (instance " << response.instance()
            << ", pid " << response.pid() << "); it dies at its next heartbeat" << std::endl;
  return kStatusOk;
}

}  // namespace ecps
