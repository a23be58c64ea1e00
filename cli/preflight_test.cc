// `ecps run`'s checks of the machine, on real folders of the test's own.
#include "cli/preflight.h"

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ecps {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

fs::path Scratch(const std::string& name) {
  fs::path p = fs::path(::testing::TempDir()) / ("ecps_preflight_" + name);
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

TEST(CheckWritableFolder, AFolderThatCanBeMadeIsAcceptedAndLeftAsItWas) {
  const fs::path root = Scratch("made");
  const fs::path deep = root / "a" / "b" / "checkpoints";
  EXPECT_TRUE(CheckWritableFolder("fault_tolerance.checkpoint.dir", deep.string()).ok());
  EXPECT_FALSE(fs::exists(root / "a")) << "the check left the folders it made";
  EXPECT_TRUE(fs::is_empty(root));
  // An existing folder too, and nothing is left in it.
  EXPECT_TRUE(CheckWritableFolder("job.output_dir", root.string()).ok());
  EXPECT_TRUE(fs::is_empty(root));
  fs::remove_all(root);
}

// The finding: output_dir: /proc/x was refused, checkpoint.dir: /proc/x/ck accepted (and
// the job failed at its first checkpoint). Both keys are checked alike now.
TEST(CheckWritableFolder, EveryKeyIsRefusedAlikeWhereNothingCanBeWritten) {
  for (const char* key : {"job.output_dir", "fault_tolerance.checkpoint.dir"}) {
    const absl::Status s = CheckWritableFolder(key, "/proc/x/ck");
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(std::string(s.message()),
                HasSubstr(std::string(key) + ": /proc/x/ck is not writable: cannot create it"))
        << s;
  }
}

TEST(CheckWritableFolder, AFileInTheWayIsNamed) {
  const fs::path root = Scratch("file");
  std::ofstream(root / "plain") << "x";
  const absl::Status s = CheckWritableFolder("job.output_dir", (root / "plain" / "out").string());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr((root / "plain").string() + " is not a folder"));
  fs::remove_all(root);
}

TEST(CheckWritableFolder, AReadOnlyFolderIsRefusedEvenForRoot) {
  // A read-only bind is not at hand; /proc/self is a folder whose files nobody may create.
  const absl::Status s = CheckWritableFolder("job.output_dir", "/proc/self");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("cannot create a file in it")) << s;
}

JobSpec Tables(int servers, int64_t rows) {
  JobSpec spec;
  spec.cluster.servers = servers;
  spec.model.embedding_dim = 16;
  spec.model.table_rows.assign(spec.model.num_sparse, rows);
  return spec;
}

TEST(CheckTablesFitThisMachine, TablesOverTheMemoryAvailableAreRefusedWithTheFigures) {
  const JobSpec spec = Tables(4, 1'000'000);
  EXPECT_TRUE(CheckTablesFitThisMachine(spec, int64_t{1} << 40).ok());
  const absl::Status s = CheckTablesFitThisMachine(spec, int64_t{1} << 20);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("4 servers x ")) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("0.00 GiB available (MemAvailable)")) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("model.table_rows")) << s;
  // Memory that cannot be read refuses nothing.
  EXPECT_TRUE(CheckTablesFitThisMachine(spec, -1).ok());
}

}  // namespace
}  // namespace ecps
