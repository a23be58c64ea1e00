#include "coordinator/state_log.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ecps {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// The format's sizes (state_log.h), which the tests tear and corrupt by hand.
constexpr int64_t kSegmentHeader = 16;
constexpr int64_t kRecordHeader = 24;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
  ASSERT_TRUE(out.good()) << path;
}

std::string SegmentPath(const std::string& dir, uint64_t first_seq) {
  return absl::StrFormat("%s/log-%020d", dir, first_seq);
}

std::set<std::string> FileNames(const std::string& dir) {
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.insert(entry.path().filename());
  return names;
}

std::vector<std::string> Bytes(const StateLogContents& c) {
  std::vector<std::string> out;
  for (const StateLogRecord& r : c.records) out.push_back(r.bytes);
  return out;
}

std::vector<uint64_t> Seqs(const StateLogContents& c) {
  std::vector<uint64_t> out;
  for (const StateLogRecord& r : c.records) out.push_back(r.seq);
  return out;
}

// Options whose fault hook fails the step `*fail_at` names, before it happens (none while it
// is empty).
StateLogOptions FailingAt(const std::optional<StateLogStep>* fail_at) {
  StateLogOptions options;
  options.before_step = [fail_at](StateLogStep at, const std::string& path) {
    return at == *fail_at ? absl::InternalError("injected fault at " + path) : absl::OkStatus();
  };
  return options;
}

// Appends "a", snapshots "old" (through record 1), appends "b" and "c".
void WriteOldSnapshotAndTwoRecords(StateLog& log) {
  ASSERT_TRUE(log.Append("a").ok());
  ASSERT_TRUE(log.WriteSnapshot("old").ok());
  ASSERT_TRUE(log.Append("b").ok());
  ASSERT_TRUE(log.Append("c").ok());
}

class StateLogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = absl::StrCat(::testing::TempDir(), "state-log-test-", getpid(), "-",
                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
    dir_ = root_ + "/log";
  }
  void TearDown() override { fs::remove_all(root_); }

  // A fresh folder for one case of a loop.
  std::string CaseDir(int n) { return absl::StrCat(root_, "/case-", n); }

  std::unique_ptr<StateLog> MustOpen(const std::string& dir, StateLogOptions options = {}) {
    absl::StatusOr<std::unique_ptr<StateLog>> log = StateLog::Open(dir, std::move(options));
    EXPECT_TRUE(log.ok()) << log.status();
    return log.ok() ? std::move(log).value() : nullptr;
  }

  StateLogContents MustLoad(const std::string& dir) {
    std::unique_ptr<StateLog> log = MustOpen(dir);
    if (log == nullptr) return {};
    absl::StatusOr<StateLogContents> c = log->Load();
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *std::move(c) : StateLogContents{};
  }

  // Opens `dir`, appends `records` (expecting sequence numbers from `first_seq`) and closes it.
  void AppendAll(const std::string& dir, const std::vector<std::string>& records,
                 uint64_t first_seq = 1) {
    std::unique_ptr<StateLog> log = MustOpen(dir);
    ASSERT_NE(log, nullptr);
    for (size_t i = 0; i < records.size(); ++i) {
      absl::StatusOr<uint64_t> seq = log->Append(records[i]);
      ASSERT_TRUE(seq.ok()) << seq.status();
      EXPECT_EQ(*seq, first_seq + i);
    }
  }

  std::string root_;
  std::string dir_;
};

TEST_F(StateLogTest, EmptyFolderLoadsAsEmptyState) {
  for (const std::string& dir : {dir_, root_}) {  // a folder Open creates, an existing one
    std::unique_ptr<StateLog> log = MustOpen(dir);
    ASSERT_NE(log, nullptr);
    absl::StatusOr<StateLogContents> c = log->Load();
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_FALSE(c->snapshot.has_value());
    EXPECT_EQ(c->snapshot_seq, 0u);
    EXPECT_TRUE(c->records.empty());
    EXPECT_EQ(log->next_seq(), 1u);
  }
}

TEST_F(StateLogTest, AppendedRecordsLoadAfterReopen) {
  const std::vector<std::string> records = {"first", "", std::string("a\0b\xff", 4),
                                            std::string(10000, 'x')};
  AppendAll(dir_, records);
  StateLogContents c = MustLoad(dir_);
  EXPECT_FALSE(c.snapshot.has_value());
  EXPECT_EQ(Bytes(c), records);
  EXPECT_THAT(Seqs(c), ElementsAre(1, 2, 3, 4));
  // Sequence numbers go on after a reopen.
  AppendAll(dir_, {"fifth"}, 5);
  EXPECT_THAT(Seqs(MustLoad(dir_)), ElementsAre(1, 2, 3, 4, 5));
}

TEST_F(StateLogTest, LoadSeesRecordsAppendedByTheSameLog) {
  std::unique_ptr<StateLog> log = MustOpen(dir_);
  ASSERT_NE(log, nullptr);
  ASSERT_TRUE(log->Append("one").ok());
  ASSERT_TRUE(log->Append("two").ok());
  absl::StatusOr<StateLogContents> c = log->Load();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(Bytes(*c), ElementsAre("one", "two"));
}

TEST_F(StateLogTest, SnapshotThenRecords) {
  {
    std::unique_ptr<StateLog> log = MustOpen(dir_);
    ASSERT_NE(log, nullptr);
    for (const char* r : {"a", "b", "c"}) ASSERT_TRUE(log->Append(r).ok());
    ASSERT_TRUE(log->WriteSnapshot("state after c").ok());
    EXPECT_EQ(log->next_seq(), 4u);
    EXPECT_EQ(*log->Append("d"), 4u);
    EXPECT_EQ(*log->Append("e"), 5u);
  }
  StateLogContents c = MustLoad(dir_);
  EXPECT_EQ(c.snapshot, "state after c");
  EXPECT_EQ(c.snapshot_seq, 3u);
  EXPECT_THAT(Bytes(c), ElementsAre("d", "e"));
  EXPECT_THAT(Seqs(c), ElementsAre(4, 5));
  // The segment before the snapshot is gone, and no temporary is left.
  EXPECT_THAT(FileNames(dir_),
              ::testing::UnorderedElementsAre("LOCK", "SNAPSHOT", "log-00000000000000000004"));
}

TEST_F(StateLogTest, ANewSnapshotReplacesTheOldOneEvenWithNoRecordBetween) {
  {
    std::unique_ptr<StateLog> log = MustOpen(dir_);
    ASSERT_NE(log, nullptr);
    ASSERT_TRUE(log->Append("a").ok());
    ASSERT_TRUE(log->WriteSnapshot("one").ok());
    ASSERT_TRUE(log->WriteSnapshot("two").ok());  // no record since: the same segment again
    ASSERT_TRUE(log->Append("b").ok());
    ASSERT_TRUE(log->WriteSnapshot("three").ok());
    ASSERT_TRUE(log->Append("c").ok());
  }
  StateLogContents c = MustLoad(dir_);
  EXPECT_EQ(c.snapshot, "three");
  EXPECT_EQ(c.snapshot_seq, 2u);
  EXPECT_THAT(Bytes(c), ElementsAre("c"));
  EXPECT_THAT(Seqs(c), ElementsAre(3));
}

TEST_F(StateLogTest, ATornLastRecordAtEveryByteIsDroppedAndAppendingGoesOn) {
  const std::vector<std::string> good = {"alpha", "bravo", "charlie"};
  const std::string last(40, 'L');
  std::vector<std::string> all = good;
  all.push_back(last);
  AppendAll(dir_, all);
  const std::string segment = ReadFile(SegmentPath(dir_, 1));
  const int64_t last_start = static_cast<int64_t>(segment.size()) - kRecordHeader - 40;
  ASSERT_EQ(last_start, kSegmentHeader + 3 * kRecordHeader + 5 + 5 + 7);

  for (int64_t cut = last_start; cut < static_cast<int64_t>(segment.size()); ++cut) {
    SCOPED_TRACE(absl::StrCat("cut at byte ", cut));
    const std::string dir = CaseDir(static_cast<int>(cut));
    fs::create_directories(dir);
    WriteFile(SegmentPath(dir, 1), segment.substr(0, cut));
    {
      std::unique_ptr<StateLog> log = MustOpen(dir);
      ASSERT_NE(log, nullptr);
      absl::StatusOr<StateLogContents> c = log->Load();
      ASSERT_TRUE(c.ok()) << c.status();
      EXPECT_EQ(Bytes(*c), good);
      // Open cut the torn bytes off, so the new record follows the good ones.
      EXPECT_EQ(static_cast<int64_t>(fs::file_size(SegmentPath(dir, 1))), last_start);
      absl::StatusOr<uint64_t> seq = log->Append("after the tear");
      ASSERT_TRUE(seq.ok()) << seq.status();
      EXPECT_EQ(*seq, 4u);
    }
    StateLogContents c = MustLoad(dir);
    EXPECT_THAT(Bytes(c), ElementsAre("alpha", "bravo", "charlie", "after the tear"));
    fs::remove_all(dir);
  }
}

TEST_F(StateLogTest, ALastRecordWithABadPayloadByteIsDroppedAsTorn) {
  AppendAll(dir_, {"alpha", "bravo", "the last record"});
  const std::string path = SegmentPath(dir_, 1);
  const std::string segment = ReadFile(path);
  const int64_t payload = static_cast<int64_t>(segment.size()) - 15;
  for (int64_t i = payload; i < static_cast<int64_t>(segment.size()); ++i) {
    SCOPED_TRACE(absl::StrCat("byte ", i));
    std::string bad = segment;
    bad[i] ^= 0x20;
    WriteFile(path, bad);
    EXPECT_THAT(Bytes(MustLoad(dir_)), ElementsAre("alpha", "bravo"));
  }
}

TEST_F(StateLogTest, AZeroFilledTailIsDroppedAsTorn) {
  AppendAll(dir_, {"alpha", "bravo"});
  const std::string path = SegmentPath(dir_, 1);
  WriteFile(path, ReadFile(path) + std::string(100, '\0'));
  AppendAll(dir_, {"charlie"}, 3);
  EXPECT_THAT(Bytes(MustLoad(dir_)), ElementsAre("alpha", "bravo", "charlie"));
}

TEST_F(StateLogTest, ABadByteInAMiddleRecordIsDataLossNamingTheFileAndRecord) {
  AppendAll(dir_, {"alpha", "bravo-record", "charlie", "delta"});
  const std::string path = SegmentPath(dir_, 1);
  const std::string segment = ReadFile(path);
  const int64_t start = kSegmentHeader + kRecordHeader + 5;  // record 2
  const int64_t end = start + kRecordHeader + 12;
  for (int64_t i = start; i < end; ++i) {
    SCOPED_TRACE(absl::StrCat("byte ", i));
    for (unsigned char flip : {0x01, 0x80}) {  // the low and the high bit: a length field
      std::string bad = segment;               // grows past the end with the high one
      bad[i] ^= flip;
      WriteFile(path, bad);
      absl::StatusOr<std::unique_ptr<StateLog>> log = StateLog::Open(dir_);
      ASSERT_EQ(log.status().code(), absl::StatusCode::kDataLoss) << log.status();
      EXPECT_THAT(log.status().message(), HasSubstr(path));
      EXPECT_THAT(log.status().message(), HasSubstr(absl::StrCat("record 2 at byte ", start)));
      EXPECT_EQ(ReadFile(path), bad);  // a refused Open changes nothing
    }
  }
  WriteFile(path, segment);
  EXPECT_THAT(Bytes(MustLoad(dir_)), ElementsAre("alpha", "bravo-record", "charlie", "delta"));
}

TEST_F(StateLogTest, AnIntactRecordWithTheWrongSequenceNumberIsDataLossEvenAtTheEnd) {
  AppendAll(dir_, {"alpha", "bravo"});
  const std::string path = SegmentPath(dir_, 1);
  const std::string segment = ReadFile(path);
  // Record 2 again after itself: intact, but not record 3.
  WriteFile(path, segment + segment.substr(kSegmentHeader + kRecordHeader + 5));
  absl::StatusOr<std::unique_ptr<StateLog>> log = StateLog::Open(dir_);
  ASSERT_EQ(log.status().code(), absl::StatusCode::kDataLoss) << log.status();
  EXPECT_THAT(log.status().message(), HasSubstr("record 3 at byte"));
  EXPECT_THAT(log.status().message(), HasSubstr("it holds record 2"));
}

TEST_F(StateLogTest, ADamagedSnapshotIsDataLoss) {
  {
    std::unique_ptr<StateLog> log = MustOpen(dir_);
    ASSERT_NE(log, nullptr);
    ASSERT_TRUE(log->Append("a").ok());
    ASSERT_TRUE(log->WriteSnapshot("the whole state").ok());
  }
  const std::string path = dir_ + "/SNAPSHOT";
  const std::string snapshot = ReadFile(path);
  for (const std::string& bad : {snapshot.substr(0, snapshot.size() - 1), snapshot.substr(0, 10),
                                 snapshot.substr(0, 40) + "X" + snapshot.substr(41)}) {
    WriteFile(path, bad);
    absl::StatusOr<std::unique_ptr<StateLog>> log = StateLog::Open(dir_);
    ASSERT_EQ(log.status().code(), absl::StatusCode::kDataLoss) << log.status();
    EXPECT_THAT(log.status().message(), HasSubstr(path));
  }
}

TEST_F(StateLogTest, AMissingSegmentIsDataLoss) {
  {
    std::unique_ptr<StateLog> log = MustOpen(dir_);
    ASSERT_NE(log, nullptr);
    ASSERT_TRUE(log->Append("a").ok());
    ASSERT_TRUE(log->WriteSnapshot("state").ok());
    ASSERT_TRUE(log->Append("b").ok());
  }
  fs::remove(SegmentPath(dir_, 2));
  absl::StatusOr<std::unique_ptr<StateLog>> log = StateLog::Open(dir_);
  ASSERT_EQ(log.status().code(), absl::StatusCode::kDataLoss) << log.status();
  EXPECT_THAT(log.status().message(), HasSubstr(SegmentPath(dir_, 2) + ": missing"));

  // Without a snapshot the first segment must be log-1.
  const std::string dir = CaseDir(0);
  AppendAll(dir, {"a"});
  fs::rename(SegmentPath(dir, 1), SegmentPath(dir, 7));
  log = StateLog::Open(dir);
  ASSERT_EQ(log.status().code(), absl::StatusCode::kDataLoss) << log.status();
  EXPECT_THAT(log.status().message(), HasSubstr(SegmentPath(dir, 1) + ": missing"));
}

// WriteSnapshot failing at each of its steps leaves what a crash there would: a folder that
// loads as before the snapshot or as after it, and takes appends after a reopen.
TEST_F(StateLogTest, ASnapshotCutShortAtAnyStepLoadsTheOldStateOrTheNew) {
  for (StateLogStep step :
       {StateLogStep::kSegmentCreate, StateLogStep::kSnapshotWrite, StateLogStep::kRemoveStale}) {
    SCOPED_TRACE(static_cast<int>(step));
    const std::string dir = CaseDir(static_cast<int>(step));
    std::optional<StateLogStep> fail_at;
    {
      std::unique_ptr<StateLog> log = MustOpen(dir, FailingAt(&fail_at));
      ASSERT_NE(log, nullptr);
      ASSERT_NO_FATAL_FAILURE(WriteOldSnapshotAndTwoRecords(*log));
      fail_at = step;
      absl::Status s = log->WriteSnapshot("new");
      if (step == StateLogStep::kRemoveStale) {
        EXPECT_TRUE(s.ok()) << s;  // the snapshot is durable; the stale segment waits
        EXPECT_TRUE(fs::exists(SegmentPath(dir, 2)));
        continue;
      }
      EXPECT_THAT(s.message(), HasSubstr("injected fault"));
      EXPECT_EQ(log->Append("d").status().code(), absl::StatusCode::kFailedPrecondition);
      EXPECT_EQ(log->WriteSnapshot("x").code(), absl::StatusCode::kFailedPrecondition);
    }
    StateLogContents c = MustLoad(dir);
    EXPECT_EQ(c.snapshot, "old");
    EXPECT_EQ(c.snapshot_seq, 1u);
    EXPECT_THAT(Bytes(c), ElementsAre("b", "c"));
    AppendAll(dir, {"d"}, 4);
    EXPECT_THAT(Bytes(MustLoad(dir)), ElementsAre("b", "c", "d"));
  }
  // The snapshot whose stale segment was not removed: the reopen removes it.
  const std::string dir = CaseDir(static_cast<int>(StateLogStep::kRemoveStale));
  StateLogContents c = MustLoad(dir);
  EXPECT_EQ(c.snapshot, "new");
  EXPECT_EQ(c.snapshot_seq, 3u);
  EXPECT_TRUE(c.records.empty());
  EXPECT_FALSE(fs::exists(SegmentPath(dir, 2)));
}

TEST_F(StateLogTest, ATornRecordBeforeAnotherSegmentIsDataLoss) {
  {
    // A snapshot cut short after it created log-4: two live segments.
    std::optional<StateLogStep> fail_at;
    std::unique_ptr<StateLog> log = MustOpen(dir_, FailingAt(&fail_at));
    ASSERT_NE(log, nullptr);
    ASSERT_NO_FATAL_FAILURE(WriteOldSnapshotAndTwoRecords(*log));
    fail_at = StateLogStep::kSnapshotWrite;
    ASSERT_FALSE(log->WriteSnapshot("new").ok());
  }
  EXPECT_TRUE(fs::exists(SegmentPath(dir_, 4)));
  EXPECT_THAT(Bytes(MustLoad(dir_)), ElementsAre("b", "c"));
  const std::string path = SegmentPath(dir_, 2);
  fs::resize_file(path, fs::file_size(path) - 1);
  absl::StatusOr<std::unique_ptr<StateLog>> log = StateLog::Open(dir_);
  ASSERT_EQ(log.status().code(), absl::StatusCode::kDataLoss) << log.status();
  EXPECT_THAT(log.status().message(), HasSubstr(path + ": record 3 at byte"));
}

TEST_F(StateLogTest, AFailedFsyncStopsWritesAndTheReopenSettlesTheRecord) {
  for (StateLogStep step : {StateLogStep::kAppendWrite, StateLogStep::kAppendSync}) {
    SCOPED_TRACE(static_cast<int>(step));
    const std::string dir = CaseDir(static_cast<int>(step));
    std::optional<StateLogStep> fail_at;
    {
      std::unique_ptr<StateLog> log = MustOpen(dir, FailingAt(&fail_at));
      ASSERT_NE(log, nullptr);
      ASSERT_TRUE(log->Append("a").ok());
      fail_at = step;
      EXPECT_EQ(log->Append("b").status().code(), absl::StatusCode::kInternal);
      fail_at.reset();
      absl::StatusOr<uint64_t> again = log->Append("c");
      EXPECT_EQ(again.status().code(), absl::StatusCode::kFailedPrecondition);
      EXPECT_THAT(again.status().message(), HasSubstr("injected fault"));
    }
    // Failed before the write: "b" is not there; before the fsync: it was written, so it is.
    StateLogContents c = MustLoad(dir);
    if (step == StateLogStep::kAppendWrite) {
      EXPECT_THAT(Bytes(c), ElementsAre("a"));
    } else {
      EXPECT_THAT(Bytes(c), ElementsAre("a", "b"));
    }
  }
}

TEST_F(StateLogTest, AnOversizedRecordIsRefusedAndTheLogGoesOn) {
  std::unique_ptr<StateLog> log = MustOpen(dir_);
  ASSERT_NE(log, nullptr);
  EXPECT_EQ(log->Append(std::string(kMaxStateLogRecordBytes + 1, 'x')).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<uint64_t> seq = log->Append("small");
  ASSERT_TRUE(seq.ok()) << seq.status();
  EXPECT_EQ(*seq, 1u);
}

TEST_F(StateLogTest, ASecondWriterIsRefusedWhileTheFirstHoldsTheLock) {
  StateLogOptions first;
  first.owner = "coordinator 7@node-a";
  std::unique_ptr<StateLog> log = MustOpen(dir_, first);
  ASSERT_NE(log, nullptr);
  absl::StatusOr<std::unique_ptr<StateLog>> second = StateLog::Open(dir_);
  ASSERT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition) << second.status();
  EXPECT_THAT(second.status().message(), HasSubstr(dir_));
  EXPECT_THAT(second.status().message(), HasSubstr("coordinator 7@node-a"));
  log.reset();
  second = StateLog::Open(dir_);
  ASSERT_TRUE(second.ok()) << second.status();
  // The default owner names this process.
  absl::StatusOr<std::unique_ptr<StateLog>> third = StateLog::Open(dir_);
  EXPECT_THAT(third.status().message(), HasSubstr(absl::StrCat("pid ", getpid(), " on host ")));
}

// A child that opens the log, appends `record`, tells the parent through `ready` and then
// either exits without closing the log or waits to be killed. Exits 1 when it cannot.
[[noreturn]] void RunChildWriter(const std::string& dir, const std::string& record, int ready,
                                 bool wait) {
  absl::StatusOr<std::unique_ptr<StateLog>> log = StateLog::Open(dir);
  if (!log.ok() || !(*log)->Append(record).ok()) _exit(1);
  char byte = 'r';
  if (::write(ready, &byte, 1) != 1) _exit(1);
  if (wait) {
    for (;;) ::pause();  // until SIGKILL
  }
  _exit(0);  // no destructor runs: the log is never closed
}

TEST_F(StateLogTest, TheLockOfADeadWriterIsFree) {
  for (bool killed : {false, true}) {
    SCOPED_TRACE(killed ? "SIGKILLed" : "_exit without closing");
    const std::string dir = CaseDir(killed);
    int pipe_fds[2];
    ASSERT_EQ(::pipe(pipe_fds), 0);
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      ::close(pipe_fds[0]);
      RunChildWriter(dir, "from the child", pipe_fds[1], killed);
    }
    ::close(pipe_fds[1]);
    bool reaped = false;
    absl::Cleanup kill_child = [&] {  // a failed assertion must not leave it waiting
      if (!reaped) {
        ::kill(child, SIGKILL);
        ::waitpid(child, nullptr, 0);
      }
    };
    char byte = 0;
    ASSERT_EQ(::read(pipe_fds[0], &byte, 1), 1) << "the child could not write the log";
    ::close(pipe_fds[0]);
    if (killed) {
      absl::StatusOr<std::unique_ptr<StateLog>> refused = StateLog::Open(dir);
      ASSERT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
      EXPECT_THAT(refused.status().message(), HasSubstr(absl::StrCat("pid ", child, " on host")));
      ASSERT_EQ(::kill(child, SIGKILL), 0);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    reaped = true;
    if (killed) {
      EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
    } else {
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
    }
    std::unique_ptr<StateLog> log = MustOpen(dir);
    ASSERT_NE(log, nullptr);
    absl::StatusOr<StateLogContents> c = log->Load();
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_THAT(Bytes(*c), ElementsAre("from the child"));
  }
}

TEST_F(StateLogTest, ConcurrentAppendsGetDistinctSequenceNumbersInFileOrder) {
  constexpr int kThreads = 4;
  constexpr int kEach = 25;
  std::unique_ptr<StateLog> log = MustOpen(dir_);
  ASSERT_NE(log, nullptr);
  std::vector<std::vector<uint64_t>> seqs(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        absl::StatusOr<uint64_t> seq = log->Append(absl::StrCat(t, "/", i));
        seqs[t].push_back(seq.ok() ? *seq : 0);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  absl::StatusOr<StateLogContents> c = log->Load();
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->records.size(), static_cast<size_t>(kThreads * kEach));
  for (size_t k = 0; k < c->records.size(); ++k) EXPECT_EQ(c->records[k].seq, k + 1);
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kEach; ++i) {
      ASSERT_GE(seqs[t][i], 1u);
      EXPECT_EQ(c->records[seqs[t][i] - 1].bytes, absl::StrCat(t, "/", i));
    }
  }
}

}  // namespace
}  // namespace ecps
