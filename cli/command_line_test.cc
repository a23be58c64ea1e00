#include "cli/command_line.h"

#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ecps {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::Pair;
using ::testing::UnorderedElementsAre;

absl::StatusOr<ParsedCommand> Parse(std::vector<std::string> args) {
  args.insert(args.begin(), "ecps");
  return ParseCommandLine(args);
}

TEST(CommandLineTest, RunTakesOperandsAndFlagsInAnyOrder) {
  auto p = Parse({"run", "--output", "out", "job.yaml", "--no-progress", "--backend=slurm"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->command, "run");
  EXPECT_THAT(p->operands, ElementsAre("job.yaml"));
  EXPECT_THAT(p->options, UnorderedElementsAre(Pair("output", "out"), Pair("no-progress", "true"),
                                               Pair("backend", "slurm")));
  EXPECT_TRUE(p->help.empty());
}

TEST(CommandLineTest, TheLastOfARepeatedFlagWins) {
  auto p = Parse({"run", "a.yaml", "--output", "first", "--output", "second"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->Get("output"), "second");
}

TEST(CommandLineTest, CommandNamesAndNegativeNumbersAreOperandsOrValues) {
  // `server` is also a command, -1 looks like a flag: both are what the user meant here.
  auto kill = Parse({"kill", "--job", "runs/q", "server", "-1"});
  ASSERT_TRUE(kill.ok()) << kill.status();
  EXPECT_EQ(kill->command, "kill");
  EXPECT_THAT(kill->operands, ElementsAre("server", "-1"));
  auto spare = Parse({"server", "--spec", "s.yaml", "--id", "-1", "--coordinator", "h:1"});
  ASSERT_TRUE(spare.ok()) << spare.status();
  EXPECT_EQ(spare->Get("id"), "-1");
  EXPECT_EQ(*spare->GetInt("id", 0), -1);
  auto status = Parse({"status", "--job", "run"});
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->Get("job"), "run");
}

TEST(CommandLineTest, SlurmScriptByShortFlagOrStandardOutput) {
  auto p = Parse({"slurm", "job.yaml", "-o", "-", "--output", "runs"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->Get("script"), "-");
  EXPECT_THAT(p->operands, ElementsAre("job.yaml"));
  auto missing = Parse({"slurm", "job.yaml", "-o"});
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("-o needs a file"));
}

TEST(CommandLineTest, NestedBenchCommands) {
  auto p = Parse({"bench", "recovery", "job.yaml", "--output", "b"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->command, "bench recovery");
  EXPECT_THAT(p->operands, ElementsAre("job.yaml"));
  auto bare = Parse({"bench"});
  ASSERT_FALSE(bare.ok());
  EXPECT_THAT(bare.status().message(), HasSubstr("throughput or recovery"));
  auto typo = Parse({"bench", "recovry", "job.yaml"});
  ASSERT_FALSE(typo.ok());
  EXPECT_THAT(typo.status().message(), HasSubstr("did you mean recovery?"));
}

TEST(CommandLineTest, UnknownFlagIsRefusedWithTheNearestName) {
  auto p = Parse({"worker", "--sped", "job.yaml", "--id", "0"});
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(p.status().message(), HasSubstr("unknown flag --sped"));
  EXPECT_THAT(p.status().message(), HasSubstr("did you mean --spec?"));
  // Another command's flag is unknown here, and nothing known is near it.
  auto other = Parse({"run", "job.yaml", "--json"});
  ASSERT_FALSE(other.ok());
  EXPECT_THAT(other.status().message(), HasSubstr("unknown flag --json"));
  EXPECT_THAT(other.status().message(), Not(HasSubstr("did you mean")));
  auto with_value = Parse({"status", "--intervall-ms=5", "--job", "d"});
  ASSERT_FALSE(with_value.ok());
  EXPECT_THAT(with_value.status().message(), HasSubstr("did you mean --interval-ms?"));
}

TEST(CommandLineTest, UnknownOrMissingCommandIsRefused) {
  auto typo = Parse({"stauts", "--job", "d"});
  ASSERT_FALSE(typo.ok());
  EXPECT_THAT(typo.status().message(), HasSubstr("unknown command 'stauts'; did you mean status?"));
  auto none = Parse({});
  ASSERT_FALSE(none.ok());
  EXPECT_THAT(none.status().message(), HasSubstr("missing command"));
  auto far = Parse({"train", "x"});
  ASSERT_FALSE(far.ok());
  EXPECT_THAT(far.status().message(), Not(HasSubstr("did you mean")));
}

TEST(CommandLineTest, FlagWithoutItsValueIsRefused) {
  auto p = Parse({"run", "job.yaml", "--output"});
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(), HasSubstr("option --output needs a value"));
  // An empty value after = is refused, not filled from the next word.
  auto empty = Parse({"status", "--token=", "127.0.0.1:1"});
  ASSERT_FALSE(empty.ok());
  EXPECT_THAT(empty.status().message(), HasSubstr("option --token needs a value after the ="));
}

TEST(CommandLineTest, GetIntNamesTheFlagAndTheValue) {
  auto p = Parse({"status", "--job", "d", "--interval-ms", "fast"});
  ASSERT_TRUE(p.ok()) << p.status();
  auto interval = p->GetInt("interval-ms", 1000);
  ASSERT_FALSE(interval.ok());
  EXPECT_THAT(interval.status().message(), HasSubstr("--interval-ms must be an integer, got 'fast'"));
  EXPECT_EQ(*p->GetInt("absent", 7), 7);
}

TEST(CommandLineTest, HelpListsEveryCommandAndItsSynopsis) {
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"help"}, {"--help"}, {"-h"}}) {
    auto p = Parse(args);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_TRUE(p->command.empty());
    for (const CommandSpec& c : CommandTable()) {
      if (c.name == "bench") continue;  // listed as its two commands
      EXPECT_THAT(p->help, HasSubstr("  " + c.name + " " + c.synopsis + "\n")) << args[0];
    }
    EXPECT_THAT(p->help, HasSubstr(CommandNotes()));
  }
}

TEST(CommandLineTest, CommandHelpShowsItsUsageAndEveryFlag) {
  for (const CommandSpec& c : CommandTable()) {
    std::vector<std::string> args = absl::StrSplit(c.name, ' ');
    args.push_back("--help");
    auto p = Parse(args);
    ASSERT_TRUE(p.ok()) << c.name << ": " << p.status();
    EXPECT_THAT(p->help, HasSubstr("usage: ecps " + c.name + " " + c.synopsis)) << c.name;
    for (const FlagSpec& f : c.flags) {
      EXPECT_THAT(p->help, HasSubstr("--" + f.name)) << c.name;
      EXPECT_THAT(p->help, HasSubstr(f.help)) << c.name << " --" << f.name;
    }
    EXPECT_EQ(CommandHelp(c.name), p->help);
    auto via_help = Parse([&] {
      std::vector<std::string> h = {"help"};
      h.insert(h.end(), args.begin(), args.end() - 1);
      return h;
    }());
    ASSERT_TRUE(via_help.ok());
    EXPECT_EQ(via_help->help, p->help) << c.name;
  }
  EXPECT_THAT(CommandHelp("bench"), HasSubstr("bench recovery SPEC.yaml"));
}

TEST(CommandLineTest, EveryFlagOfTheTableParses) {
  for (const CommandSpec& c : CommandTable()) {
    if (c.name == "bench") continue;
    std::vector<std::string> args = absl::StrSplit(c.name, ' ');
    for (const FlagSpec& f : c.flags) {
      args.push_back("--" + f.name);
      if (!f.value.empty()) args.push_back("v-" + f.name);
    }
    auto p = Parse(args);
    ASSERT_TRUE(p.ok()) << c.name << ": " << p.status();
    EXPECT_EQ(p->options.size(), c.flags.size()) << c.name;
    EXPECT_THAT(p->operands, IsEmpty()) << c.name;
    for (const FlagSpec& f : c.flags) {
      EXPECT_EQ(p->Get(f.name), f.value.empty() ? "true" : "v-" + f.name) << c.name;
    }
  }
}

TEST(NearestNameTest, ToleratesAThirdOfTheWord) {
  const std::vector<std::string> known = {"--spec", "--id", "--coordinator", "--token"};
  EXPECT_EQ(NearestName("--sped", known), "--spec");
  EXPECT_EQ(NearestName("--coordniator", known), "--coordinator");  // a swap is one edit
  EXPECT_EQ(NearestName("--tokn", known), "--token");
  EXPECT_EQ(NearestName("--verbose", known), "");
  EXPECT_EQ(NearestName("--x", {}), "");
}

}  // namespace
}  // namespace ecps
