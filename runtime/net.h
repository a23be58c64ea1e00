// Addresses: what a role binds (its listening socket) and what it advertises (what its peers
// dial, written into the cluster map). They differ whenever a role binds every interface
// (0.0.0.0): nobody on another host can dial 0.0.0.0, so the advertised address is then the
// host's own (docs/deploy.md).
#ifndef ECPS_RUNTIME_NET_H_
#define ECPS_RUNTIME_NET_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ecps {

// 0.0.0.0, ::, [::]: every interface.
bool IsWildcardHost(const std::string& host);
// 127.0.0.0/8, ::1, localhost: reachable from this host only.
bool IsLoopbackHost(const std::string& host);

// The address this host is reached at when it binds every interface: the first IPv4 address
// of an interface that is up and not a loopback, in the order the kernel lists them
// (getifaddrs); when there is none, the host's name. An error only when neither exists.
absl::StatusOr<std::string> DefaultAdvertiseHost();

// What a role that binds `bind_host` advertises: `advertise` when set (a name or an address;
// a wildcard is refused), else DefaultAdvertiseHost() for a wildcard bind, else bind_host.
absl::StatusOr<std::string> AdvertiseHost(const std::string& bind_host,
                                          const std::string& advertise);

// host:port, with brackets around an IPv6 address.
std::string JoinHostPort(const std::string& host, int port);

// Checks "host:port" as something to dial: host a DNS name, an IPv4 address or a bracketed
// IPv6 address, port 1-65535. INVALID_ARGUMENT naming what is wrong.
absl::Status CheckDialAddress(const std::string& address);

// A port on `host` (an address or name this host binds) that is free now: bound to port 0 and
// released. Another process may take it before the caller binds it (a launcher that must
// name ports before its children listen accepts that race; the child then fails to bind and
// says so).
absl::StatusOr<int> PickFreePort(const std::string& host);

// A list of addresses to dial, comma-separated ("a:1,b:2"): the coordinator and its standbys
// (docs/recovery.md). Each is checked by CheckDialAddress; INVALID_ARGUMENT names the bad one,
// an empty item or a repeated address.
absl::StatusOr<std::vector<std::string>> SplitDialAddresses(const std::string& list);

}  // namespace ecps

#endif  // ECPS_RUNTIME_NET_H_
