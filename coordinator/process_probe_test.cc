#include "coordinator/process_probe.h"

#include <string>

#include "gtest/gtest.h"
#include "runtime/socket_test_util.h"

namespace ecps {
namespace {

using testing::LoopbackListener;

TEST(ConnectionRefused, OnlyWhenNothingListens) {
  LoopbackListener listener;
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
