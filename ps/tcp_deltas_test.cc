// Parity batches over plain TCP (ps/tcp_deltas.h), on real loopback sockets: what a sender
// gets back, and what the listener does with input that is not a peer's.
#include "ps/tcp_deltas.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "gtest/gtest.h"
#include "proto/ecps.pb.h"
#include "runtime/rpc.h"

namespace ecps {
namespace {

// A batch as a sender serializes it: the whole message, split anywhere into head and records.
std::string Serialized(uint64_t seq, const std::string& packed) {
  v1::ParityDeltaBatch batch;
  batch.set_from_server(2);
  batch.set_seq(seq);
  batch.set_packed(packed);
  batch.set_delta_bytes(8);
  return batch.SerializeAsString();
}

// A plain client socket connected to 127.0.0.1:port, with `timeout_ms` on its reads.
int Dial(int port, int timeout_ms = 10'000) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

// Reads an answer frame from `fd`: its code (-1 when the connection closed or timed out
// first) and message.
int ReadAnswer(int fd, std::string* message) {
  uint32_t head[2];
  if (::recv(fd, head, sizeof(head), MSG_WAITALL) != sizeof(head)) return -1;
  message->assign(head[1], '\0');
  uint64_t seq;
  if (head[1] > 0 && ::recv(fd, message->data(), head[1], MSG_WAITALL) != head[1]) return -1;
  if (::recv(fd, &seq, 8, MSG_WAITALL) != 8) return -1;
  return static_cast<int>(head[0]);
}

// True when the listener closed `fd` (a read returns end of file before its timeout).
bool ClosedByListener(int fd) {
  char c;
  return ::recv(fd, &c, 1, 0) == 0;
}

class TcpDeltasTest : public ::testing::Test {
 protected:
  // Starts a listener whose handler records each batch and answers with `answer_`.
  void Listen(TcpDeltaLimits limits = {}) {
    listener_ = std::make_unique<TcpDeltaListener>(
        [this](const v1::ParityDeltaBatch& batch, v1::ParityDeltaAck* ack) {
          handled_.fetch_add(1);
          std::lock_guard<std::mutex> lock(mu_);
          last_packed_ = batch.packed();
          ack->set_applied_seq(batch.seq());
          return answer_;
        },
        limits);
    ASSERT_TRUE(listener_->Start("127.0.0.1").ok());
    ASSERT_GT(listener_->port(), 0);
  }

  void ExpectRefused(uint32_t length, const std::string& body, absl::StatusCode code,
                     const std::string& names);

  std::unique_ptr<TcpDeltaListener> listener_;
  std::atomic<int> handled_{0};
  std::string LastPacked() {
    std::lock_guard<std::mutex> lock(mu_);
    return last_packed_;
  }
  std::mutex mu_;
  std::string last_packed_;
  absl::Status answer_;
};

TEST_F(TcpDeltasTest, ABatchIsAppliedAndItsAnswerReturnsOnOneConnection) {
  Listen();
  TcpDeltaConnection connection;
  const std::string whole = Serialized(41, std::string(64, 'x'));
  // Split as PeerClient splits it: the records go as a buffer of their own.
  auto applied = connection.Send("127.0.0.1", listener_->port(), whole.substr(0, 10),
                                 whole.substr(10), 5000);
  ASSERT_TRUE(applied.ok()) << applied.status();
  EXPECT_EQ(*applied, 41u);
  EXPECT_EQ(LastPacked(), std::string(64, 'x'));

  // The handler's error is the peer's answer, and the connection stays for the next batch.
  answer_ = absl::FailedPreconditionError("stale epoch 3 < 4");
  auto refused = connection.Send("127.0.0.1", listener_->port(), Serialized(42, ""), "", 5000);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(refused.status().message(), "stale epoch 3 < 4");
  EXPECT_TRUE(AnsweredByPeer(refused.status()));
  EXPECT_EQ(handled_.load(), 2);
  EXPECT_EQ(listener_->connections(), 1);
}

TEST_F(TcpDeltasTest, NothingListeningIsUnavailableNotAnAnswer) {
  Listen();
  const int port = listener_->port();
  listener_.reset();  // the port is closed now
  TcpDeltaConnection connection;
  auto sent = connection.Send("127.0.0.1", port, Serialized(1, ""), "", 2000);
  ASSERT_FALSE(sent.ok());
  EXPECT_EQ(sent.status().code(), absl::StatusCode::kUnavailable) << sent.status();
  EXPECT_FALSE(AnsweredByPeer(sent.status()));
}

// Sends a frame's length and `body` (which may be shorter) on a fresh connection and expects
// an answer with `code` and a message holding `names`, then the connection closed, and the
// handler never called.
void TcpDeltasTest::ExpectRefused(uint32_t length, const std::string& body, absl::StatusCode code,
                                  const std::string& names) {
  const int fd = Dial(listener_->port());
  ASSERT_EQ(::send(fd, &length, 4, 0), 4);
  if (!body.empty()) {
    ASSERT_EQ(::send(fd, body.data(), body.size(), 0), static_cast<ssize_t>(body.size()));
  }
  std::string message;
  EXPECT_EQ(ReadAnswer(fd, &message), static_cast<int>(code));
  EXPECT_NE(message.find(names), std::string::npos) << message;
  EXPECT_TRUE(ClosedByListener(fd));
  ::close(fd);
  EXPECT_EQ(handled_.load(), 0);
}

TEST_F(TcpDeltasTest, AFrameThatIsNotABatchIsRefusedAndItsConnectionClosed) {
  Listen();
  const std::string junk = "\xff\xff\xff\xff not protobuf";
  ExpectRefused(static_cast<uint32_t>(junk.size()), junk, absl::StatusCode::kInvalidArgument,
                "is not a ParityDeltaBatch");
}

TEST_F(TcpDeltasTest, AFrameOverTheLimitIsRefusedUnread) {
  TcpDeltaLimits limits;
  limits.max_frame_bytes = 1024;
  Listen(limits);
  // 1 GiB announced, never sent.
  ExpectRefused(1u << 30, "", absl::StatusCode::kResourceExhausted, "over the limit of 1024");
}

TEST_F(TcpDeltasTest, AFrameLeftUnfinishedIsDroppedAndOthersAreStillServed) {
  TcpDeltaLimits limits;
  limits.frame_timeout_ms = 200;
  Listen(limits);
  const int stalled = Dial(listener_->port());
  const uint32_t length = 100;
  ASSERT_EQ(::send(stalled, &length, 4, 0), 4);
  ASSERT_EQ(::send(stalled, "abc", 3, 0), 3);  // 97 bytes short, for good
  EXPECT_TRUE(ClosedByListener(stalled)) << "still open past the frame timeout";
  ::close(stalled);
  TcpDeltaConnection connection;
  auto applied = connection.Send("127.0.0.1", listener_->port(), Serialized(7, "r"), "", 5000);
  ASSERT_TRUE(applied.ok()) << applied.status();
  EXPECT_EQ(handled_.load(), 1);
}

TEST_F(TcpDeltasTest, ConnectionsOverTheCapAreClosedAtOnce) {
  TcpDeltaLimits limits;
  limits.max_connections = 2;
  Listen(limits);
  TcpDeltaConnection a, b;
  ASSERT_TRUE(a.Send("127.0.0.1", listener_->port(), Serialized(1, ""), "", 5000).ok());
  ASSERT_TRUE(b.Send("127.0.0.1", listener_->port(), Serialized(1, ""), "", 5000).ok());
  const int third = Dial(listener_->port());
  EXPECT_TRUE(ClosedByListener(third));
  ::close(third);
  EXPECT_EQ(listener_->refused(), 1);
  EXPECT_EQ(listener_->connections(), 2);
  // The connections it holds still work.
  EXPECT_TRUE(a.Send("127.0.0.1", listener_->port(), Serialized(2, ""), "", 5000).ok());
}

TEST_F(TcpDeltasTest, AnAnswerThatIsNotAParityServersIsAFailedConnection) {
  // Something else on the port: it reads anything and writes a frame no listener would.
  const int server = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(server, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(server, 1), 0);
  socklen_t size = sizeof(addr);
  ::getsockname(server, reinterpret_cast<sockaddr*>(&addr), &size);
  std::thread other([server] {
    const int fd = ::accept(server, nullptr, nullptr);
    char buf[256];
    ::recv(fd, buf, sizeof(buf), 0);
    const uint32_t reply[4] = {99, 0xffffffff, 0, 0};  // no such code, a 4 GiB message
    ::send(fd, reply, sizeof(reply), MSG_NOSIGNAL);
    ::close(fd);
  });
  TcpDeltaConnection connection;
  auto sent = connection.Send("127.0.0.1", ntohs(addr.sin_port), Serialized(1, ""), "", 5000);
  other.join();
  ::close(server);
  ASSERT_FALSE(sent.ok());
  EXPECT_EQ(sent.status().code(), absl::StatusCode::kUnavailable) << sent.status();
  EXPECT_NE(sent.status().message().find("not a parity server's"), std::string::npos)
      << sent.status();
  EXPECT_FALSE(AnsweredByPeer(sent.status()));
}

}  // namespace
}  // namespace ecps
