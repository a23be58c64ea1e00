// A real etcd cluster for tests (label etcd): N members of Debian's etcd on 127.0.0.1 (or on a
// network namespace's address), each with its own client and peer ports and data folder, started by the test and stopped by pid
// (SIGKILL) when the EtcdCluster goes, also when the test fails. A member also dies with the
// test process (PR_SET_PDEATHSIG). Fast elections (50 ms heartbeats, 500 ms election timeout)
// make etcd's smallest lease 1 s.
#ifndef ECPS_TESTS_ETCD_CLUSTER_H_
#define ECPS_TESTS_ETCD_CLUSTER_H_

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "coordinator/etcd_client.h"
#include "runtime/security.h"
#include "tests/poll.h"
#include "tests/spawn.h"

namespace ecps {
namespace testing_process {

// The etcd binary on PATH (or Debian's), "" when etcd is not installed.
inline std::string EtcdBinary() {
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "";
  dirs += ":/usr/bin:/usr/local/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    const size_t end = std::min(dirs.find(':', start), dirs.size());
    const std::filesystem::path candidate =
        std::filesystem::path(dirs.substr(start, end - start)) / "etcd";
    if (end > start && access(candidate.c_str(), X_OK) == 0) return candidate.string();
    start = end + 1;
  }
  return "";
}

// A port that was free a moment ago (bound to 0, read, closed).
inline int PickFreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

class EtcdCluster {
 public:
  EtcdCluster() = default;
  EtcdCluster(const EtcdCluster&) = delete;
  EtcdCluster& operator=(const EtcdCluster&) = delete;
  ~EtcdCluster() { StopAll(); }

  // SIGKILLs every member still running.
  void StopAll() {
    for (size_t i = 0; i < pids_.size(); ++i) Kill(static_cast<int>(i));
  }

  // Before Start: the members serve TLS with `cert`/`key` and ask every client for a
  // certificate of `ca` (--client-cert-auth); Start's readiness check presents `client`.
  void UseTls(const std::string& ca, const std::string& cert, const std::string& key,
              const TlsIdentity* client) {
    tls_ = {ca, cert, key};
    client_tls_ = client;
  }

  // Starts `members` members with folders under `dir` and waits (up to 20 s) until every one
  // answers a read. Returns "" or what went wrong.
  std::string Start(int members, const std::filesystem::path& dir) {
    for (int i = 0; i < members; ++i) {
      client_ports_.push_back(PickFreePort());
      peer_ports_.push_back(PickFreePort());
    }
    if (std::string failed = Spawn(dir, {}); !failed.empty()) return failed;
    for (int i = 0; i < members; ++i) {
      auto client = EtcdClient::Create({endpoint(i)}, absl::Seconds(1), client_tls_);
      if (!client.ok()) return client.status().ToString();
      std::string last;
      const bool up = PollUntil(
          [&] {
            auto read = (*client)->Get("/ecps-test/ready");
            last = read.status().ToString();
            return read.ok();
          },
          std::chrono::seconds(20));
      if (!up) return NotUp(i, dir, last);
    }
    return "";
  }

  // The same inside the network namespace `ns` (which the caller made), on `host` there and
  // ports 2379 (client) and 2380 (peer) + 2 per member; readiness asked by Debian's etcdctl
  // from inside the namespace.
  std::string StartInNamespace(int members, const std::filesystem::path& dir,
                               const std::string& ns, const std::string& host) {
    host_ = host;
    for (int i = 0; i < members; ++i) {
      client_ports_.push_back(2379 + 2 * i);
      peer_ports_.push_back(2380 + 2 * i);
    }
    // env finds ip on PATH; it, ip and etcd each exec the next: the pid is etcd's.
    if (std::string failed = Spawn(dir, {"/usr/bin/env", "ip", "netns", "exec", ns});
        !failed.empty()) {
      return failed;
    }
    for (int i = 0; i < members; ++i) {
      const std::string check = "ip netns exec " + ns + " etcdctl --dial-timeout=1s " +
                                "--command-timeout=1s --endpoints=http://" + endpoint(i) +
                                " get /ecps-test/ready >/dev/null 2>&1";
      if (!PollUntil([&] { return std::system(check.c_str()) == 0; },
                     std::chrono::seconds(20))) {
        return NotUp(i, dir, "etcdctl get failed");
      }
    }
    return "";
  }

  // SIGKILLs member `i` and reaps it (no-op when it is already gone).
  void Kill(int i) {
    if (pids_[i] <= 0) return;
    kill(pids_[i], SIGKILL);
    waitpid(pids_[i], nullptr, 0);
    pids_[i] = -1;
  }

  std::string endpoint(int i) const { return host_ + ":" + std::to_string(client_ports_[i]); }
  std::vector<std::string> endpoints() const {
    std::vector<std::string> all;
    for (size_t i = 0; i < client_ports_.size(); ++i) all.push_back(endpoint(static_cast<int>(i)));
    return all;
  }
  // "a,b,c": what a spec or a flag takes.
  std::string endpoint_list() const {
    std::string list;
    for (const std::string& e : endpoints()) list += (list.empty() ? "" : ",") + e;
    return list;
  }

 private:
  static std::string Name(int i) { return "m" + std::to_string(i); }

  // Starts every member (`prefix`: what runs it, e.g. ip netns exec NS); "" or why not.
  std::string Spawn(const std::filesystem::path& dir, const std::vector<std::string>& prefix) {
    const std::string binary = EtcdBinary();
    if (binary.empty()) return "etcd is not installed";
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    const int members = static_cast<int>(client_ports_.size());
    std::string initial;
    for (int i = 0; i < members; ++i) {
      initial += (i ? "," : "") + Name(i) + "=" + Url(peer_ports_[i]);
    }
    const std::string token =
        "ecps-test-" + std::to_string(getpid()) + "-" + std::to_string(client_ports_[0]);
    for (int i = 0; i < members; ++i) {
      const std::string client = Url(client_ports_[i], /*client=*/true);
      const std::string peer = Url(peer_ports_[i]);
      std::vector<std::string> args = prefix;
      args.insert(args.end(), {binary, "--name", Name(i), "--data-dir", (dir / Name(i)).string(),
                               "--listen-client-urls", client, "--advertise-client-urls", client,
                               "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                               "--initial-cluster", initial, "--initial-cluster-state", "new",
                               "--initial-cluster-token", token, "--heartbeat-interval", "50",
                               "--election-timeout", "500"});
      if (!tls_.empty()) {
        args.insert(args.end(), {"--cert-file", tls_[1], "--key-file", tls_[2],
                                 "--trusted-ca-file", tls_[0], "--client-cert-auth"});
      }
      pids_.push_back(SpawnLogged(args, dir / (Name(i) + ".log"), /*die_with_test=*/true));
    }
    return "";
  }
  // Client URLs are https with TLS; peers stay plaintext (on the test's own host).
  std::string Url(int port, bool client = false) const {
    return std::string(client && !tls_.empty() ? "https://" : "http://") + host_ + ":" +
           std::to_string(port);
  }
  static std::string NotUp(int i, const std::filesystem::path& dir, const std::string& last) {
    return "etcd member " + Name(i) + " did not answer within 20 s (" + last + "; " +
           (dir / (Name(i) + ".log")).string() + ")";
  }

  std::string host_ = "127.0.0.1";
  std::vector<std::string> tls_;  // empty, or {ca, cert, key}
  const TlsIdentity* client_tls_ = nullptr;
  std::vector<int> client_ports_;
  std::vector<int> peer_ports_;
  std::vector<pid_t> pids_;
};

}  // namespace testing_process
}  // namespace ecps

#endif  // ECPS_TESTS_ETCD_CLUSTER_H_
