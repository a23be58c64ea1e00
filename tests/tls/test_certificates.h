// TLS certificates for a test suite: tests/tls/make_certs.sh (openssl) run into a fresh
// folder, removed again with the object. Needs ECPS_SOURCE_DIR (the source tree) defined.
#ifndef ECPS_TESTS_TLS_TEST_CERTIFICATES_H_
#define ECPS_TESTS_TLS_TEST_CERTIFICATES_H_

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "runtime/security.h"

namespace ecps {

class TestCertificates {
 public:
  // Null (with the failure recorded) when openssl could not make them.
  static std::unique_ptr<TestCertificates> Make() {
    static std::atomic<int> made{0};
    std::unique_ptr<TestCertificates> certs(new TestCertificates(
        (std::filesystem::temp_directory_path() /
         ("ecps-certs-" + std::to_string(::getpid()) + "-" + std::to_string(made++)))
            .string()));
    const std::string command =
        std::string("bash ") + ECPS_SOURCE_DIR + "/tests/tls/make_certs.sh " + certs->dir_;
    if (std::system(command.c_str()) != 0) {
      ADD_FAILURE() << "could not make the test certificates: " << command;
      return nullptr;
    }
    return certs;
  }
  ~TestCertificates() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  // NAME.pem and NAME.key (make_certs.sh lists the names), with the CA `ca`.
  TlsFiles Files(const std::string& name, const std::string& ca = "ca") const {
    return TlsFiles{Path(ca + ".pem"), Path(name + ".pem"), Path(name + ".key")};
  }
  // Loaded and checked as a role loads its own (LoadTlsIdentity).
  TlsIdentity Identity(const std::string& name, Role role) const {
    auto id = LoadTlsIdentity(Files(name), role);
    EXPECT_TRUE(id.ok()) << id.status();
    return id.ok() ? *id : TlsIdentity{};
  }
  // Read as they are, unchecked: a client that presents what LoadTlsIdentity would refuse
  // (an expired certificate, another CA's, a CN that is no role), with the job's CA.
  TlsIdentity Unchecked(const std::string& name, Role role) const {
    return TlsIdentity{role, Read("ca.pem"), Read(name + ".pem"), Read(name + ".key")};
  }
  std::string Path(const std::string& file) const { return dir_ + "/" + file; }

 private:
  explicit TestCertificates(std::string dir) : dir_(std::move(dir)) {}
  std::string Read(const std::string& file) const {
    std::ifstream in(Path(file));
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }

  const std::string dir_;
};

}  // namespace ecps

#endif  // ECPS_TESTS_TLS_TEST_CERTIFICATES_H_
