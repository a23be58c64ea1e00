// The `ecps` command line: one table of subcommands (CommandTable) from which the parser
// (CLI11) and every help text (`ecps help`, `ecps --help`, `ecps CMD --help`) are built, so
// a flag cannot be accepted without being documented, nor documented without being accepted.
// The parser only checks the shape of the command line (known command, known flags, a value
// for each flag that takes one); what the operands and values mean is checked by the
// command that runs them (cli/main.cc). Not thread-safe.
#ifndef ECPS_CLI_COMMAND_LINE_H_
#define ECPS_CLI_COMMAND_LINE_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ecps {

struct FlagSpec {
  std::string name;     // "output": the flag is --output
  std::string value;    // what it takes, as help shows it ("DIR"); empty: takes no value
  std::string help;
  char short_name = 0;  // 'o': also accepted as -o
};

struct CommandSpec {
  std::string name;      // "run"; a nested command is "PARENT CHILD" ("bench throughput")
  std::string synopsis;  // what follows the name in a usage line ("SPEC.yaml [--output DIR]")
  std::string summary;   // what it does; lines after the first indented by 6 spaces
  std::vector<FlagSpec> flags;
};

// Every command, in the order `ecps help` lists them. A command whose name is the prefix
// of nested ones ("bench") holds no flags of its own.
const std::vector<CommandSpec>& CommandTable();

// What `ecps help` prints after the commands: what every role and operator command shares.
const std::string& CommandNotes();

struct ParsedCommand {
  std::string command;                         // "run", "bench throughput"; empty with help
  std::vector<std::string> operands;           // the positional arguments, in order
  std::map<std::string, std::string> options;  // the flags given: name -> value ("true" when
                                               // it takes none); the last one wins
  std::string help;  // not empty: the help asked for; print it and exit 0 (nothing else set)

  bool Has(const std::string& flag) const { return options.count(flag) > 0; }
  std::string Get(const std::string& flag, const std::string& fallback = "") const;
  // The flag's value as an integer, `fallback` when it was not given; INVALID_ARGUMENT
  // naming the flag and the value when that is not an integer.
  absl::StatusOr<int> GetInt(const std::string& flag, int fallback) const;
};

// Parses argv[1..] (argv[0] is the binary). `ecps help [CMD]`, --help and -h anywhere
// answer with `help` set. INVALID_ARGUMENT for a missing or unknown command, an unknown flag
// and a flag without its value, with the nearest known name when one is close
// ("unknown flag --sped; did you mean --spec?").
absl::StatusOr<ParsedCommand> ParseCommandLine(const std::vector<std::string>& argv);

// The help of `command` ("run", "bench recovery"), or of every command when it names none.
std::string CommandHelp(const std::string& command);

// The known name nearest to `word` by edit distance (a swap of two neighbours counts as one
// edit), when it is close enough to be a likely misspelling; empty otherwise.
std::string NearestName(const std::string& word, const std::vector<std::string>& known);

}  // namespace ecps

#endif  // ECPS_CLI_COMMAND_LINE_H_
