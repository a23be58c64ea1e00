#include "cli/prometheus_targets.h"

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "runtime/metrics.h"

namespace ecps {

std::string PrometheusTargets(const v1::StatusResponse& status) {
  nlohmann::json groups = nlohmann::json::array();
  auto add = [&](const std::string& address, const char* role, const std::string& id) {
    if (address.empty()) return;
    nlohmann::json labels = {{"ecps_job", status.job()}, {"ecps_role", role}};
    if (!id.empty()) labels["ecps_id"] = id;
    groups.push_back({{"targets", {address}}, {"labels", labels}});
  };
  add(status.metrics_address(), "coordinator", "");
  for (const v1::NodeInfo& node : status.nodes()) {
    if (node.state() == v1::NODE_DEAD) continue;  // gone; its replacement registers anew
    add(node.metrics_address(), RoleLabel(node.role()), absl::StrCat(node.id()));
  }
  return groups.dump(2) + "\n";
}

}  // namespace ecps
