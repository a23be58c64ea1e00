// Parity delta batches on plain TCP (fault_tolerance.parity_transport: tcp): one connection
// per (data server, parity server) pair, a blocking write of the batch and a read of its
// answer on the sender's thread, one thread per connection on the receiver. It carries the
// same serialized ParityDeltaBatch as the gRPC method ApplyParityDeltas and the receiver
// admits it the same way (the token in its header), but without gRPC's HTTP/2 framing, call
// objects and pollers, which are most of what a delta batch costs a server on gRPC
// (docs/scaling.md). There is no encryption, so a job with security.tls cannot use it.
//
// Frames, little-endian:
//   batch:  u32 length, then `length` bytes of a serialized ParityDeltaBatch
//   answer: u32 status code (absl::StatusCode), u32 message length (at most
//           kMaxAnswerMessage), the message, u64 applied_seq (0 unless the code is OK)
//
// A sender learns the port from the ack of a gRPC ApplyParityDeltas (ParityDeltaAck.tcp_port)
// and goes back to gRPC whenever the connection fails, so a peer whose port cannot be
// reached costs one failed attempt, never a lost batch (batches are applied exactly once by
// their sequence numbers, however often they are sent).
#ifndef ECPS_PS_TCP_DELTAS_H_
#define ECPS_PS_TCP_DELTAS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <list>
#include <string>
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

// What a listener allows a connection: anyone who can reach the port may connect, so each
// limit bounds what a connection that is not a peer can hold.
struct TcpDeltaLimits {
  int64_t max_frame_bytes = 256 << 20;  // a longer frame is refused and its connection closed
  int max_connections = 256;            // more are closed as soon as they are accepted
  int frame_timeout_ms = 30'000;        // a frame begun must arrive (and its answer go) in this
  int idle_timeout_ms = 600'000;        // a connection with no frame for this long is closed
};

class TcpDeltaListener {
 public:
  // Applies one batch (after admitting it); its status goes back as the answer.
  using Handler = std::function<absl::Status(const v1::ParityDeltaBatch&, v1::ParityDeltaAck*)>;
  TcpDeltaListener(Handler handler, TcpDeltaLimits limits = {});
  ~TcpDeltaListener();  // closes every connection and waits for their threads
  TcpDeltaListener(const TcpDeltaListener&) = delete;
  TcpDeltaListener& operator=(const TcpDeltaListener&) = delete;

  // Listens on `host` (a name or address; "0.0.0.0" for every interface) at a port the
  // system picks. UNAVAILABLE naming the host when it cannot.
  absl::Status Start(const std::string& host);
  int port() const { return port_; }
  int connections() const ABSL_LOCKS_EXCLUDED(mu_);   // open now
  int64_t refused() const { return refused_.load(); }  // closed at once: over max_connections

 private:
  // A connection's thread; `done` once it has closed its socket, for the acceptor to join.
  struct Connection {
    std::thread thread;
    bool done = false;
  };
  void AcceptLoop();
  void Serve(int fd);
  void JoinFinished() ABSL_LOCKS_EXCLUDED(mu_);

  const Handler handler_;
  const TcpDeltaLimits limits_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<int64_t> refused_{0};
  std::thread acceptor_;
  mutable absl::Mutex mu_;
  absl::flat_hash_set<int> open_ ABSL_GUARDED_BY(mu_);  // sockets being served
  std::list<Connection> threads_ ABSL_GUARDED_BY(mu_);  // not joined yet
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
  // for its answer, all within `timeout_ms`. Returns the applied sequence number; the
  // receiver's error, marked AnsweredByPeer; or, when the connection failed, UNAVAILABLE or
  // DEADLINE_EXCEEDED (the connection is then closed).
  absl::StatusOr<uint64_t> Send(const std::string& host, int port, const std::string& head,
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
