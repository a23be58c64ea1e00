#include "coordinator/process_probe.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "gtest/gtest.h"

namespace ecps {
namespace {

// A listening socket on a free loopback port; closing it leaves the port refusing.
class Listener {
 public:
  Listener() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    EXPECT_EQ(listen(fd_, 4), 0);
    socklen_t len = sizeof(a);
    EXPECT_EQ(getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len), 0);
    port_ = ntohs(a.sin_port);
  }
  ~Listener() { Close(); }
  void Close() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  int fd_ = -1;
  int port_ = 0;
};

TEST(ConnectionRefused, OnlyWhenNothingListens) {
  Listener listener;
  EXPECT_FALSE(ConnectionRefused(listener.address(), 1000));
  const std::string address = listener.address();
  listener.Close();
  EXPECT_TRUE(ConnectionRefused(address, 1000));
}

TEST(ConnectionRefused, NoVerdictForAddressesItCannotUse) {
  EXPECT_FALSE(ConnectionRefused("no-port", 100));
  EXPECT_FALSE(ConnectionRefused("127.0.0.1:", 100));
  EXPECT_FALSE(ConnectionRefused("host.invalid:80", 100));
}

}  // namespace
}  // namespace ecps
