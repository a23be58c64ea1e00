#include "cli/python_script.h"

#include <cstdlib>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "cli/process_group.h"

namespace ecps {
namespace {

namespace fs = std::filesystem;

std::string FindScript(const std::string& script) {
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("ECPS_SCRIPTS_DIR")) {
    candidates.push_back(std::string(env) + "/" + script);
  }
#ifdef ECPS_SOURCE_DIR
  // StrCat, not operator+: g++ 12 warns (array-bounds, a known false positive) on a literal
  // appended to a temporary string here.
  candidates.push_back(absl::StrCat(ECPS_SOURCE_DIR, "/deploy/", script));
#endif
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) candidates.push_back((exe.parent_path() / "../../deploy" / script).string());
  // The relocatable bundle (deploy/bundle.sh): bin/ecps beside share/ecps/, no source tree.
  if (!ec) candidates.push_back((exe.parent_path() / "../share/ecps" / script).string());
  candidates.push_back("deploy/" + script);
  for (const auto& c : candidates) {
    if (fs::exists(c, ec)) return c;
  }
  return "";
}

}  // namespace

absl::Status RunPythonScript(const std::string& script, const std::vector<std::string>& args,
                             const std::string& log) {
  const std::string path = FindScript(script);
  if (path.empty()) {
    return absl::NotFoundError("deploy/" + script + " not found (set ECPS_SCRIPTS_DIR)");
  }
  std::string python = "python3";
  std::error_code ec;
  if (const char* env = std::getenv("ECPS_PYTHON")) {
    python = env;
  } else if (fs::exists("/usr/bin/python3", ec)) {
    python = "/usr/bin/python3";
  }
  std::string command = ShellQuote(python) + " " + ShellQuote(path);
  for (const auto& a : args) command += " " + ShellQuote(a);
  command += " > " + ShellQuote(log) + " 2>&1";
  if (std::system(command.c_str()) == 0) return absl::OkStatus();
  std::string why = TailFile(log, 1);
  while (!why.empty() && (why.back() == '\n' || why.back() == ' ')) why.pop_back();
  while (!why.empty() && why.front() == ' ') why.erase(0, 1);
  return absl::InternalError(why.empty() ? "python3 is not available" : why);
}

}  // namespace ecps
