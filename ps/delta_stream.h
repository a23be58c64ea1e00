// Parity deltas from this (data) server to the parity holders: one ordered stream per
// (this server, parity server) pair, batched, with sequence numbers and acks
// (docs/architecture.md, "Parity, replicas and scrub").
//
// Enqueue hands a delta to the stream of one parity server and returns its ticket (the
// stream's count of deltas so far). A sender thread per stream takes everything pending,
// coalesces deltas to the same parity row (same table, stripe and data position: XOR; the
// merged delta carries the row's versions before the first and after the last update in
// it), and sends it as one batch with the next sequence number; it resends the same batch
// (same number) until the receiver acknowledges it, so a batch is applied exactly once
// however often the network drops or repeats it. WaitAcked blocks until a ticket is acknowledged.
// Thread-safe.
#ifndef ECPS_PS_DELTA_STREAM_H_
#define ECPS_PS_DELTA_STREAM_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "runtime/retry_policy.h"

namespace ecps {
namespace v1 {
class ParityDeltaBatch;
}

// The network between servers, as the delta streams see it: the seam that lets tests drop,
// delay and duplicate batches without touching the production path.
class DeltaTransport {
 public:
  virtual ~DeltaTransport() = default;
  // Delivers `batch` to parity server `peer`; returns the highest sequence number the peer
  // has applied from this sender, or the error.
  virtual absl::StatusOr<uint64_t> Send(int peer, const v1::ParityDeltaBatch& batch) = 0;
  // The same, with the batch's packed records held apart (`batch` has none of its own), so
  // that a transport can put them on the wire without copying them; it may keep `packed`
  // after it returns. By default they are copied into a batch for Send.
  virtual absl::StatusOr<uint64_t> SendPacked(int peer, const v1::ParityDeltaBatch& batch,
                                              std::shared_ptr<const std::string> packed);
  // The address Send reaches `peer` at now; empty when the transport has none.
  virtual std::string AddressOf(int /*peer*/) { return ""; }
  // Server `peer` is another process now (a replacement): forget what was learnt of the old
  // one (the transport's own address book follows the peer client).
  virtual void PeerMoved(int /*peer*/) {}
  // Batches this transport sent over plain TCP (parity_transport: tcp); 0 for the others.
  virtual int64_t tcp_batches() { return 0; }
};

// Hears of a peer server that looks down: its id and the address that failed (may be empty).
using UnreachableFn = std::function<void(int peer, const std::string& address)>;

// The default DeltaStreamOptions::resend.
inline RetryPolicy ResendRetry() {
  RetryPolicy policy;
  policy.initial_backoff = std::chrono::milliseconds(5);
  policy.multiplier = 2;
  policy.max_backoff = std::chrono::milliseconds(500);
  policy.codes = StatusCodeSet::AllErrors();
  return policy;
}

struct DeltaStreamOptions {
  int max_batch_deltas = 8192;  // deltas per batch, after coalescing
  int window = 0;               // >0: Enqueue blocks while this many are unacknowledged
  // >0: the sender waits up to this long after the first pending delta before sending, so
  // that the deltas of several pushes go as one coalesced batch (fewer, larger messages). It
  // sends at once when someone waits for an acknowledgement (WaitAcked, Drain, an Enqueue
  // held back by the window) or when three quarters of the window are pending.
  int linger_ms = 0;
  // How a batch is resent until its ack: 5 ms doubling to 500 ms, whatever the error, for as
  // long as it takes (a stream never gives a batch up; the peer is replaced if it is dead).
  RetryPolicy resend = ResendRetry();
  std::string instance;  // this process's incarnation, stamped on every batch
  // Called with the peer and its address when a send fails as if the peer were down
  // (UNAVAILABLE or DEADLINE_EXCEEDED): the coordinator hears of a dead parity server at once.
  UnreachableFn on_unreachable;
};

class DeltaStreams {
 public:
  // `self` is this server's id; `header` fills each batch's request header (token, epoch)
  // at send time.
  DeltaStreams(int self, int servers, DeltaTransport* transport, DeltaStreamOptions options,
               std::function<void(v1::ParityDeltaBatch*)> header);
  ~DeltaStreams();  // stops the sender threads; unsent deltas are dropped

  // Deltas headed for one parity server, gathered before they are queued in one go, already
  // in the wire format: records of a 24-byte header (int32 table, int32 j, int64 stripe,
  // uint32 from_version, uint32 to_version, little-endian) followed by the delta, all deltas
  // of one length.
  struct Batch {
    static constexpr size_t kHeader = 24;
    struct Header {
      int table = 0;
      int j = 0;
      int64_t stripe = 0;
      uint32_t from = 0;  // the data row's version before and after the delta
      uint32_t to = 0;
      // The header of data row `row`'s delta, in stripes of k rows.
      static Header ForRow(int table, int64_t row, int k, uint32_t from, uint32_t to) {
        return Header{table, static_cast<int>(row % k), row / k, from, to};
      }
    };
    std::string packed;
    size_t count = 0;
    size_t len = 0;
    // Room for `records` more records of `bytes`-byte deltas.
    void Reserve(size_t records, size_t bytes) {
      packed.reserve(packed.size() + records * (kHeader + bytes));
    }
    // Appends a record with `header` and returns where its `bytes` delta bytes go, for the
    // caller to fill (valid until the next AddRecord): the delta is computed in place
    // rather than copied in.
    uint8_t* AddRecord(const Header& header, size_t bytes) {
      // One resize (within the reserved capacity: a small memset) rather than two appends.
      const size_t at = packed.size();
      packed.resize(at + kHeader + bytes);
      char* p = packed.data() + at;
      const int32_t t32 = header.table, j32 = header.j;
      std::memcpy(p, &t32, 4);
      std::memcpy(p + 4, &j32, 4);
      std::memcpy(p + 8, &header.stripe, 8);
      std::memcpy(p + 16, &header.from, 4);
      std::memcpy(p + 20, &header.to, 4);
      len = bytes;
      ++count;
      return reinterpret_cast<uint8_t*>(p + kHeader);
    }
    void Add(const Header& header, const uint8_t* delta, size_t bytes);
    static Header ReadHeader(const char* record);
  };

  // Queues every delta of `batch` under one lock (taking its buffer when the stream has
  // nothing pending); returns the ticket of the last. Blocks for backpressure when
  // options.window is set and the stream is that far behind.
  uint64_t EnqueueBatch(int peer, Batch&& batch);
  // Waits until `peer` acknowledged every delta up to `ticket`; DEADLINE_EXCEEDED after
  // `timeout`, CANCELLED when stopping.
  absl::Status WaitAcked(int peer, uint64_t ticket, std::chrono::milliseconds timeout);
  // Waits until every stream has nothing unacknowledged.
  absl::Status Drain(std::chrono::milliseconds timeout);

  // From now on the deltas to `peer` go one per update, never coalesced. A server calls it
  // before it serves a rebuild read from `peer`: a replacement installs a parity row at the
  // versions it read, and a coalesced delta that straddled that read (updates from before
  // and after it, in one XOR) could be neither applied nor skipped.
  void StopCoalescing(int peer);

  int64_t unacked() const;  // deltas queued or in flight, all streams
  int64_t bytes_sent() const { return bytes_sent_.load(std::memory_order_relaxed); }
  int64_t batches_sent() const { return batches_sent_.load(std::memory_order_relaxed); }

 private:
  struct Stream {
    mutable absl::Mutex mu;
    absl::CondVar cv;
    // Records not yet sent: each EnqueueBatch call's buffer as it came (moved in, never
    // copied), so that only the sender's one pass over them copies the bytes. Within one
    // buffer no row repeats.
    std::vector<std::string> pending ABSL_GUARDED_BY(mu);
    size_t pending_count ABSL_GUARDED_BY(mu) = 0;  // records in `pending`
    size_t pending_len ABSL_GUARDED_BY(mu) = 0;    // their delta bytes
    // When `pending` became non-empty.
    std::chrono::steady_clock::time_point first_pending ABSL_GUARDED_BY(mu);
    // Threads waiting for acks: the sender must not linger.
    int flush_waiters ABSL_GUARDED_BY(mu) = 0;
    bool exact ABSL_GUARDED_BY(mu) = false;  // StopCoalescing was called
    uint64_t enqueued ABSL_GUARDED_BY(mu) = 0;
    uint64_t acked ABSL_GUARDED_BY(mu) = 0;
    uint64_t next_seq ABSL_GUARDED_BY(mu) = 1;
    std::thread sender;  // set at construction, joined at destruction
  };
  void SenderLoop(int peer);
  // Where each (table and j, stripe) record went in a batch being coalesced.
  using RecordIndex = absl::flat_hash_map<std::pair<uint64_t, int64_t>, size_t>;
  // Copies the records of `taken` (take of them, deltas of `len` bytes) into `packed`,
  // merging the deltas of one parity row when `coalesce` (several pushes); takes the buffer
  // when there is only one.
  static void PackRecords(std::vector<std::string>* taken, bool coalesce, size_t take, size_t len,
                          RecordIndex* index, std::string* packed);
  // Sends `batch` with `records` until the peer acknowledges it, resending as options.resend
  // says; false when the streams stop first.
  bool SendUntilAcked(int peer, v1::ParityDeltaBatch* batch,
                      const std::shared_ptr<std::string>& records);

  const int self_;
  DeltaTransport* transport_;
  const DeltaStreamOptions options_;
  std::function<void(v1::ParityDeltaBatch*)> header_;
  std::vector<std::unique_ptr<Stream>> streams_;
  std::atomic<bool> stopping_{false};
  std::atomic<int64_t> bytes_sent_{0};
  std::atomic<int64_t> batches_sent_{0};
};

}  // namespace ecps

#endif  // ECPS_PS_DELTA_STREAM_H_
