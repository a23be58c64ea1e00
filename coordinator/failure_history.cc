#include "coordinator/failure_history.h"

namespace ecps {
namespace {

bool IsOpen(const v1::FailureEvent& e, v1::Role role, int id) {
  return e.role() == role && e.id() == id && e.state() != v1::FAILURE_RECOVERED;
}

}  // namespace

int64_t RowPayloadBytes(int embedding_dim, SparseOptimizerType sparse_optimizer) {
  int64_t floats = embedding_dim;
  if (sparse_optimizer == SparseOptimizerType::kAdagrad) floats += embedding_dim;
  if (sparse_optimizer == SparseOptimizerType::kRowwiseAdagrad) floats += 1;
  return floats * 4;
}

void FailureHistory::Declared(v1::Role role, int id, const std::string& instance, int64_t pid,
                              absl::Time last_heartbeat, absl::Time now,
                              const std::string& reason) {
  v1::FailureEvent& e = events_.emplace_back();
  e.set_role(role);
  e.set_id(id);
  e.set_instance(instance);
  e.set_pid(pid);
  e.set_reason(reason);
  e.set_state(v1::FAILURE_DETECTED);
  e.set_last_heartbeat_unix_ms(absl::ToUnixMillis(last_heartbeat));
  e.set_detected_unix_ms(absl::ToUnixMillis(now));
  e.set_detection_s(absl::ToDoubleSeconds(now - last_heartbeat));
  e.set_rebuild_s(-1);
  e.set_recovery_s(-1);
}

void FailureHistory::Replaced(v1::Role role, int id, const std::string& instance, int64_t pid,
                              bool by_spare, absl::Time now) {
  for (v1::FailureEvent& e : events_) {
    if (!IsOpen(e, role, id)) continue;
    e.set_state(v1::FAILURE_REPLACING);
    e.set_replacement(instance);
    e.set_replacement_pid(pid);
    e.set_by_spare(by_spare);
    e.set_replaced_unix_ms(absl::ToUnixMillis(now));
    e.set_rows_rebuilt(0);
    e.set_rows_total(0);
    e.set_on_demand_rebuilds(0);
  }
}

void FailureHistory::Progress(int server_id, const v1::ServerStats& stats) {
  for (v1::FailureEvent& e : events_) {
    if (!IsOpen(e, v1::ROLE_SERVER, server_id) || e.state() != v1::FAILURE_REPLACING) continue;
    e.set_rows_rebuilt(stats.rebuild_rows_done());
    e.set_rows_total(stats.rebuild_rows_total());
    e.set_on_demand_rebuilds(stats.on_demand_rebuilds());
  }
}

bool FailureHistory::Recovered(v1::Role role, int id, absl::Time now) {
  bool closed = false;
  for (v1::FailureEvent& e : events_) {
    if (!IsOpen(e, role, id) || e.state() != v1::FAILURE_REPLACING) continue;
    const int64_t now_ms = absl::ToUnixMillis(now);
    e.set_state(v1::FAILURE_RECOVERED);
    e.set_recovered_unix_ms(now_ms);
    e.set_rebuild_s(static_cast<double>(now_ms - e.replaced_unix_ms()) / 1000.0);
    e.set_recovery_s(static_cast<double>(now_ms - e.detected_unix_ms()) / 1000.0);
    if (row_bytes_ > 0 && e.rebuild_s() > 0 && e.rows_rebuilt() > 0) {
      e.set_rebuild_mb_s(static_cast<double>(e.rows_rebuilt()) * static_cast<double>(row_bytes_) /
                         1e6 / e.rebuild_s());
    }
    closed = true;
  }
  return closed;
}

bool FailureHistory::Open(v1::Role role, int id) const {
  for (const v1::FailureEvent& e : events_) {
    if (IsOpen(e, role, id)) return true;
  }
  return false;
}

void FailureHistory::Fill(v1::StatusResponse* out) const {
  for (const v1::FailureEvent& e : events_) *out->add_failures() = e;
}

}  // namespace ecps
