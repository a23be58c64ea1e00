#include "runtime/net.h"

#include <gtest/gtest.h>

namespace ecps {
namespace {

TEST(NetTest, AWildcardBindAdvertisesAnAddressOthersCanDial) {
  auto host = AdvertiseHost("0.0.0.0", "");
  ASSERT_TRUE(host.ok()) << host.status();
  EXPECT_FALSE(IsWildcardHost(*host)) << *host;
  EXPECT_FALSE(IsLoopbackHost(*host)) << *host;
  EXPECT_TRUE(CheckDialAddress(JoinHostPort(*host, 7000)).ok()) << *host;
}

TEST(NetTest, AnExplicitAdvertiseWinsAndAWildcardOneIsRefused) {
  EXPECT_EQ(*AdvertiseHost("0.0.0.0", "node7.cluster"), "node7.cluster");
  EXPECT_EQ(*AdvertiseHost("10.1.2.3", ""), "10.1.2.3");
  EXPECT_EQ(*AdvertiseHost("127.0.0.1", ""), "127.0.0.1");  // the user asked for loopback
  auto refused = AdvertiseHost("0.0.0.0", "0.0.0.0");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("no peer can dial"), std::string::npos);
}

TEST(NetTest, DialAddressesTakeNamesAndAddressesAndNameWhatIsWrong) {
  EXPECT_TRUE(CheckDialAddress("coordinator.default.svc.cluster.local:7000").ok());
  EXPECT_TRUE(CheckDialAddress("10.0.0.5:1").ok());
  EXPECT_TRUE(CheckDialAddress("[fd00::5]:7000").ok());
  struct Case {
    const char* address;
    const char* says;
  };
  for (const Case& c : {Case{"coordinator", "has no port"}, Case{"host:0", "between 1 and 65535"},
                        Case{"host:70000", "between 1 and 65535"}, Case{":7000", "has no host"},
                        Case{"0.0.0.0:7000", "every interface"}, Case{"[fd00::5:7000", "unclosed"},
                        Case{"[zz]:7000", "bad IPv6"}, Case{"a b:7000", "cannot hold: ' '"}}) {
    absl::Status s = CheckDialAddress(c.address);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.address;
    EXPECT_NE(s.message().find(c.says), std::string::npos) << c.address << ": " << s.message();
  }
}

TEST(NetTest, JoinHostPortBracketsIpv6) {
  EXPECT_EQ(JoinHostPort("10.0.0.1", 80), "10.0.0.1:80");
  EXPECT_EQ(JoinHostPort("fd00::1", 80), "[fd00::1]:80");
  EXPECT_EQ(JoinHostPort("[fd00::1]", 80), "[fd00::1]:80");
}

TEST(NetTest, PicksAPortThatCanBeBound) {
  auto port = PickFreePort("127.0.0.1");
  ASSERT_TRUE(port.ok()) << port.status();
  EXPECT_GT(*port, 0);
  EXPECT_LE(*port, 65535);
  auto bad = PickFreePort("no-such-host.invalid");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("no-such-host.invalid"), std::string::npos);
}

TEST(NetTest, SplitsAListOfCoordinatorAddresses) {
  auto one = SplitDialAddresses("h1:7000");
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(*one, std::vector<std::string>{"h1:7000"});
  auto three = SplitDialAddresses("h1:7000, 10.0.0.2:7001,[::1]:7002");
  ASSERT_TRUE(three.ok()) << three.status();
  EXPECT_EQ(*three, (std::vector<std::string>{"h1:7000", "10.0.0.2:7001", "[::1]:7002"}));
  auto empty = SplitDialAddresses("h1:7000,");
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("empty address"), std::string::npos);
  auto twice = SplitDialAddresses("h1:7000,h1:7000");
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.status().message().find("names h1:7000 twice"), std::string::npos);
  auto bad = SplitDialAddresses("h1:7000,h2");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'h2' has no port"), std::string::npos);
}

}  // namespace
}  // namespace ecps
