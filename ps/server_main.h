// The `ecps server` role: a parameter server process.
#ifndef ECPS_PS_SERVER_MAIN_H_
#define ECPS_PS_SERVER_MAIN_H_

#include <string>

#include "runtime/spec.h"

namespace ecps {

// The exit code of a server that cannot allocate its tables (not worth restarting).
inline constexpr int kExitCannotAllocate = 3;

struct ServerOptions {
  JobSpec spec;
  std::string coordinator;          // host:port
  // Empty, or the file the coordinator writes its address into: read again when the
  // coordinator stops answering (runtime/coordinator_finder.h).
  std::string coordinator_file;
  std::string token;  // the job secret (docs/security.md)
  std::string listen_host = "127.0.0.1";
  std::string advertise;            // what peers dial; empty: see AdvertiseHost (runtime/net.h)
  int port = 0;                     // 0: a free port
  int requested_id = -1;            // -1: let the coordinator choose (a spare)
};

// Starts the gRPC service, registers with the coordinator, initialises its rows, serves
// until the job finishes (or this instance is fenced, or SIGTERM/SIGINT). Returns the exit
// code: 0 on a finished job, kExitCannotAllocate when its tables do not fit, 1 on an error.
int RunServer(const ServerOptions& options);

}  // namespace ecps

#endif  // ECPS_PS_SERVER_MAIN_H_
