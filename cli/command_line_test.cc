#include "cli/command_line.h"

#include "absl/strings/str_split.h"
#include "cli/command_options.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ecps {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

// The options each command's handler received: handlers that keep them, and exit with a
// code that says which one ran.
struct Received {
  RunOptions run;
  BenchOptions bench;
  OperatorOptions op;
  StatusOptions status;
  SlurmOptions slurm;
  CoordinatorRoleOptions coordinator;
  ServerRoleOptions server;
  WorkerRoleOptions worker;
  std::string ran;

  CommandHandlers Handlers() {
    CommandHandlers h;
    h.run = [this](const RunOptions& o) { return Keep("run", o, &run); };
    h.bench_throughput = [this](const BenchOptions& o) { return Keep("throughput", o, &bench); };
    h.bench_recovery = [this](const BenchOptions& o) { return Keep("recovery", o, &bench); };
    h.checkpoint = [this](const OperatorOptions& o) { return Keep("checkpoint", o, &op); };
    h.export_checkpoint = [this](const ExportOptions&) { return Keep("export"); };
    h.scrub = [this](const OperatorOptions& o) { return Keep("scrub", o, &op); };
    h.status = [this](const StatusOptions& o) { return Keep("status", o, &status); };
    h.kill = [this](const OperatorOptions& o) { return Keep("kill", o, &op); };
    h.health = [this](const HealthOptions&) { return Keep("health"); };
    h.slurm = [this](const SlurmOptions& o) { return Keep("slurm", o, &slurm); };
    h.k8s = [this](const K8sOptions&) { return Keep("k8s"); };
    h.coordinator = [this](const CoordinatorRoleOptions& o) {
      return Keep("coordinator", o, &coordinator);
    };
    h.server = [this](const ServerRoleOptions& o) { return Keep("server", o, &server); };
    h.worker = [this](const WorkerRoleOptions& o) { return Keep("worker", o, &worker); };
    return h;
  }

 private:
  int Keep(const std::string& name) {
    ran = name;
    return 7;
  }
  template <typename Options>
  int Keep(const std::string& name, const Options& given, Options* kept) {
    *kept = given;
    return Keep(name);
  }
};

// Parses `args` after "ecps" and runs the handler of the command that parsed, which keeps its
// options in `received` when given.
absl::StatusOr<ParsedCommand> Parse(std::vector<std::string> args,
                                    Received* received = nullptr) {
  args.insert(args.begin(), "ecps");
  Received ignored;
  Received* into = received != nullptr ? received : &ignored;
  absl::StatusOr<ParsedCommand> p = ParseCommandLine(args, BindCommands(into->Handlers()));
  if (p.ok() && p->help.empty()) {
    into->ran.clear();
    EXPECT_EQ(p->run(), 7);
  }
  return p;
}

TEST(CommandLineTest, RunTakesOperandsAndFlagsInAnyOrder) {
  Received r;
  auto p = Parse({"run", "--output", "out", "job.yaml", "--no-progress", "--backend=slurm"}, &r);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->command, "run");
  EXPECT_EQ(r.ran, "run");
  EXPECT_THAT(r.run.operands, ElementsAre("job.yaml"));
  EXPECT_EQ(r.run.output, "out");
  EXPECT_TRUE(r.run.no_progress);
  EXPECT_EQ(r.run.backend, LaunchBackendKind::kSlurm);
  EXPECT_TRUE(p->help.empty());
}

TEST(CommandLineTest, AbsentFlagsKeepTheirDefaults) {
  Received r;
  ASSERT_TRUE(Parse({"run", "job.yaml"}, &r).ok());
  EXPECT_EQ(r.run.output, "");
  EXPECT_FALSE(r.run.no_progress);
  EXPECT_EQ(r.run.backend, LaunchBackendKind::kLocal);
  ASSERT_TRUE(Parse({"status", "h:1"}, &r).ok());
  EXPECT_EQ(r.status.interval_ms, 1000);
  EXPECT_FALSE(r.status.json);
  EXPECT_FALSE(r.status.token.has_value());  // falls back to $ECPS_TOKEN, not to ""
  EXPECT_FALSE(r.status.job.has_value());
  ASSERT_TRUE(Parse({"coordinator", "--spec", "s.yaml"}, &r).ok());
  EXPECT_EQ(r.coordinator.spec, "s.yaml");
  EXPECT_FALSE(r.coordinator.port.has_value());  // cluster.coordinator_port
  EXPECT_FALSE(r.coordinator.linger_ms.has_value());
  EXPECT_FALSE(r.coordinator.log_level.has_value());  // monitoring.log_level
  EXPECT_FALSE(r.coordinator.host.has_value());
  // Given, even empty, is not absent: --token "" is the token the user chose.
  ASSERT_TRUE(Parse({"scrub", "h:1", "--token", ""}, &r).ok());
  ASSERT_TRUE(r.op.token.has_value());
  EXPECT_EQ(*r.op.token, "");
}

TEST(CommandLineTest, TypedValuesAreConverted) {
  Received r;
  ASSERT_TRUE(Parse({"coordinator", "--spec", "s", "--port", "7000", "--linger-ms", "-1",
                     "--log-level", "debug", "--host", "10.0.0.1"},
                    &r)
                  .ok());
  EXPECT_EQ(r.coordinator.port, 7000);
  EXPECT_EQ(r.coordinator.linger_ms, -1);
  EXPECT_EQ(r.coordinator.log_level, LogLevel::kDebug);
  EXPECT_EQ(LogLevelName(*r.coordinator.log_level), "debug");
  EXPECT_EQ(r.coordinator.host, "10.0.0.1");
  ASSERT_TRUE(Parse({"status", "--job", "d", "--json", "--watch", "--interval-ms", "250"}, &r)
                  .ok());
  EXPECT_EQ(r.status.job, "d");
  EXPECT_TRUE(r.status.json);
  EXPECT_TRUE(r.status.watch);
  EXPECT_EQ(r.status.interval_ms, 250);
}

TEST(CommandLineTest, TheLastOfARepeatedFlagWins) {
  Received r;
  ASSERT_TRUE(Parse({"run", "a.yaml", "--output", "first", "--output", "second"}, &r).ok());
  EXPECT_EQ(r.run.output, "second");
  ASSERT_TRUE(Parse({"server", "--spec", "s", "--port", "1", "--port", "2"}, &r).ok());
  EXPECT_EQ(r.server.port, 2);
}

TEST(CommandLineTest, CommandNamesAndNegativeNumbersAreOperandsOrValues) {
  // `server` is also a command, -1 looks like a flag: both are what the user meant here.
  Received r;
  auto kill = Parse({"kill", "--job", "runs/q", "server", "-1"}, &r);
  ASSERT_TRUE(kill.ok()) << kill.status();
  EXPECT_EQ(kill->command, "kill");
  EXPECT_EQ(r.ran, "kill");
  EXPECT_THAT(r.op.operands, ElementsAre("server", "-1"));
  auto spare = Parse({"server", "--spec", "s.yaml", "--id", "-1", "--coordinator", "h:1"}, &r);
  ASSERT_TRUE(spare.ok()) << spare.status();
  EXPECT_EQ(r.server.id, -1);
  EXPECT_EQ(r.server.coordinator, "h:1");
  auto status = Parse({"status", "--job", "run"}, &r);
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(r.status.job, "run");
}

TEST(CommandLineTest, SlurmScriptByShortFlagOrStandardOutput) {
  Received r;
  auto p = Parse({"slurm", "job.yaml", "-o", "-", "--output", "runs"}, &r);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(r.slurm.script, "-");
  EXPECT_EQ(r.slurm.output, "runs");
  EXPECT_THAT(r.slurm.operands, ElementsAre("job.yaml"));
  auto missing = Parse({"slurm", "job.yaml", "-o"});
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("-o needs a file"));
}

TEST(CommandLineTest, NestedBenchCommands) {
  Received r;
  auto p = Parse({"bench", "recovery", "job.yaml", "--output", "b"}, &r);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->command, "bench recovery");
  EXPECT_EQ(r.ran, "recovery");  // the nested command's own handler, not its sibling's
  EXPECT_THAT(r.bench.operands, ElementsAre("job.yaml"));
  EXPECT_EQ(r.bench.output, "b");
  Received t;
  ASSERT_TRUE(Parse({"bench", "throughput", "job.yaml"}, &t).ok());
  EXPECT_EQ(t.ran, "throughput");
  auto bare = Parse({"bench"});
  ASSERT_FALSE(bare.ok());
  EXPECT_THAT(bare.status().message(), HasSubstr("throughput or recovery"));
  auto typo = Parse({"bench", "recovry", "job.yaml"});
  ASSERT_FALSE(typo.ok());
  EXPECT_THAT(typo.status().message(), HasSubstr("did you mean recovery?"));
}

TEST(CommandLineTest, AValueOutsideItsSetIsRefusedNamingFlagAndValue) {
  auto backend = Parse({"run", "job.yaml", "--backend", "k8s"});
  ASSERT_FALSE(backend.ok());
  EXPECT_EQ(backend.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(backend.status().message(),
              HasSubstr("option --backend must be local or slurm, got 'k8s'"));
  auto level = Parse({"worker", "--spec", "s", "--id", "0", "--log-level=loud"});
  ASSERT_FALSE(level.ok());
  EXPECT_THAT(level.status().message(),
              HasSubstr("option --log-level must be trace, debug, info, warn or error, got "
                        "'loud'"));
}

TEST(CommandLineTest, ANonIntegerIsRefusedNamingFlagAndValue) {
  auto interval = Parse({"status", "--job", "d", "--interval-ms", "fast"});
  ASSERT_FALSE(interval.ok());
  EXPECT_EQ(interval.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(interval.status().message(),
              HasSubstr("option --interval-ms must be an integer, got 'fast'"));
  auto port = Parse({"coordinator", "--spec", "s", "--port=80x"});
  ASSERT_FALSE(port.ok());
  EXPECT_THAT(port.status().message(), HasSubstr("option --port must be an integer, got '80x'"));
  auto id = Parse({"server", "--spec", "s", "--id", "1.5"});
  ASSERT_FALSE(id.ok());
  EXPECT_THAT(id.status().message(), HasSubstr("option --id must be an integer, got '1.5'"));
}

TEST(CommandLineTest, ACommandWithoutAHandlerIsNotImplemented) {
  CommandHandlers none;
  auto p = ParseCommandLine({"ecps", "run", "job.yaml"}, BindCommands(none));
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(), HasSubstr("command 'run' is not implemented"));
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

// A value each flag's type accepts, by the name help gives its value.
std::string SampleValue(const FlagSpec& f) {
  if (f.value == "N" || f.value == "P") return "7";
  if (f.value == "L") return "warn";
  if (f.value == "local|slurm") return "slurm";
  return "v-" + f.name;
}

TEST(CommandLineTest, EveryFlagOfTheTableParses) {
  for (const CommandSpec& c : CommandTable()) {
    if (c.name == "bench") continue;
    std::vector<std::string> args = absl::StrSplit(c.name, ' ');
    for (const FlagSpec& f : c.flags) {
      args.push_back("--" + f.name);
      if (!f.value.empty()) args.push_back(SampleValue(f));
    }
    Received r;
    auto p = Parse(args, &r);
    ASSERT_TRUE(p.ok()) << c.name << ": " << p.status();
    EXPECT_EQ(p->command, c.name);
    EXPECT_FALSE(r.ran.empty()) << c.name;
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
