#include "runtime/security.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "proto/ecps.pb.h"

namespace ecps {
namespace {

constexpr std::array<const char*, kRoleCount> kRoleNames = {"coordinator", "server", "worker",
                                                            "admin"};
constexpr char kTokenPrefix[] = "ecps-";
constexpr size_t kMacHexDigits = 32;  // 128 bits of the HMAC

bool EqualConstantTime(std::string_view a, std::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

template <typename T, void (*Free)(T*)>
struct OpenSslDeleter {
  void operator()(T* p) const { Free(p); }
};
using Bio = std::unique_ptr<BIO, OpenSslDeleter<BIO, BIO_free_all>>;
using X509Ptr = std::unique_ptr<X509, OpenSslDeleter<X509, X509_free>>;
using KeyPtr = std::unique_ptr<EVP_PKEY, OpenSslDeleter<EVP_PKEY, EVP_PKEY_free>>;
using StorePtr = std::unique_ptr<X509_STORE, OpenSslDeleter<X509_STORE, X509_STORE_free>>;
using StoreCtxPtr =
    std::unique_ptr<X509_STORE_CTX, OpenSslDeleter<X509_STORE_CTX, X509_STORE_CTX_free>>;

absl::StatusOr<std::string> ReadPem(const std::string& what, const std::string& path) {
  if (path.empty()) return absl::InvalidArgumentError(absl::StrCat("no ", what, " file given"));
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat("cannot read the ", what, " ", path));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

X509Ptr ParseCert(const std::string& pem) {
  Bio bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  return X509Ptr(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
}

std::string CommonName(X509* cert) {
  char cn[256] = {0};
  int n = X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, cn, sizeof(cn));
  return n < 0 ? std::string() : std::string(cn, n);
}

const TlsIdentity*& ProcessTlsSlot() {
  static const TlsIdentity* tls = nullptr;
  return tls;
}

}  // namespace

const char* RoleName(Role role) { return kRoleNames[static_cast<int>(role)]; }

std::string RoleWithArticle(Role role) {
  return absl::StrCat(role == Role::kAdmin ? "an " : "a ", RoleName(role));
}

std::optional<Role> RoleFromName(std::string_view name) {
  for (int r = 0; r < kRoleCount; ++r) {
    if (name == kRoleNames[r]) return static_cast<Role>(r);
  }
  return std::nullopt;
}

std::string RoleSet::ToString() const {
  std::vector<std::string> names;
  for (int r = 0; r < kRoleCount; ++r) {
    if (Has(static_cast<Role>(r))) names.push_back(kRoleNames[r]);
  }
  return names.empty() ? "nobody" : absl::StrJoin(names, ", ");
}

std::string MessageMac(std::string_view key, std::string_view message) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int mac_len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), mac, &mac_len);
  return std::string(reinterpret_cast<const char*>(mac), mac_len);
}

std::string RoleToken(std::string_view secret, Role role) {
  const std::string mac =
      MessageMac(secret, absl::StrCat("ecps role token v1: ", RoleName(role)));
  static constexpr char kHex[] = "0123456789abcdef";
  std::string token = absl::StrCat(kTokenPrefix, RoleName(role), "-");
  for (size_t i = 0; i < kMacHexDigits / 2 && i < mac.size(); ++i) {
    const unsigned char b = static_cast<unsigned char>(mac[i]);
    token += kHex[b >> 4];
    token += kHex[b & 15];
  }
  return token;
}

std::optional<Role> ClaimedRole(std::string_view token) {
  if (token.substr(0, sizeof(kTokenPrefix) - 1) != kTokenPrefix) return std::nullopt;
  token.remove_prefix(sizeof(kTokenPrefix) - 1);
  const size_t dash = token.find('-');
  if (dash == std::string_view::npos || token.size() - dash - 1 != kMacHexDigits) {
    return std::nullopt;
  }
  for (char c : token.substr(dash + 1)) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return std::nullopt;
  }
  return RoleFromName(token.substr(0, dash));
}

absl::StatusOr<std::string> PresentedToken(std::string_view given, Role role) {
  if (given.empty()) return std::string();  // a job without a secret (Gatekeeper)
  std::optional<Role> claimed = ClaimedRole(given);
  if (!claimed.has_value()) return RoleToken(given, role);  // the job secret
  if (*claimed != role) {
    return absl::InvalidArgumentError(absl::StrCat("the token given is ", RoleWithArticle(*claimed),
                                                   "'s credential, not ", RoleWithArticle(role),
                                                   "'s (docs/security.md)"));
  }
  return std::string(given);
}

absl::Status CheckJobSecret(std::string_view given, Role role) {
  std::optional<Role> claimed = ClaimedRole(given);
  if (!claimed.has_value()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("the ", RoleName(role),
                   " checks every role's credential and needs the job secret "
                   "(the job token), but was given ",
                   RoleWithArticle(*claimed), "'s token (docs/security.md)"));
}

Gatekeeper::Gatekeeper(std::string secret) : secret_(std::move(secret)) {
  for (int r = 0; r < kRoleCount; ++r) tokens_[r] = RoleToken(secret_, static_cast<Role>(r));
}

std::optional<Caller> Gatekeeper::TokenCaller(std::string_view token) const {
  if (EqualConstantTime(token, secret_)) return Caller{true, Role::kAdmin};
  for (int r = 0; r < kRoleCount; ++r) {
    if (EqualConstantTime(token, tokens_[r])) return Caller{false, static_cast<Role>(r)};
  }
  return std::nullopt;
}

namespace {
absl::Status WrongToken(const v1::RequestHeader& header) {
  return absl::UnauthenticatedError(
      "wrong or missing job token" +
      (header.sender().empty() ? std::string() : " (request from " + header.sender() + ")"));
}
}  // namespace

bool Gatekeeper::CheckMac(Role role, std::string_view message, std::string_view mac) const {
  // Both keys are always tried, so the time taken does not tell which one matched.
  const bool by_role = EqualConstantTime(MessageMac(token(role), message), mac);
  const bool by_secret = EqualConstantTime(MessageMac(secret_, message), mac);
  return by_role || by_secret;
}

absl::Status Gatekeeper::Authenticate(const v1::RequestHeader& header) const {
  return TokenCaller(header.token()).has_value() ? absl::OkStatus() : WrongToken(header);
}

absl::StatusOr<Caller> Gatekeeper::Authorize(const grpc::ServerContext* context,
                                             const v1::RequestHeader& header, RoleSet allowed,
                                             std::string_view method) const {
  std::optional<Caller> caller = TokenCaller(header.token());
  if (!caller.has_value()) return WrongToken(header);
  std::string from = "token";
  if (context != nullptr) {
    absl::StatusOr<std::optional<Role>> cert_role = PeerCertificateRole(*context);
    if (!cert_role.ok()) return cert_role.status();
    if (cert_role->has_value()) {
      caller = Caller{false, **cert_role};  // the certificate decides, whatever the token
      from = "certificate";
    }
  }
  if (caller->secret || allowed.Has(caller->role)) return *caller;
  return absl::PermissionDeniedError(absl::StrCat(
      std::string(method), " is not open to ", RoleWithArticle(caller->role), " (role from its ",
      from, "; open to: ", allowed.ToString(), ")",
      header.sender().empty() ? std::string() : absl::StrCat("; request from ", header.sender())));
}

absl::StatusOr<TlsIdentity> LoadTlsIdentity(const TlsFiles& files, Role role) {
  TlsIdentity id;
  id.role = role;
  const std::string who = absl::StrCat(RoleName(role), "'s ");
  auto ca = ReadPem("CA certificate", files.ca);
  if (!ca.ok()) return ca.status();
  auto cert = ReadPem(who + "certificate", files.cert);
  if (!cert.ok()) return cert.status();
  auto key = ReadPem(who + "key", files.key);
  if (!key.ok()) return key.status();
  id.ca_pem = *std::move(ca);
  id.cert_pem = *std::move(cert);
  id.key_pem = *std::move(key);

  X509Ptr ca_cert = ParseCert(id.ca_pem);
  if (ca_cert == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(files.ca, ": not a PEM certificate (the job's CA)"));
  }
  X509Ptr own = ParseCert(id.cert_pem);
  if (own == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(files.cert, ": not a PEM certificate"));
  }
  Bio key_bio(BIO_new_mem_buf(id.key_pem.data(), static_cast<int>(id.key_pem.size())));
  KeyPtr private_key(PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr));
  if (private_key == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(files.key, ": not a PEM private key (an unencrypted one)"));
  }
  const std::string cn = CommonName(own.get());
  if (cn != RoleName(role)) {
    return absl::InvalidArgumentError(absl::StrCat(
        files.cert, ": its subject CN is '", cn, "', but ", RoleWithArticle(role),
        "'s certificate must have CN=", RoleName(role), " (the CN is the role; docs/security.md)"));
  }
  if (X509_check_private_key(own.get(), private_key.get()) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(files.key, " is not the private key of ", files.cert));
  }
  if (X509_cmp_current_time(X509_get0_notAfter(own.get())) <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(files.cert, " has expired"));
  }
  if (X509_cmp_current_time(X509_get0_notBefore(own.get())) >= 0) {
    return absl::InvalidArgumentError(absl::StrCat(files.cert, " is not valid yet"));
  }
  StorePtr store(X509_STORE_new());
  X509_STORE_add_cert(store.get(), ca_cert.get());
  StoreCtxPtr ctx(X509_STORE_CTX_new());
  X509_STORE_CTX_init(ctx.get(), store.get(), own.get(), nullptr);
  if (X509_verify_cert(ctx.get()) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(files.cert, " does not chain to the CA ", files.ca, ": ",
                     X509_verify_cert_error_string(X509_STORE_CTX_get_error(ctx.get()))));
  }
  return id;
}

void SetProcessTls(TlsIdentity identity) {
  // Set once at start and never freed: channels and servers made later keep using it.
  ProcessTlsSlot() = new TlsIdentity(std::move(identity));
}

const TlsIdentity* ProcessTls() { return ProcessTlsSlot(); }

std::shared_ptr<grpc::ServerCredentials> ServerCredentialsFor(const TlsIdentity* tls) {
  if (tls == nullptr) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions options(
      GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_root_certs = tls->ca_pem;
  options.pem_key_cert_pairs.push_back({tls->key_pem, tls->cert_pem});
  return grpc::SslServerCredentials(options);
}

std::shared_ptr<grpc::ChannelCredentials> ChannelCredentialsFor(const TlsIdentity* tls) {
  if (tls == nullptr) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = tls->ca_pem;
  options.pem_private_key = tls->key_pem;
  options.pem_cert_chain = tls->cert_pem;
  return grpc::SslCredentials(options);
}

absl::StatusOr<std::optional<Role>> PeerCertificateRole(const grpc::ServerContext& context) {
  std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (auth == nullptr || !auth->IsPeerAuthenticated()) return std::optional<Role>();
  std::vector<grpc::string_ref> cns = auth->FindPropertyValues("x509_common_name");
  if (cns.empty()) {
    return absl::PermissionDeniedError("the caller's certificate has no subject CN (its role)");
  }
  const std::string cn(cns[0].data(), cns[0].size());
  std::optional<Role> role = RoleFromName(cn);
  if (!role.has_value()) {
    return absl::PermissionDeniedError(
        absl::StrCat("the caller's certificate has CN '", cn,
                     "', not a role (coordinator, server, worker or admin)"));
  }
  return role;
}

}  // namespace ecps
