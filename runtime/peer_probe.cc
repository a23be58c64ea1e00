#include "runtime/peer_probe.h"

#include <fcntl.h>
#include <netdb.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <memory>

namespace ecps {
namespace {

// A connected socket (blocking, with `timeout_ms` on reads and writes), or -1 with why.
struct Connection {
  int fd = -1;
  TcpProbe outcome = TcpProbe::kUnresolved;
};

Connection Connect(const std::string& address, int timeout_ms) {
  Connection out;
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) return out;
  std::string host = address.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);  // [::1]:port
  }
  const std::string port = address.substr(colon + 1);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), port.c_str(), &hints, &found) != 0 || found == nullptr) {
    return out;
  }
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> release(found, freeaddrinfo);
  out.outcome = TcpProbe::kNoAnswer;
  const int fd = socket(found->ai_family, found->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                        found->ai_protocol);
  if (fd < 0) return out;
  int error = 0;
  if (connect(fd, found->ai_addr, found->ai_addrlen) != 0) {
    error = errno;
    if (error == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      error = ETIMEDOUT;
      socklen_t len = sizeof(error);
      if (poll(&p, 1, timeout_ms) == 1) getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len);
    }
  }
  if (error != 0) {
    close(fd);
    if (error == ECONNREFUSED) out.outcome = TcpProbe::kRefused;
    return out;
  }
  const int flags = fcntl(fd, F_GETFL);
  fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  out.fd = fd;
  out.outcome = TcpProbe::kAccepted;
  return out;
}

// OpenSSL's message callback: notes a handshake message or an alert that the peer sent.
void NoteTlsFromPeer(int write_p, int, int content_type, const void*, size_t, SSL*, void* arg) {
  if (write_p == 0 && (content_type == SSL3_RT_HANDSHAKE || content_type == SSL3_RT_ALERT)) {
    *static_cast<bool*>(arg) = true;
  }
}

}  // namespace

TcpProbe ProbeTcp(const std::string& address, int timeout_ms) {
  Connection c = Connect(address, timeout_ms);
  if (c.fd >= 0) close(c.fd);
  return c.outcome;
}

std::optional<bool> AnswersTls(const std::string& address, int timeout_ms) {
  Connection c = Connect(address, timeout_ms);
  if (c.fd < 0) return std::nullopt;
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> ctx(SSL_CTX_new(TLS_client_method()),
                                                        SSL_CTX_free);
  std::unique_ptr<SSL, decltype(&SSL_free)> ssl(ctx ? SSL_new(ctx.get()) : nullptr, SSL_free);
  if (ssl == nullptr) {
    close(c.fd);
    return std::nullopt;
  }
  // Only whether the peer speaks TLS matters: its certificate is not checked, and this client
  // has none to offer.
  SSL_set_verify(ssl.get(), SSL_VERIFY_NONE, nullptr);
  bool tls = false;
  SSL_set_msg_callback(ssl.get(), NoteTlsFromPeer);
  SSL_set_msg_callback_arg(ssl.get(), &tls);
  SSL_set_fd(ssl.get(), c.fd);
  const int connected = SSL_connect(ssl.get());
  // A read that timed out (SO_RCVTIMEO) is, to OpenSSL, one to retry.
  const int error = connected <= 0 ? SSL_get_error(ssl.get(), connected) : SSL_ERROR_NONE;
  const bool timed_out = !tls && (error == SSL_ERROR_WANT_READ || error == SSL_ERROR_WANT_WRITE ||
                                  (error == SSL_ERROR_SYSCALL && errno == EAGAIN));
  ERR_clear_error();  // this thread's OpenSSL errors are of no use to anyone after
  ssl.reset();
  close(c.fd);
  if (timed_out) return std::nullopt;
  return tls;
}

}  // namespace ecps
