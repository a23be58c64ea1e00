// prometheus_targets.json from a status: one target group per role serving /metrics.
#include "cli/prometheus_targets.h"

#include <gtest/gtest.h>

#include "nlohmann/json.hpp"

namespace ecps {
namespace {

TEST(PrometheusTargetsTest, EveryLiveRoleWithMetricsIsATarget) {
  v1::StatusResponse s;
  s.set_job("j");
  s.set_metrics_address("10.0.0.1:9400");
  auto add = [&](v1::Role role, int id, v1::NodeState state, const std::string& metrics) {
    v1::NodeInfo* n = s.add_nodes();
    n->set_role(role);
    n->set_id(id);
    n->set_state(state);
    n->set_metrics_address(metrics);
  };
  add(v1::ROLE_SERVER, 0, v1::NODE_ACTIVE, "10.0.0.2:9400");
  add(v1::ROLE_SERVER, 1, v1::NODE_DEAD, "10.0.0.3:9400");   // gone: not scraped
  add(v1::ROLE_SERVER, -1, v1::NODE_STANDBY, "10.0.0.4:9400");
  add(v1::ROLE_WORKER, 0, v1::NODE_ACTIVE, "");               // metrics off
  const nlohmann::json groups = nlohmann::json::parse(PrometheusTargets(s));
  ASSERT_EQ(groups.size(), 3u) << groups.dump();
  EXPECT_EQ(groups[0]["targets"], nlohmann::json::array({"10.0.0.1:9400"}));
  EXPECT_EQ(groups[0]["labels"]["ecps_role"], "coordinator");
  EXPECT_EQ(groups[0]["labels"]["ecps_job"], "j");
  EXPECT_FALSE(groups[0]["labels"].contains("ecps_id"));
  EXPECT_EQ(groups[1]["targets"], nlohmann::json::array({"10.0.0.2:9400"}));
  EXPECT_EQ(groups[1]["labels"]["ecps_role"], "server");
  EXPECT_EQ(groups[1]["labels"]["ecps_id"], "0");
  EXPECT_EQ(groups[2]["labels"]["ecps_id"], "-1");
}

TEST(PrometheusTargetsTest, NothingServesMetricsGivesAnEmptyList) {
  v1::StatusResponse s;
  s.add_nodes()->set_role(v1::ROLE_SERVER);
  EXPECT_EQ(nlohmann::json::parse(PrometheusTargets(s)), nlohmann::json::array());
}

}  // namespace
}  // namespace ecps
