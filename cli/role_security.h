// Each process's credentials, from the spec and its command line (docs/security.md): the
// token it presents and, with security.tls, the certificate of its role.
#ifndef ECPS_CLI_ROLE_SECURITY_H_
#define ECPS_CLI_ROLE_SECURITY_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/security.h"
#include "runtime/spec.h"

namespace ecps {

// The TLS files of `role` in security.tls.
TlsFiles TlsFilesFor(const TlsSection& tls, Role role);

// With TLS on in the spec, loads `role`'s certificate (checked: LoadTlsIdentity) and makes it
// this process's (SetProcessTls); nothing without TLS. INVALID_ARGUMENT naming the problem.
absl::Status UseSpecTls(const TlsSection& tls, Role role);

// The same for files named directly (an operator command's --tls-* flags or its job folder);
// nothing when `files` names none. Every file must be given when one is.
absl::Status UseTlsFiles(const TlsFiles& files, Role role);

}  // namespace ecps

#endif  // ECPS_CLI_ROLE_SECURITY_H_
