#include "cli/progress_line.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ecps {
namespace {

// " | recovering server 2: 45% rebuilt, 120 on demand | worker 1 dead: replacing".
std::string RecoveryNote(const v1::StatusResponse& st) {
  std::string note;
  for (const auto& n : st.nodes()) {
    if (n.id() < 0) continue;
    const std::string label = NodeLabel(n.role(), n.id());
    if (n.role() == v1::ROLE_SERVER && n.state() == v1::NODE_RECOVERING) {
      const v1::ServerStats& s = n.server();
      if (s.rebuild_rows_total() > 0) {
        absl::StrAppend(&note, absl::StrFormat(" | recovering %s: %.0f%% rebuilt, %d on demand",
                                               label, 100.0 * s.rebuild_rows_done() /
                                                          s.rebuild_rows_total(),
                                               s.on_demand_rebuilds()));
      } else {
        absl::StrAppend(&note, " | recovering ", label);
      }
    } else if (n.state() == v1::NODE_DEAD) {
      absl::StrAppend(&note, " | ", label, " dead: replacing");
    } else if (n.state() == v1::NODE_SUSPECT) {
      absl::StrAppend(&note, " | ", label, " suspect");
    }
  }
  return note;
}

}  // namespace

std::string DataEpoch(const v1::StatusResponse& st) {
  if (st.data_epochs() <= 1) return "";  // one pass (or none reported yet): nothing to count
  if (st.data_epoch() <= 0) return absl::StrFormat("epoch -/%d", st.data_epochs());
  return absl::StrFormat("epoch %d/%d", st.data_epoch(), st.data_epochs());
}

std::string FormatDuration(double s) {
  if (!(s >= 0) || std::isinf(s)) return "--";
  int total = static_cast<int>(s + 0.5);
  if (total >= 3600) return absl::StrFormat("%dh%02dm", total / 3600, total / 60 % 60);
  if (total >= 60) return absl::StrFormat("%dm%02ds", total / 60, total % 60);
  return absl::StrFormat("%ds", total);
}

std::string NodeLabel(v1::Role role, int id) {
  return absl::StrCat(role == v1::ROLE_SERVER ? "server " : "worker ", id);
}

std::string ProgressLine(const v1::StatusResponse& st) {
  double pct = st.total_steps() > 0 ? 100.0 * st.step() / st.total_steps() : 0;
  std::string auc = st.eval_auc() >= 0 ? absl::StrFormat("%.4f", st.eval_auc()) : "--";
  std::string data_epoch = DataEpoch(st);
  if (!data_epoch.empty()) data_epoch = " | " + data_epoch;
  return absl::StrFormat("[%s] step %d/%d (%.0f%%)%s | %.0f samples/s | loss %.4f | AUC %s | "
                         "map epoch %d | elapsed %s | ETA %s",
                         PhaseName(st.phase()), st.step(), st.total_steps(), pct, data_epoch,
                         st.samples_per_s(), st.loss(), auc, st.epoch(),
                         FormatDuration(st.elapsed_s()), FormatDuration(st.eta_s())) +
         RecoveryNote(st);
}

std::vector<std::string> FailureHistoryEvents(const v1::StatusResponse& st,
                                              std::map<int, int>* seen_states) {
  std::vector<std::string> out;
  for (int i = 0; i < st.failures_size(); ++i) {
    const v1::FailureEvent& e = st.failures(i);
    int& seen = (*seen_states)[i];
    if (seen == e.state()) continue;
    const std::string label = NodeLabel(e.role(), e.id());
    if (seen < v1::FAILURE_DETECTED) {
      out.push_back(absl::StrFormat("%s (pid %d) declared dead: %s; detected in %.1f s", label,
                                    e.pid(), e.reason(), e.detection_s()));
    }
    if (seen < v1::FAILURE_REPLACING && e.state() >= v1::FAILURE_REPLACING) {
      out.push_back(absl::StrFormat("%s replaced by %s (pid %d)%s", label,
                                    e.by_spare() ? "spare" : "a new process", e.replacement_pid(),
                                    e.role() == v1::ROLE_SERVER ? "; rebuilding online" : ""));
    }
    if (e.state() == v1::FAILURE_RECOVERED) {
      std::string what = absl::StrFormat("%s recovered in %.1f s after replacement", label,
                                         e.rebuild_s());
      if (e.role() == v1::ROLE_SERVER && e.rows_rebuilt() > 0) {
        absl::StrAppend(&what, absl::StrFormat(" (%d rows rebuilt: %d on demand)",
                                               e.rows_rebuilt(), e.on_demand_rebuilds()));
      }
      out.push_back(what);
    }
    seen = e.state();
  }
  return out;
}

const char kMetricsCsvHeader[] =
    "time_s,phase,epoch,step,samples,samples_per_s,loss,eval_auc,eval_logloss,servers_active,"
    "event\n";

std::string MetricsCsvRow(double t, const v1::StatusResponse& st, std::string events) {
  int active = 0;
  for (const auto& n : st.nodes()) {
    active += n.role() == v1::ROLE_SERVER && n.state() == v1::NODE_ACTIVE;
  }
  std::replace(events.begin(), events.end(), ',', ' ');
  return absl::StrFormat("%.3f,%s,%d,%d,%d,%.1f,%.6f,%.6f,%.6f,%d,%s\n", t, PhaseName(st.phase()),
                         st.epoch(), st.step(), st.samples(), st.samples_per_s(), st.loss(),
                         st.eval_auc(), st.eval_logloss(), active, events);
}

ProgressPrinter::ProgressPrinter(bool enabled)
    : enabled_(enabled), tty_(isatty(STDOUT_FILENO)) {}

void ProgressPrinter::Update(const std::string& line) {
  if (!enabled_) return;
  absl::MutexLock lock(&mu_);
  if (tty_) {
    std::printf("\r\033[K%s", line.c_str());
    std::fflush(stdout);
    dirty_ = true;
  } else if (std::chrono::steady_clock::now() - last_ >= std::chrono::seconds(5)) {
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
    last_ = std::chrono::steady_clock::now();
  }
}

void ProgressPrinter::Event(const std::string& line) {
  absl::MutexLock lock(&mu_);
  FinishLocked();
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

void ProgressPrinter::Finish() {
  absl::MutexLock lock(&mu_);
  FinishLocked();
}

void ProgressPrinter::FinishLocked() {
  if (dirty_) std::printf("\n");
  dirty_ = false;
}

void EventLog::Add(const std::string& line) {
  printer_->Event("ecps: " + line);
  Note(line);
}

void EventLog::Note(const std::string& line) {
  events_ += (events_.empty() ? "" : "; ") + line;
}

std::string EventLog::Take() {
  std::string out;
  out.swap(events_);
  return out;
}

}  // namespace ecps
