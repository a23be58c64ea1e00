// Unit tests of DeltaStreams (ps/delta_stream.h) over fake transports: an unreachable parity
// server is reported and still gets everything exactly once when it answers; lingering
// coalesces pushes into one batch, and only versions that join up coalesce.
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "proto/ecps.pb.h"
#include "ps/delta_stream.h"
#include "ps/peer_client.h"
#include "runtime/rpc.h"

namespace ecps {
namespace {

// A parity server that does not answer is reported (so the coordinator suspects it at
// once), and what the stream carried still arrives, exactly once, when it answers again.
class DownThenUpTransport : public DeltaTransport {
 public:
  absl::StatusOr<uint64_t> Send(int /*peer*/, const v1::ParityDeltaBatch& batch) override {
    if (failures_left.fetch_sub(1) > 0) return absl::UnavailableError("connection refused");
    return batch.seq();
  }
  std::string AddressOf(int peer) override { return "10.0.0." + std::to_string(peer) + ":7000"; }
  std::atomic<int> failures_left{3};
};

TEST(DeltaStreams, ReportsAnUnreachableParityServer) {
  DownThenUpTransport down;
  std::mutex mu;
  std::vector<std::pair<int, std::string>> reported;
  DeltaStreamOptions options;
  options.resend.initial_backoff = std::chrono::milliseconds(1);
  options.on_unreachable = [&](int peer, const std::string& address) {
    std::lock_guard<std::mutex> lock(mu);
    reported.emplace_back(peer, address);
  };
  DeltaStreams streams(0, 3, &down, options, [](v1::ParityDeltaBatch*) {});
  DeltaStreams::Batch batch;
  const uint8_t delta[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  DeltaStreams::Batch::Header h;
  h.stripe = 4;
  h.j = 1;
  h.to = 1;
  batch.Add(h, delta, sizeof(delta));
  const uint64_t ticket = streams.EnqueueBatch(2, std::move(batch));
  ASSERT_TRUE(streams.WaitAcked(2, ticket, std::chrono::seconds(30)).ok());
  std::lock_guard<std::mutex> lock(mu);
  const std::pair<int, std::string> report(2, "10.0.0.2:7000");
  const std::vector<std::pair<int, std::string>> want(3, report);
  EXPECT_EQ(reported, want);
}

// A parity server that answers UNAVAILABLE (still initialising) is alive: the stream
// retries it and does not report it.
TEST(DeltaStreams, DoesNotReportAPeerThatAnswered) {
  class AnswersNotReady : public DeltaTransport {
   public:
    absl::StatusOr<uint64_t> Send(int /*peer*/, const v1::ParityDeltaBatch& batch) override {
      if (answers_left.fetch_sub(1) > 0) {
        return FromGrpcStatus(ToGrpcStatus(absl::UnavailableError("still initialising")));
      }
      return batch.seq();
    }
    std::atomic<int> answers_left{3};
  } peer;
  std::atomic<int> reports{0};
  DeltaStreamOptions options;
  options.resend.initial_backoff = std::chrono::milliseconds(1);
  options.on_unreachable = [&](int, const std::string&) { ++reports; };
  DeltaStreams streams(0, 3, &peer, options, [](v1::ParityDeltaBatch*) {});
  DeltaStreams::Batch batch;
  const uint8_t delta[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  DeltaStreams::Batch::Header h;
  h.to = 1;
  batch.Add(h, delta, sizeof(delta));
  const uint64_t ticket = streams.EnqueueBatch(2, std::move(batch));
  ASSERT_TRUE(streams.WaitAcked(2, ticket, std::chrono::seconds(30)).ok());
  EXPECT_LE(peer.answers_left.load(), 0) << "the answers were retried";
  EXPECT_EQ(reports.load(), 0);
}

// Records every batch it is handed and acknowledges it.
class RecordingTransport : public DeltaTransport {
 public:
  absl::StatusOr<uint64_t> Send(int /*peer*/, const v1::ParityDeltaBatch& batch) override {
    std::lock_guard<std::mutex> lock(mu);
    batches.push_back(batch);
    cv.notify_all();
    return batch.seq();
  }
  // Waits until `n` batches arrived or `timeout` passed; returns how many arrived.
  size_t WaitFor(size_t n, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait_for(lock, timeout, [&] { return batches.size() >= n; });
    return batches.size();
  }
  std::mutex mu;
  std::condition_variable cv;
  std::vector<v1::ParityDeltaBatch> batches;
};

// A delta of data member 1 of `stripe` of table 0, taking the row from version `to` - 1 to
// `to`.
DeltaStreams::Batch OneDelta(int64_t stripe, uint8_t value, uint32_t to = 1) {
  DeltaStreams::Batch batch;
  const uint8_t delta[8] = {value, value, value, value, value, value, value, value};
  DeltaStreams::Batch::Header h;
  h.stripe = stripe;
  h.j = 1;
  h.from = to - 1;
  h.to = to;
  batch.Add(h, delta, sizeof(delta));
  return batch;
}

// A wide window and a linger far longer than any test: only a waiter sends a batch.
DeltaStreamOptions HeldBack() {
  DeltaStreamOptions options;
  options.window = 1000;
  options.linger_ms = 60'000;
  return options;
}

// One record of a sent batch: its header and the first byte of its (OneDelta) delta.
struct SentRecord {
  DeltaStreams::Batch::Header header;
  uint8_t first_byte;
};

// Waits until `ticket` is acknowledged, checks that everything went out in one batch, and
// returns that batch's records (empty, with a failure recorded, otherwise).
std::vector<SentRecord> OnlyBatch(DeltaStreams* streams, RecordingTransport* transport,
                                  uint64_t ticket) {
  std::vector<SentRecord> records;
  if (!streams->WaitAcked(1, ticket, std::chrono::seconds(30)).ok()) {
    ADD_FAILURE() << "the deltas were not acknowledged";
    return records;
  }
  std::lock_guard<std::mutex> lock(transport->mu);
  if (transport->batches.size() != 1u) {
    ADD_FAILURE() << transport->batches.size() << " batches sent, want 1";
    return records;
  }
  const std::string& packed = transport->batches[0].packed();
  const size_t record = DeltaStreams::Batch::kHeader + 8;
  EXPECT_EQ(packed.size() % record, 0u);
  for (size_t at = 0; at + record <= packed.size(); at += record) {
    records.push_back({DeltaStreams::Batch::ReadHeader(packed.data() + at),
                       static_cast<uint8_t>(packed[at + DeltaStreams::Batch::kHeader])});
  }
  return records;
}

TEST(DeltaStreams, LingerCoalescesPushesIntoOneBatchAndAWaiterFlushesIt) {
  RecordingTransport transport;
  DeltaStreams streams(0, 2, &transport, HeldBack(), [](v1::ParityDeltaBatch*) {});
  streams.EnqueueBatch(1, OneDelta(/*stripe=*/5, 0x0f, /*to=*/7));
  // Lingering: nothing goes out while no one waits and the window is far from full.
  EXPECT_EQ(transport.WaitFor(1, std::chrono::milliseconds(300)), 0u);
  streams.EnqueueBatch(1, OneDelta(/*stripe=*/5, 0xf1, /*to=*/8));
  const uint64_t ticket = streams.EnqueueBatch(1, OneDelta(/*stripe=*/9, 0x22));
  const auto start = std::chrono::steady_clock::now();
  const std::vector<SentRecord> sent = OnlyBatch(&streams, &transport, ticket);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
  // Three pushes, two parity rows: stripe 5's deltas were XORed into one record.
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[0].header.stripe, 5);
  // The merged record takes the row from before the first update to after the second.
  EXPECT_EQ(sent[0].header.from, 6u);
  EXPECT_EQ(sent[0].header.to, 8u);
  EXPECT_EQ(sent[0].first_byte, 0x0f ^ 0xf1);
}

// Two pushes of one row can queue their deltas in the other order, and an update between two
// queued ones may have gone in an earlier batch: a merged record must hold exactly the
// updates from its `from` to its `to`, so only versions that join up are merged.
TEST(DeltaStreams, CoalescesOnlyVersionsThatJoinUp) {
  RecordingTransport transport;
  DeltaStreams streams(0, 2, &transport, HeldBack(), [](v1::ParityDeltaBatch*) {});
  streams.EnqueueBatch(1, OneDelta(/*stripe=*/5, 0x01, /*to=*/8));  // 7 -> 8 first
  streams.EnqueueBatch(1, OneDelta(/*stripe=*/5, 0x02, /*to=*/7));  // then 6 -> 7
  streams.EnqueueBatch(1, OneDelta(/*stripe=*/5, 0x04, /*to=*/10));  // 9 -> 10: 8 -> 9 missing
  const uint64_t ticket = streams.EnqueueBatch(1, OneDelta(/*stripe=*/5, 0x08, /*to=*/11));
  const std::vector<SentRecord> sent = OnlyBatch(&streams, &transport, ticket);
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[0].header.from, 6u);
  EXPECT_EQ(sent[0].header.to, 8u);
  EXPECT_EQ(sent[0].first_byte, 0x01 ^ 0x02);
  EXPECT_EQ(sent[1].header.from, 9u);
  EXPECT_EQ(sent[1].header.to, 11u);
  EXPECT_EQ(sent[1].first_byte, 0x04 ^ 0x08);
}

TEST(DeltaStreams, AfterStopCoalescingEveryUpdateIsItsOwnRecord) {
  RecordingTransport transport;
  DeltaStreams streams(0, 2, &transport, HeldBack(), [](v1::ParityDeltaBatch*) {});
  streams.StopCoalescing(1);
  streams.EnqueueBatch(1, OneDelta(/*stripe=*/5, 0x0f, /*to=*/7));
  const uint64_t ticket = streams.EnqueueBatch(1, OneDelta(/*stripe=*/5, 0xf1, /*to=*/8));
  const std::vector<SentRecord> sent = OnlyBatch(&streams, &transport, ticket);
  ASSERT_EQ(sent.size(), 2u);
  for (uint32_t i = 0; i < 2; ++i) {
    EXPECT_EQ(sent[i].header.stripe, 5);
    EXPECT_EQ(sent[i].header.from, 6u + i);
    EXPECT_EQ(sent[i].header.to, 7u + i);
  }
}

TEST(DeltaStreams, LingerEndsWhenMostOfTheWindowIsPending) {
  RecordingTransport transport;
  DeltaStreamOptions options;
  options.window = 4;  // sends once 3 deltas are pending
  options.linger_ms = 60'000;
  DeltaStreams streams(0, 2, &transport, options, [](v1::ParityDeltaBatch*) {});
  streams.EnqueueBatch(1, OneDelta(1, 1));
  streams.EnqueueBatch(1, OneDelta(2, 2));
  EXPECT_EQ(transport.WaitFor(1, std::chrono::milliseconds(300)), 0u);
  streams.EnqueueBatch(1, OneDelta(3, 3));
  EXPECT_EQ(transport.WaitFor(1, std::chrono::seconds(30)), 1u);
}

// A push's records are queued as the push made them; a batch takes whole pushes up to its
// limit and splits only a push larger than what is left of it. Every record goes once, in
// order.
TEST(DeltaStreams, BatchesTakeWholePushesAndSplitOnlyAtTheLimit) {
  RecordingTransport transport;
  DeltaStreamOptions options = HeldBack();
  options.max_batch_deltas = 3;
  DeltaStreams streams(0, 2, &transport, options, [](v1::ParityDeltaBatch*) {});
  // A push of n rows' deltas, stripes first, first + 1, ...; each delta's bytes are its stripe.
  auto push = [](int64_t first, int n) {
    DeltaStreams::Batch batch;
    for (int64_t stripe = first; stripe < first + n; ++stripe) {
      DeltaStreams::Batch::Header h;
      h.stripe = stripe;
      h.j = 1;
      h.to = 1;
      const std::vector<uint8_t> delta(8, static_cast<uint8_t>(stripe));
      batch.Add(h, delta.data(), delta.size());
    }
    return batch;
  };
  streams.EnqueueBatch(1, push(10, 5));  // larger than a batch
  const uint64_t ticket = streams.EnqueueBatch(1, push(20, 2));
  ASSERT_EQ(ticket, 7u);
  ASSERT_TRUE(streams.WaitAcked(1, ticket, std::chrono::seconds(30)).ok());
  std::lock_guard<std::mutex> lock(transport.mu);
  std::vector<int64_t> stripes;
  const size_t record = DeltaStreams::Batch::kHeader + 8;
  for (const v1::ParityDeltaBatch& b : transport.batches) {
    EXPECT_LE(b.packed().size(), 3 * record) << "a batch over the limit";
    for (size_t at = 0; at + record <= b.packed().size(); at += record) {
      const auto h = DeltaStreams::Batch::ReadHeader(b.packed().data() + at);
      stripes.push_back(h.stripe);
      EXPECT_EQ(static_cast<uint8_t>(b.packed()[at + DeltaStreams::Batch::kHeader]),
                static_cast<uint8_t>(h.stripe));
    }
  }
  EXPECT_EQ(stripes, (std::vector<int64_t>{10, 11, 12, 13, 14, 20, 21}));
  EXPECT_EQ(transport.batches.size(), 3u);  // 3 records, 2 + 1, 1
}

}  // namespace
}  // namespace ecps

namespace ecps {
namespace {

// PeerClient::SendPacked puts the batch's own fields, then the records as field 6 with no
// copy: the bytes must parse to the very batch Send would have sent, records included, and
// be as long as the streams count it.
TEST(DeltaStreams, RecordsSentApartParseToTheWholeBatch) {
  v1::ParityDeltaBatch batch;
  batch.mutable_header()->set_token("t");
  batch.mutable_header()->set_epoch(7);
  batch.set_from_server(3);
  batch.set_seq(41);
  batch.set_sender_instance("123@host:1");
  batch.set_delta_bytes(8);
  for (size_t records : {0u, 1u, 5u, 2000u}) {  // lengths with 0-, 1-, 2- and 3-byte varints
    std::string packed;
    DeltaStreams::Batch b;
    for (size_t i = 0; i < records; ++i) {
      DeltaStreams::Batch::Header h;
      h.table = static_cast<int>(i % 3);
      h.stripe = static_cast<int64_t>(i);
      h.to = 1;
      const uint8_t delta[8] = {1, 2, 3, 4, 5, 6, 7, static_cast<uint8_t>(i)};
      b.Add(h, delta, sizeof(delta));
    }
    const std::string wire = PeerClient::EncodeDeltaHead(batch, b.packed.size()) + b.packed;
    v1::ParityDeltaBatch parsed;
    ASSERT_TRUE(parsed.ParseFromString(wire)) << records << " records";
    v1::ParityDeltaBatch whole = batch;
    whole.set_packed(b.packed);
    EXPECT_EQ(parsed.SerializeAsString(), whole.SerializeAsString()) << records << " records";
    EXPECT_EQ(wire.size(), whole.ByteSizeLong()) << records << " records";
  }
}

}  // namespace
}  // namespace ecps
