// Parity delta batches on plain TCP (fault_tolerance.parity_transport: tcp): one connection
// per (data server, parity server) pair, a blocking write of the batch and a read of its
// answer on the sender's thread, one thread per connection on the receiver. It carries the
// same serialized ParityDeltaBatch as the gRPC method ApplyParityDeltas and the receiver
// admits it the same way (the token in its header), but without gRPC's HTTP/2 framing, call
// objects and pollers, which are most of what a delta batch costs a server on gRPC
// (docs/scaling.md). There is no encryption, so a job with security.tls cannot use it.
//
// Frames, little-endian:
//   batch:  a head of kFrameHeadBytes: the magic "ECP1", u32 length, i32 from_server, u64
//           seq, then 32 bytes of HMAC-SHA256 over those 20 bytes, keyed by the sender's
//           token (runtime/security.h, MessageMac); then `length` bytes of a serialized
//           ParityDeltaBatch with the same from_server and seq
//   answer: u32 status code (absl::StatusCode), u32 message length (at most
//           kMaxAnswerMessage), the message, u64 applied_seq (0 unless the code is OK)
//
// Anyone who can reach the port can connect, so the listener spends nothing on a connection
// before its head has checked out: the head must arrive within a short deadline, only a few
// connections may be waiting for theirs, and a frame's body is allocated only after its
// head's MAC is right, from a budget shared by every connection of the listener. Every
// refusal is counted and reported (ServerStats.refused_requests).
//
// A sender learns the port from the ack of a gRPC ApplyParityDeltas (ParityDeltaAck.tcp_port)
// and goes back to gRPC whenever the connection fails, so a peer whose port cannot be
// reached costs one failed attempt, never a lost batch (batches are applied exactly once by
// their sequence numbers, however often they are sent).
#ifndef ECPS_PS_TCP_DELTAS_H_
#define ECPS_PS_TCP_DELTAS_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace ecps {
namespace v1 {
class ParityDeltaBatch;
class ParityDeltaAck;
}  // namespace v1

inline constexpr uint32_t kMaxAnswerMessage = 4096;
inline constexpr size_t kFrameHeadBytes = 52;
inline constexpr size_t kFrameMacBytes = 32;

// A batch frame's head, as the sender wrote it.
struct FrameHead {
  uint32_t length = 0;  // of the body that follows
  int32_t from_server = -1;
  uint64_t seq = 0;
};

// The head of a frame: the 20 bytes a MAC covers, then MessageMac(key, those bytes).
std::string EncodeFrameHead(const FrameHead& head, std::string_view key);
// The bytes a head's MAC covers, and its MAC, within `bytes` (kFrameHeadBytes long).
std::string_view FrameHeadSigned(std::string_view bytes);
std::string_view FrameHeadMac(std::string_view bytes);
// Decodes a head without its MAC: INVALID_ARGUMENT for anything but kFrameHeadBytes bytes
// with the magic; RESOURCE_EXHAUSTED for a length over `max_frame_bytes`. The caller checks
// the MAC (TcpDeltaListener's MacCheck) before it believes any field.
absl::StatusOr<FrameHead> DecodeFrameHead(std::string_view bytes, int64_t max_frame_bytes);
// Parses a frame's body into `batch`: INVALID_ARGUMENT when it is not a ParityDeltaBatch of
// head.length bytes, or not the one the head names (its from_server and seq).
absl::Status DecodeFrameBody(const FrameHead& head, std::string_view body,
                             v1::ParityDeltaBatch* batch);

// What a listener allows: anyone who can reach the port may connect, so each limit bounds
// what a connection that is not a peer can hold.
struct TcpDeltaLimits {
  int64_t max_frame_bytes = 256 << 20;  // a longer frame is refused and its connection closed
  // Frame bodies being read or applied, all connections together: a frame waits for room
  // (within frame_timeout_ms) before its body is allocated. A frame takes twice its length
  // (the body and the batch parsed from it); raised to 2 * max_frame_bytes if below.
  int64_t frame_budget_bytes = 512 << 20;
  int max_connections = 256;  // more are closed as soon as they are accepted
  // Connections whose first head has not checked out yet: when one more comes, the one that
  // has waited longest is closed. A peer writes its head as soon as it connects, so only
  // strangers ever wait long, and they cannot keep a peer out.
  int max_unauthenticated = 16;
  int head_timeout_ms = 2'000;    // from accept to a first head that checks out
  int frame_timeout_ms = 30'000;  // a frame begun must arrive (and its answer go) in this
  int idle_timeout_ms = 600'000;  // a peer's connection with no frame for this long is closed
};

class TcpDeltaListener {
 public:
  // Applies one batch (after admitting it); its status goes back as the answer.
  using Handler = std::function<absl::Status(const v1::ParityDeltaBatch&, v1::ParityDeltaAck*)>;
  // Whether `mac` is the MAC of `message` under a key of the job's servers.
  using MacCheck = std::function<bool(std::string_view message, std::string_view mac)>;
  // Told of every connection or frame the listener refuses (the handler's own refusals are
  // the handler's): why, and the remote address. Counts and logs it (rate limited).
  using RefusalSink = std::function<void(const absl::Status& why, const std::string& from)>;
  TcpDeltaListener(Handler handler, MacCheck check, RefusalSink refused,
                   TcpDeltaLimits limits = {});
  ~TcpDeltaListener();  // closes every connection and waits for their threads
  TcpDeltaListener(const TcpDeltaListener&) = delete;
  TcpDeltaListener& operator=(const TcpDeltaListener&) = delete;

  // Listens on `host` (a name or address; "0.0.0.0" for every interface) at a port the
  // system picks. UNAVAILABLE naming the host when it cannot.
  absl::Status Start(const std::string& host);
  int port() const { return port_; }
  int connections() const ABSL_LOCKS_EXCLUDED(mu_);   // open now
  int64_t refused() const { return refused_.load(); }  // connections and frames refused
  int64_t budget_in_use() const ABSL_LOCKS_EXCLUDED(budget_mu_);  // bytes of frame bodies

 private:
  // A connection's thread; `done` once it has closed its socket, for the acceptor to join.
  struct Connection {
    std::thread thread;
    bool done = false;
  };
  void AcceptLoop();
  // Serves the connection `fd` from `from` until it closes, fails or the listener stops;
  // then closes it.
  void Serve(int fd, std::string from);
  // Serve's steps. Waits for the next frame (until `head_deadline` for a connection not
  // `authenticated` yet); false, refusals counted, when none comes.
  bool AwaitFrame(int fd, const std::string& from, bool authenticated,
                  std::chrono::steady_clock::time_point head_deadline);
  // Reads a frame's head and checks its MAC and its length; nothing when the head is not
  // read by `deadline` or refused.
  std::optional<FrameHead> ReadHead(int fd, const std::string& from,
                                    std::chrono::steady_clock::time_point deadline);
  // Moves a connection whose first head checked out off the waiting list; false when it was
  // evicted meanwhile.
  bool Admit(int fd) ABSL_LOCKS_EXCLUDED(mu_);
  // Reads the body of the frame `head` heads into `body`, applies it and answers; false when
  // the connection must close. `body`, `batch` and `ack` are the connection's buffers.
  bool ServeFrame(int fd, const std::string& from, const FrameHead& head, std::string* body,
                  v1::ParityDeltaBatch* batch, v1::ParityDeltaAck* ack);
  // Refuses a frame: the answer says why (best effort, by `deadline` and within 500 ms), the
  // refusal is counted, and the caller closes the connection, since its stream cannot be
  // trusted to be in step any more.
  void RefuseFrame(int fd, const absl::Status& why, const std::string& from,
                   std::chrono::steady_clock::time_point deadline);
  void JoinFinished() ABSL_LOCKS_EXCLUDED(mu_);
  // Counts a refusal and tells the sink.
  void Refused(const absl::Status& why, const std::string& from);
  // Takes `bytes` of the frame budget, waiting for room until `deadline`; false when there
  // was none by then (or the listener is stopping).
  bool Reserve(int64_t bytes, std::chrono::steady_clock::time_point deadline)
      ABSL_LOCKS_EXCLUDED(budget_mu_);
  void Release(int64_t bytes) ABSL_LOCKS_EXCLUDED(budget_mu_);

  const Handler handler_;
  const MacCheck check_;
  const RefusalSink sink_;
  const TcpDeltaLimits limits_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<int64_t> refused_{0};
  std::thread acceptor_;
  mutable absl::Mutex mu_;
  absl::flat_hash_set<int> open_ ABSL_GUARDED_BY(mu_);  // sockets being served
  // Of them, those whose first head has not checked out yet, oldest first.
  std::deque<int> waiting_ ABSL_GUARDED_BY(mu_);
  std::list<Connection> threads_ ABSL_GUARDED_BY(mu_);  // not joined yet
  mutable absl::Mutex budget_mu_;
  int64_t budget_used_ ABSL_GUARDED_BY(budget_mu_) = 0;
};

// The sender's end: one connection to one parity server, opened on first use and after a
// failure. Not thread-safe (each stream's sender thread has its own).
class TcpDeltaConnection {
 public:
  TcpDeltaConnection() = default;
  ~TcpDeltaConnection() { Close(); }
  TcpDeltaConnection(const TcpDeltaConnection&) = delete;
  TcpDeltaConnection& operator=(const TcpDeltaConnection&) = delete;

  // Sends the batch whose serialized bytes are `head` then `records` to host:port and waits
  // for its answer, all within `timeout_ms`. The frame's head names `from_server` and `seq`
  // (the batch's own) and is signed with `key`, the token the batch carries. Returns the
  // applied sequence number; the receiver's error, marked AnsweredByPeer; or, when the
  // connection failed, UNAVAILABLE or DEADLINE_EXCEEDED (the connection is then closed).
  absl::StatusOr<uint64_t> Send(const std::string& host, int port, std::string_view key,
                                int32_t from_server, uint64_t seq, const std::string& head,
                                const std::string& records, int timeout_ms);
  void Close();

 private:
  absl::Status Connect(const std::string& host, int port, int timeout_ms);
  int fd_ = -1;
  std::string host_;
  int port_ = 0;
};

}  // namespace ecps

#endif  // ECPS_PS_TCP_DELTAS_H_
