#include "ps/server_metrics.h"

#include "absl/strings/str_cat.h"

namespace ecps {

bool ServerReady(v1::NodeState state) {
  return state == v1::NODE_ACTIVE || state == v1::NODE_RECOVERING;
}

void AddServerMetrics(int id, const v1::ServerStats& stats, MetricsBuilder* out) {
  const MetricLabels server = {{"server", absl::StrCat(id)}};
  auto gauge = [&](const char* name, const char* help, double value) {
    out->Gauge(name, help, value, server);
  };
  auto counter = [&](const char* name, const char* help, double value) {
    out->Counter(name, help, value, server);
  };
  gauge("ecps_server_data_rows", "Embedding rows this server holds", stats.data_rows());
  gauge("ecps_server_parity_rows", "Parity rows this server holds", stats.parity_rows());
  gauge("ecps_server_memory_bytes", "Memory held by tables, parity and dense tensors",
        stats.bytes());
  gauge("ecps_server_dense_tensors", "Dense tensors this server is the primary of",
        stats.dense_tensors());
  counter("ecps_server_pulled_rows_total", "Rows workers pulled", stats.pulls());
  counter("ecps_server_pushed_rows_total", "Row updates workers pushed", stats.pushes());
  // Delta streams: what is in flight to the parity holders (the lag) and what was sent.
  gauge("ecps_server_unacked_deltas",
        "Parity deltas sent and not yet acknowledged (the delta streams' lag)",
        stats.unacked_deltas());
  counter("ecps_server_delta_sent_bytes_total", "Bytes of parity deltas sent to peers",
          stats.delta_bytes_sent());
  counter("ecps_server_delta_sent_batches_total",
          "Messages of parity deltas sent to peers (one per batch)", stats.delta_batches_sent());
  counter("ecps_server_delta_sent_tcp_batches_total",
          "Of those messages, the ones sent over plain TCP (fault_tolerance.parity_transport)",
          stats.delta_batches_sent_tcp());
  gauge("ecps_server_delta_bytes_per_second", "Rate of parity delta bytes sent",
        stats.delta_bytes_per_s());
  // Rebuild of a replacement (zero on a server that never rebuilt; kept once ACTIVE).
  gauge("ecps_server_rebuild_rows", "Rows (data and parity) rebuilt so far",
        stats.rebuild_rows_done());
  gauge("ecps_server_rebuild_rows_target", "Rows this server must rebuild",
        stats.rebuild_rows_total());
  gauge("ecps_server_rebuild_rows_per_second", "Current background rebuild rate",
        stats.rebuild_rows_per_s());
  counter("ecps_server_on_demand_rebuilds_total",
          "Rows rebuilt first because a worker asked for them", stats.on_demand_rebuilds());
  counter("ecps_server_on_demand_batches_total", "On-demand rebuild batches",
          stats.on_demand_batches());
  counter("ecps_server_frozen_rebuild_stripes_total",
          "Stripes whose lock-free read raced with updates, rebuilt under a freeze",
          stats.frozen_rebuild_stripes());
  counter("ecps_server_parity_version_gaps_total",
          "Parity deltas out of order (always 0 unless something is wrong)",
          stats.parity_version_gaps());
  counter("ecps_server_refused_requests_total", "Peer requests refused as inconsistent",
          stats.refused_requests());
  counter("ecps_server_freezes_expired_total",
          "Freezes dropped because their owner died or their lease ran out",
          stats.freezes_expired());
  gauge("ecps_server_freezes_held", "Live freezes on this server", stats.freezes_held());
  // The online scrub (ps/online_scrub.h): what it checked, and the mismatches it found (on
  // the lock-free read), confirmed (read again under a freeze), repaired, or could not locate
  // (r = 1: parity re-derived from the data rows).
  counter("ecps_server_scrub_stripes_checked_total",
          "Stripes the online scrub compared with a fresh encode of their data rows",
          stats.scrub_stripes_checked());
  counter("ecps_server_scrub_bytes_checked_total", "Bytes the online scrub read",
          stats.scrub_bytes_checked());
  counter("ecps_server_scrub_dense_checked_total",
          "Dense replicas the online scrub compared with their primary",
          stats.scrub_dense_checked());
  counter("ecps_server_scrub_mismatches_found_total",
          "Stripes and dense replicas that differed on the online scrub's first read",
          stats.scrub_mismatches_found());
  counter("ecps_server_scrub_mismatches_confirmed_total",
          "Of those, the ones that still differed when read again (a corruption)",
          stats.scrub_mismatches_confirmed());
  counter("ecps_server_scrub_repaired_total",
          "Confirmed mismatches the online scrub rewrote from the located bad member",
          stats.scrub_repaired());
  counter("ecps_server_scrub_unlocated_total",
          "Confirmed mismatches the code could not locate (r = 1): parity re-derived",
          stats.scrub_unlocated());
  counter("ecps_server_scrub_passes_total", "Full online scrub passes completed",
          stats.scrub_passes());
}

}  // namespace ecps
