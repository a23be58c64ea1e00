#include "runtime/logging.h"

#include <memory>

#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

namespace ecps {

absl::Status InitLogging(const std::string& role, const std::string& level) {
  spdlog::level::level_enum lvl = spdlog::level::from_str(level);
  // from_str maps unknown names to `off`; only accept `off` when it was asked for.
  if (lvl == spdlog::level::off && level != "off") {
    return absl::InvalidArgumentError("unknown log level '" + level +
                                      "' (allowed: trace, debug, info, warn, error, off)");
  }
  spdlog::drop(role);  // InitLogging may be called again (tests, re-exec)
  auto logger = spdlog::stderr_color_mt(role);
  logger->set_pattern("[%H:%M:%S.%e] [%n] [%^%l%$] %v");
  logger->set_level(lvl);
  spdlog::set_default_logger(std::move(logger));
  return absl::OkStatus();
}

}  // namespace ecps
