#include "runtime/coordinator_finder.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"

namespace ecps {
namespace {

// What the fake file holds; NOT_FOUND while `present` is false.
struct FakeFile {
  bool present = false;
  std::string line;
  int reads = 0;
  CoordinatorFinder::ReadFirstLine Reader() {
    return [this](const std::string&) -> absl::StatusOr<std::string> {
      ++reads;
      if (!present) return absl::NotFoundError("no file");
      return line;
    };
  }
};

TEST(CoordinatorFinder, WithoutAFileTheAddressNeverChanges) {
  FakeFile file;
  CoordinatorFinder finder("10.0.0.1:7070", "", file.Reader());
  EXPECT_EQ(finder.Refresh(), std::nullopt);
  EXPECT_EQ(file.reads, 0);
  EXPECT_EQ(finder.address(), "10.0.0.1:7070");
}

TEST(CoordinatorFinder, AMovedCoordinatorIsFoundThroughTheFile) {
  FakeFile file;
  CoordinatorFinder finder("10.0.0.1:7070", "/job/coordinator.address", file.Reader());
  // The relaunched coordinator has not written the file yet.
  EXPECT_EQ(finder.Refresh(), std::nullopt);
  EXPECT_EQ(finder.address(), "10.0.0.1:7070");
  // It still names the address in use: nothing moved.
  file.present = true;
  file.line = "10.0.0.1:7070";
  EXPECT_EQ(finder.Refresh(), std::nullopt);
  // The new one listens on another node.
  file.line = "10.0.0.2:41234\n";
  EXPECT_EQ(finder.Refresh(), "10.0.0.2:41234");
  EXPECT_EQ(finder.address(), "10.0.0.2:41234");
  // Found once: the same file again is no move.
  EXPECT_EQ(finder.Refresh(), std::nullopt);
  EXPECT_EQ(file.reads, 4);
}

TEST(CoordinatorFinder, WhatIsNoAddressIsIgnored) {
  FakeFile file;
  file.present = true;
  CoordinatorFinder finder("node1:7070", "/job/coordinator.address", file.Reader());
  for (const char* bad : {"", "node2", "node2:", "node2:99999", "node2:7070 trailing"}) {
    file.line = bad;
    EXPECT_EQ(finder.Refresh(), std::nullopt) << bad;
    EXPECT_EQ(finder.address(), "node1:7070") << bad;
  }
  file.line = "[fd00::2]:7070";
  EXPECT_EQ(finder.Refresh(), "[fd00::2]:7070");
}

TEST(CoordinatorFinder, ReadsTheRealFile) {
  const std::string path =
      ::testing::TempDir() + "/coordinator_finder_test." + std::to_string(getpid());
  std::remove(path.c_str());
  CoordinatorFinder finder("127.0.0.1:1", path);
  EXPECT_EQ(finder.Refresh(), std::nullopt);  // no file yet
  std::ofstream(path) << "127.0.0.1:2\n";
  EXPECT_EQ(finder.Refresh(), "127.0.0.1:2");
  std::remove(path.c_str());
}

}  // namespace
}  // namespace ecps
