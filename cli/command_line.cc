#include "cli/command_line.h"

#include <algorithm>
#include <memory>
#include <sstream>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace ecps {
namespace {

constexpr char kRootUsage[] = "usage: ecps <command> [options]\n";

const CommandSpec* FindCommand(const std::string& name) {
  for (const CommandSpec& c : CommandTable()) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

// The commands nested under `parent` ("" for the top level), in table order.
std::vector<const CommandSpec*> Children(const std::string& parent) {
  std::vector<const CommandSpec*> out;
  for (const CommandSpec& c : CommandTable()) {
    const size_t space = c.name.rfind(' ');
    const std::string above = space == std::string::npos ? "" : c.name.substr(0, space);
    if (above == parent) out.push_back(&c);
  }
  return out;
}

bool HasChildren(const std::string& name) { return !Children(name).empty(); }

// The last words of those commands: "throughput", "recovery" under "bench".
std::vector<std::string> ChildNames(const std::string& parent) {
  std::vector<std::string> names;
  for (const CommandSpec* c : Children(parent)) {
    names.push_back(c->name.substr(c->name.rfind(' ') + 1));
  }
  return names;
}

// "  run SPEC.yaml ...\n      start a whole job ...\n": one command as `ecps help` lists it.
std::string Entry(const CommandSpec& c, const std::string& prefix) {
  return absl::StrCat(prefix, c.name, " ", c.synopsis, "\n      ", c.summary, "\n");
}

// The path of a CLI11 subcommand below the root: "bench throughput".
std::string PathOf(const CLI::App* app) {
  std::vector<std::string> names;
  for (; app != nullptr && app->get_parent() != nullptr; app = app->get_parent()) {
    names.insert(names.begin(), app->get_name());
  }
  return absl::StrJoin(names, " ");
}

// Renders help from the command table; CLI11 contributes the list of a command's flags.
class TableFormatter : public CLI::Formatter {
 public:
  std::string make_help(const CLI::App* app, std::string, CLI::AppFormatMode mode) const override {
    const std::string path = PathOf(app);
    if (path.empty()) return RootHelp();
    const CommandSpec* c = FindCommand(path);
    if (c == nullptr) return RootHelp();
    std::string out = Entry(*c, "usage: ecps ");
    if (HasChildren(path)) {
      absl::StrAppend(&out, "\ncommands:\n");
      for (const CommandSpec* child : Children(path)) absl::StrAppend(&out, Entry(*child, "  "));
    }
    absl::StrAppend(&out, make_groups(app, mode));
    return out;
  }

  static std::string RootHelp() {
    std::string out = absl::StrCat(kRootUsage, "\n");
    for (const CommandSpec& c : CommandTable()) {
      if (!HasChildren(c.name)) absl::StrAppend(&out, Entry(c, "  "));
    }
    return absl::StrCat(out, "\n", CommandNotes());
  }
};

// The CLI11 application the table describes, and where it keeps what it parsed.
class CommandParser {
 public:
  CommandParser() : app_("ecps: erasure-coded parameter servers for DLRM training", "ecps") {
    app_.formatter(std::make_shared<TableFormatter>());
    // Unknown arguments are kept (remaining()) so that Parse can name the nearest flag.
    app_.allow_extras();
    // One command per command line: a later word that names another command is an operand
    // (`ecps kill ADDR server 2`), not a second command.
    app_.require_subcommand(0, 1);
    for (const CommandSpec& c : CommandTable()) Add(c);
  }

  absl::StatusOr<ParsedCommand> Parse(const std::vector<std::string>& argv) {
    // CLI11 reads `--token=` (nothing after the =) as `--token` and takes the next word as
    // the value: `ecps status --token= HOST:PORT` would send the address as the token.
    for (size_t i = 1; i < argv.size(); ++i) {
      const std::string& a = argv[i];
      if (a.size() > 3 && a.compare(0, 2, "--") == 0 && a.back() == '=' &&
          a.find('=') == a.size() - 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("option ", a.substr(0, a.size() - 1), " needs a value after the ="));
      }
    }
    std::vector<std::string> args(argv.rbegin(), argv.rend() - 1);  // CLI11 pops from the back
    ParsedCommand parsed;
    try {
      app_.parse(args);
    } catch (const CLI::CallForHelp&) {
      parsed.help = app_.help();
      return parsed;
    } catch (const CLI::ParseError& e) {
      return absl::InvalidArgumentError(Describe(e));
    }
    CLI::App* app = &app_;
    std::vector<std::string> extras = app->remaining();
    while (!app->get_subcommands().empty()) {
      app = app->get_subcommands().front();
      for (const std::string& e : app->remaining()) extras.push_back(e);
    }
    const std::string path = PathOf(app);
    const bool needs_command = path.empty() || HasChildren(path);
    if (needs_command) {
      // The first word that is not a flag was meant as the command.
      const std::vector<std::string> names = ChildNames(path);
      for (const std::string& e : extras) {
        if (e.size() >= 2 && e[0] == '-') continue;
        std::string message =
            absl::StrCat("unknown command '", path.empty() ? "" : path + " ", e, "'");
        const std::string near = NearestName(e, names);
        if (!near.empty()) absl::StrAppend(&message, "; did you mean ", near, "?");
        return absl::InvalidArgumentError(message);
      }
    }
    for (const std::string& e : extras) {
      if (e.size() < 2 || e[0] != '-') continue;
      const std::string flag = e.substr(0, e.find('='));
      std::string message = absl::StrCat("unknown flag ", flag);
      if (!path.empty()) absl::StrAppend(&message, " for ", path);
      const std::string near = NearestName(flag, FlagNames(app));
      if (!near.empty()) absl::StrAppend(&message, "; did you mean ", near, "?");
      return absl::InvalidArgumentError(message);
    }
    if (needs_command) {
      if (path.empty()) return absl::InvalidArgumentError("missing command");
      const std::vector<std::string> names = ChildNames(path);
      return absl::InvalidArgumentError(
          absl::StrCat(path, " needs a command: ", absl::StrJoin(names, " or ")));
    }
    parsed.command = path;
    parsed.operands = operands_[path];
    for (const CLI::Option* opt : app->get_options()) {
      if (opt->count() == 0 || opt->get_positional() || opt == app->get_help_ptr()) continue;
      const std::string name = opt->get_lnames().front();
      parsed.options[name] = opt->get_expected_max() == 0 ? "true" : opt->as<std::string>();
    }
    return parsed;
  }

 private:
  void Add(const CommandSpec& c) {
    std::vector<std::string> words = absl::StrSplit(c.name, ' ');
    CLI::App* parent = &app_;
    for (size_t i = 0; i + 1 < words.size(); ++i) parent = parent->get_subcommand(words[i]);
    CLI::App* sub = parent->add_subcommand(words.back(), c.summary);
    sub->allow_extras();
    sub->require_subcommand(0, 1);
    if (!HasChildren(c.name)) {
      // Hidden from the flag list: the synopsis names the operands.
      sub->add_option("operands", operands_[c.name])->group("");
    }
    for (const FlagSpec& f : c.flags) {
      std::string names = "--" + f.name;
      if (f.short_name != 0) names = absl::StrCat("-", std::string(1, f.short_name), ",", names);
      if (f.value.empty()) {
        sub->add_flag(names, f.help);
      } else {
        sub->add_option(names, f.help)
            ->option_text(f.value)
            ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
      }
    }
  }

  static std::vector<std::string> FlagNames(const CLI::App* app) {
    std::vector<std::string> names;
    for (const CLI::Option* opt : app->get_options()) {
      for (const std::string& l : opt->get_lnames()) names.push_back("--" + l);
      for (const std::string& s : opt->get_snames()) names.push_back("-" + s);
    }
    return names;
  }

  // CLI11's message, in the words the rest of ecps uses where they differ.
  static std::string Describe(const CLI::ParseError& e) {
    const std::string what = e.what();
    if (dynamic_cast<const CLI::ArgumentMismatch*>(&e) != nullptr) {
      const std::string flag = what.substr(0, what.find(':'));
      if (flag == "--script") return "-o needs a file (or - for standard output)";
      return absl::StrCat("option ", flag, " needs a value");
    }
    return what;
  }

  CLI::App app_;
  std::map<std::string, std::vector<std::string>> operands_;  // command -> its operands
};

// The optimal string alignment distance: insertions, deletions, substitutions and swaps of
// two neighbouring characters each count one.
size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

}  // namespace

std::string ParsedCommand::Get(const std::string& flag, const std::string& fallback) const {
  auto it = options.find(flag);
  return it == options.end() ? fallback : it->second;
}

absl::StatusOr<int> ParsedCommand::GetInt(const std::string& flag, int fallback) const {
  if (!Has(flag)) return fallback;
  int value = 0;
  if (!absl::SimpleAtoi(Get(flag), &value)) {
    return absl::InvalidArgumentError(
        absl::StrCat("option --", flag, " must be an integer, got '", Get(flag), "'"));
  }
  return value;
}

absl::StatusOr<ParsedCommand> ParseCommandLine(const std::vector<std::string>& argv) {
  if (argv.size() < 2) return absl::InvalidArgumentError("missing command");
  if (argv[1] == "help") {
    const std::string topic = absl::StrJoin(argv.begin() + 2, argv.end(), " ");
    if (!topic.empty() && FindCommand(topic) == nullptr) {
      std::vector<std::string> names;
      for (const CommandSpec& c : CommandTable()) names.push_back(c.name);
      std::string message = absl::StrCat("no help for unknown command '", topic, "'");
      const std::string near = NearestName(topic, names);
      if (!near.empty()) absl::StrAppend(&message, "; did you mean ", near, "?");
      return absl::InvalidArgumentError(message);
    }
    ParsedCommand parsed;
    parsed.help = CommandHelp(topic);
    return parsed;
  }
  CommandParser parser;
  return parser.Parse(argv);
}

std::string CommandHelp(const std::string& command) {
  if (FindCommand(command) == nullptr) return TableFormatter::RootHelp();
  std::vector<std::string> argv = absl::StrSplit(command, ' ');
  argv.insert(argv.begin(), "ecps");
  argv.push_back("--help");
  CommandParser parser;
  auto parsed = parser.Parse(argv);
  return parsed.ok() ? parsed->help : TableFormatter::RootHelp();
}

std::string NearestName(const std::string& word, const std::vector<std::string>& known) {
  std::string best;
  size_t best_distance = 0;
  for (const std::string& name : known) {
    const size_t d = EditDistance(word, name);
    if (best.empty() || d < best_distance) {
      best = name;
      best_distance = d;
    }
  }
  // A third of the word may be wrong ("--sped" for "--spec"); more is another word.
  const size_t bare = word.size() - std::min(word.find_first_not_of('-'), word.size());
  if (best.empty() || best_distance > std::max<size_t>(1, bare / 3)) return "";
  return best;
}

}  // namespace ecps
