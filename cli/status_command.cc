#include "cli/status_command.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cli/operator_call.h"
#include "cli/progress_line.h"
#include "google/protobuf/util/json_util.h"
#include "proto/ecps.grpc.pb.h"
#include "proto/ecps.pb.h"
#include "runtime/rpc.h"

namespace ecps {
namespace {

// "RUNNING" from JOB_RUNNING, "ACTIVE" from NODE_ACTIVE.
std::string StripPrefix(const std::string& name, const std::string& prefix) {
  if (name.rfind(prefix, 0) == 0) return name.substr(prefix.size());
  return name.empty() ? "?" : name;
}

std::string TablePhaseName(v1::JobPhase phase) {
  return StripPrefix(v1::JobPhase_Name(phase), "JOB_");
}

std::string StateName(v1::NodeState state) {
  if (state == v1::NODE_STATE_UNSPECIFIED) return "-";
  return StripPrefix(v1::NodeState_Name(state), "NODE_");
}

// 12.3s, 2m05s, 1h02m03s; "-" when negative (unknown).
std::string Seconds(double s) {
  if (s < 0) return "-";
  if (s < 60) return absl::StrFormat("%.1fs", s);
  const int64_t total = static_cast<int64_t>(s + 0.5);
  if (total < 3600) return absl::StrFormat("%dm%02ds", total / 60, total % 60);
  return absl::StrFormat("%dh%02dm%02ds", total / 3600, (total / 60) % 60, total % 60);
}

std::string Millis(int64_t ms) {
  if (ms < 0) return "-";
  if (ms < 1000) return absl::StrCat(ms, "ms");
  return Seconds(static_cast<double>(ms) / 1000.0);
}

std::string Bytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  if (unit == 0) return absl::StrCat(bytes, " B");
  return absl::StrFormat("%.1f %s", value, units[unit]);
}

// "rebuilt 45% (450/1000 rows), 120 on demand in 6 batches, 900 rows/s, ETA 0.6s".
std::string RebuildProgress(const v1::ServerStats& s) {
  if (s.rebuild_rows_total() <= 0) return "rebuilding";
  const double pct = 100.0 * static_cast<double>(s.rebuild_rows_done()) /
                     static_cast<double>(s.rebuild_rows_total());
  std::string text = absl::StrFormat("rebuilt %.0f%% (%d/%d rows), %d on demand", pct,
                                     s.rebuild_rows_done(), s.rebuild_rows_total(),
                                     s.on_demand_rebuilds());
  if (s.on_demand_batches() > 0) {
    absl::StrAppend(&text, absl::StrFormat(" in %d batches", s.on_demand_batches()));
  }
  if (s.rebuild_rows_per_s() > 0) {
    const double eta = static_cast<double>(s.rebuild_rows_total() - s.rebuild_rows_done()) /
                       s.rebuild_rows_per_s();
    absl::StrAppend(&text, absl::StrFormat(", %.0f rows/s, ETA %s", s.rebuild_rows_per_s(),
                                           Seconds(eta)));
  }
  return text;
}

std::string Details(const v1::NodeInfo& node) {
  if (node.role() == v1::ROLE_SERVER) {
    const v1::ServerStats& s = node.server();
    std::string text = absl::StrFormat("rows %d (+%d parity)  %s", s.data_rows(), s.parity_rows(),
                                       Bytes(s.bytes()));
    if (node.state() == v1::NODE_RECOVERING) absl::StrAppend(&text, "  ", RebuildProgress(s));
    if (s.scrub_passes() > 0 || s.scrub_mismatches_found() > 0) {
      // The online scrub (docs/abft.md): shown once it has done something.
      absl::StrAppend(&text, absl::StrFormat("  scrub %d passes, %d stripes", s.scrub_passes(),
                                             s.scrub_stripes_checked()));
      if (s.scrub_mismatches_confirmed() > 0) {
        absl::StrAppend(&text, absl::StrFormat(", %d corrupt: %d repaired, %d unlocated",
                                               s.scrub_mismatches_confirmed(), s.scrub_repaired(),
                                               s.scrub_unlocated()));
      }
    }
    return text;
  }
  const v1::WorkerProgress& w = node.worker();
  std::string text = absl::StrFormat("step %d  %.1f samples/s", w.step(), w.samples_per_s());
  if (w.done()) absl::StrAppend(&text, "  done");
  if (!w.error().empty()) absl::StrAppend(&text, "  error: ", w.error());
  return text;
}

std::string FailureLine(const v1::FailureEvent& e) {
  const std::string node =
      absl::StrCat(e.role() == v1::ROLE_SERVER ? "server " : "worker ", e.id());
  std::string text = absl::StrCat(node, " (pid ", e.pid(), "): ", e.reason(), "; detected in ",
                                  absl::StrFormat("%.1fs", e.detection_s()));
  if (e.state() == v1::FAILURE_DETECTED) {
    absl::StrAppend(&text, "; waiting for a replacement");
    return text;
  }
  absl::StrAppend(&text, "; replaced by ", e.by_spare() ? "spare " : "new process ",
                  e.replacement(), " (pid ", e.replacement_pid(), ")");
  if (e.state() == v1::FAILURE_REPLACING) {
    absl::StrAppend(&text, e.role() == v1::ROLE_SERVER ? "; rebuilding" : "; starting");
    return text;
  }
  absl::StrAppend(&text, absl::StrFormat("; recovered %s after replacement (%s after detection)",
                                         Seconds(e.rebuild_s()), Seconds(e.recovery_s())));
  if (e.role() == v1::ROLE_SERVER && e.rows_rebuilt() > 0) {
    absl::StrAppend(&text, absl::StrFormat(", %d rows rebuilt (%d on demand)", e.rows_rebuilt(),
                                           e.on_demand_rebuilds()));
    if (e.rebuild_mb_s() > 0) absl::StrAppend(&text, absl::StrFormat(", %.1f MB/s", e.rebuild_mb_s()));
  }
  return text;
}

std::string Json(const v1::StatusResponse& status, bool pretty) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = pretty;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  std::string out;
  if (!google::protobuf::util::MessageToJsonString(status, &out, options).ok()) {
    return "{}";
  }
  if (out.empty() || out.back() != '\n') out.push_back('\n');
  return out;
}

}  // namespace

std::string FormatStatusTable(const v1::StatusResponse& status) {
  std::string out;
  const double pct = status.total_steps() > 0 ? 100.0 * static_cast<double>(status.step()) /
                                                    static_cast<double>(status.total_steps())
                                              : 0.0;
  absl::StrAppend(&out, "job ", status.job().empty() ? "?" : status.job(), "  ",
                  TablePhaseName(status.phase()));
  absl::StrAppend(
      &out, absl::StrFormat("  step %d/%d (%.1f%%)", status.step(), status.total_steps(), pct));
  absl::StrAppend(&out, absl::StrFormat("  %.1f samples/s", status.samples_per_s()));
  absl::StrAppend(&out, status.step() > 0 ? absl::StrFormat("  loss %.4f", status.loss())
                                          : std::string("  loss -"));
  absl::StrAppend(&out, status.eval_auc() > 0 ? absl::StrFormat("  AUC %.4f", status.eval_auc())
                                              : std::string("  AUC -"));
  absl::StrAppend(&out, "  elapsed ", Seconds(status.elapsed_s()), "  ETA ",
                  Seconds(status.eta_s()));
  if (const std::string data_epoch = DataEpoch(status); !data_epoch.empty()) {
    absl::StrAppend(&out, "  ", data_epoch);
  }
  absl::StrAppend(&out, "  map epoch ", status.epoch(), "  mode ",
                  status.mode().empty() ? "?" : status.mode(), " k=", status.k(), " r=", status.r(),
                  "\n");
  if (status.abft_detections() > 0) {
    absl::StrAppend(&out, "abft: ", status.abft_detections(),
                    " steps computed again after a failed GEMM checksum (worker.abft)\n");
  }
  if (!status.error().empty()) absl::StrAppend(&out, "error: ", status.error(), "\n");

  std::vector<std::vector<std::string>> rows;
  rows.push_back({"ROLE", "ID", "ADDRESS", "STATE", "HEARTBEAT", "PID", "DETAILS"});
  for (const v1::NodeInfo& node : status.nodes()) {
    const std::string role = node.role() == v1::ROLE_SERVER   ? "server"
                             : node.role() == v1::ROLE_WORKER ? "worker"
                                                              : "?";
    rows.push_back({role, node.id() < 0 ? std::string("-") : absl::StrCat(node.id()),
                    node.address().empty() ? std::string("-") : node.address(),
                    StateName(node.state()), Millis(node.heartbeat_age_ms()),
                    node.pid() > 0 ? absl::StrCat(node.pid()) : std::string("-"), Details(node)});
  }
  std::vector<size_t> widths(rows[0].size(), 0);
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size(); ++c) widths[c] = std::max(widths[c], row[c].size());
  }
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      absl::StrAppend(&line, row[c]);
      if (c + 1 < row.size()) line.append(widths[c] - row[c].size() + 2, ' ');
    }
    absl::StrAppend(&out, line, "\n");
  }
  if (status.failures_size() > 0) {
    absl::StrAppend(&out, "failures:\n");
    for (const v1::FailureEvent& e : status.failures()) {
      absl::StrAppend(&out, "  ", FailureLine(e), "\n");
    }
  }
  return out;
}

std::string FormatStatusJson(const v1::StatusResponse& status) { return Json(status, true); }

int RunStatusCommand(const std::string& address, const std::string& token, bool json, bool watch,
                     int watch_interval_ms) {
  OperatorCall coordinator(address);
  RpcOptions rpc;
  rpc.deadline_ms = 5000;
  rpc.max_attempts = 3;
  const bool tty = isatty(STDOUT_FILENO) != 0;
  bool first = true;
  while (true) {
    v1::StatusRequest request;
    FillHeader(request.mutable_header(), token, 0, "cli");
    v1::StatusResponse response;
    const absl::Status status = coordinator.Call(rpc, [&](grpc::ClientContext* context) {
      response.Clear();
      return coordinator.stub()->Status(context, request, &response);
    });
    if (!status.ok()) return coordinator.Fail("status", status);
    if (json) {
      std::cout << Json(response, /*pretty=*/!watch);
    } else {
      if (watch && tty) {
        std::cout << "\033[H\033[2J";  // clear the screen: the table redraws in place
      } else if (watch && !first) {
        std::cout << "\n";
      }
      std::cout << FormatStatusTable(response);
    }
    std::cout.flush();
    first = false;
    const bool ended = response.phase() == v1::JOB_FINISHED || response.phase() == v1::JOB_FAILED;
    if (!watch || ended) return kStatusOk;
    std::this_thread::sleep_for(std::chrono::milliseconds(std::max(1, watch_interval_ms)));
  }
}

}  // namespace ecps
