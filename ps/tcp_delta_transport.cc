#include "ps/tcp_delta_transport.h"

#include <utility>

#include "proto/ecps.pb.h"
#include "runtime/rpc.h"
#include "spdlog/spdlog.h"

namespace ecps {

TcpDeltaTransport::TcpDeltaTransport(PeerClient* grpc, int servers, int rpc_timeout_ms)
    : grpc_(grpc), rpc_timeout_ms_(rpc_timeout_ms) {
  for (int p = 0; p < servers; ++p) peers_.push_back(std::make_unique<Peer>());
}

void TcpDeltaTransport::PeerMoved(int peer) {
  if (peer < 0 || peer >= static_cast<int>(peers_.size())) return;
  // A new process: back to gRPC until it offers a port of its own. (The connection to the
  // old one is closed by the next send, which sees the host or port change or the
  // connection fail.)
  Peer& t = *peers_[peer];
  absl::MutexLock lock(&t.mu);
  t.port = 0;
  t.retry.Reset();
}

int64_t TcpDeltaTransport::tcp_batches() {
  int64_t total = 0;
  for (const auto& t : peers_) {
    absl::MutexLock lock(&t->mu);
    total += t->sent;
  }
  return total;
}

absl::StatusOr<uint64_t> TcpDeltaTransport::SendPacked(int peer,
                                                       const v1::ParityDeltaBatch& batch,
                                                       std::shared_ptr<const std::string> packed) {
  const std::string head = PeerClient::EncodeDeltaHead(batch, packed->size());
  if (absl::StatusOr<uint64_t> sent; SendOverTcp(peer, batch, head, *packed, &sent)) return sent;
  const std::string address = grpc_->AddressOf(peer);
  int port = 0;
  absl::StatusOr<uint64_t> sent = grpc_->SendPackedOverGrpc(peer, batch, std::move(packed), &port);
  if (sent.ok()) LearnPort(peer, address, port);
  return sent;
}

bool TcpDeltaTransport::SendOverTcp(int peer, const v1::ParityDeltaBatch& batch,
                                    const std::string& head, const std::string& records,
                                    absl::StatusOr<uint64_t>* result) {
  if (peer < 0 || peer >= static_cast<int>(peers_.size())) return false;
  Peer& t = *peers_[peer];
  absl::MutexLock send_lock(&t.send_mu);
  std::string host;
  int port;
  {
    absl::MutexLock lock(&t.mu);
    if (t.port == 0) return false;
    host = t.host;
    port = t.port;
  }
  // The frame's head is signed with the token the batch carries: the receiver checks it
  // before it reads (or makes room for) the batch.
  *result = t.connection.Send(host, port, batch.header().token(), batch.from_server(),
                              batch.seq(), head, records, rpc_timeout_ms_);
  absl::MutexLock lock(&t.mu);
  if (result->ok() || AnsweredByPeer(result->status())) {
    ++t.sent;
    t.retry.Reset();
    return true;
  }
  // The connection failed, not the peer's answer: this batch and the next go over gRPC,
  // which says whether the peer is down; its acks offer the port again, taken up after a
  // wait that doubles with each failure in a row (TcpRetry), so a port that cannot be reached
  // costs a failed attempt now and then, not one per batch.
  t.retry.CountAttempt();
  const auto wait = t.retry.NextBackoff();
  t.retry_after = std::chrono::steady_clock::now() + wait;
  spdlog::warn("parity to server {} over TCP failed ({}); over gRPC for the next {} s", peer,
               result->status().ToString(),
               std::chrono::duration_cast<std::chrono::seconds>(wait).count());
  t.port = 0;
  return false;
}

void TcpDeltaTransport::LearnPort(int peer, const std::string& address, int port) {
  if (port <= 0 || port > 65535 || peer < 0 || peer >= static_cast<int>(peers_.size())) return;
  std::string host;
  int grpc_port = 0;
  if (!SplitHostPort(address, &host, &grpc_port).ok()) return;
  Peer& t = *peers_[peer];
  absl::MutexLock lock(&t.mu);
  if (t.port == port && t.host == host) return;
  if (t.retry.attempts() > 0 && std::chrono::steady_clock::now() < t.retry_after) return;
  t.host = std::move(host);
  t.port = port;
}

}  // namespace ecps
