#include "ps/delta_stream.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "google/protobuf/io/coded_stream.h"
#include "proto/ecps.pb.h"
#include "ps/cond_wait.h"
#include "runtime/rpc.h"
#include "spdlog/spdlog.h"

namespace ecps {

absl::StatusOr<uint64_t> DeltaTransport::SendPacked(int peer, const v1::ParityDeltaBatch& batch,
                                                    std::shared_ptr<const std::string> packed) {
  v1::ParityDeltaBatch whole = batch;
  whole.set_packed(*packed);
  return Send(peer, whole);
}

DeltaStreams::DeltaStreams(int self, int servers, DeltaTransport* transport,
                           DeltaStreamOptions options,
                           std::function<void(v1::ParityDeltaBatch*)> header)
    : self_(self), transport_(transport), options_(options), header_(std::move(header)) {
  for (int p = 0; p < servers; ++p) streams_.push_back(std::make_unique<Stream>());
  for (int p = 0; p < servers; ++p) {
    if (p == self_) continue;
    streams_[p]->sender = std::thread([this, p] { SenderLoop(p); });
  }
}

DeltaStreams::~DeltaStreams() {
  stopping_.store(true);
  for (auto& s : streams_) {
    { absl::MutexLock lock(&s->mu); }
    s->cv.SignalAll();
  }
  for (auto& s : streams_) {
    if (s->sender.joinable()) s->sender.join();
  }
}

void DeltaStreams::Batch::Add(const Header& h, const uint8_t* delta, size_t bytes) {
  std::memcpy(AddRecord(h, bytes), delta, bytes);
}

DeltaStreams::Batch::Header DeltaStreams::Batch::ReadHeader(const char* record) {
  Header h;
  int32_t t32, j32;
  std::memcpy(&t32, record, 4);
  std::memcpy(&j32, record + 4, 4);
  std::memcpy(&h.stripe, record + 8, 8);
  std::memcpy(&h.from, record + 16, 4);
  std::memcpy(&h.to, record + 20, 4);
  h.table = t32;
  h.j = j32;
  return h;
}

void DeltaStreams::StopCoalescing(int peer) {
  if (peer < 0 || peer >= static_cast<int>(streams_.size())) return;
  Stream& s = *streams_[peer];
  absl::MutexLock lock(&s.mu);
  s.exact = true;
}

uint64_t DeltaStreams::EnqueueBatch(int peer, Batch&& batch) {
  Stream& s = *streams_[peer];
  absl::ReleasableMutexLock lock(&s.mu);
  if (options_.window > 0 && s.enqueued - s.acked >= static_cast<uint64_t>(options_.window)) {
    ++s.flush_waiters;
    s.cv.SignalAll();
    while (!stopping_.load() && s.enqueued - s.acked >= static_cast<uint64_t>(options_.window)) {
      s.cv.Wait(&s.mu);
    }
    --s.flush_waiters;
  }
  if (batch.count > 0) {
    if (s.pending_count == 0) s.first_pending = std::chrono::steady_clock::now();
    s.pending.push_back(std::move(batch.packed));
    s.pending_count += batch.count;
    s.pending_len = batch.len;
    s.enqueued += batch.count;
  }
  const uint64_t ticket = s.enqueued;
  lock.Release();
  s.cv.SignalAll();
  return ticket;
}

namespace {

// acc ^= in, `bytes` of them, a word at a time.
void XorBytes(char* acc, const char* in, size_t bytes) {
  size_t b = 0;
  for (; b + 8 <= bytes; b += 8) {
    uint64_t x, y;
    std::memcpy(&x, acc + b, 8);
    std::memcpy(&y, in + b, 8);
    x ^= y;
    std::memcpy(acc + b, &x, 8);
  }
  for (; b < bytes; ++b) acc[b] ^= in[b];
}

}  // namespace

absl::Status DeltaStreams::WaitAcked(int peer, uint64_t ticket, std::chrono::milliseconds timeout) {
  Stream& s = *streams_[peer];
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  absl::MutexLock lock(&s.mu);
  ++s.flush_waiters;
  s.cv.SignalAll();
  while (!stopping_.load() && s.acked < ticket) {
    if (!WaitBefore(&s.cv, &s.mu, deadline)) break;
  }
  const bool ok = stopping_.load() || s.acked >= ticket;
  --s.flush_waiters;
  if (stopping_.load()) return absl::CancelledError("server stopping");
  if (!ok) {
    return absl::DeadlineExceededError("parity server " + std::to_string(peer) +
                                       " did not acknowledge deltas in time");
  }
  return absl::OkStatus();
}

absl::Status DeltaStreams::Drain(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (size_t p = 0; p < streams_.size(); ++p) {
    uint64_t target;
    {
      const Stream& s = *streams_[p];
      absl::MutexLock lock(&s.mu);
      target = s.enqueued;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (absl::Status st =
            WaitAcked(static_cast<int>(p), target, std::max(left, std::chrono::milliseconds(0)));
        !st.ok()) {
      return st;
    }
  }
  return absl::OkStatus();
}

int64_t DeltaStreams::unacked() const {
  int64_t total = 0;
  for (const auto& s : streams_) {
    absl::MutexLock lock(&s->mu);
    total += static_cast<int64_t>(s->enqueued - s->acked);
  }
  return total;
}

void DeltaStreams::PackRecords(std::vector<std::string>* taken, bool coalesce, size_t take,
                               size_t len, RecordIndex* index, std::string* packed) {
  // Deltas of one push name distinct rows and go as they are; deltas of several pushes are
  // coalesced, one XOR per repeated parity row, in the one pass that copies them into the
  // message.
  const size_t record = Batch::kHeader + len;
  if (taken->size() == 1) {
    std::swap(*packed, (*taken)[0]);
    return;
  }
  packed->reserve(take * record);
  if (!coalesce) {
    for (const std::string& chunk : *taken) packed->append(chunk);
    return;
  }
  index->clear();
  index->reserve(take);
  for (const std::string& chunk : *taken) {
    const char* end = chunk.data() + chunk.size();
    for (const char* p = chunk.data(); p + record <= end; p += record) {
      uint64_t table_j;  // the header's table and j, as one word
      int64_t stripe;
      std::memcpy(&table_j, p, 8);
      std::memcpy(&stripe, p + 8, 8);
      auto [it, inserted] = index->try_emplace(std::make_pair(table_j, stripe), packed->size());
      if (!inserted) {
        // Merge only versions that join up: the merged delta must hold exactly the updates
        // from its `from` to its `to`. The deltas of two pushes of a row can be queued in
        // either order, and an update between them may have gone in an earlier batch.
        char* acc = packed->data() + it->second;
        uint32_t acc_from, acc_to, from, to;
        std::memcpy(&acc_from, acc + 16, 4);
        std::memcpy(&acc_to, acc + 20, 4);
        std::memcpy(&from, p + 16, 4);
        std::memcpy(&to, p + 20, 4);
        if (acc_to == from || to == acc_from) {
          acc_to == from ? std::memcpy(acc + 20, &to, 4) : std::memcpy(acc + 16, &from, 4);
          XorBytes(acc + Batch::kHeader, p + Batch::kHeader, len);
          continue;
        }
        it->second = packed->size();  // a record of its own, which later ones may join
      }
      packed->append(p, record);
    }
  }
}

bool DeltaStreams::SendUntilAcked(int peer, v1::ParityDeltaBatch* batch,
                                  const std::shared_ptr<std::string>& records) {
  Retrier retrier(options_.resend);
  while (true) {
    if (stopping_.load()) return false;
    header_(batch);
    const std::string address = options_.on_unreachable ? transport_->AddressOf(peer) : "";
    auto ack = transport_->SendPacked(peer, *batch, records);
    if (ack.ok() && *ack >= batch->seq()) return true;
    if (!ack.ok() && options_.on_unreachable && !AnsweredByPeer(ack.status()) &&
        (absl::IsUnavailable(ack.status()) || absl::IsDeadlineExceeded(ack.status()))) {
      options_.on_unreachable(peer, address);
    }
    if (!ack.ok() && retrier.backoff() >= options_.resend.max_backoff) {
      spdlog::warn("server {}: parity stream to server {} failing: {}", self_, peer,
                   ack.status().ToString());
    }
    // An ack below the batch (OK, but not applied yet) is resent like an error.
    retrier.Wait();
  }
}

void DeltaStreams::SenderLoop(int peer) {
  Stream& s = *streams_[peer];
  v1::ParityDeltaBatch batch;
  std::vector<std::string> taken;  // the pushes' buffers taken for the next batch
  RecordIndex index;
  // With a linger, what is pending goes early once it fills most of the window.
  const size_t flush_at = static_cast<size_t>(std::max(
      1, std::min(options_.max_batch_deltas,
                  options_.window > 0 ? options_.window * 3 / 4 : options_.max_batch_deltas)));
  const size_t max_take = static_cast<size_t>(std::max(1, options_.max_batch_deltas));
  while (true) {
    uint64_t last_ticket = 0;
    size_t len = 0, take = 0;
    bool coalesce = false;
    taken.clear();
    {
      absl::MutexLock lock(&s.mu);
      while (!stopping_.load() && s.pending_count == 0) s.cv.Wait(&s.mu);
      if (options_.linger_ms > 0) {
        const auto deadline = s.first_pending + std::chrono::milliseconds(options_.linger_ms);
        while (!stopping_.load() && s.flush_waiters == 0 && s.pending_count < flush_at) {
          if (!WaitBefore(&s.cv, &s.mu, deadline)) break;
        }
      }
      if (stopping_.load()) return;
      // Take whole buffers (up to a batch) out of the stream, so that pushes can queue more
      // while this batch is prepared and sent; only a buffer larger than a batch is split.
      len = s.pending_len;
      const size_t record = Batch::kHeader + len;
      size_t used = 0;  // buffers taken whole
      while (used < s.pending.size() && take < max_take) {
        std::string& chunk = s.pending[used];
        const size_t n = chunk.size() / record;
        if (take + n <= max_take) {
          taken.push_back(std::move(chunk));
          take += n;
          ++used;
          continue;
        }
        const size_t part = (max_take - take) * record;
        taken.emplace_back(chunk, 0, part);
        chunk.erase(0, part);
        take = max_take;
      }
      s.pending.erase(s.pending.begin(), s.pending.begin() + static_cast<ptrdiff_t>(used));
      s.pending_count -= take;
      coalesce = taken.size() > 1 && !s.exact;
      last_ticket = s.acked + take;
      batch.Clear();
      batch.set_from_server(self_);
      batch.set_sender_instance(options_.instance);
      batch.set_seq(s.next_seq++);
      batch.set_delta_bytes(static_cast<int32_t>(len));
    }
    // The records go to the transport apart from the batch, shared, so that it can send them
    // without a copy (grpc slices that keep them alive while the bytes are on their way).
    auto records = std::make_shared<std::string>();
    PackRecords(&taken, coalesce, take, len, &index, records.get());
    // What the whole message is on the wire: the batch, and the records as its field 6.
    size_t bytes = batch.ByteSizeLong();
    if (!records->empty()) {
      bytes += 1 + google::protobuf::io::CodedOutputStream::VarintSize64(records->size()) +
               records->size();
    }
    if (!SendUntilAcked(peer, &batch, records)) return;
    bytes_sent_.fetch_add(static_cast<int64_t>(bytes), std::memory_order_relaxed);
    batches_sent_.fetch_add(1, std::memory_order_relaxed);
    {
      absl::MutexLock lock(&s.mu);
      s.acked = last_ticket;
    }
    s.cv.SignalAll();
  }
}

}  // namespace ecps
