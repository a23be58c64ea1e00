// The state log meeting a fault in any of its writes: a failed fsync (then a power loss) or a
// torn write (then the writer fails or dies). What a reopened log loads is always the state the
// log acknowledged, with one documented exception below. Every file goes through a
// FaultInjectionEnv (runtime/fault_injection_env.h); the restart reads through the POSIX Env.
#include <unistd.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/state_log.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "coordinator/state_store.h"
#include "runtime/fault_injection_env.h"

namespace ecps {
namespace {

using ::testing::HasSubstr;
using AfterTear = FaultInjectionEnv::AfterTear;

// A state the log holds: the snapshot and the records after it.
struct State {
  std::optional<std::string> snapshot;
  std::vector<std::string> records;
  bool operator==(const State& o) const { return snapshot == o.snapshot && records == o.records; }
};

std::string Describe(const State& s) {
  std::string out = absl::StrCat("snapshot ", s.snapshot.value_or("(none)"), ", records [");
  for (const std::string& r : s.records) absl::StrAppend(&out, r, " ");
  return out + "]";
}

// What a run of the script left: the state the log acknowledged (every write that returned
// OK), and the state the write that failed would have made, if one failed.
struct Outcome {
  State acked;
  std::optional<State> attempted;
  bool snapshot_failed = false;  // the write that failed was a WriteSnapshot
  absl::Status failure;
};

// Opens the log in `dir` through `env` and makes its writes (records, snapshots, records),
// stopping at the first that fails.
Outcome RunScript(const std::string& dir, Env* env) {
  Outcome out;
  StateLogOptions options;
  options.env = env;
  absl::StatusOr<std::unique_ptr<StateLog>> log = StateLog::Open(dir, options);
  if (!log.ok()) {
    out.failure = log.status();
    return out;
  }
  struct Write {
    bool snapshot;
    std::string bytes;
  };
  const std::vector<Write> script = {{false, "a"},      {false, "bb"}, {true, "S1"}, {false, "c"},
                                     {true, "S2 long"}, {false, "d"},  {false, "e"}};
  for (const Write& w : script) {
    State next = out.acked;
    absl::Status s;
    if (w.snapshot) {
      next = State{w.bytes, {}};
      s = (*log)->WriteSnapshot(w.bytes);
    } else {
      next.records.push_back(w.bytes);
      s = (*log)->Append(w.bytes).status();
    }
    if (!s.ok()) {
      out.attempted = next;
      out.snapshot_failed = w.snapshot;
      out.failure = s;
      return out;
    }
    out.acked = next;
  }
  return out;
}

class StateLogFaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = absl::StrCat(::testing::TempDir(), "state-log-fault-test-", getpid(), "-",
                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    ASSERT_TRUE(Env::Default()->RemoveAll(root_).ok());
  }
  void TearDown() override { ASSERT_TRUE(Env::Default()->RemoveAll(root_).ok()); }

  std::string CaseDir(const std::string& name) { return absl::StrCat(root_, "/", name); }

  // The script run whole through a FaultInjectionEnv, to count its operations.
  void Count(int* syncs, int* appends) {
    FaultInjectionEnv env;
    Outcome clean = RunScript(CaseDir("count"), &env);
    ASSERT_TRUE(clean.failure.ok()) << clean.failure;
    *syncs = env.syncs();
    *appends = env.appends();
  }

  // What the log in `dir` loads once reopened (through the POSIX Env).
  static State Reopened(const std::string& dir) {
    absl::StatusOr<std::unique_ptr<StateLog>> log = StateLog::Open(dir);
    EXPECT_TRUE(log.ok()) << log.status();
    if (!log.ok()) return {};
    absl::StatusOr<StateLogContents> c = (*log)->Load();
    EXPECT_TRUE(c.ok()) << c.status();
    if (!c.ok()) return {};
    State s{c->snapshot, {}};
    for (const StateLogRecord& r : c->records) s.records.push_back(r.bytes);
    return s;
  }

  std::string root_;
};

// An fsync that fails, whichever of the log's it is, fails that write; the writer then dies
// and the power goes. The reopened log loads exactly the acknowledged state. The exception:
// the fsync of the folder after SNAPSHOT's rename, where the new snapshot, whole, may load
// instead (its bytes were durable already; "an error leaves the old snapshot or the new one",
// state_log.h). Never a torn state, never a lost acknowledged record.
TEST_F(StateLogFaultTest, AFailedFsyncThenAPowerLossLoadsOnlyWhatWasAcknowledged) {
  int syncs = 0;
  int appends = 0;
  ASSERT_NO_FATAL_FAILURE(Count(&syncs, &appends));
  ASSERT_GE(syncs, 8);
  for (int n = 1; n <= syncs; ++n) {
    SCOPED_TRACE(absl::StrCat("fsync ", n, " of ", syncs, " fails"));
    const std::string dir = CaseDir(absl::StrCat("sync-", n));
    FaultInjectionEnv env;
    env.FailSync(n);
    Outcome run = RunScript(dir, &env);
    env.Crash();
    ASSERT_TRUE(env.DropUnsyncedData().ok());
    const State loaded = Reopened(dir);
    if (!run.failure.ok()) {
      EXPECT_THAT(run.failure.message(), HasSubstr("fsync failed: injected fault"));
      if (run.snapshot_failed && loaded == *run.attempted) {
        EXPECT_THAT(run.failure.message(), HasSubstr(dir + ": fsync failed"));
        continue;  // the folder's fsync after the rename: the exception above
      }
    }  // else the failed fsync was the one after removing stale segments, which is only logged
    EXPECT_EQ(loaded, run.acked) << "loaded " << Describe(loaded) << ", acknowledged "
                                 << Describe(run.acked);
  }
}

// A write torn in half, whichever it is (a record's, a new segment's header, SNAPSHOT.tmp's),
// after which the write fails (and the log is closed) or the writer dies on the spot: the
// reopened log loads exactly the acknowledged state, and takes appends again.
TEST_F(StateLogFaultTest, ATornWriteNeverLoadsAStateThatWasNotAcknowledged) {
  int syncs = 0;
  int appends = 0;
  ASSERT_NO_FATAL_FAILURE(Count(&syncs, &appends));
  ASSERT_GE(appends, 7);
  for (AfterTear after : {AfterTear::kFail, AfterTear::kCrash}) {
    for (int n = 1; n <= appends; ++n) {
      const std::string how = after == AfterTear::kFail ? "fail" : "die";
      SCOPED_TRACE(absl::StrCat("write ", n, " of ", appends, " torn, then ", how));
      const std::string dir = CaseDir(absl::StrCat("tear-", how, "-", n));
      FaultInjectionEnv env;
      env.TearWrite(n, after);
      Outcome run = RunScript(dir, &env);
      ASSERT_FALSE(run.failure.ok());
      EXPECT_THAT(run.failure.message(), HasSubstr(dir + "/"));
      EXPECT_EQ(Reopened(dir), run.acked) << Describe(run.acked);
      // The log goes on from there.
      {
        absl::StatusOr<std::unique_ptr<StateLog>> log = StateLog::Open(dir);
        ASSERT_TRUE(log.ok()) << log.status();
        ASSERT_TRUE((*log)->Append("after").ok());
      }
      State more = run.acked;
      more.records.push_back("after");
      EXPECT_EQ(Reopened(dir), more) << Describe(more);
    }
  }
}

}  // namespace
// The coordinator's file state store over a disk whose fsync fails now and then: the save
// that meets the failure is tried again on the reopened log, and the saves after it work. A
// StateLog alone refuses every write after its first failed one, so before the store reopened
// it, one failed fsync stopped every later save of a coordinator (and a takeover would have
// started from that old state).
TEST_F(StateLogFaultTest, TheStateStoreSavesOnAfterAFailedFsync) {
  FaultInjectionEnv env;
  StateLogOptions options;
  options.env = &env;
  absl::StatusOr<std::unique_ptr<StateStore>> store =
      OpenFileStateStore(CaseDir("store"), options);
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE((*store)->Save("s1").ok());

  env.FailSync(1);  // the next save's first fsync: the retry on the reopened log succeeds
  EXPECT_TRUE((*store)->Save("s2").ok());
  absl::StatusOr<std::optional<std::string>> loaded = (*store)->Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->value_or(""), "s2");

  for (const char* state : {"s3", "s4"}) {
    EXPECT_TRUE((*store)->Save(state).ok()) << state;
  }
  loaded = (*store)->Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->value_or(""), "s4");
  store->reset();  // lets go of the folder's lock
  EXPECT_EQ(Reopened(CaseDir("store")).snapshot.value_or(""), "s4") << "durable";
}

}  // namespace ecps
