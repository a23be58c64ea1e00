// Parity batches over plain TCP (ps/tcp_deltas.h), on real loopback sockets: what a sender
// gets back, and what the listener does with input that is not a peer's.
#include "ps/tcp_deltas.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "proto/ecps.pb.h"
#include "runtime/rpc.h"
#include "runtime/security.h"

namespace ecps {
namespace {

constexpr char kKey[] = "ecps-server-0123456789abcdef0123456789abcdef";
constexpr int32_t kFrom = 2;

// A batch as a sender serializes it: the whole message, split anywhere into head and records.
std::string Serialized(uint64_t seq, const std::string& packed) {
  v1::ParityDeltaBatch batch;
  batch.set_from_server(kFrom);
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

// A whole frame as a peer sends it: the head, signed with `key`, announcing `length` bytes of
// `body` (which may be shorter) from server kFrom with `seq`.
std::string Frame(uint32_t length, const std::string& body, uint64_t seq = 1,
                  std::string_view key = kKey) {
  return EncodeFrameHead(FrameHead{length, kFrom, seq}, key) + body;
}

// Sends `bytes` on `fd`, all of them.
void SendAll(int fd, const std::string& bytes) {
  ASSERT_EQ(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(bytes.size()));
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

// True when the listener closed `fd` (a read returns end of file before its timeout, or a
// reset: a socket closed with bytes of ours unread resets the connection).
bool ClosedByListener(int fd) {
  char c;
  const ssize_t n = ::recv(fd, &c, 1, 0);
  return n == 0 || (n < 0 && errno == ECONNRESET);
}

class TcpDeltasTest : public ::testing::Test {
 protected:
  // Starts a listener whose handler records each batch and answers with `answer_`.
  void Listen(TcpDeltaLimits limits = {}) {
    listener_ = std::make_unique<TcpDeltaListener>(
        [this](const v1::ParityDeltaBatch& batch, v1::ParityDeltaAck* ack) {
          handled_.fetch_add(1);
          std::unique_lock<std::mutex> lock(mu_);
          last_packed_ = batch.packed();
          ++in_handler_;
          cv_.notify_all();
          cv_.wait(lock, [this] { return !hold_; });
          --in_handler_;
          ack->set_applied_seq(batch.seq());
          return answer_;
        },
        [](std::string_view message, std::string_view mac) {
          return MessageMac(kKey, message) == mac;
        },
        [this](const absl::Status& why, const std::string& from) {
          std::lock_guard<std::mutex> lock(mu_);
          refusals_.push_back(why.ToString() + " from " + from);
        },
        limits);
    ASSERT_TRUE(listener_->Start("127.0.0.1").ok());
    ASSERT_GT(listener_->port(), 0);
  }

  void ExpectRefused(const std::string& bytes, absl::StatusCode code, const std::string& names);

  std::unique_ptr<TcpDeltaListener> listener_;
  std::atomic<int> handled_{0};
  std::string LastPacked() {
    std::lock_guard<std::mutex> lock(mu_);
    return last_packed_;
  }
  // The refusals the listener reported, each with its status and sender.
  std::vector<std::string> Refusals() {
    std::lock_guard<std::mutex> lock(mu_);
    return refusals_;
  }
  // Handlers wait while held.
  void Hold(bool hold) {
    std::lock_guard<std::mutex> lock(mu_);
    hold_ = hold;
    cv_.notify_all();
  }
  // Waits (10 s at most) until `n` handlers are running.
  bool InHandler(int n) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(10), [&] { return in_handler_ == n; });
  }
  std::mutex mu_;
  std::condition_variable cv_;
  bool hold_ = false;
  int in_handler_ = 0;
  std::string last_packed_;
  std::vector<std::string> refusals_;
  absl::Status answer_;
};

// The TCP sender as PeerClient uses it, with the test's key and server id.
absl::StatusOr<uint64_t> SendBatch(TcpDeltaConnection& c, int port, uint64_t seq,
                                   const std::string& packed, std::string_view key = kKey) {
  return c.Send("127.0.0.1", port, key, kFrom, seq, Serialized(seq, packed), "", 5000);
}

TEST_F(TcpDeltasTest, ABatchIsAppliedAndItsAnswerReturnsOnOneConnection) {
  Listen();
  TcpDeltaConnection connection;
  const std::string whole = Serialized(41, std::string(64, 'x'));
  // Split as PeerClient splits it: the records go as a buffer of their own.
  auto applied = connection.Send("127.0.0.1", listener_->port(), kKey, kFrom, 41,
                                 whole.substr(0, 10), whole.substr(10), 5000);
  ASSERT_TRUE(applied.ok()) << applied.status();
  EXPECT_EQ(*applied, 41u);
  EXPECT_EQ(LastPacked(), std::string(64, 'x'));

  // The handler's error is the peer's answer, and the connection stays for the next batch.
  answer_ = absl::FailedPreconditionError("stale epoch 3 < 4");
  auto refused = SendBatch(connection, listener_->port(), 42, "");
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
  auto sent = SendBatch(connection, port, 1, "");
  ASSERT_FALSE(sent.ok());
  EXPECT_EQ(sent.status().code(), absl::StatusCode::kUnavailable) << sent.status();
  EXPECT_FALSE(AnsweredByPeer(sent.status()));
}

// Sends `bytes` on a fresh connection and expects an answer with `code` and a message
// holding `names`, then the connection closed, the handler never called, and the refusal
// reported once.
void TcpDeltasTest::ExpectRefused(const std::string& bytes, absl::StatusCode code,
                                  const std::string& names) {
  const int fd = Dial(listener_->port());
  SendAll(fd, bytes);
  std::string message;
  EXPECT_EQ(ReadAnswer(fd, &message), static_cast<int>(code));
  EXPECT_NE(message.find(names), std::string::npos) << message;
  EXPECT_TRUE(ClosedByListener(fd));
  ::close(fd);
  EXPECT_EQ(handled_.load(), 0);
  EXPECT_EQ(listener_->refused(), 1);
  const std::vector<std::string> refusals = Refusals();
  ASSERT_EQ(refusals.size(), 1u);
  EXPECT_NE(refusals[0].find(names), std::string::npos) << refusals[0];
  EXPECT_NE(refusals[0].find("from 127.0.0.1:"), std::string::npos) << refusals[0];
}

TEST_F(TcpDeltasTest, AFrameThatIsNotABatchIsRefusedAndItsConnectionClosed) {
  Listen();
  const std::string junk = "\xff\xff\xff\xff not protobuf";
  ExpectRefused(Frame(static_cast<uint32_t>(junk.size()), junk),
                absl::StatusCode::kInvalidArgument, "is not a ParityDeltaBatch");
}

TEST_F(TcpDeltasTest, BytesThatAreNotAFrameHeadAreRefused) {
  Listen();
  ExpectRefused(std::string(kFrameHeadBytes, 'x'), absl::StatusCode::kInvalidArgument,
                "not a parity frame");
}

TEST_F(TcpDeltasTest, AFrameOverTheLimitIsRefusedUnread) {
  TcpDeltaLimits limits;
  limits.max_frame_bytes = 1024;
  Listen(limits);
  // 1 GiB announced, never sent.
  ExpectRefused(Frame(1u << 30, ""), absl::StatusCode::kResourceExhausted,
                "over the limit of 1024");
}

// The finding this guards against: a stranger announced 256 MiB, sent a byte, and the
// listener allocated the frame. Now a head that no server signed is refused before anything
// is reserved or allocated, whatever length it announces.
TEST_F(TcpDeltasTest, AHeadNotSignedByAServerIsRefusedBeforeAnythingIsAllocated) {
  Listen();
  const int fd = Dial(listener_->port());
  SendAll(fd, Frame(200u << 20, "x", 1, "not-the-key"));
  std::string message;
  EXPECT_EQ(ReadAnswer(fd, &message), static_cast<int>(absl::StatusCode::kUnauthenticated));
  EXPECT_NE(message.find("not signed"), std::string::npos) << message;
  EXPECT_TRUE(ClosedByListener(fd));
  ::close(fd);
  EXPECT_EQ(listener_->budget_in_use(), 0);
  EXPECT_EQ(listener_->refused(), 1);
  EXPECT_EQ(handled_.load(), 0);
}

TEST_F(TcpDeltasTest, ABatchThatIsNotTheOneItsHeadNamesIsRefused) {
  Listen();
  const std::string body = Serialized(8, "r");
  ExpectRefused(Frame(static_cast<uint32_t>(body.size()), body, /*seq=*/9),
                absl::StatusCode::kInvalidArgument, "does not match its batch");
}

TEST_F(TcpDeltasTest, AFrameLeftUnfinishedIsDroppedAndOthersAreStillServed) {
  TcpDeltaLimits limits;
  limits.frame_timeout_ms = 200;
  Listen(limits);
  const int stalled = Dial(listener_->port());
  SendAll(stalled, Frame(100, "abc"));  // 97 bytes short, for good
  EXPECT_TRUE(ClosedByListener(stalled)) << "still open past the frame timeout";
  ::close(stalled);
  EXPECT_EQ(listener_->refused(), 1);
  EXPECT_EQ(listener_->budget_in_use(), 0) << "the frame's room given back";
  TcpDeltaConnection connection;
  auto applied = SendBatch(connection, listener_->port(), 7, "r");
  ASSERT_TRUE(applied.ok()) << applied.status();
  EXPECT_EQ(handled_.load(), 1);
}

TEST_F(TcpDeltasTest, AConnectionThatSendsNoHeadIsClosedAtTheHeadDeadline) {
  TcpDeltaLimits limits;
  limits.head_timeout_ms = 200;
  Listen(limits);
  const int silent = Dial(listener_->port());
  EXPECT_TRUE(ClosedByListener(silent)) << "still open past the head deadline";
  ::close(silent);
  EXPECT_EQ(listener_->refused(), 1);
  const std::vector<std::string> refusals = Refusals();
  ASSERT_EQ(refusals.size(), 1u);
  EXPECT_NE(refusals[0].find("no frame head within 200 ms"), std::string::npos) << refusals[0];
}

// Strangers who connect and say nothing hold at most max_unauthenticated connections; the
// oldest gives way to each newcomer, so a peer that connects among them is still served.
TEST_F(TcpDeltasTest, StrangersWaitingForTheirHeadCannotKeepAPeerOut) {
  TcpDeltaLimits limits;
  limits.max_unauthenticated = 3;
  Listen(limits);
  std::vector<int> strangers;
  for (int i = 0; i < 10; ++i) strangers.push_back(Dial(listener_->port()));
  TcpDeltaConnection peer;
  auto applied = SendBatch(peer, listener_->port(), 1, "r");
  ASSERT_TRUE(applied.ok()) << applied.status();
  // Of the ten, the seven oldest were closed for the newer ones, and one more for the peer.
  int closed = 0;
  for (int fd : strangers) {
    timeval short_wait{0, 200'000};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &short_wait, sizeof(short_wait));
    closed += ClosedByListener(fd);
    ::close(fd);
  }
  EXPECT_EQ(closed, 8);
  EXPECT_GE(listener_->refused(), 8);
  // The peer's connection is trusted now, and stays.
  ASSERT_TRUE(SendBatch(peer, listener_->port(), 2, "r").ok());
}

// Frames in flight share one budget: a frame waits for room before its body is allocated,
// and one that finds none within the frame timeout is refused.
TEST_F(TcpDeltasTest, AFrameWaitsForRoomInTheBudget) {
  TcpDeltaLimits limits;
  limits.max_frame_bytes = 400;
  limits.frame_budget_bytes = 1000;  // two frames of up to 400 bytes: 800 of it each
  limits.frame_timeout_ms = 300;
  Listen(limits);
  Hold(true);
  TcpDeltaConnection first;
  absl::StatusOr<uint64_t> first_sent;
  std::thread sender(
      [&] { first_sent = SendBatch(first, listener_->port(), 1, std::string(250, 'z')); });
  ASSERT_TRUE(InHandler(1));
  EXPECT_GT(listener_->budget_in_use(), 500);
  // A second frame of 300 bytes needs 600: no room while the first is held, so it is
  // refused when its frame timeout passes, unread.
  const std::string body = Serialized(2, std::string(250, 'y'));
  ASSERT_LE(body.size(), 300u);
  const int fd = Dial(listener_->port());
  SendAll(fd, Frame(300, body, 2));
  std::string message;
  EXPECT_EQ(ReadAnswer(fd, &message), static_cast<int>(absl::StatusCode::kResourceExhausted));
  EXPECT_NE(message.find("no room for a parity frame of 300 bytes"), std::string::npos)
      << message;
  ::close(fd);
  Hold(false);
  sender.join();
  ASSERT_TRUE(first_sent.ok()) << first_sent.status();
  // The room is given back once the answer is written, just after the sender has read it.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (listener_->budget_in_use() != 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  EXPECT_EQ(listener_->budget_in_use(), 0);
}

TEST_F(TcpDeltasTest, ConnectionsOverTheCapAreClosedAtOnce) {
  TcpDeltaLimits limits;
  limits.max_connections = 2;
  Listen(limits);
  TcpDeltaConnection a, b;
  ASSERT_TRUE(SendBatch(a, listener_->port(), 1, "").ok());
  ASSERT_TRUE(SendBatch(b, listener_->port(), 1, "").ok());
  const int third = Dial(listener_->port());
  EXPECT_TRUE(ClosedByListener(third));
  ::close(third);
  EXPECT_EQ(listener_->refused(), 1);
  EXPECT_EQ(listener_->connections(), 2);
  // The connections it holds still work.
  EXPECT_TRUE(SendBatch(a, listener_->port(), 2, "").ok());
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
  auto sent = SendBatch(connection, ntohs(addr.sin_port), 1, "");
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
