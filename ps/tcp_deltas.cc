#include "ps/tcp_deltas.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <iterator>
#include <limits>
#include <optional>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "proto/ecps.pb.h"
#include "ps/deadline_io.h"
#include "runtime/rpc.h"
#include "runtime/security.h"
#include "spdlog/spdlog.h"

namespace ecps {
namespace {

using Clock = std::chrono::steady_clock;

// An answer frame: the status's code and (bounded) message, and the applied sequence number.
Io Answer(int fd, const absl::Status& status, uint64_t seq, Clock::time_point deadline) {
  const uint32_t code = static_cast<uint32_t>(status.code());
  const absl::string_view message =
      status.message().substr(0, std::min<size_t>(status.message().size(), kMaxAnswerMessage));
  const uint32_t length = static_cast<uint32_t>(message.size());
  iovec iov[4] = {{const_cast<uint32_t*>(&code), 4},
                  {const_cast<uint32_t*>(&length), 4},
                  {const_cast<char*>(message.data()), message.size()},
                  {&seq, 8}};
  return WriteFull(fd, iov, 4, deadline);
}

std::string Unbracketed(const std::string& host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    return host.substr(1, host.size() - 2);
  }
  return host;
}

// "address:port" of a connection's far end, for the log.
std::string RemoteName(const sockaddr_storage& addr) {
  char text[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (addr.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&addr);
    ::inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text));
    port = ntohs(in->sin_port);
    return absl::StrCat(text, ":", port);
  }
  if (addr.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&addr);
    ::inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof(text));
    port = ntohs(in6->sin6_port);
  }
  return absl::StrCat("[", text, "]:", port);
}

constexpr char kFrameMagic[4] = {'E', 'C', 'P', '1'};
constexpr size_t kFrameSignedBytes = kFrameHeadBytes - kFrameMacBytes;
static_assert(kFrameSignedBytes == 4 + 4 + 4 + 8, "magic, length, from_server, seq");
// A body buffer up to this size is kept for a connection's next frame; a larger one is freed.
constexpr size_t kKeptBodyBytes = 1 << 20;

}  // namespace

std::string EncodeFrameHead(const FrameHead& head, std::string_view key) {
  std::string out(kFrameSignedBytes, '\0');
  std::memcpy(out.data(), kFrameMagic, 4);
  std::memcpy(out.data() + 4, &head.length, 4);
  std::memcpy(out.data() + 8, &head.from_server, 4);
  std::memcpy(out.data() + 12, &head.seq, 8);
  out += MessageMac(key, out);
  return out;
}

std::string_view FrameHeadSigned(std::string_view bytes) {
  return bytes.substr(0, kFrameSignedBytes);
}

std::string_view FrameHeadMac(std::string_view bytes) {
  return bytes.size() < kFrameSignedBytes ? std::string_view() : bytes.substr(kFrameSignedBytes);
}

absl::StatusOr<FrameHead> DecodeFrameHead(std::string_view bytes, int64_t max_frame_bytes) {
  if (bytes.size() != kFrameHeadBytes || std::memcmp(bytes.data(), kFrameMagic, 4) != 0) {
    return absl::InvalidArgumentError(
        "not a parity frame (no ECP1 head): is something other than an ecps server sending "
        "to this port?");
  }
  FrameHead head;
  std::memcpy(&head.length, bytes.data() + 4, 4);
  std::memcpy(&head.from_server, bytes.data() + 8, 4);
  std::memcpy(&head.seq, bytes.data() + 12, 8);
  if (head.length > max_frame_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("a parity frame of ", head.length,
                                                     " bytes is over the limit of ",
                                                     max_frame_bytes));
  }
  return head;
}

absl::Status DecodeFrameBody(const FrameHead& head, std::string_view body,
                             v1::ParityDeltaBatch* batch) {
  if (body.size() != head.length || !batch->ParseFromArray(body.data(), body.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("a parity frame of ", body.size(), " bytes is not a ParityDeltaBatch"));
  }
  if (batch->from_server() != head.from_server || batch->seq() != head.seq) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a parity frame's head (server ", head.from_server, ", seq ", head.seq,
        ") does not match its batch (server ", batch->from_server(), ", seq ", batch->seq(),
        ")"));
  }
  return absl::OkStatus();
}

TcpDeltaListener::TcpDeltaListener(Handler handler, MacCheck check, RefusalSink refused,
                                   TcpDeltaLimits limits)
    : handler_(std::move(handler)),
      check_(std::move(check)),
      sink_(std::move(refused)),
      limits_([&limits] {
        TcpDeltaLimits l = limits;
        l.frame_budget_bytes = std::max(l.frame_budget_bytes, 2 * l.max_frame_bytes);
        return l;
      }()) {}

TcpDeltaListener::~TcpDeltaListener() {
  stopping_.store(true);
  if (acceptor_.joinable()) acceptor_.join();
  if (listen_fd_ >= 0) ::close(listen_fd_);
  std::list<Connection> threads;
  {
    absl::MutexLock lock(&mu_);
    // Each connection's thread sees its socket shut and ends, closing it.
    for (int fd : open_) ::shutdown(fd, SHUT_RDWR);
    threads.swap(threads_);
  }
  for (Connection& c : threads) c.thread.join();
}

void TcpDeltaListener::Refused(const absl::Status& why, const std::string& from) {
  refused_.fetch_add(1);
  if (sink_) sink_(why, from);
}

bool TcpDeltaListener::Reserve(int64_t bytes, Clock::time_point deadline) {
  absl::MutexLock lock(&budget_mu_);
  auto room = [this, bytes]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(budget_mu_) {
    return budget_used_ + bytes <= limits_.frame_budget_bytes || stopping_.load();
  };
  // Waited on with a timeout, not signalled on stop: the stop is seen within 100 ms.
  while (!room()) {
    const auto now = Clock::now();
    if (now >= deadline) return false;
    budget_mu_.AwaitWithTimeout(
        absl::Condition(&room),
        absl::FromChrono(std::min<Clock::duration>(deadline - now, std::chrono::milliseconds(100))));
  }
  if (stopping_.load()) return false;
  budget_used_ += bytes;
  return true;
}

void TcpDeltaListener::Release(int64_t bytes) {
  absl::MutexLock lock(&budget_mu_);
  budget_used_ -= bytes;
}

int64_t TcpDeltaListener::budget_in_use() const {
  absl::MutexLock lock(&budget_mu_);
  return budget_used_;
}

void TcpDeltaListener::JoinFinished() {
  std::list<Connection> finished;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = threads_.begin(); it != threads_.end();) {
      auto next = std::next(it);
      if (it->done) finished.splice(finished.end(), threads_, it);
      it = next;
    }
  }
  for (Connection& c : finished) c.thread.join();
}

absl::Status TcpDeltaListener::Start(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const std::string name = Unbracketed(host);
  if (int e = ::getaddrinfo(name.c_str(), "0", &hints, &found); e != 0) {
    return absl::UnavailableError(absl::StrCat("parity TCP listener: cannot resolve ", host,
                                               ": ", ::gai_strerror(e)));
  }
  std::string error = "no address";
  for (addrinfo* a = found; a != nullptr && listen_fd_ < 0; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      error = std::strerror(errno);
      continue;
    }
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, 128) != 0) {
      error = std::strerror(errno);
      ::close(fd);
      continue;
    }
    sockaddr_storage bound{};
    socklen_t size = sizeof(bound);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &size);
    port_ = ntohs(bound.ss_family == AF_INET6
                      ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                      : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    listen_fd_ = fd;
  }
  ::freeaddrinfo(found);
  if (listen_fd_ < 0) {
    return absl::UnavailableError(
        absl::StrCat("parity TCP listener: cannot listen on ", host, ": ", error));
  }
  acceptor_ = std::thread([this] { AcceptLoop(); });
  return absl::OkStatus();
}

int TcpDeltaListener::connections() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(open_.size());
}

void TcpDeltaListener::AcceptLoop() {
  while (!stopping_.load()) {
    JoinFinished();  // a connection that ended leaves no thread behind
    // Polled with a short timeout so that the destructor's flag is seen.
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 200) <= 0) continue;
    sockaddr_storage remote{};
    socklen_t remote_size = sizeof(remote);
    const int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&remote), &remote_size,
                             SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOMEM || errno == ENOBUFS) {
        // Out of descriptors: the pending connection stays queued; do not spin on it.
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      continue;
    }
    SetNoDelay(fd);
    std::string from = RemoteName(remote);
    absl::Status over;
    bool evicted = false;
    {
      absl::MutexLock lock(&mu_);
      if (static_cast<int>(open_.size()) >= limits_.max_connections) {
        over = absl::ResourceExhaustedError(absl::StrCat(
            "a parity connection over the limit of ", limits_.max_connections, " closed"));
      } else {
        if (static_cast<int>(waiting_.size()) >= limits_.max_unauthenticated) {
          // Counted before its client can see the close. Its thread sees the socket shut,
          // and closes it (under mu_, so not before this).
          refused_.fetch_add(1);
          ::shutdown(waiting_.front(), SHUT_RDWR);
          waiting_.pop_front();
          evicted = true;
        }
        open_.insert(fd);
        waiting_.push_back(fd);
        threads_.emplace_back();
        Connection* c = &threads_.back();  // a list's elements stay where they are
        try {
          // The thread marks itself done under mu_, which is held until it is stored.
          c->thread = std::thread([this, fd, c, from] {
            Serve(fd, from);
            absl::MutexLock done(&mu_);
            c->done = true;
          });
        } catch (const std::system_error& e) {
          spdlog::warn("parity TCP listener: no thread for a connection: {}", e.what());
          threads_.pop_back();
          open_.erase(fd);
          waiting_.pop_back();
          ::close(fd);
        }
      }
    }
    if (evicted && sink_) {
      sink_(absl::ResourceExhaustedError(absl::StrCat(
                "a parity connection closed: the oldest of ", limits_.max_unauthenticated,
                " that had not sent a frame head that checks out")),
            "an earlier connection");
    }
    if (!over.ok()) {
      Refused(over, from);  // before the close, which its client may see at once
      ::close(fd);
    }
  }
}

void TcpDeltaListener::RefuseFrame(int fd, const absl::Status& why, const std::string& from,
                                   Clock::time_point deadline) {
  Refused(why, from);  // counted before the client can read the answer
  Answer(fd, why, 0, std::min(deadline, Clock::now() + std::chrono::milliseconds(500)));
}

bool TcpDeltaListener::AwaitFrame(int fd, const std::string& from, bool authenticated,
                                  Clock::time_point head_deadline) {
  // Between frames a peer's connection may idle (a stream with nothing to send); a new
  // connection must show a good head by head_deadline. Within a frame, the whole frame and
  // its answer get frame_timeout_ms.
  const Clock::time_point wait_until =
      authenticated ? Clock::now() + std::chrono::milliseconds(limits_.idle_timeout_ms)
                    : head_deadline;
  const Io waited = WaitFd(fd, POLLIN, wait_until);
  if (waited == Io::kOk) return true;
  if (!authenticated && waited == Io::kTimeout) {
    Refused(
        absl::DeadlineExceededError(absl::StrCat("a parity connection sent no frame head within ",
                                                 limits_.head_timeout_ms, " ms of connecting")),
        from);
  }
  return false;
}

std::optional<FrameHead> TcpDeltaListener::ReadHead(int fd, const std::string& from,
                                                    Clock::time_point deadline) {
  char head_bytes[kFrameHeadBytes];
  if (Io io = ReadFull(fd, head_bytes, sizeof(head_bytes), deadline); io != Io::kOk) {
    if (io == Io::kTimeout) {
      Refused(absl::DeadlineExceededError("a parity frame head left unfinished"), from);
    }
    return std::nullopt;
  }
  const std::string_view head_view(head_bytes, sizeof(head_bytes));
  absl::StatusOr<FrameHead> head = DecodeFrameHead(head_view, limits_.max_frame_bytes);
  // The MAC before anything else the head says is believed, the length above all: nothing
  // is allocated for a frame whose sender is not one of the job's servers.
  if (head.ok() || absl::IsResourceExhausted(head.status())) {
    if (!check_(FrameHeadSigned(head_view), FrameHeadMac(head_view))) {
      head = absl::UnauthenticatedError(
          "the parity frame's head is not signed with a token of this job's servers");
    }
  }
  if (!head.ok()) {
    RefuseFrame(fd, head.status(), from, deadline);
    return std::nullopt;
  }
  return *head;
}

bool TcpDeltaListener::Admit(int fd) {
  absl::MutexLock lock(&mu_);
  auto it = std::find(waiting_.begin(), waiting_.end(), fd);
  if (it == waiting_.end()) return false;  // evicted (and counted) meanwhile
  waiting_.erase(it);
  return true;
}

bool TcpDeltaListener::ServeFrame(int fd, const std::string& from, const FrameHead& head,
                                  std::string* body, v1::ParityDeltaBatch* batch,
                                  v1::ParityDeltaAck* ack) {
  // From a head that checked out, the frame and its answer get frame_timeout_ms.
  const Clock::time_point frame_deadline =
      Clock::now() + std::chrono::milliseconds(limits_.frame_timeout_ms);
  // The body and its parsed copy are held together while the batch is applied.
  const int64_t held = 2 * static_cast<int64_t>(head.length);
  if (!Reserve(held, frame_deadline)) {
    const absl::Status no_room = absl::ResourceExhaustedError(
        absl::StrCat("no room for a parity frame of ", head.length, " bytes: the frames in "
                     "flight already hold the budget of ", limits_.frame_budget_bytes, " bytes"));
    RefuseFrame(fd, no_room, from, frame_deadline);
    return false;
  }
  body->resize(head.length);
  Io io = ReadFull(fd, body->data(), body->size(), frame_deadline);
  absl::Status status;
  if (io != Io::kOk) {
    if (io == Io::kTimeout) {
      Refused(absl::DeadlineExceededError(
                  absl::StrCat("a parity frame of ", head.length, " bytes left unfinished")),
              from);
    }
  } else {
    status = DecodeFrameBody(head, *body, batch);
  }
  bool keep = io == Io::kOk && status.ok();
  if (!status.ok()) RefuseFrame(fd, status, from, frame_deadline);
  if (keep) {
    ack->Clear();
    status = handler_(*batch, ack);
    keep = Answer(fd, status, status.ok() ? ack->applied_seq() : 0, frame_deadline) == Io::kOk;
  }
  batch->Clear();
  body->clear();
  if (body->capacity() > kKeptBodyBytes) std::string().swap(*body);
  if (batch->SpaceUsedLong() > static_cast<int64_t>(kKeptBodyBytes)) {
    v1::ParityDeltaBatch().Swap(batch);
  }
  Release(held);
  return keep;
}

void TcpDeltaListener::Serve(int fd, std::string from) {
  const auto accepted = Clock::now();
  const auto head_deadline = accepted + std::chrono::milliseconds(limits_.head_timeout_ms);
  bool authenticated = false;
  std::string body;
  v1::ParityDeltaBatch batch;
  v1::ParityDeltaAck ack;
  while (!stopping_.load()) {
    if (!AwaitFrame(fd, from, authenticated, head_deadline)) break;
    const Clock::time_point deadline =
        authenticated ? Clock::now() + std::chrono::milliseconds(limits_.frame_timeout_ms)
                      : head_deadline;  // for the head
    const std::optional<FrameHead> head = ReadHead(fd, from, deadline);
    if (!head.has_value()) break;
    if (!authenticated) {
      if (!Admit(fd)) break;
      authenticated = true;
    }
    if (!ServeFrame(fd, from, *head, &body, &batch, &ack)) break;
  }
  absl::MutexLock lock(&mu_);
  if (!authenticated) {
    if (auto it = std::find(waiting_.begin(), waiting_.end(), fd); it != waiting_.end()) {
      waiting_.erase(it);
    }
  }
  ::close(fd);
  open_.erase(fd);
}

void TcpDeltaConnection::Close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

absl::Status TcpDeltaConnection::Connect(const std::string& host, int port, int timeout_ms) {
  const std::string where = absl::StrCat(host, ":", port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string name = Unbracketed(host);
  if (int e = ::getaddrinfo(name.c_str(), std::to_string(port).c_str(), &hints, &found);
      e != 0) {
    return absl::UnavailableError(
        absl::StrCat("parity over TCP: cannot resolve ", host, ": ", ::gai_strerror(e)));
  }
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  absl::Status status = absl::UnavailableError("parity over TCP: no address for " + where);
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd =
        ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) continue;
    int err = 0;
    if (::connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      err = errno;
      if (err == EINPROGRESS) {
        const Io w = WaitFd(fd, POLLOUT, deadline);
        socklen_t size = sizeof(err);
        if (w == Io::kTimeout) {
          err = ETIMEDOUT;
        } else if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &size) != 0) {
          err = errno;
        }
      }
    }
    if (err == 0) {
      SetNoDelay(fd);
      fd_ = fd;
      host_ = host;
      port_ = port;
      ::freeaddrinfo(found);
      return absl::OkStatus();
    }
    ::close(fd);
    status = err == ETIMEDOUT
                 ? absl::DeadlineExceededError("parity over TCP: connecting to " + where +
                                               " timed out")
                 : absl::UnavailableError(absl::StrCat("parity over TCP: cannot connect to ",
                                                       where, ": ", std::strerror(err)));
  }
  ::freeaddrinfo(found);
  return status;
}

absl::StatusOr<uint64_t> TcpDeltaConnection::Send(const std::string& host, int port,
                                                  std::string_view key, int32_t from_server,
                                                  uint64_t seq, const std::string& head,
                                                  const std::string& records, int timeout_ms) {
  if (fd_ >= 0 && (host != host_ || port != port_)) Close();
  if (fd_ < 0) {
    if (absl::Status s = Connect(host, port, timeout_ms); !s.ok()) return s;
  }
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  auto broken = [&](Io io, const char* what) -> absl::Status {
    Close();
    const std::string text = absl::StrCat("parity over TCP to ", host, ":", port, ": ", what);
    if (io == Io::kTimeout) return absl::DeadlineExceededError(text + " timed out");
    if (io == Io::kClosed) return absl::UnavailableError(text + ": connection closed");
    return absl::UnavailableError(text);
  };
  const size_t total = head.size() + records.size();
  if (total > std::numeric_limits<uint32_t>::max()) {
    return absl::InvalidArgumentError(absl::StrCat("a parity batch of ", total,
                                                   " bytes does not fit a TCP frame"));
  }
  const std::string frame_head =
      EncodeFrameHead(FrameHead{static_cast<uint32_t>(total), from_server, seq}, key);
  iovec iov[3] = {{const_cast<char*>(frame_head.data()), frame_head.size()},
                  {const_cast<char*>(head.data()), head.size()},
                  {const_cast<char*>(records.data()), records.size()}};
  if (Io io = WriteFull(fd_, iov, 3, deadline); io != Io::kOk) return broken(io, "sending");
  uint32_t answer[2];  // code, message length
  if (Io io = ReadFull(fd_, answer, sizeof(answer), deadline); io != Io::kOk) {
    return broken(io, "waiting for the answer");
  }
  if (answer[1] > kMaxAnswerMessage || answer[0] > static_cast<uint32_t>(absl::StatusCode::kUnauthenticated)) {
    return broken(Io::kError, "the answer is not a parity server's");
  }
  std::string message(answer[1], '\0');
  uint64_t applied = 0;
  if (Io io = ReadFull(fd_, message.data(), message.size(), deadline); io != Io::kOk) {
    return broken(io, "reading the answer");
  }
  if (Io io = ReadFull(fd_, &applied, 8, deadline); io != Io::kOk) {
    return broken(io, "reading the answer");
  }
  if (answer[0] == 0) return applied;
  return AnsweredByPeerStatus(static_cast<absl::StatusCode>(answer[0]), message);
}

}  // namespace ecps
