#include "runtime/net.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace ecps {

bool IsWildcardHost(const std::string& host) {
  return host == "0.0.0.0" || host == "::" || host == "[::]";
}

bool IsLoopbackHost(const std::string& host) {
  return absl::StartsWith(host, "127.") || host == "::1" || host == "[::1]" ||
         absl::EqualsIgnoreCase(host, "localhost");
}

absl::StatusOr<std::string> DefaultAdvertiseHost() {
  struct ifaddrs* list = nullptr;
  if (getifaddrs(&list) == 0) {
    std::string found;
    for (struct ifaddrs* a = list; a != nullptr && found.empty(); a = a->ifa_next) {
      if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
      if ((a->ifa_flags & IFF_UP) == 0 || (a->ifa_flags & IFF_LOOPBACK) != 0) continue;
      char text[INET_ADDRSTRLEN] = {};
      const auto* in = reinterpret_cast<const struct sockaddr_in*>(a->ifa_addr);
      if (inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text)) != nullptr) found = text;
    }
    freeifaddrs(list);
    if (!found.empty()) return found;
  }
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) == 0 && name[0] != '\0') return std::string(name);
  return absl::UnavailableError(
      "this host has no non-loopback IPv4 address and no host name to advertise: set "
      "--advertise (or cluster.advertise) to the address peers should dial");
}

absl::StatusOr<std::string> AdvertiseHost(const std::string& bind_host,
                                          const std::string& advertise) {
  if (!advertise.empty()) {
    if (IsWildcardHost(advertise)) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot advertise ", advertise,
                       ": it names every interface, which no peer can dial; "
                       "give this host's name or address"));
    }
    return advertise;
  }
  if (IsWildcardHost(bind_host)) return DefaultAdvertiseHost();
  return bind_host;
}

std::string JoinHostPort(const std::string& host, int port) {
  if (host.find(':') != std::string::npos && !absl::StartsWith(host, "[")) {
    return absl::StrCat("[", host, "]:", port);
  }
  return absl::StrCat(host, ":", port);
}

absl::Status CheckDialAddress(const std::string& address) {
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(
        absl::StrCat("address '", address, "' ", why, " (want host:port, e.g. ",
                     "coordinator.example.org:7000 or 10.0.0.5:7000)"));
  };
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) return bad("has no port");
  const std::string host = address.substr(0, colon);
  int port = 0;
  if (!absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 1 || port > 65535) {
    return bad("has no port between 1 and 65535");
  }
  if (host.empty()) return bad("has no host");
  if (absl::StartsWith(host, "[")) {
    if (!absl::EndsWith(host, "]") || host.size() < 3) return bad("has an unclosed [IPv6] host");
    in6_addr v6;
    std::string inner(host.substr(1, host.size() - 2));
    if (inet_pton(AF_INET6, inner.c_str(), &v6) != 1) return bad("has a bad IPv6 address");
    return absl::OkStatus();
  }
  if (IsWildcardHost(host)) return bad("names every interface, which nobody can dial");
  for (char c : host) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '.' && c != '_') {
      return bad(
          absl::StrCat("has a character a host name cannot hold: '", std::string(1, c), "'"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<int> PickFreePort(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  std::string name = host;
  if (name.size() > 2 && name.front() == '[' && name.back() == ']') {
    name = name.substr(1, name.size() - 2);
  }
  if (const int rc = getaddrinfo(name.c_str(), "0", &hints, &found); rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot resolve '", host, "' to pick a port: ", gai_strerror(rc)));
  }
  int port = -1;
  std::string error = "no address";
  for (addrinfo* a = found; a != nullptr && port < 0; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) continue;
    sockaddr_storage bound{};
    socklen_t len = sizeof(bound);
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len) == 0) {
      port = bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                                         : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    } else {
      error = std::strerror(errno);
    }
    close(fd);
  }
  freeaddrinfo(found);
  if (port < 0) {
    return absl::UnavailableError(absl::StrCat("cannot bind a port on ", host, ": ", error));
  }
  return port;
}

absl::StatusOr<std::vector<std::string>> SplitDialAddresses(const std::string& list) {
  std::vector<std::string> addresses;
  for (absl::string_view item : absl::StrSplit(list, ',')) {
    const std::string address(absl::StripAsciiWhitespace(item));
    if (address.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", list, "' has an empty address (want host:port[,host:port...])"));
    }
    if (absl::Status s = CheckDialAddress(address); !s.ok()) return s;
    for (const std::string& seen : addresses) {
      if (seen == address) {
        return absl::InvalidArgumentError(absl::StrCat("'", list, "' names ", address, " twice"));
      }
    }
    addresses.push_back(address);
  }
  return addresses;
}

}  // namespace ecps
