#include "cli/job_dir.h"

#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ecps {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class JobDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/ecps_job_dir_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_;
};

TEST_F(JobDirTest, TokenIsWrittenOwnerOnlyAndReadBackWithTheAddress) {
  ASSERT_TRUE(WriteJobToken(dir_, "s3cret").ok());
  ASSERT_TRUE(WriteJobAddress(dir_, "10.0.0.7:4100").ok());
  struct stat st;
  ASSERT_EQ(::stat((dir_ + "/token").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto job = ReadJobDir(dir_);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->token, "s3cret");
  EXPECT_EQ(job->address, "10.0.0.7:4100");
}

TEST_F(JobDirTest, AnOldTokenFileIsReplacedAndItsLooseModeNotKept) {
  {
    std::ofstream old(dir_ + "/token");
    old << "old\n";
  }
  fs::permissions(dir_ + "/token", fs::perms::all);
  ASSERT_TRUE(WriteJobToken(dir_, "new").ok());
  struct stat st;
  ASSERT_EQ(::stat((dir_ + "/token").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(ReadJobDir(dir_)->token, "new");
}

TEST_F(JobDirTest, AFolderWithoutAJobIsNamed) {
  auto job = ReadJobDir(dir_);
  ASSERT_FALSE(job.ok());
  EXPECT_TRUE(absl::IsNotFound(job.status()));
  EXPECT_THAT(std::string(job.status().message()), HasSubstr(dir_ + "/token"));
}

TEST_F(JobDirTest, ATokenOthersCanReadIsRefused) {
  ASSERT_TRUE(WriteJobToken(dir_, "s3cret").ok());
  fs::permissions(dir_ + "/token", fs::perms::group_read, fs::perm_options::add);
  auto job = ReadJobDir(dir_);
  ASSERT_FALSE(job.ok());
  EXPECT_TRUE(absl::IsPermissionDenied(job.status()));
  EXPECT_THAT(std::string(job.status().message()), HasSubstr("chmod 600"));
}

TEST_F(JobDirTest, AddressIsEmptyBeforeTheCoordinatorListens) {
  ASSERT_TRUE(WriteJobToken(dir_, "t").ok());
  auto job = ReadJobDir(dir_);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->address, "");
}

}  // namespace
}  // namespace ecps
