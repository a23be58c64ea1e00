#include "cli/run_report.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "cli/progress_line.h"
#include "google/protobuf/util/json_util.h"
#include "nlohmann/json.hpp"
#include "runtime/scrub_counters.h"

namespace ecps {
namespace {

using Json = nlohmann::ordered_json;

// `x` rounded to `decimals` places, or null when negative (unknown).
Json Num(double x, int decimals = 3) {
  if (x < 0) return nullptr;
  const double scale = std::pow(10.0, decimals);
  return std::round(x * scale) / scale;
}

double Rounded(double x, int decimals) {
  const double scale = std::pow(10.0, decimals);
  return std::round(x * scale) / scale;
}

// A value on one line: {"done": true, "clean": true}. Bytes that are not UTF-8 (a bad input
// line) become U+FFFD rather than invalid JSON.
std::string Inline(const Json& v) {
  std::vector<std::string> parts;
  if (v.is_object()) {
    for (const auto& [key, value] : v.items()) {
      parts.push_back(absl::StrCat(Json(key).dump(), ": ", Inline(value)));
    }
    return absl::StrCat("{", absl::StrJoin(parts, ", "), "}");
  }
  if (v.is_array()) {
    for (const Json& e : v) parts.push_back(Inline(e));
    return absl::StrCat("[", absl::StrJoin(parts, ", "), "]");
  }
  return v.dump(-1, ' ', false, Json::error_handler_t::replace);
}

// The layout report.json has always had: one key per line, list items one per line.
std::string Layout(const Json& report) {
  std::vector<std::string> lines;
  for (const auto& [key, value] : report.items()) {
    std::string text;
    if (value.is_array() && !value.empty()) {
      std::vector<std::string> items;
      for (const Json& e : value) items.push_back(Inline(e));
      text = absl::StrCat("[\n    ", absl::StrJoin(items, ",\n    "), "\n  ]");
    } else {
      text = Inline(value);
    }
    lines.push_back(absl::StrCat("  ", Json(key).dump(), ": ", text));
  }
  return absl::StrCat("{\n", absl::StrJoin(lines, ",\n"), "\n}\n");
}

// The launcher-timeline time (s since monitoring started) of a coordinator Unix time.
double LocalTime(const RunRecord& run, int64_t unix_ms) {
  return unix_ms > 0 ? static_cast<double>(unix_ms) / 1000.0 - run.start_unix : -1;
}

// When the failure happened on the launcher's timeline: the drill that caused it, else the
// dead instance's last heartbeat.
double FailedAt(const RunRecord& run, const v1::FailureEvent& e) {
  for (const DrillRecord& d : run.drills) {
    if (d.pid == e.pid()) return d.t;
  }
  return LocalTime(run, e.last_heartbeat_unix_ms());
}

struct FailureFigures {
  double failed_at, detected_at, recovered_at, before, during, ratio;
};

FailureFigures Figures(const RunRecord& run, const v1::FailureEvent& e) {
  FailureFigures f;
  f.failed_at = FailedAt(run, e);
  f.detected_at = LocalTime(run, e.detected_unix_ms());
  f.recovered_at = LocalTime(run, e.recovered_unix_ms());
  // The 30 s before the failure, or as much of them as the job trained.
  f.before = RateBefore(run.timeline, f.failed_at, 30);
  // While training ran: a recovery that outlasts the job does not count the time after it.
  f.during = f.recovered_at > f.failed_at
                 ? MeanRateWhileTraining(run.timeline, f.failed_at, f.recovered_at)
                 : -1;
  f.ratio = f.before > 0 && f.during >= 0 ? f.during / f.before : -1;
  return f;
}

Json DrillsJson(const RunRecord& run) {
  Json out = Json::array();
  for (const DrillRecord& d : run.drills) {
    out.push_back({{"at_step", d.fault.at_step},
                   {"action", ToString(d.fault.action)},
                   {"target", d.fault.target},
                   {"duration_s", Rounded(d.fault.duration_s, 3)},
                   {"pid", d.pid},
                   {"time_s", Rounded(d.t, 3)}});
  }
  return out;
}

Json CoordinatorFailuresJson(const RunRecord& run) {
  Json out = Json::array();
  for (const RunRecord::CoordinatorFailure& c : run.coordinator_failures) {
    out.push_back({{"pid", c.pid},
                   {"time_s", Rounded(c.t, 3)},
                   {"downtime_s", Rounded(c.downtime_s, 3)},
                   {"step_at_death", c.step_at_death},
                   {"step_restored", c.step_restored},
                   {"step_at_restart", c.step_at_restart}});
  }
  return out;
}

Json FailuresJson(const RunRecord& run, const v1::StatusResponse& st) {
  Json out = Json::array();
  for (const v1::FailureEvent& e : st.failures()) {
    const FailureFigures f = Figures(run, e);
    const char* state = e.state() == v1::FAILURE_RECOVERED   ? "recovered"
                        : e.state() == v1::FAILURE_REPLACING ? "replacing"
                                                             : "detected";
    out.push_back({{"node", NodeLabel(e.role(), e.id())},
                   {"pid", e.pid()},
                   {"reason", e.reason()},
                   {"state", state},
                   {"replacement", e.replacement()},
                   {"replacement_pid", e.replacement_pid()},
                   {"by_spare", e.by_spare()},
                   {"failed_at_s", Num(f.failed_at)},
                   {"detected_at_s", Num(f.detected_at)},
                   {"recovered_at_s", Num(f.recovered_at)},
                   {"detection_s", Num(e.detection_s())},
                   {"rebuild_s", Num(e.rebuild_s())},
                   {"recovery_s", Num(e.recovery_s())},
                   {"rows_rebuilt", e.rows_rebuilt()},
                   {"on_demand_rebuilds", e.on_demand_rebuilds()},
                   {"rebuild_mb_s", e.rebuild_mb_s() > 0 ? Num(e.rebuild_mb_s()) : Json()},
                   {"samples_per_s_before", Num(f.before, 1)},
                   {"samples_per_s_during", Num(f.during, 1)},
                   {"throughput_during_vs_before", Num(f.ratio, 4)}});
  }
  return out;
}

// The status as protobuf maps it to JSON (lowerCamelCase names, defaults included).
Json StatusJson(const v1::StatusResponse& st) {
  google::protobuf::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  std::string text;
  if (!google::protobuf::util::MessageToJsonString(st, &text, options).ok()) return nullptr;
  Json parsed = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  return parsed.is_discarded() ? Json() : parsed;
}

double Rate(const v1::StatusResponse& st) {
  return st.elapsed_s() > 0 ? st.samples() / st.elapsed_s() : 0;
}

}  // namespace

JobFacts FactsOf(const JobSpec& spec) {
  JobFacts f;
  f.name = spec.job.name;
  f.mode = ToString(spec.fault_tolerance.mode);
  f.servers = spec.cluster.servers;
  f.workers = spec.cluster.workers;
  f.steps_asked = spec.job.steps;
  f.samples_asked = spec.job.steps * spec.data.batch_size * spec.cluster.workers;
  f.max_bad_lines = spec.data.max_bad_lines;
  return f;
}

// The online scrub's counts over the job: every server in the status (a dead one waiting for
// its replacement too) and the instances that were replaced (the coordinator keeps their last
// counts, which the slots' new holders no longer show).
v1::ServerStats OnlineScrubTotals(const v1::StatusResponse& st) {
  v1::ServerStats sum;
  for (const auto& n : st.nodes()) {
    if (n.role() == v1::ROLE_SERVER) AddScrubCounts(n.server(), &sum);
  }
  AddScrubCounts(st.replaced_servers_scrub(), &sum);
  return sum;
}

Json OnlineScrubJson(const v1::ServerStats& totals) {
  Json out = Json::object();
  for (const ScrubCounter& c : kScrubCounters) out[c.name] = (totals.*c.get)();
  return out;
}

DataNotes CollectDataNotes(const v1::StatusResponse& st) {
  constexpr size_t kMaxExamples = 5;
  DataNotes notes;
  for (const auto& n : st.nodes()) {
    if (n.role() != v1::ROLE_WORKER || n.id() < 0) continue;
    notes.bad_lines += n.worker().bad_lines();
    for (const std::string& e : n.worker().bad_line_examples()) {
      if (notes.bad_line_examples.size() < kMaxExamples) notes.bad_line_examples.push_back(e);
    }
    if (n.worker().data_exhausted()) notes.exhausted.push_back(n.id());
  }
  return notes;
}

std::string ReportJson(const JobFacts& job, const RunRecord& run, const v1::StatusResponse& last) {
  const DataNotes notes = CollectDataNotes(last);
  const v1::ScrubReport& scrub = last.scrub();
  const v1::ServerStats online = OnlineScrubTotals(last);
  Json report = {
      {"job", job.name},
      {"ok", run.ok},
      {"error", run.failure},
      {"data_lost", last.data_lost()},
      {"mode", job.mode},
      {"servers", job.servers},
      {"workers", job.workers},
      {"steps", last.step()},
      {"samples", last.samples()},
      {"steps_asked", job.steps_asked},
      {"samples_asked", job.samples_asked},
      {"data_epoch", last.data_epoch()},
      {"data_epochs", last.data_epochs()},
      {"abft_detections", last.abft_detections()},
      {"data_exhausted", !notes.exhausted.empty()},
      {"bad_lines", notes.bad_lines},
      {"bad_line_examples", notes.bad_line_examples},
      {"train_seconds", Rounded(last.elapsed_s(), 3)},
      {"wall_seconds", Rounded(run.wall_s, 3)},
      {"samples_per_s", Rounded(Rate(last), 1)},
      {"eval_auc", Rounded(last.eval_auc(), 6)},
      {"eval_logloss", Rounded(last.eval_logloss(), 6)},
      {"scrub",
       {{"done", scrub.done()},
        {"clean", scrub.clean()},
        {"stripes_checked", scrub.stripes_checked()},
        {"parity_mismatches", scrub.parity_mismatches()},
        {"dense_checked", scrub.dense_checked()},
        {"dense_mismatches", scrub.dense_mismatches()}}},
      {"online_scrub", OnlineScrubJson(online)},
      {"drills", DrillsJson(run)},
      {"failures", FailuresJson(run, last)},
      {"coordinator_failures", CoordinatorFailuresJson(run)},
      {"final_status", run.have_status ? StatusJson(last) : Json()},
  };
  return Layout(report);
}

std::string FailureSummary(const RunRecord& run, const v1::StatusResponse& last) {
  std::string out;
  for (const RunRecord::CoordinatorFailure& c : run.coordinator_failures) {
    absl::StrAppend(&out, absl::StrFormat("ecps: the coordinator failed at %.1f s (step %d): ",
                                          c.t, c.step_at_death));
    absl::StrAppend(&out, c.downtime_s >= 0
                              ? absl::StrFormat("a new one took the job over in %.1f s (step %d)\n",
                                                c.downtime_s, c.step_at_restart)
                              : std::string("no new one answered\n"));
  }
  for (const v1::FailureEvent& e : last.failures()) {
    const FailureFigures f = Figures(run, e);
    std::string line = absl::StrFormat("ecps: %s failed at %.1f s: detected in %.1f s",
                                       NodeLabel(e.role(), e.id()), f.failed_at, e.detection_s());
    if (e.state() == v1::FAILURE_RECOVERED) {
      absl::StrAppend(&line, absl::StrFormat(", %s in %.1f s",
                                             e.role() == v1::ROLE_SERVER ? "rebuilt" : "resumed",
                                             e.rebuild_s()));
      if (e.rows_rebuilt() > 0) {
        absl::StrAppend(&line, absl::StrFormat(" (%d rows, %d on demand", e.rows_rebuilt(),
                                               e.on_demand_rebuilds()));
        if (e.rebuild_mb_s() > 0) {
          absl::StrAppend(&line, absl::StrFormat(", %.1f MB/s", e.rebuild_mb_s()));
        }
        absl::StrAppend(&line, ")");
      }
    } else {
      absl::StrAppend(&line, "; not recovered");
    }
    if (f.ratio >= 0) {
      absl::StrAppend(&line, absl::StrFormat("; throughput during recovery %.2fx of before "
                                             "(%.0f vs %.0f samples/s)",
                                             f.ratio, f.during, f.before));
    }
    absl::StrAppend(&out, line, "\n");
  }
  return out;
}

std::string BadLinesSummary(const JobFacts& job, const DataNotes& notes) {
  if (notes.bad_lines == 0) return "";
  std::string out =
      absl::StrFormat("ecps: skipped %d malformed input lines (data.max_bad_lines %d); the first:\n",
                      notes.bad_lines, job.max_bad_lines);
  for (const std::string& e : notes.bad_line_examples) absl::StrAppend(&out, "  ", e, "\n");
  return out;
}

std::string FinishedSummary(const JobFacts& job, const v1::StatusResponse& last,
                            const std::string& out_dir) {
  const DataNotes notes = CollectDataNotes(last);
  std::string ran_out;
  if (!notes.exhausted.empty()) {
    // Fewer steps than asked is easy to miss in a line that says "finished".
    ran_out = absl::StrFormat("; data ran out at step %d of %d (%d of the %d samples asked)",
                              last.step(), job.steps_asked, last.samples(), job.samples_asked);
  }
  std::string out = absl::StrFormat(
      "ecps: finished %d steps, %d samples in %.1f s (%.0f samples/s); AUC %.4f, logloss %.4f%s\n",
      last.step(), last.samples(), last.elapsed_s(), Rate(last), last.eval_auc(),
      last.eval_logloss(), ran_out);
  absl::StrAppend(&out, BadLinesSummary(job, notes));
  if (last.scrub().done()) {
    absl::StrAppend(&out, absl::StrFormat(
                              "ecps: scrub %s: %d stripes and %d dense replicas checked in %.2f s\n",
                              last.scrub().clean() ? "clean" : "NOT CLEAN",
                              last.scrub().stripes_checked(), last.scrub().dense_checked(),
                              last.scrub().seconds()));
  }
  const v1::ServerStats online = OnlineScrubTotals(last);
  if (online.scrub_mismatches_confirmed() > 0) {
    // Only when it found something: a clean online scrub is the normal case.
    absl::StrAppend(&out, absl::StrFormat(
                              "ecps: online scrub found %d corrupt stripes or dense replicas: "
                              "%d repaired, %d not locatable (parity re-derived; r = 1)\n",
                              online.scrub_mismatches_confirmed(), online.scrub_repaired(),
                              online.scrub_unlocated()));
  }
  if (last.checkpoint().done()) {
    absl::StrAppend(&out, absl::StrFormat("ecps: %scheckpoint of step %d saved to %s\n",
                                          last.checkpoint().final() ? "final " : "",
                                          last.checkpoint().step(), last.checkpoint().dir()));
  }
  absl::StrAppend(&out, absl::StrFormat("ecps: report %s/report.json, metrics %s/metrics.csv\n",
                                        out_dir, out_dir));
  return out;
}

}  // namespace ecps
