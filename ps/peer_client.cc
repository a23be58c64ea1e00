#include "ps/peer_client.h"

#include <chrono>

#include <grpcpp/impl/codegen/client_unary_call.h>
#include <grpcpp/support/byte_buffer.h>

#include "runtime/rpc.h"
#include "spdlog/spdlog.h"

namespace ecps {

PeerClient::PeerClient(std::vector<std::string> addresses, int rpc_timeout_ms)
    : rpc_timeout_ms_(rpc_timeout_ms), addresses_(std::move(addresses)) {
  for (const std::string& a : addresses_) {
    if (a.empty()) {
      stubs_.push_back(nullptr);
      raw_.push_back(nullptr);
      continue;
    }
    std::shared_ptr<grpc::Channel> channel = MakeChannel(a, Role::kServer);
    stubs_.push_back(v1::ParameterServer::NewStub(channel));
    raw_.push_back(MakeRawDeltas(channel));
  }
}

std::shared_ptr<const PeerClient::RawDeltas> PeerClient::MakeRawDeltas(
    std::shared_ptr<grpc::Channel> channel) {
  auto raw = std::make_shared<RawDeltas>();
  raw->method = std::make_unique<grpc::internal::RpcMethod>(
      "/ecps.v1.ParameterServer/ApplyParityDeltas", grpc::internal::RpcMethod::NORMAL_RPC,
      channel);
  raw->channel = std::move(channel);
  return raw;
}

void PeerClient::SetAddress(int peer, const std::string& address) {
  std::shared_ptr<grpc::Channel> channel = MakeChannel(address, Role::kServer);
  std::shared_ptr<const RawDeltas> raw = MakeRawDeltas(channel);
  {
    absl::MutexLock lock(&mu_);
    stubs_[peer] = v1::ParameterServer::NewStub(channel);
    raw_[peer] = std::move(raw);
    addresses_[peer] = address;
  }
}

std::string PeerClient::AddressOf(int peer) {
  absl::MutexLock lock(&mu_);
  return peer >= 0 && peer < static_cast<int>(addresses_.size()) ? addresses_[peer] : "";
}

std::shared_ptr<v1::ParameterServer::Stub> PeerClient::StubFor(int peer) {
  absl::MutexLock lock(&mu_);
  return peer >= 0 && peer < static_cast<int>(stubs_.size()) ? stubs_[peer] : nullptr;
}

absl::StatusOr<uint64_t> PeerClient::Send(int peer, const v1::ParityDeltaBatch& batch) {
  std::shared_ptr<v1::ParameterServer::Stub> stub = StubFor(peer);
  if (stub == nullptr) return absl::UnavailableError("no address for server " + std::to_string(peer));
  v1::ParityDeltaAck ack;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(rpc_timeout_ms_));
  grpc::Status s = stub->ApplyParityDeltas(&ctx, batch, &ack);
  if (!s.ok()) return FromGrpcStatus(s);
  return ack.applied_seq();
}

std::shared_ptr<const PeerClient::RawDeltas> PeerClient::RawDeltasFor(int peer) {
  absl::MutexLock lock(&mu_);
  return peer >= 0 && peer < static_cast<int>(raw_.size()) ? raw_[peer] : nullptr;
}

std::string PeerClient::EncodeDeltaHead(const v1::ParityDeltaBatch& batch, size_t records_bytes) {
  std::string head;
  batch.SerializeToString(&head);
  if (records_bytes > 0) {
    head.push_back(static_cast<char>((6 << 3) | 2));  // field 6 (packed), length-delimited
    for (uint64_t n = records_bytes;; n >>= 7) {  // its length, a varint
      if (n < 0x80) {
        head.push_back(static_cast<char>(n));
        break;
      }
      head.push_back(static_cast<char>((n & 0x7f) | 0x80));
    }
  }
  return head;
}

absl::StatusOr<uint64_t> PeerClient::SendPackedOverGrpc(int peer,
                                                        const v1::ParityDeltaBatch& batch,
                                                        std::shared_ptr<const std::string> packed,
                                                        int* tcp_port) {
  // The batch's own fields (small), then field 6's tag and length: one copied slice.
  const std::string head = EncodeDeltaHead(batch, packed->size());
  std::shared_ptr<const RawDeltas> raw = RawDeltasFor(peer);
  if (raw == nullptr) return absl::UnavailableError("no address for server " + std::to_string(peer));
  grpc::Slice slices[2] = {grpc::Slice(head), grpc::Slice()};
  size_t count = 1;
  if (!packed->empty()) {
    // The records themselves, not copied: the slice holds a reference to them until gRPC is
    // done with the bytes, which may be after this call returns (a cancelled call's write).
    auto* owner = new std::shared_ptr<const std::string>(std::move(packed));
    slices[1] = grpc::Slice(
        const_cast<char*>((*owner)->data()), (*owner)->size(),
        [](void* p) { delete static_cast<std::shared_ptr<const std::string>*>(p); }, owner);
    count = 2;
  }
  grpc::ByteBuffer request(slices, count);
  grpc::ByteBuffer response;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(rpc_timeout_ms_));
  grpc::Status s = grpc::internal::BlockingUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(
      raw->channel.get(), *raw->method, &ctx, request, &response);
  if (!s.ok()) return FromGrpcStatus(s);
  v1::ParityDeltaAck ack;
  grpc::Status parsed =
      grpc::SerializationTraits<v1::ParityDeltaAck>::Deserialize(&response, &ack);
  if (!parsed.ok()) return FromGrpcStatus(parsed);
  if (tcp_port != nullptr) *tcp_port = ack.tcp_port();
  return ack.applied_seq();
}

absl::Status PeerClient::ReplicateDense(int peer, const v1::ReplicateDenseRequest& request) {
  std::shared_ptr<v1::ParameterServer::Stub> stub = StubFor(peer);
  if (stub == nullptr) return absl::UnavailableError("no address for server " + std::to_string(peer));
  RpcOptions options;
  options.deadline_ms = rpc_timeout_ms_;
  v1::ReplicateDenseResponse response;
  return CallWithRetry(options, [&](grpc::ClientContext* ctx) {
    return stub->ReplicateDense(ctx, request, &response);
  });
}

absl::Status PeerClient::ReadRows(int peer, const v1::ReadRowsRequest& request,
                                  v1::ReadRowsResponse* response) {
  std::shared_ptr<v1::ParameterServer::Stub> stub = StubFor(peer);
  if (stub == nullptr) return absl::UnavailableError("no address for server " + std::to_string(peer));
  RpcOptions options;
  options.deadline_ms = rpc_timeout_ms_;
  return CallWithRetry(options, [&](grpc::ClientContext* ctx) {
    return stub->ReadRows(ctx, request, response);
  });
}

void PeerClient::ReadRowsFromEach(const std::vector<int>& peers,
                                  const std::vector<v1::ReadRowsRequest>& requests,
                                  std::vector<v1::ReadRowsResponse>* responses,
                                  std::vector<absl::Status>* statuses) {
  // The attempts, backoff and codes of CallWithRetry (ReadRows).
  Retrier retrier(RpcRetryPolicy(RpcOptions{}));
  responses->resize(peers.size());
  statuses->assign(peers.size(), absl::OkStatus());
  std::vector<size_t> pending(peers.size());
  for (size_t i = 0; i < pending.size(); ++i) pending[i] = i;
  while (true) {
    grpc::CompletionQueue cq;
    std::vector<std::shared_ptr<v1::ParameterServer::Stub>> stubs(pending.size());
    std::vector<std::unique_ptr<grpc::ClientContext>> contexts(pending.size());
    std::vector<std::unique_ptr<grpc::ClientAsyncResponseReader<v1::ReadRowsResponse>>> calls(
        pending.size());
    std::vector<grpc::Status> results(pending.size());
    size_t started = 0;
    for (size_t j = 0; j < pending.size(); ++j) {
      const size_t i = pending[j];
      stubs[j] = StubFor(peers[i]);
      if (stubs[j] == nullptr) {
        (*statuses)[i] = absl::UnavailableError("no address for server " + std::to_string(peers[i]));
        continue;
      }
      contexts[j] = std::make_unique<grpc::ClientContext>();
      contexts[j]->set_deadline(std::chrono::system_clock::now() +
                                std::chrono::milliseconds(rpc_timeout_ms_));
      (*responses)[i].Clear();
      calls[j] = stubs[j]->AsyncReadRows(contexts[j].get(), requests[i], &cq);
      calls[j]->Finish(&(*responses)[i], &results[j], reinterpret_cast<void*>(j));
      ++started;
    }
    for (size_t done = 0; done < started; ++done) {
      void* tag = nullptr;
      bool ok = false;
      cq.Next(&tag, &ok);
    }
    std::vector<size_t> retry;
    for (size_t j = 0; j < pending.size(); ++j) {
      if (calls[j] == nullptr) continue;
      const size_t i = pending[j];
      (*statuses)[i] = FromGrpcStatus(results[j]);
      if (retrier.policy().Retries((*statuses)[i])) retry.push_back(i);
    }
    pending.swap(retry);
    if (pending.empty() || !retrier.CountAttempt()) return;
    retrier.Wait();
  }
}

namespace {

template <typename Call>
absl::Status Unary(const std::shared_ptr<v1::ParameterServer::Stub>& stub, int peer,
                   int timeout_ms, Call call) {
  if (stub == nullptr) return absl::UnavailableError("no address for server " + std::to_string(peer));
  RpcOptions options;
  options.deadline_ms = timeout_ms;
  options.max_attempts = 3;
  return CallWithRetry(options, [&](grpc::ClientContext* ctx) { return call(stub.get(), ctx); });
}

}  // namespace

absl::Status PeerClient::HotRows(int peer, const v1::HotRowsRequest& request,
                                 v1::HotRowsResponse* response) {
  return Unary(StubFor(peer), peer, rpc_timeout_ms_, [&](auto* stub, grpc::ClientContext* ctx) {
    return stub->HotRows(ctx, request, response);
  });
}

absl::Status PeerClient::WriteParity(int peer, const v1::WriteParityRequest& request) {
  v1::WriteParityResponse response;
  return Unary(StubFor(peer), peer, rpc_timeout_ms_, [&](auto* stub, grpc::ClientContext* ctx) {
    return stub->WriteParity(ctx, request, &response);
  });
}

absl::Status PeerClient::WriteRows(int peer, const v1::WriteRowsRequest& request) {
  v1::WriteRowsResponse response;
  return Unary(StubFor(peer), peer, rpc_timeout_ms_, [&](auto* stub, grpc::ClientContext* ctx) {
    return stub->WriteRows(ctx, request, &response);
  });
}
absl::Status PeerClient::DenseChecksums(int peer, const v1::DenseChecksumsRequest& request,
                                        v1::DenseChecksumsResponse* response) {
  return Unary(StubFor(peer), peer, rpc_timeout_ms_, [&](auto* stub, grpc::ClientContext* ctx) {
    return stub->DenseChecksums(ctx, request, response);
  });
}
absl::Status PeerClient::ReadDense(int peer, const v1::ReadDenseRequest& request,
                                   v1::ReadDenseResponse* response) {
  return Unary(StubFor(peer), peer, rpc_timeout_ms_, [&](auto* stub, grpc::ClientContext* ctx) {
    return stub->ReadDense(ctx, request, response);
  });
}

absl::Status PeerClient::Freeze(int peer, const v1::FreezeRequest& request) {
  v1::FreezeResponse response;
  return Unary(StubFor(peer), peer, std::max(rpc_timeout_ms_, 60000),
               [&](auto* stub, grpc::ClientContext* ctx) {
                 return stub->Freeze(ctx, request, &response);
               });
}

}  // namespace ecps
