// What listens at an address, asked of the network with a plain TCP connect and, when it
// accepts, a TLS ClientHello. The coordinator asks whether a reported server's process is gone
// (coordinator/process_probe.h); an operator command asks, after a call failed, why
// (cli/operator_call.h): nothing listens, the host does not answer, or the listener speaks
// another transport security than the caller. Thread-safe; each probe holds one socket for at
// most its timeout (twice that for AnswersTls).
#ifndef ECPS_RUNTIME_PEER_PROBE_H_
#define ECPS_RUNTIME_PEER_PROBE_H_

#include <optional>
#include <string>

namespace ecps {

enum class TcpProbe {
  kUnresolved,  // the address is not host:port, or its host does not resolve (DNS)
  kRefused,     // the host answered that nothing listens on the port
  kNoAnswer,    // nothing came back within the timeout (a dead host, a firewall), or unreachable
  kAccepted,    // something listens there
};

// A TCP connect to `address` ("host:port", "[v6]:port"), closed at once.
TcpProbe ProbeTcp(const std::string& address, int timeout_ms);

// Whether the listener at `address` speaks TLS: true when it answers a ClientHello with a TLS
// handshake message or alert (whatever it then thinks of this certificate-less client), false
// when it answers anything else or closes; nullopt when it cannot be reached (ProbeTcp is not
// kAccepted) or says nothing within the timeout.
std::optional<bool> AnswersTls(const std::string& address, int timeout_ms);

}  // namespace ecps

#endif  // ECPS_RUNTIME_PEER_PROBE_H_
