// The `ecps` command line: one table of subcommands (CommandTable) from which the parser
// (CLI11) and every help text (`ecps help`, `ecps --help`, `ecps CMD --help`) are built, so
// a flag cannot be accepted without being documented, nor documented without being accepted.
// Each command's flags are bound to the typed fields of its options (cli/command_options.h)
// through a CommandBinder, so the parser refuses a value of the wrong type (a non-integer
// for --port, `--backend k8s`) naming the flag and the value; the handler stored with the
// command receives the options once they are parsed. What the operands mean, and how flags
// combine, is checked by the handler (cli/main.cc). Not thread-safe.
#ifndef ECPS_CLI_COMMAND_LINE_H_
#define ECPS_CLI_COMMAND_LINE_H_

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace CLI {
class App;
class Option;
}  // namespace CLI

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

// Binds the flags of one command (its CommandSpec) to typed fields, which must outlive the
// parse. A flag is named as in the table ("output"); its help and value text come from the
// table. Binding a flag the table does not list for the command, or leaving one of its flags
// unbound, is a programming error that ParseCommandLine reports as INTERNAL.
class CommandBinder {
 public:
  CommandBinder(CLI::App* app, const CommandSpec& spec) : app_(app), spec_(spec) {}

  // The positional arguments, in order.
  void Operands(std::vector<std::string>* out);
  // A switch (a FlagSpec without a value): true when given.
  void Switch(const std::string& name, bool* out);
  void Text(const std::string& name, std::string* out);
  // Absent when the flag is not given; `--token ""` is given, and empty.
  void Text(const std::string& name, std::optional<std::string>* out);
  // An integer; anything else is refused as "option --N must be an integer, got 'X'".
  void Integer(const std::string& name, int* out);
  void Integer(const std::string& name, std::optional<int>* out);
  // One of a closed set of names, each standing for a value of E; anything else is refused
  // as "option --N must be a or b, got 'X'".
  template <typename E>
  void Choice(const std::string& name, const std::vector<std::pair<std::string, E>>& values,
              std::optional<E>* out) {
    std::vector<std::string> names;
    for (const auto& v : values) names.push_back(v.first);
    ChoiceIndex(name, names, [values, out](size_t i) { *out = values[i].second; });
  }
  template <typename E>
  void Choice(const std::string& name, const std::vector<std::pair<std::string, E>>& values,
              E* out) {
    std::vector<std::string> names;
    for (const auto& v : values) names.push_back(v.first);
    ChoiceIndex(name, names, [values, out](size_t i) { *out = values[i].second; });
  }

  // OK when every flag of the command was bound once and nothing else; INTERNAL otherwise.
  absl::Status Finish() const;

 private:
  // The table's entry for `name`, nullptr (and an error kept for Finish) when it has none.
  const FlagSpec* Find(const std::string& name);
  // "-o,--output": the names CLI11 accepts for the flag.
  static std::string Names(const FlagSpec& f);
  // The option of a flag that takes a value, not yet bound; nullptr when the table lacks it.
  CLI::Option* Value(const std::string& name);
  void ChoiceIndex(const std::string& name, const std::vector<std::string>& names,
                   std::function<void(size_t)> set);

  CLI::App* app_;
  const CommandSpec& spec_;
  std::vector<std::string> bound_;
  std::vector<std::string> errors_;
};

// A command as the binary runs it: binds a fresh set of the command's options (which it owns)
// to the parser and returns what calls the command's handler with them once they are parsed
// (and returns its exit code); an empty function, having bound nothing, when the command has
// no handler.
using CommandBinding = std::function<std::function<int()>(CommandBinder&)>;
// Command name ("run", "bench throughput") -> its binding. A command of the table without a
// binding still has its help; parsing it is refused as not implemented.
using CommandBindings = std::map<std::string, CommandBinding>;

struct ParsedCommand {
  std::string command;  // "run", "bench throughput"; empty with help
  std::string help;     // not empty: the help asked for; print it and exit 0 (nothing else set)
  std::function<int()> run;  // the command's handler, with the options parsed; empty with help
};

// Parses argv[1..] (argv[0] is the binary) into the options `bindings` bound. `ecps help
// [CMD]`, --help and -h anywhere answer with `help` set. INVALID_ARGUMENT for a missing or
// unknown command, an unknown flag, a flag without its value and a value of the wrong type,
// with the nearest known name when one is close ("unknown flag --sped; did you mean --spec?").
absl::StatusOr<ParsedCommand> ParseCommandLine(const std::vector<std::string>& argv,
                                               const CommandBindings& bindings);

// The help of `command` ("run", "bench recovery"), or of every command when it names none.
std::string CommandHelp(const std::string& command);

// The known name nearest to `word` by edit distance (a swap of two neighbours counts as one
// edit), when it is close enough to be a likely misspelling; empty otherwise.
std::string NearestName(const std::string& word, const std::vector<std::string>& known);

}  // namespace ecps

#endif  // ECPS_CLI_COMMAND_LINE_H_
