#include "cli/command_line.h"

#include <algorithm>
#include <memory>

#include "CLI/CLI.hpp"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "runtime/status_macros.h"

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
    absl::StrAppend(&out, FlagList(app, *c, mode));
    return out;
  }

  // The flags as CLI11 lists them, in the table's order whatever order they were bound in.
  std::string FlagList(const CLI::App* app, const CommandSpec& c, CLI::AppFormatMode mode) const {
    std::vector<const CLI::Option*> opts;
    if (mode != CLI::AppFormatMode::Sub && app->get_help_ptr() != nullptr) {
      opts.push_back(app->get_help_ptr());
    }
    for (const FlagSpec& f : c.flags) {
      if (const CLI::Option* opt = app->get_option_no_throw("--" + f.name)) opts.push_back(opt);
    }
    // A blank line closes the list of a command that takes operands, as CLI11 ends a group
    // that another (the hidden operands) follows.
    const std::string blank = HasChildren(c.name) ? "" : "\n";
    return absl::StrCat(make_group(get_label("Options"), false, opts), blank);
  }

  static std::string RootHelp() {
    std::string out = absl::StrCat(kRootUsage, "\n");
    for (const CommandSpec& c : CommandTable()) {
      if (!HasChildren(c.name)) absl::StrAppend(&out, Entry(c, "  "));
    }
    return absl::StrCat(out, "\n", CommandNotes());
  }
};

// "must be a, b or c": the names of a closed set, as an error message lists them.
std::string OneOf(const std::vector<std::string>& names) {
  if (names.size() < 2) return absl::StrJoin(names, "");
  return absl::StrCat(absl::StrJoin(names.begin(), names.end() - 1, ", "), " or ", names.back());
}

// Checks a value before CLI11 converts it, in the words the rest of ecps uses; the parser
// prefixes "option --FLAG".
CLI::Validator IntegerText() {
  return CLI::Validator(
      [](std::string& value) {
        int parsed = 0;
        if (absl::SimpleAtoi(value, &parsed)) return std::string();
        return absl::StrCat("must be an integer, got '", value, "'");
      },
      "");
}

// The CLI11 application the table describes, and the handlers of the commands bound to it.
class CommandParser {
 public:
  explicit CommandParser(const CommandBindings& bindings)
      : app_("ecps: erasure-coded parameter servers for DLRM training", "ecps") {
    app_.formatter(std::make_shared<TableFormatter>());
    // Unknown arguments are kept (remaining()) so that Parse can name the nearest flag.
    app_.allow_extras();
    // One command per command line: a later word that names another command is an operand
    // (`ecps kill ADDR server 2`), not a second command.
    app_.require_subcommand(0, 1);
    for (const CommandSpec& c : CommandTable()) Add(c, bindings);
  }

  absl::StatusOr<ParsedCommand> Parse(const std::vector<std::string>& argv) {
    if (!setup_.ok()) return setup_;
    RETURN_IF_ERROR(CheckEmptyValues(argv));
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
    RETURN_IF_ERROR(CheckExtras(app, path, extras));
    auto run = runs_.find(app);
    if (run == runs_.end() || !run->second) {
      return absl::InvalidArgumentError(absl::StrCat("command '", path, "' is not implemented"));
    }
    parsed.command = path;
    parsed.run = run->second;
    return parsed;
  }

 private:
  // CLI11 reads `--token=` (nothing after the =) as `--token` and takes the next word as the
  // value: `ecps status --token= HOST:PORT` would send the address as the token.
  static absl::Status CheckEmptyValues(const std::vector<std::string>& argv) {
    for (size_t i = 1; i < argv.size(); ++i) {
      const std::string& a = argv[i];
      if (a.size() > 3 && a.compare(0, 2, "--") == 0 && a.back() == '=' &&
          a.find('=') == a.size() - 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("option ", a.substr(0, a.size() - 1), " needs a value after the ="));
      }
    }
    return absl::OkStatus();
  }

  // What CLI11 left over at `app` (the command `path`, "" for none): a misspelt command, an
  // unknown flag, or a command that needs one nested below it.
  static absl::Status CheckExtras(const CLI::App* app, const std::string& path,
                                  const std::vector<std::string>& extras) {
    const bool needs_command = path.empty() || HasChildren(path);
    if (needs_command) {
      // The first word that is not a flag was meant as the command.
      for (const std::string& e : extras) {
        if (e.size() >= 2 && e[0] == '-') continue;
        std::string message =
            absl::StrCat("unknown command '", path.empty() ? "" : path + " ", e, "'");
        const std::string near = NearestName(e, ChildNames(path));
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
    if (!needs_command) return absl::OkStatus();
    if (path.empty()) return absl::InvalidArgumentError("missing command");
    return absl::InvalidArgumentError(
        absl::StrCat(path, " needs a command: ", absl::StrJoin(ChildNames(path), " or ")));
  }

  void Add(const CommandSpec& c, const CommandBindings& bindings) {
    std::vector<std::string> words = absl::StrSplit(c.name, ' ');
    CLI::App* parent = &app_;
    for (size_t i = 0; i + 1 < words.size(); ++i) parent = parent->get_subcommand(words[i]);
    CLI::App* sub = parent->add_subcommand(words.back(), c.summary);
    sub->allow_extras();
    sub->require_subcommand(0, 1);
    if (HasChildren(c.name)) return;  // it only leads to the nested commands
    CommandBinder binder(sub, c);
    auto binding = bindings.find(c.name);
    std::function<int()> run = binding != bindings.end() ? binding->second(binder) : nullptr;
    if (run) {
      runs_[sub] = std::move(run);
    } else {
      BindForHelp(c, &binder);
    }
    if (absl::Status s = binder.Finish(); !s.ok() && setup_.ok()) setup_ = s;
  }

  // A command without a handler: its flags bound to values nobody reads, for its help.
  void BindForHelp(const CommandSpec& c, CommandBinder* binder) {
    binder->Operands(&unread_operands_[c.name]);
    for (const FlagSpec& f : c.flags) {
      const std::string key = absl::StrCat(c.name, " --", f.name);
      if (f.value.empty()) {
        binder->Switch(f.name, &unread_switches_[key]);
      } else {
        binder->Text(f.name, &unread_values_[key]);
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
    const std::string flag = what.substr(0, what.find(':'));
    if (dynamic_cast<const CLI::ArgumentMismatch*>(&e) != nullptr) {
      if (flag == "--script") return "-o needs a file (or - for standard output)";
      return absl::StrCat("option ", flag, " needs a value");
    }
    if (dynamic_cast<const CLI::ValidationError*>(&e) != nullptr && flag.size() < what.size()) {
      // "--port: must be an integer, got 'x'", from the checks CommandBinder adds.
      return absl::StrCat("option ", flag, " ", absl::StripLeadingAsciiWhitespace(
                                                    what.substr(flag.size() + 1)));
    }
    return what;
  }

  CLI::App app_;
  absl::Status setup_;  // the first binding that does not fit the table (INTERNAL)
  std::map<const CLI::App*, std::function<int()>> runs_;  // command -> its bound handler
  std::map<std::string, std::vector<std::string>> unread_operands_;
  std::map<std::string, bool> unread_switches_;
  std::map<std::string, std::string> unread_values_;
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


const FlagSpec* CommandBinder::Find(const std::string& name) {
  for (const FlagSpec& f : spec_.flags) {
    if (f.name != name) continue;
    if (std::find(bound_.begin(), bound_.end(), name) != bound_.end()) {
      errors_.push_back(absl::StrCat("--", name, " is bound twice"));
    }
    bound_.push_back(name);
    return &f;
  }
  errors_.push_back(absl::StrCat("--", name, " is not in the command table"));
  return nullptr;
}

std::string CommandBinder::Names(const FlagSpec& f) {
  std::string names = "--" + f.name;
  if (f.short_name != 0) names = absl::StrCat("-", std::string(1, f.short_name), ",", names);
  return names;
}

CLI::Option* CommandBinder::Value(const std::string& name) {
  const FlagSpec* f = Find(name);
  if (f == nullptr) return nullptr;
  if (f->value.empty()) errors_.push_back(absl::StrCat("--", name, " takes no value"));
  // Each value given is checked, then stored (each()): of a repeated flag the last one wins.
  return app_->add_option(Names(*f), f->help)
      ->option_text(f->value)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
}

void CommandBinder::Operands(std::vector<std::string>* out) {
  // Hidden from the flag list: the synopsis names the operands.
  app_->add_option("operands", *out)->group("");
}

void CommandBinder::Switch(const std::string& name, bool* out) {
  const FlagSpec* f = Find(name);
  if (f == nullptr) return;
  if (!f->value.empty()) errors_.push_back(absl::StrCat("--", name, " takes a value"));
  app_->add_flag(Names(*f), *out, f->help);
}

void CommandBinder::Text(const std::string& name, std::string* out) {
  if (CLI::Option* opt = Value(name)) opt->each([out](const std::string& v) { *out = v; });
}

void CommandBinder::Text(const std::string& name, std::optional<std::string>* out) {
  if (CLI::Option* opt = Value(name)) opt->each([out](const std::string& v) { *out = v; });
}

void CommandBinder::Integer(const std::string& name, int* out) {
  CLI::Option* opt = Value(name);
  if (opt == nullptr) return;
  opt->check(IntegerText())->each([out](const std::string& v) {
    if (!absl::SimpleAtoi(v, out)) *out = 0;  // not reached: IntegerText refused it
  });
}

void CommandBinder::Integer(const std::string& name, std::optional<int>* out) {
  CLI::Option* opt = Value(name);
  if (opt == nullptr) return;
  opt->check(IntegerText())->each([out](const std::string& v) {
    int value = 0;
    if (absl::SimpleAtoi(v, &value)) *out = value;
  });
}

void CommandBinder::ChoiceIndex(const std::string& name, const std::vector<std::string>& names,
                                std::function<void(size_t)> set) {
  CLI::Option* opt = Value(name);
  if (opt == nullptr) return;
  CLI::Validator member(
      [names](std::string& value) {
        if (std::find(names.begin(), names.end(), value) != names.end()) return std::string();
        return absl::StrCat("must be ", OneOf(names), ", got '", value, "'");
      },
      "");
  opt->check(member)->each([names, set](const std::string& v) {
    set(std::find(names.begin(), names.end(), v) - names.begin());
  });
}

absl::Status CommandBinder::Finish() const {
  std::vector<std::string> errors = errors_;
  for (const FlagSpec& f : spec_.flags) {
    if (std::find(bound_.begin(), bound_.end(), f.name) == bound_.end()) {
      errors.push_back(absl::StrCat("--", f.name, " is not bound"));
    }
  }
  if (errors.empty()) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat("the options of ", spec_.name, " do not fit the command table: ",
                   absl::StrJoin(errors, "; ")));
}

absl::StatusOr<ParsedCommand> ParseCommandLine(const std::vector<std::string>& argv,
                                               const CommandBindings& bindings) {
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
  CommandParser parser(bindings);
  return parser.Parse(argv);
}

std::string CommandHelp(const std::string& command) {
  if (FindCommand(command) == nullptr) return TableFormatter::RootHelp();
  std::vector<std::string> argv = absl::StrSplit(command, ' ');
  argv.insert(argv.begin(), "ecps");
  argv.push_back("--help");
  CommandParser parser(CommandBindings{});  // help needs no handler
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
