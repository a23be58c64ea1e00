#include "cli/role_security.h"

#include "absl/strings/str_cat.h"

namespace ecps {

TlsFiles TlsFilesFor(const TlsSection& tls, Role role) {
  const TlsPair& pair = role == Role::kCoordinator ? tls.coordinator
                        : role == Role::kServer    ? tls.server
                        : role == Role::kWorker    ? tls.worker
                                                   : tls.admin;
  return TlsFiles{tls.ca, pair.cert, pair.key};
}

absl::Status UseSpecTls(const TlsSection& tls, Role role) {
  if (!tls.enabled()) return absl::OkStatus();
  TlsFiles files = TlsFilesFor(tls, role);
  if (files.cert.empty() || files.key.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("security.tls has no certificate for the ",
                                                   RoleName(role), " (security.tls.",
                                                   RoleName(role), ".cert and .key)"));
  }
  absl::Status used = UseTlsFiles(files, role);
  if (used.ok()) return used;
  return absl::InvalidArgumentError(absl::StrCat("security.tls: ", used.message()));
}

absl::Status UseTlsFiles(const TlsFiles& files, Role role) {
  if (files.ca.empty() && files.cert.empty() && files.key.empty()) return absl::OkStatus();
  if (files.ca.empty() || files.cert.empty() || files.key.empty()) {
    return absl::InvalidArgumentError(
        "TLS needs all three of --tls-ca, --tls-cert and --tls-key (or ECPS_TLS_CA, "
        "ECPS_TLS_CERT and ECPS_TLS_KEY)");
  }
  absl::StatusOr<TlsIdentity> identity = LoadTlsIdentity(files, role);
  if (!identity.ok()) return identity.status();
  SetProcessTls(*std::move(identity));
  return absl::OkStatus();
}

}  // namespace ecps
