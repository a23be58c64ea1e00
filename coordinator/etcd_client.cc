#include "coordinator/etcd_client.h"

#include <chrono>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "grpcpp/grpcpp.h"
#include "proto/etcd_rpc.grpc.pb.h"
#include "runtime/rpc.h"
#include "runtime/security.h"
#include "spdlog/spdlog.h"

namespace ecps {
namespace {

namespace pb = etcdserverpb;

// "http://host:port" (plaintext), "https://host:port" (with `tls`) or "host:port" ->
// "host:port"; errors name the endpoint.
absl::StatusOr<std::string> EndpointAddress(const std::string& endpoint, bool tls) {
  std::string address = endpoint;
  if (absl::StartsWith(address, "https://")) {
    if (!tls) {
      return absl::InvalidArgumentError(absl::StrCat(
          "etcd endpoint '", endpoint,
          "' is https, but the job has no TLS identity to speak it with (security.tls)"));
    }
    address = address.substr(8);
  } else if (absl::StartsWith(address, "http://")) {
    if (tls) {
      return absl::InvalidArgumentError(absl::StrCat(
          "etcd endpoint '", endpoint,
          "' is plaintext http, but the job speaks TLS (security.tls): give https:// or "
          "host:port"));
    }
    address = address.substr(7);
  }
  if (!address.empty() && address.back() == '/') address.pop_back();
  const size_t colon = address.rfind(':');
  int port = 0;
  if (address.empty() || colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 1 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("etcd endpoint '", endpoint, "' is not host:port (e.g. 10.0.0.5:2379)"));
  }
  return address;
}

EtcdKeyValue FromProto(const pb::KeyValue& kv) {
  EtcdKeyValue out;
  out.key = kv.key();
  out.value = kv.value();
  out.create_revision = kv.create_revision();
  out.mod_revision = kv.mod_revision();
  out.lease = kv.lease();
  return out;
}

// The end of the range of keys that start with `prefix` (etcd's convention: the prefix with
// its last byte below 0xff raised by one).
std::string PrefixEnd(std::string prefix) {
  while (!prefix.empty()) {
    if (static_cast<unsigned char>(prefix.back()) < 0xff) {
      prefix.back() = static_cast<char>(static_cast<unsigned char>(prefix.back()) + 1);
      return prefix;
    }
    prefix.pop_back();
  }
  return std::string(1, '\0');  // every key
}

bool MemberDidNotAnswer(const grpc::Status& status) {
  return status.error_code() == grpc::StatusCode::UNAVAILABLE ||
         status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
}

}  // namespace

EtcdClient::EtcdClient(std::vector<std::string> endpoints, absl::Duration attempt_timeout,
                       const TlsIdentity* tls)
    : endpoints_(std::move(endpoints)), attempt_timeout_(attempt_timeout) {
  grpc::ChannelArguments args;
  // A restarted member is found again quickly; a dead one fails fast (no wait_for_ready).
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  // gRPC also takes this as the least time one connection attempt may take: at 100 ms the
  // HTTP/2 handshake with a busy etcd failed every attempt. A member that refuses still fails
  // at once; one that is cut off costs the call's attempt timeout.
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 2000);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  // Mutual TLS with the role's own certificate; etcd (--client-cert-auth) checks it against
  // its --trusted-ca-file, and this side checks etcd's against the job's CA.
  const std::shared_ptr<grpc::ChannelCredentials> credentials = ChannelCredentialsFor(tls);
  for (const std::string& endpoint : endpoints_) {
    channels_.push_back(grpc::CreateCustomChannel(endpoint, credentials, args));
  }
}

EtcdClient::~EtcdClient() = default;

absl::StatusOr<std::unique_ptr<EtcdClient>> EtcdClient::Create(
    const std::vector<std::string>& endpoints, absl::Duration attempt_timeout,
    const TlsIdentity* tls) {
  if (endpoints.empty()) return absl::InvalidArgumentError("no etcd endpoint given");
  std::vector<std::string> addresses;
  for (const std::string& endpoint : endpoints) {
    absl::StatusOr<std::string> address = EndpointAddress(endpoint, tls != nullptr);
    if (!address.ok()) return address.status();
    addresses.push_back(*std::move(address));
  }
  return std::unique_ptr<EtcdClient>(new EtcdClient(std::move(addresses), attempt_timeout, tls));
}

absl::Status EtcdClient::Call(
    const std::string& what,
    const std::function<grpc::Status(const Channel&, grpc::ClientContext*)>& call) {
  const size_t n = channels_.size();
  const size_t first = current_.load();
  grpc::Status status;
  std::vector<std::string> failures;
  for (size_t attempt = 0; attempt < 2 * n; ++attempt) {
    const size_t member = (first + attempt) % n;
    const auto deadline =
        std::chrono::system_clock::now() + absl::ToChronoMilliseconds(attempt_timeout_);
    if (!WaitForConnection(channels_[member].get(), deadline)) {
      status = grpc::Status(grpc::StatusCode::UNAVAILABLE, "cannot connect");
    } else {
      grpc::ClientContext context;
      context.set_deadline(deadline);
      status = call(channels_[member], &context);
    }
    if (status.ok() || !MemberDidNotAnswer(status)) {
      if (member != first) {
        // Later calls start at the member that answered.
        size_t expected = first;
        if (current_.compare_exchange_strong(expected, member)) {
          spdlog::info("etcd: {} answers; {} did not", endpoints_[member], endpoints_[first]);
        }
      }
      if (status.ok()) return absl::OkStatus();
      return absl::Status(
          static_cast<absl::StatusCode>(status.error_code()),
          absl::StrCat("etcd ", what, " at ", endpoints_[member], ": ", status.error_message()));
    }
    if (attempt < n)
      failures.push_back(absl::StrCat(endpoints_[member], ": ", status.error_message()));
  }
  return absl::UnavailableError(
      absl::StrCat("etcd ", what, ": no member answered (", absl::StrJoin(failures, "; "), ")"));
}

absl::StatusOr<std::optional<EtcdKeyValue>> EtcdClient::Get(const std::string& key) {
  pb::RangeRequest request;
  request.set_key(key);
  pb::RangeResponse response;
  absl::Status s = Call("get " + key, [&](const Channel& ch, grpc::ClientContext* ctx) {
    return pb::KV::NewStub(ch)->Range(ctx, request, &response);
  });
  if (!s.ok()) return s;
  if (response.kvs_size() == 0) return std::optional<EtcdKeyValue>();
  return std::optional<EtcdKeyValue>(FromProto(response.kvs(0)));
}

absl::StatusOr<int64_t> EtcdClient::Put(const std::string& key, const std::string& value,
                                        int64_t lease) {
  pb::PutRequest request;
  request.set_key(key);
  request.set_value(value);
  request.set_lease(lease);
  pb::PutResponse response;
  absl::Status s = Call("put " + key, [&](const Channel& ch, grpc::ClientContext* ctx) {
    return pb::KV::NewStub(ch)->Put(ctx, request, &response);
  });
  if (!s.ok()) return s;
  return response.header().revision();
}

absl::StatusOr<int64_t> EtcdClient::DeletePrefix(const std::string& prefix) {
  pb::DeleteRangeRequest request;
  request.set_key(prefix);
  request.set_range_end(PrefixEnd(prefix));
  pb::DeleteRangeResponse response;
  absl::Status s = Call("delete " + prefix + "*", [&](const Channel& ch, grpc::ClientContext* ctx) {
    return pb::KV::NewStub(ch)->DeleteRange(ctx, request, &response);
  });
  if (!s.ok()) return s;
  return response.deleted();
}

absl::StatusOr<EtcdCreateResult> EtcdClient::CreateIfAbsent(const std::string& key,
                                                            const std::string& value,
                                                            int64_t lease) {
  pb::TxnRequest request;
  pb::Compare* absent = request.add_compare();
  absent->set_key(key);
  absent->set_target(pb::Compare::CREATE);
  absent->set_result(pb::Compare::EQUAL);
  absent->set_create_revision(0);
  pb::PutRequest* put = request.add_success()->mutable_request_put();
  put->set_key(key);
  put->set_value(value);
  put->set_lease(lease);
  request.add_failure()->mutable_request_range()->set_key(key);
  pb::TxnResponse response;
  absl::Status s = Call("create " + key, [&](const Channel& ch, grpc::ClientContext* ctx) {
    return pb::KV::NewStub(ch)->Txn(ctx, request, &response);
  });
  if (!s.ok()) return s;
  EtcdCreateResult result;
  if (response.succeeded()) {
    result.created = true;
    result.current.key = key;
    result.current.value = value;
    result.current.lease = lease;
    result.current.create_revision = response.header().revision();
    result.current.mod_revision = response.header().revision();
    return result;
  }
  if (response.responses_size() > 0 && response.responses(0).has_response_range() &&
      response.responses(0).response_range().kvs_size() > 0) {
    result.current = FromProto(response.responses(0).response_range().kvs(0));
    // An earlier attempt of this very call took effect before its answer was lost.
    result.created = result.current.value == value && result.current.lease == lease;
  }
  return result;
}

absl::StatusOr<bool> EtcdClient::PutIfEqual(const std::string& guard_key,
                                            const std::string& guard_value, const std::string& key,
                                            const std::string& value) {
  pb::TxnRequest request;
  pb::Compare* guard = request.add_compare();
  guard->set_key(guard_key);
  guard->set_target(pb::Compare::VALUE);
  guard->set_result(pb::Compare::EQUAL);
  guard->set_value(guard_value);
  pb::PutRequest* put = request.add_success()->mutable_request_put();
  put->set_key(key);
  put->set_value(value);
  pb::TxnResponse response;
  absl::Status s = Call("guarded put " + key, [&](const Channel& ch, grpc::ClientContext* ctx) {
    return pb::KV::NewStub(ch)->Txn(ctx, request, &response);
  });
  if (!s.ok()) return s;
  return response.succeeded();
}

absl::StatusOr<bool> EtcdClient::DeleteIfEqual(const std::string& key, const std::string& value) {
  pb::TxnRequest request;
  pb::Compare* guard = request.add_compare();
  guard->set_key(key);
  guard->set_target(pb::Compare::VALUE);
  guard->set_result(pb::Compare::EQUAL);
  guard->set_value(value);
  request.add_success()->mutable_request_delete_range()->set_key(key);
  pb::TxnResponse response;
  absl::Status s = Call("guarded delete " + key, [&](const Channel& ch, grpc::ClientContext* ctx) {
    return pb::KV::NewStub(ch)->Txn(ctx, request, &response);
  });
  if (!s.ok()) return s;
  return response.succeeded();
}

absl::StatusOr<EtcdLease> EtcdClient::GrantLease(int64_t ttl_s) {
  pb::LeaseGrantRequest request;
  request.set_ttl(ttl_s);
  pb::LeaseGrantResponse response;
  absl::Status s = Call("lease grant", [&](const Channel& ch, grpc::ClientContext* ctx) {
    return pb::Lease::NewStub(ch)->LeaseGrant(ctx, request, &response);
  });
  if (!s.ok()) return s;
  if (!response.error().empty()) {
    return absl::UnavailableError("etcd lease grant: " + response.error());
  }
  return EtcdLease{response.id(), response.ttl()};
}

absl::StatusOr<EtcdLease> EtcdClient::KeepAlive(int64_t lease) {
  pb::LeaseKeepAliveRequest request;
  request.set_id(lease);
  pb::LeaseKeepAliveResponse response;
  absl::Status s = Call("lease keep-alive", [&](const Channel& ch, grpc::ClientContext* ctx) {
    // A stream per renewal: simple, and it moves to another member as any call does.
    auto stream = pb::Lease::NewStub(ch)->LeaseKeepAlive(ctx);
    if (stream->Write(request)) {
      stream->WritesDone();
      if (stream->Read(&response)) {
        ctx->TryCancel();  // the answer is in; the stream's end is of no interest
        (void)stream->Finish();
        return grpc::Status::OK;
      }
    }
    grpc::Status finished = stream->Finish();
    return finished.ok() ? grpc::Status(grpc::StatusCode::UNAVAILABLE, "no keep-alive answer")
                         : finished;
  });
  if (!s.ok()) return s;
  if (response.ttl() <= 0) {
    return absl::NotFoundError(absl::StrCat("etcd lease ", lease, " has expired"));
  }
  return EtcdLease{response.id(), response.ttl()};
}

absl::Status EtcdClient::RevokeLease(int64_t lease) {
  pb::LeaseRevokeRequest request;
  request.set_id(lease);
  pb::LeaseRevokeResponse response;
  return Call("lease revoke", [&](const Channel& ch, grpc::ClientContext* ctx) {
    return pb::Lease::NewStub(ch)->LeaseRevoke(ctx, request, &response);
  });
}

}  // namespace ecps
