// Who may call what (docs/security.md): the four roles of a job, their credentials, and the
// check every RPC handler makes before it does anything.
//
// A caller has a role: the coordinator, a parameter server (spares too), a worker, or an
// admin (the operator commands and `ecps run`'s launcher). Each service method is open to a
// set of roles; a caller outside the set gets PERMISSION_DENIED and nothing changes.
//
// Where the role comes from:
//  - With mutual TLS (security.tls), from the caller's certificate: its subject CN is the role
//    name, and the certificate chains to the job's CA. A request must still carry a token of
//    the job (any role's): two jobs may share a CA, never a token.
//  - Without TLS, from the token in the request header. Role tokens are derived from the job
//    secret: "ecps-<role>-" followed by 32 hex digits of HMAC-SHA256(secret, role). Whoever
//    holds the secret can derive every role's token, so only the coordinator, the servers and
//    the launcher are given it; a worker gets its role token, an operator the admin token.
//    The secret itself, presented as a token, is the credential of every role.
#ifndef ECPS_RUNTIME_SECURITY_H_
#define ECPS_RUNTIME_SECURITY_H_

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace grpc {
class ServerContext;
class ServerCredentials;
class ChannelCredentials;
}  // namespace grpc

namespace ecps {
namespace v1 {
class RequestHeader;
}

enum class Role : uint8_t { kCoordinator = 0, kServer = 1, kWorker = 2, kAdmin = 3 };
inline constexpr int kRoleCount = 4;

const char* RoleName(Role role);         // "coordinator", "server", "worker", "admin"
std::string RoleWithArticle(Role role);  // "a worker", "an admin"
std::optional<Role> RoleFromName(std::string_view name);

// A set of roles: who may call one method.
class RoleSet {
 public:
  constexpr RoleSet(std::initializer_list<Role> roles) {
    for (Role r : roles) bits_ |= Bit(r);
  }
  constexpr bool Has(Role role) const { return (bits_ & Bit(role)) != 0; }
  std::string ToString() const;  // "server, coordinator"

 private:
  static constexpr uint8_t Bit(Role r) { return static_cast<uint8_t>(1u << static_cast<int>(r)); }
  uint8_t bits_ = 0;
};

// The role token of `role` in the job whose secret is `secret`.
std::string RoleToken(std::string_view secret, Role role);

// HMAC-SHA256 of `message` under `key`: 32 raw bytes. What a frame outside gRPC carries
// instead of the token itself (ps/tcp_deltas.h), so that its header can be checked before
// its body is read.
std::string MessageMac(std::string_view key, std::string_view message);

// The role a token claims by its form ("ecps-worker-<hex>"); nullopt for anything else (a job
// secret, say). Claims only: Gatekeeper checks them.
std::optional<Role> ClaimedRole(std::string_view token);

// The token a process of `role` presents, from the credential it was given (--token or
// ECPS_TOKEN): a role token of its own role as it is; a job secret turned into the role's
// token; nothing as nothing (a job without a secret). INVALID_ARGUMENT for another role's
// token.
absl::StatusOr<std::string> PresentedToken(std::string_view given, Role role);

// The coordinator and the servers check every role's credential, so they need the job secret
// itself: INVALID_ARGUMENT, naming `role`, when `given` is a role token instead.
absl::Status CheckJobSecret(std::string_view given, Role role);

// Who sent a request, as the gatekeeper established it.
struct Caller {
  bool secret = false;       // the job secret itself: every role
  Role role = Role::kAdmin;  // when !secret
  bool Is(Role r) const { return secret || role == r; }
};

// The check every handler makes. Made from the job secret; thread-safe (immutable). With an
// empty secret (a job started without a token, which the coordinator warns about) an empty
// token is the secret: every caller has every role unless TLS names its role.
class Gatekeeper {
 public:
  explicit Gatekeeper(std::string secret);

  // The job's token check, on the token alone: OK for the secret or any role's token,
  // UNAUTHENTICATED otherwise (naming the sender when the header names one).
  absl::Status Authenticate(const v1::RequestHeader& header) const;

  // Authenticates the request, then finds the caller's role (from the TLS peer's certificate
  // when `context` has one, else from the token) and refuses with PERMISSION_DENIED, naming
  // `method`, the caller's role and who may call it, when the role is not in `allowed`.
  // `context` may be null (an in-process call): the token decides.
  absl::StatusOr<Caller> Authorize(const grpc::ServerContext* context,
                                   const v1::RequestHeader& header, RoleSet allowed,
                                   std::string_view method) const;

  // The token this job's `role` presents.
  const std::string& token(Role role) const { return tokens_[static_cast<int>(role)]; }

  // Whether `mac` is MessageMac(key, message) for a key that may act as `role`: its role
  // token or the job secret (compared in constant time).
  bool CheckMac(Role role, std::string_view message, std::string_view mac) const;

 private:
  std::optional<Caller> TokenCaller(std::string_view token) const;

  const std::string secret_;
  std::array<std::string, kRoleCount> tokens_;
};

// ---- Mutual TLS (security.tls) ----

// Where a role's TLS files are (PEM).
struct TlsFiles {
  std::string ca;    // the job's CA certificate: peers must chain to it
  std::string cert;  // this process's certificate; its CN is its role
  std::string key;   // its private key
};

// A loaded, checked TLS identity.
struct TlsIdentity {
  Role role = Role::kAdmin;
  std::string ca_pem, cert_pem, key_pem;
};

// Reads and checks the files: each readable PEM, the certificate's CN is `role`'s name, the
// key is the certificate's, the certificate is within its validity period and chains to the
// CA. INVALID_ARGUMENT naming the file and the problem otherwise.
absl::StatusOr<TlsIdentity> LoadTlsIdentity(const TlsFiles& files, Role role);

// This process's transport security: every server StartGrpcServer starts and every channel
// MakeChannel makes uses it. Plaintext until set; set once, at start, before any of them.
void SetProcessTls(TlsIdentity identity);
const TlsIdentity* ProcessTls();  // null: plaintext

// gRPC credentials for `tls` (null: plaintext). A server requires and verifies a client
// certificate; a channel presents its certificate and accepts only a peer whose certificate
// chains to the CA and names `peer` (the role it means to reach).
std::shared_ptr<grpc::ServerCredentials> ServerCredentialsFor(const TlsIdentity* tls);
std::shared_ptr<grpc::ChannelCredentials> ChannelCredentialsFor(const TlsIdentity* tls);

// The role named by the verified client certificate of the call; nullopt without TLS.
// A certificate whose CN is not a role name yields an error.
absl::StatusOr<std::optional<Role>> PeerCertificateRole(const grpc::ServerContext& context);

}  // namespace ecps

#endif  // ECPS_RUNTIME_SECURITY_H_
