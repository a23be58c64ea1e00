#include "runtime/env.h"

#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/fault_injection_env.h"

namespace ecps {
namespace {

using ::testing::HasSubstr;
using AfterTear = FaultInjectionEnv::AfterTear;

class EnvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (std::filesystem::path(::testing::TempDir()) / "env-test-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    root_ = tmpl;
  }
  void TearDown() override { ASSERT_TRUE(Env::Default()->RemoveAll(root_).ok()); }

  std::string Path(const std::string& name) const { return root_ + "/" + name; }

  static std::string Read(const std::string& path) {
    absl::StatusOr<std::string> data = Env::Default()->ReadFile(path);
    EXPECT_TRUE(data.ok()) << data.status();
    return data.ok() ? *data : "";
  }

  // Creates `path` through `env` holding `synced`, fsynced, then `unsynced` after it.
  static void Write(Env& env, const std::string& path, const std::string& synced,
                    const std::string& unsynced) {
    absl::StatusOr<std::unique_ptr<WritableFile>> file = env.NewWritableFile(path);
    ASSERT_TRUE(file.ok()) << file.status();
    ASSERT_TRUE((*file)->Append(synced).ok());
    ASSERT_TRUE((*file)->Sync().ok());
    ASSERT_TRUE((*file)->Append(unsynced).ok());
    ASSERT_TRUE((*file)->Close().ok());
  }

  std::string root_;
};

TEST_F(EnvTest, PosixEnvWritesReadsListsAndNamesWhatIsMissing) {
  Env* env = Env::Default();
  ASSERT_TRUE(WriteFileDurably(Path("a"), "one").ok());
  ASSERT_TRUE(WriteFileDurably(Path("a"), "two").ok());
  EXPECT_EQ(Read(Path("a")), "two");
  EXPECT_EQ(*env->GetFileKind(Path("a.tmp")), FileKind::kMissing);  // renamed away
  EXPECT_EQ(*env->CreateDirs(Path("d/e")), true);
  EXPECT_EQ(*env->CreateDirs(Path("d/e")), false);
  EXPECT_EQ(*env->GetFileKind(Path("d")), FileKind::kDirectory);
  std::filesystem::create_symlink(Path("nowhere"), Path("dangling"));
  absl::StatusOr<std::vector<DirEntry>> entries = env->ListDir(root_);
  ASSERT_TRUE(entries.ok()) << entries.status();
  std::map<std::string, FileKind> kinds;
  for (const DirEntry& e : *entries) kinds[e.name] = e.kind;
  EXPECT_EQ(kinds, (std::map<std::string, FileKind>{{"a", FileKind::kFile},
                                                    {"d", FileKind::kDirectory},
                                                    {"dangling", FileKind::kMissing}}));

  absl::StatusOr<std::unique_ptr<WritableFile>> file = env->NewAppendableFile(Path("a"));
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_TRUE((*file)->Append("!").ok());  // at the end
  ASSERT_TRUE((*file)->Truncate(2).ok());
  ASSERT_TRUE((*file)->Append("o").ok());  // at the new end
  ASSERT_TRUE((*file)->Close().ok());
  EXPECT_EQ(Read(Path("a")), "two");

  EXPECT_EQ(env->NewAppendableFile(Path("none")).status().code(), absl::StatusCode::kNotFound);
  absl::Status missing = env->ReadFile(Path("none")).status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.message(), HasSubstr(Path("none") + ": missing"));
  absl::Status bad = WriteFileDurably(Path("no-dir/x"), "x");
  EXPECT_EQ(bad.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(bad.message(), HasSubstr(Path("no-dir/x.tmp")));
  EXPECT_EQ(env->NewMappedFile(Path("a"), 4).status().code(),
            absl::StatusCode::kFailedPrecondition);  // "two" is 3 bytes
}

TEST_F(EnvTest, DropUnsyncedDataPutsFilesBackToTheirLastSync) {
  FaultInjectionEnv env;
  ASSERT_NO_FATAL_FAILURE(Write(env, Path("synced"), "kept", " lost"));
  ASSERT_NO_FATAL_FAILURE(Write(env, Path("never"), "", "all lost"));
  ASSERT_TRUE(Env::Default()->CreateDir(Path("d.tmp")).ok());
  ASSERT_NO_FATAL_FAILURE(Write(env, Path("d.tmp/f"), "in a dir", " renamed"));
  ASSERT_TRUE(env.RenameFile(Path("d.tmp"), Path("d")).ok());   // the file's state goes along
  ASSERT_TRUE(Env::Default()->RemoveFile(Path("never")).ok());  // a removed file stays removed
  EXPECT_EQ(Read(Path("synced")), "kept lost");

  ASSERT_TRUE(env.DropUnsyncedData().ok());
  EXPECT_EQ(Read(Path("synced")), "kept");
  EXPECT_EQ(Read(Path("d/f")), "in a dir");
  EXPECT_EQ(*Env::Default()->GetFileKind(Path("never")), FileKind::kMissing);
}

TEST_F(EnvTest, ANeverSyncedFileComesBackEmptyAndAMappedOneToItsLastSync) {
  FaultInjectionEnv env;
  ASSERT_NO_FATAL_FAILURE(Write(env, Path("never"), "", "all lost"));
  ASSERT_TRUE(WriteFileDurably(Path("mapped"), "abcd").ok());  // not through `env`
  absl::StatusOr<std::unique_ptr<MappedFile>> map = env.NewMappedFile(Path("mapped"), 4);
  ASSERT_TRUE(map.ok()) << map.status();
  std::memcpy((*map)->data(), "AB", 2);
  ASSERT_TRUE((*map)->Sync().ok());
  std::memcpy((*map)->data() + 2, "CD", 2);
  ASSERT_TRUE((*map)->Close().ok());
  EXPECT_EQ(Read(Path("mapped")), "ABCD");

  ASSERT_TRUE(env.DropUnsyncedData().ok());
  EXPECT_EQ(Read(Path("never")), "");
  EXPECT_EQ(Read(Path("mapped")), "ABcd");
}

TEST_F(EnvTest, TheNthSyncFailsAndMakesNothingDurable) {
  FaultInjectionEnv env;
  env.FailSync(2);
  absl::StatusOr<std::unique_ptr<WritableFile>> file = env.NewWritableFile(Path("f"));
  ASSERT_TRUE(file.ok());
  ASSERT_TRUE((*file)->Append("one").ok());
  ASSERT_TRUE((*file)->Sync().ok());
  ASSERT_TRUE((*file)->Append(" two").ok());
  absl::Status failed = (*file)->Sync();
  EXPECT_EQ(failed.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(failed.message(), HasSubstr(Path("f") + ": fsync failed: injected fault"));
  EXPECT_TRUE(env.SyncPath(root_).ok());  // only the second one
  EXPECT_EQ(env.syncs(), 3);
  ASSERT_TRUE(env.DropUnsyncedData().ok());
  EXPECT_EQ(Read(Path("f")), "one");
}

TEST_F(EnvTest, ATornWriteLeavesHalfTheBytesThenFailsOrKillsTheWriter) {
  for (AfterTear after : {AfterTear::kFail, AfterTear::kCrash}) {
    SCOPED_TRACE(after == AfterTear::kFail ? "fail" : "crash");
    FaultInjectionEnv env;
    env.TearWrite(2, after);
    absl::StatusOr<std::unique_ptr<WritableFile>> file = env.NewWritableFile(Path("f"));
    ASSERT_TRUE(file.ok());
    ASSERT_TRUE((*file)->Append("head|").ok());
    absl::Status torn = (*file)->Append("12345678");
    EXPECT_EQ(torn.code(), absl::StatusCode::kInternal);
    EXPECT_THAT(torn.message(), HasSubstr(Path("f")));
    EXPECT_EQ(Read(Path("f")), "head|1234");
    EXPECT_EQ(env.crashed(), after == AfterTear::kCrash);
    // The writer goes on, or everything it tries fails and changes nothing.
    EXPECT_EQ((*file)->Append("x").ok(), after == AfterTear::kFail);
    EXPECT_EQ(env.ReadFile(Path("f")).ok(), after == AfterTear::kFail);
    EXPECT_EQ(env.RenameFile(Path("f"), Path("g")).ok(), after == AfterTear::kFail);
    EXPECT_EQ(env.appends(), after == AfterTear::kFail ? 3 : 2);
    ASSERT_TRUE(Env::Default()->RemoveAll(Path("f")).ok());
    ASSERT_TRUE(Env::Default()->RemoveAll(Path("g")).ok());
  }
}

TEST_F(EnvTest, AWriterKilledBeforeTheNthOperationDoesNothingFromThere) {
  FaultInjectionEnv env;
  // WriteFileDurably: create, append, sync, close, rename (5th), fsync of the folder.
  env.CrashAt(5);
  absl::Status s = WriteFileDurably(Path("f"), "contents", &env);
  EXPECT_THAT(s.message(), HasSubstr("the writer is dead (simulated crash)"));
  EXPECT_TRUE(env.crashed());
  EXPECT_EQ(env.operations(), 5);
  EXPECT_EQ(*Env::Default()->GetFileKind(Path("f")), FileKind::kMissing);
  EXPECT_EQ(Read(Path("f.tmp")), "contents");
  EXPECT_FALSE(env.CreateDir(Path("d")).ok());
  EXPECT_EQ(*Env::Default()->GetFileKind(Path("d")), FileKind::kMissing);
}

}  // namespace
}  // namespace ecps
