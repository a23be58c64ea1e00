// A server's /metrics from its stats, and when its health says it serves workers.
#include "ps/server_metrics.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace ecps {
namespace {

using ::testing::HasSubstr;

TEST(ServerMetricsTest, StatsBecomeSeriesLabelledWithTheServer) {
  v1::ServerStats stats;
  stats.set_pulls(1000);
  stats.set_unacked_deltas(7);
  stats.set_delta_bytes_sent(1 << 20);
  stats.set_delta_batches_sent(9);
  stats.set_delta_batches_sent_tcp(7);
  stats.set_rebuild_rows_done(300);
  stats.set_rebuild_rows_total(1200);
  stats.set_on_demand_rebuilds(25);
  MetricsBuilder b;
  AddServerMetrics(3, stats, &b);
  const std::string text = MetricsText(b.Take());
  EXPECT_THAT(text, HasSubstr("# TYPE ecps_server_pulled_rows_total counter\n"
                              "ecps_server_pulled_rows_total{server=\"3\"} 1000\n"));
  EXPECT_THAT(text, HasSubstr("ecps_server_unacked_deltas{server=\"3\"} 7\n"));
  EXPECT_THAT(text, HasSubstr("ecps_server_delta_sent_bytes_total{server=\"3\"} 1048576\n"));
  EXPECT_THAT(text, HasSubstr("ecps_server_delta_sent_batches_total{server=\"3\"} 9\n"));
  EXPECT_THAT(text, HasSubstr("ecps_server_delta_sent_tcp_batches_total{server=\"3\"} 7\n"));
  EXPECT_THAT(text, HasSubstr("ecps_server_rebuild_rows{server=\"3\"} 300\n"));
  EXPECT_THAT(text, HasSubstr("ecps_server_rebuild_rows_target{server=\"3\"} 1200\n"));
  EXPECT_THAT(text, HasSubstr("ecps_server_on_demand_rebuilds_total{server=\"3\"} 25\n"));
}

TEST(ServerMetricsTest, ReadyWhenActiveOrRebuildingNotWhileStartingOrStandingBy) {
  EXPECT_TRUE(ServerReady(v1::NODE_ACTIVE));
  EXPECT_TRUE(ServerReady(v1::NODE_RECOVERING));  // answers every pull, on demand
  EXPECT_FALSE(ServerReady(v1::NODE_STARTING));
  EXPECT_FALSE(ServerReady(v1::NODE_STANDBY));    // a spare holds no shard
  EXPECT_FALSE(ServerReady(v1::NODE_DEAD));
  EXPECT_FALSE(ServerReady(v1::NODE_STATE_UNSPECIFIED));
}

}  // namespace
}  // namespace ecps
