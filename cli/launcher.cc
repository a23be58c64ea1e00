#include "cli/launcher.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cli/job_dir.h"
#include "cli/launch_backend.h"
#include "cli/process_group.h"
#include "cli/python_script.h"
#include "cli/timeline.h"
#include "coordinator/coordinator_main.h"
#include "ps/server_main.h"
#include "google/protobuf/util/json_util.h"
#include "proto/ecps.pb.h"
#include "runtime/checkpoint_job.h"
#include "runtime/coordinator_client.h"
#include "runtime/net.h"
#include "runtime/spec.h"

namespace ecps {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::atomic<int> g_signal{0};
void OnSignal(int sig) { g_signal.store(sig); }

std::string RandomToken() {
  std::random_device rd;
  std::string token;
  const char* hex = "0123456789abcdef";
  for (int i = 0; i < 32; ++i) token += hex[rd() % 16];
  return token;
}

const char* PhaseName(v1::JobPhase phase) {
  switch (phase) {
    case v1::JOB_STARTING: return "starting";
    case v1::JOB_RUNNING: return "running";
    case v1::JOB_RECOVERING: return "recovering";
    case v1::JOB_FINISHED: return "finished";
    case v1::JOB_FAILED: return "failed";
    default: return "unknown";
  }
}

std::string FormatDuration(double s) {
  if (!(s >= 0) || std::isinf(s)) return "--";
  int total = static_cast<int>(s + 0.5);
  if (total >= 3600) return absl::StrFormat("%dh%02dm", total / 3600, total / 60 % 60);
  if (total >= 60) return absl::StrFormat("%dm%02ds", total / 60, total % 60);
  return absl::StrFormat("%ds", total);
}

bool HasParity(const std::string& mode) { return mode == "erasure_code" || mode == "replication"; }

std::string NodeLabel(v1::Role role, int id) {
  return absl::StrCat(role == v1::ROLE_SERVER ? "server " : "worker ", id);
}

// "| recovering server 2: 45% rebuilt, 120 on demand | worker 1 dead: restarting".
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

std::string ProgressLine(const v1::StatusResponse& st) {
  double pct = st.total_steps() > 0 ? 100.0 * st.step() / st.total_steps() : 0;
  std::string auc = st.eval_auc() >= 0 ? absl::StrFormat("%.4f", st.eval_auc()) : "--";
  return absl::StrFormat("[%s] step %d/%d (%.0f%%) | %.0f samples/s | loss %.4f | AUC %s | "
                         "epoch %d | elapsed %s | ETA %s",
                         PhaseName(st.phase()), st.step(), st.total_steps(), pct,
                         st.samples_per_s(), st.loss(), auc, st.epoch(),
                         FormatDuration(st.elapsed_s()), FormatDuration(st.eta_s())) +
         RecoveryNote(st);
}

std::string JsonEscape(const std::string& in) {
  std::string out;
  for (char c : in) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    if (static_cast<unsigned char>(c) < 0x20) {  // JSON strings hold no raw control bytes
      absl::StrAppendFormat(&out, "\\u%04x", static_cast<unsigned char>(c));
      continue;
    }
    out += c;
  }
  return out;
}

// What the workers' readers saw, from their last progress reports (a finished worker's
// report stays in the coordinator's map).
struct DataNotes {
  int64_t bad_lines = 0;
  std::vector<std::string> bad_line_examples;  // the first few over the workers, in id order
  std::vector<int> exhausted;                  // workers whose partition ran out
};

DataNotes CollectDataNotes(const v1::StatusResponse& st) {
  constexpr int kMaxExamples = 5;
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

// The live progress line: rewritten in place on a terminal, one line every 5 s otherwise.
class ProgressPrinter {
 public:
  explicit ProgressPrinter(bool enabled) : enabled_(enabled), tty_(isatty(STDOUT_FILENO)) {}
  void Update(const std::string& line) {
    if (!enabled_) return;
    if (tty_) {
      std::printf("\r\033[K%s", line.c_str());
      std::fflush(stdout);
      dirty_ = true;
    } else if (Clock::now() - last_ >= std::chrono::seconds(5)) {
      std::printf("%s\n", line.c_str());
      std::fflush(stdout);
      last_ = Clock::now();
    }
  }
  // Prints a full line (an event) without losing the progress line.
  void Event(const std::string& line) {
    Finish();
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  }
  void Finish() {
    if (dirty_) std::printf("\n");
    dirty_ = false;
  }

 private:
  bool enabled_;
  bool tty_;
  bool dirty_ = false;
  Clock::time_point last_{};
};

class Job {
 public:
  Job(JobSpec spec, const RunFlags& flags, std::unique_ptr<LaunchBackend> backend)
      : spec_(std::move(spec)), flags_(flags),
        printer_(flags.progress && spec_.monitoring.progress), children_(std::move(backend)) {}

  int Run() {
    out_ = flags_.output_dir.empty() ? spec_.job.output_dir : flags_.output_dir;
    std::error_code ec;
    fs::create_directories(fs::path(out_) / "logs", ec);
    if (ec) return Fail(2, "cannot create output folder " + out_ + ": " + ec.message());
    token_ = spec_.job.token.empty() ? RandomToken() : spec_.job.token;
    // The operator commands find the token here (--job DIR); nowhere else holds it.
    if (absl::Status s = WriteJobToken(out_, token_); !s.ok()) return Fail(2, s.ToString());
    // Checkpoints follow --output when the spec left checkpoint.dir at its default.
    CheckpointSection& ckpt = spec_.fault_tolerance.checkpoint;
    if (!flags_.output_dir.empty() && ckpt.dir == spec_.job.output_dir + "/checkpoints") {
      ckpt.dir = (fs::path(out_) / "checkpoints").string();
    }
    ckpt.dir = fs::absolute(ckpt.dir, ec).string();
    if (!spec_.job.resume_from.empty()) {
      // Refuse a checkpoint that is missing, truncated, corrupt or of another model before
      // anything starts: every file's size and checksum is checked here.
      auto manifest = OpenResumeCheckpoint(spec_, /*verify=*/true);
      if (!manifest.ok()) {
        return Fail(2, "cannot resume from " + spec_.job.resume_from + ": " +
                           std::string(manifest.status().message()));
      }
      spec_.job.resume_from = fs::absolute(manifest->dir, ec).string();
      std::printf("ecps: resuming from %s (step %lld, %zu reader positions)\n",
                  spec_.job.resume_from.c_str(), static_cast<long long>(manifest->layout.step),
                  manifest->reader_positions.size());
    }
    std::string spec_file = (fs::path(out_) / "spec.resolved.yaml").string();
    {
      std::ofstream f(spec_file);
      f << SpecToYaml(spec_);
      if (!f) return Fail(2, "cannot write " + spec_file);
    }
    std::printf("ecps: job '%s': %d servers (+%d spares), %d workers, mode %s; output in %s%s\n",
                spec_.job.name.c_str(), spec_.cluster.servers, spec_.cluster.spares,
                spec_.cluster.workers, spec_.fault_tolerance.mode.c_str(), out_.c_str(),
                children_->name() == std::string("local") ? "" : "; roles as Slurm job steps");
    std::fflush(stdout);

    const std::string self = SelfPath();
    self_ = self;
    spec_file_ = spec_file;
    const std::vector<std::string> env = {"ECPS_TOKEN=" + token_};
    bind_host_ = spec_.cluster.host.empty() ? children_->DefaultBindHost() : spec_.cluster.host;
    // The coordinator writes the address it advertises (host:port) where the operator
    // commands look for it (--job DIR); under Slurm it may be on another node, so this is
    // also how the launcher learns it.
    const std::string port_file = (fs::path(out_) / "coordinator.port").string();
    const std::string address_file = (fs::path(out_) / "coordinator.address").string();
    fs::remove(port_file, ec);
    fs::remove(address_file, ec);
    std::vector<std::string> coordinator_argv = {
        self, "coordinator", "--spec", spec_file, "--port-file", port_file, "--address-file",
        address_file, "--host", bind_host_, "--port",
        std::to_string(spec_.cluster.coordinator_port)};
    if (!spec_.cluster.advertise.empty()) {
      coordinator_argv.insert(coordinator_argv.end(), {"--advertise", spec_.cluster.advertise});
    }
    auto coord = children_->Spawn("coordinator", coordinator_argv, env, Log("coordinator"));
    if (!coord.ok()) return Fail(2, coord.status().ToString());
    auto address = WaitForAddress(address_file);
    if (!address.ok()) return Fail(2, address.status().ToString());
    address_ = *address;
    std::printf("ecps: coordinator at %s (ecps status --job %s)\n", address_.c_str(),
                out_.c_str());
    auto spawn_server = [&](int id, const std::string& name) -> absl::Status {
      return children_->Spawn(name, ServerArgv(id), env, Log(name)).status();
    };
    for (int i = 0; i < spec_.cluster.servers; ++i) {
      if (absl::Status s = spawn_server(i, "server-" + std::to_string(i)); !s.ok()) {
        return Fail(2, s.ToString());
      }
    }
    if (spec_.cluster.spares > 0) {
      // A spare registers without an id and would take any slot still free: start spares
      // only once every server holds its own.
      if (absl::Status s = WaitForServersRegistered(); !s.ok()) return Fail(2, s.ToString());
      for (int i = 0; i < spec_.cluster.spares; ++i) {
        if (absl::Status s = spawn_server(-1, "spare-" + std::to_string(i)); !s.ok()) {
          return Fail(2, s.ToString());
        }
      }
    }
    for (int w = 0; w < spec_.cluster.workers; ++w) {
      std::string name = "worker-" + std::to_string(w);
      auto s = children_->Spawn(name, WorkerArgv(w), env, Log(name));
      if (!s.ok()) return Fail(2, s.status().ToString());
    }
    return Monitor();
  }

 private:
  // A server's command line; id -1 is a spare. It binds what the coordinator binds.
  std::vector<std::string> ServerArgv(int id) const {
    std::vector<std::string> argv = {self_, "server", "--spec", spec_file_, "--coordinator",
                                     address_, "--id", std::to_string(id), "--host", bind_host_};
    if (!spec_.cluster.advertise.empty()) {
      argv.insert(argv.end(), {"--advertise", spec_.cluster.advertise});
    }
    return argv;
  }
  std::vector<std::string> WorkerArgv(int id) const {
    return {self_, "worker", "--spec", spec_file_, "--coordinator", address_, "--id",
            std::to_string(id)};
  }

  std::string Log(const std::string& name) const {
    return (fs::path(out_) / "logs" / (name + ".log")).string();
  }

  int Fail(int code, const std::string& message) {
    printer_.Finish();
    std::fprintf(stderr, "ecps: %s\n", message.c_str());
    children_->StopAll(3000);
    return code;
  }

  absl::Status WaitForServersRegistered() {
    CoordinatorClient client(address_, token_, "launcher", spec_.cluster.rpc_timeout_ms);
    auto deadline = Clock::now() + std::chrono::seconds(120);
    while (Clock::now() < deadline) {
      if (g_signal.load() != 0) return absl::CancelledError("interrupted");
      auto status = client.Status();
      if (status.ok()) {
        int registered = 0;
        for (const auto& n : status->nodes()) {
          registered += n.role() == v1::ROLE_SERVER && n.id() >= 0 && n.state() != v1::NODE_STANDBY;
        }
        if (registered >= spec_.cluster.servers) return absl::OkStatus();
      }
      for (int i : children_->Poll()) {
        const Child& c = children_->child(i);
        return absl::InternalError(c.name + " exited (" + DescribeExit(c.exit_status) +
                                   ") while starting; its log " + c.log_path + " ends with:\n" +
                                   TailFile(c.log_path, 10));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return absl::DeadlineExceededError("the servers did not register within 120 s");
  }

  absl::StatusOr<std::string> WaitForAddress(const std::string& address_file) {
    // A Slurm step may first wait for a node to start it.
    const int wait_s = children_->name() == std::string("local") ? 30 : 120;
    auto deadline = Clock::now() + std::chrono::seconds(wait_s);
    while (Clock::now() < deadline) {
      if (g_signal.load() != 0) return absl::CancelledError("interrupted");
      std::ifstream f(address_file);
      std::string address;
      if (std::getline(f, address) && CheckDialAddress(address).ok()) return address;
      for (int i : children_->Poll()) {
        return absl::InternalError("the coordinator exited (" +
                                   DescribeExit(children_->child(i).exit_status) +
                                   ") before listening; its log " + children_->child(i).log_path +
                                   " ends with:\n" + TailFile(children_->child(i).log_path, 10));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return absl::DeadlineExceededError(
        absl::StrFormat("the coordinator did not start listening within %d s", wait_s));
  }

  int Monitor() {
    CoordinatorClient client(address_, token_, "launcher", spec_.cluster.rpc_timeout_ms);
    std::ofstream csv((fs::path(out_) / "metrics.csv").string());
    csv << "time_s,phase,epoch,step,samples,samples_per_s,loss,eval_auc,eval_logloss,"
           "servers_active,event\n";
    const auto start = Clock::now();
    start_unix_ = std::chrono::duration<double>(
                      std::chrono::system_clock::now().time_since_epoch()).count();
    drill_done_.assign(spec_.faults.size(), false);
    auto last_ok = start;
    v1::StatusResponse last;
    bool have_status = false;
    std::string failure;
    while (true) {
      if (g_signal.load() != 0) {
        printer_.Event("ecps: interrupted; stopping every process");
        children_->StopAll(3000);
        return 130;
      }
      std::string events;
      for (int i : children_->Poll()) {
        const Child& c = children_->child(i);
        std::string what = c.name + " exited (" + DescribeExit(c.exit_status) + ")";
        events += (events.empty() ? "" : "; ") + what;
        bool clean = WIFEXITED(c.exit_status) && WEXITSTATUS(c.exit_status) == 0;
        if (drill_victims_.count(c.pid) > 0) {
          printer_.Event("ecps: " + what + " [drill]");
        } else if (c.name == "coordinator" || !clean) {
          printer_.Event("ecps: " + what + "; log " + c.log_path + ":\n" + TailFile(c.log_path, 8));
        }
        if (c.name == "coordinator" && !(have_status && last.phase() == v1::JOB_FINISHED)) {
          failure = "the coordinator exited before the job finished";
        }
        if (WIFEXITED(c.exit_status) && WEXITSTATUS(c.exit_status) == kExitCannotAllocate &&
            failure.empty()) {
          // Another process of the same spec would fail the same way: stop here.
          failure = c.name + " cannot allocate its tables (" + c.log_path + "):\n" +
                    TailFile(c.log_path, 3);
        }
      }
      ResumeStopped(&events);
      if (!failure.empty()) break;
      auto status = client.Status();
      double t = std::chrono::duration<double>(Clock::now() - start).count();
      if (status.ok()) {
        last = *status;
        have_status = true;
        last_ok = Clock::now();
        timeline_.push_back(TimelinePoint{t, static_cast<double>(last.samples())});
        FailureEvents(last, &events);
        if (last.phase() != v1::JOB_FINISHED && last.phase() != v1::JOB_FAILED) {
          RunDrills(&client, last, t, &events);
          StartReplacements(last, &events, &failure);
        }
        int active = 0;
        for (const auto& n : last.nodes()) {
          active += n.role() == v1::ROLE_SERVER && n.state() == v1::NODE_ACTIVE;
        }
        std::replace(events.begin(), events.end(), ',', ' ');
        csv << absl::StrFormat("%.3f,%s,%d,%d,%d,%.1f,%.6f,%.6f,%.6f,%d,%s\n", t,
                               PhaseName(last.phase()), last.epoch(), last.step(), last.samples(),
                               last.samples_per_s(), last.loss(), last.eval_auc(),
                               last.eval_logloss(), active, events);
        csv.flush();
        printer_.Update(ProgressLine(last));
        if (last.phase() == v1::JOB_FINISHED || last.phase() == v1::JOB_FAILED) break;
      } else if (Clock::now() - last_ok > std::chrono::seconds(30)) {
        failure = "lost contact with the coordinator: " + status.status().ToString();
      }
      if (!failure.empty()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(spec_.monitoring.metrics_interval_ms));
    }
    printer_.Finish();
    double wall = std::chrono::duration<double>(Clock::now() - start).count();
    bool ok = failure.empty() && have_status && last.phase() == v1::JOB_FINISHED;
    if (failure.empty() && have_status && last.phase() == v1::JOB_FAILED) failure = last.error();
    WriteReport(last, have_status, wall, ok, failure);
    children_->StopAll(5000);
    PrintFailures(last);
    if (last.failures_size() > 0 || !drills_.empty()) PlotTimeline();
    const DataNotes notes = CollectDataNotes(last);
    if (ok) {
      double rate = last.elapsed_s() > 0 ? last.samples() / last.elapsed_s() : 0;
      std::string ran_out;
      if (!notes.exhausted.empty()) {
        // Fewer steps than asked is easy to miss in a line that says "finished".
        ran_out = absl::StrFormat("; data ran out at step %d of %d (%d of the %d samples asked)",
                                  last.step(), spec_.job.steps, last.samples(), SamplesAsked());
      }
      std::printf(
          "ecps: finished %lld steps, %lld samples in %.1f s (%.0f samples/s); "
          "AUC %.4f, logloss %.4f%s\n",
          static_cast<long long>(last.step()), static_cast<long long>(last.samples()),
          last.elapsed_s(), rate, last.eval_auc(), last.eval_logloss(), ran_out.c_str());
      PrintBadLines(notes);
      if (last.scrub().done()) {
        std::printf("ecps: scrub %s: %lld stripes and %lld dense replicas checked in %.2f s\n",
                    last.scrub().clean() ? "clean" : "NOT CLEAN",
                    static_cast<long long>(last.scrub().stripes_checked()),
                    static_cast<long long>(last.scrub().dense_checked()), last.scrub().seconds());
      }
      if (last.checkpoint().done()) {
        std::printf("ecps: %scheckpoint of step %lld saved to %s\n",
                    last.checkpoint().final() ? "final " : "",
                    static_cast<long long>(last.checkpoint().step()),
                    last.checkpoint().dir().c_str());
      }
      std::printf("ecps: report %s/report.json, metrics %s/metrics.csv\n", out_.c_str(),
                  out_.c_str());
      return 0;
    }
    PrintBadLines(notes);
    std::fprintf(stderr, "ecps: job failed: %s (logs in %s/logs)\n",
                 failure.empty() ? "unknown error" : failure.c_str(), out_.c_str());
    return have_status && last.data_lost() ? kExitDataLost : 1;
  }

  // What the job asked for: job.steps full batches from every worker.
  int64_t SamplesAsked() const {
    return spec_.job.steps * spec_.data.batch_size * spec_.cluster.workers;
  }

  // The malformed lines the workers skipped, which only their logs named before.
  void PrintBadLines(const DataNotes& notes) {
    if (notes.bad_lines == 0) return;
    std::printf("ecps: skipped %lld malformed input lines (data.max_bad_lines %lld); the first:\n",
                static_cast<long long>(notes.bad_lines),
                static_cast<long long>(spec_.data.max_bad_lines));
    for (const std::string& e : notes.bad_line_examples) std::printf("  %s\n", e.c_str());
    std::fflush(stdout);
  }

  void WriteReport(const v1::StatusResponse& last, bool have_status, double wall, bool ok,
                   const std::string& failure) {
    std::string status_json = "null";
    if (have_status) {
      google::protobuf::util::JsonPrintOptions options;
      options.always_print_primitive_fields = true;
      std::string s;
      if (google::protobuf::util::MessageToJsonString(last, &s, options).ok()) status_json = s;
    }
    double rate = last.elapsed_s() > 0 ? last.samples() / last.elapsed_s() : 0;
    const DataNotes notes = CollectDataNotes(last);
    std::string examples = "[";
    for (size_t i = 0; i < notes.bad_line_examples.size(); ++i) {
      absl::StrAppend(&examples, i ? ",\n    \"" : "\n    \"",
                      JsonEscape(notes.bad_line_examples[i]), "\"");
    }
    examples += notes.bad_line_examples.empty() ? "]" : "\n  ]";
    std::ofstream f((fs::path(out_) / "report.json").string());
    f << absl::StrFormat(
        "{\n  \"job\": \"%s\",\n  \"ok\": %s,\n  \"error\": \"%s\",\n  \"data_lost\": %s,\n"
        "  \"mode\": \"%s\",\n"
        "  \"servers\": %d,\n  \"workers\": %d,\n  \"steps\": %d,\n  \"samples\": %d,\n"
        "  \"steps_asked\": %d,\n  \"samples_asked\": %d,\n  \"data_exhausted\": %s,\n"
        "  \"bad_lines\": %d,\n  \"bad_line_examples\": %s,\n"
        "  \"train_seconds\": %.3f,\n  \"wall_seconds\": %.3f,\n  \"samples_per_s\": %.1f,\n"
        "  \"eval_auc\": %.6f,\n  \"eval_logloss\": %.6f,\n"
        "  \"scrub\": {\"done\": %s, \"clean\": %s, \"stripes_checked\": %d, "
        "\"parity_mismatches\": %d, \"dense_checked\": %d, \"dense_mismatches\": %d},\n"
        "  \"drills\": %s,\n  \"failures\": %s,\n"
        "  \"final_status\": %s\n}\n",
        spec_.job.name, ok ? "true" : "false", JsonEscape(failure),
        last.data_lost() ? "true" : "false", spec_.fault_tolerance.mode,
        spec_.cluster.servers, spec_.cluster.workers, last.step(), last.samples(), spec_.job.steps,
        SamplesAsked(), notes.exhausted.empty() ? "false" : "true", notes.bad_lines, examples,
        last.elapsed_s(), wall, rate, last.eval_auc(), last.eval_logloss(),
        last.scrub().done() ? "true" : "false", last.scrub().clean() ? "true" : "false",
        last.scrub().stripes_checked(), last.scrub().parity_mismatches(),
        last.scrub().dense_checked(), last.scrub().dense_mismatches(), DrillsJson(),
        FailuresJson(last), status_json);
  }

  // The launcher-timeline time (s since monitoring started) of a coordinator Unix time.
  double LocalTime(int64_t unix_ms) const {
    return unix_ms > 0 ? static_cast<double>(unix_ms) / 1000.0 - start_unix_ : -1;
  }

  // The index of the running child with `pid`, or -1 (a drill only signals our own children).
  int ChildWithPid(int64_t pid) const {
    for (int i = 0; i < children_->size(); ++i) {
      if (children_->child(i).pid == pid && !children_->child(i).exited) return i;
    }
    return -1;
  }

  void AddEvent(const std::string& line, std::string* events) {
    printer_.Event("ecps: " + line);
    *events += (events->empty() ? "" : "; ") + line;
  }

  // Fault drills from the spec: when the job's step reaches at_step, signal the process that
  // holds the logical id now (it may be a promoted spare or a replacement).
  void RunDrills(CoordinatorClient* client, const v1::StatusResponse& st, double t,
                 std::string* events) {
    for (size_t i = 0; i < spec_.faults.size(); ++i) {
      const FaultSpec& f = spec_.faults[i];
      if (drill_done_[i] || st.step() < f.at_step) continue;
      const v1::Role role = f.action == "kill_worker" ? v1::ROLE_WORKER : v1::ROLE_SERVER;
      int index = -1;
      int64_t pid = 0;
      for (const auto& n : st.nodes()) {
        if (n.role() != role || n.id() != f.target || n.state() == v1::NODE_DEAD) continue;
        if (n.state() == v1::NODE_FINISHED) continue;
        index = ChildWithPid(n.pid());
        pid = n.pid();
      }
      // Nobody holds it right now: try again at the next poll.
      if (pid == 0 || (children_->SignalsRoles() && index < 0)) continue;
      drill_done_[i] = true;
      const std::string label = NodeLabel(role, f.target);
      drill_victims_.insert(static_cast<pid_t>(pid));
      drills_.push_back(DrillRecord{f, t, pid});
      if (!children_->SignalsRoles()) {
        // The role may be on another node: the coordinator has it kill itself (SIGKILL) at
        // its next heartbeat, as `ecps kill` does. (stop_server was refused at the start.)
        absl::Status killed = client->Kill(role, f.target);
        AddEvent(absl::StrFormat("drill at step %d: kill %s (pid %d) through the coordinator%s",
                                 st.step(), label, pid,
                                 killed.ok() ? "" : ": " + killed.ToString()),
                 events);
      } else if (f.action == "stop_server") {
        children_->Signal(index, SIGSTOP);
        stopped_.push_back(Stopped{index, Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(
                                                             f.duration_s * 1000)),
                                   label, pid});
        AddEvent(absl::StrFormat("drill at step %d: SIGSTOP %s (pid %d) for %.1f s", st.step(),
                                 label, pid, f.duration_s),
                 events);
      } else {
        children_->Signal(index, SIGKILL);
        AddEvent(absl::StrFormat("drill at step %d: SIGKILL %s (pid %d)", st.step(), label, pid),
                 events);
      }
    }
  }

  // SIGCONT for stopped drill victims whose time is up.
  void ResumeStopped(std::string* events) {
    for (auto it = stopped_.begin(); it != stopped_.end();) {
      if (Clock::now() < it->until) {
        ++it;
        continue;
      }
      children_->Signal(it->index, SIGCONT);
      AddEvent(absl::StrFormat("drill: SIGCONT %s (pid %d); the old instance must find itself "
                               "fenced", it->label, it->pid),
               events);
      it = stopped_.erase(it);
    }
  }

  // A dead server slot with no standby spare left, or a dead worker: start a new process with
  // that id (it registers as the replacement). A slot whose replacements keep dying before
  // it recovers (kMaxRestarts in a row) fails the job: the same spec on the same machine
  // would only fail again.
  void StartReplacements(const v1::StatusResponse& st, std::string* events,
                         std::string* failure) {
    constexpr int kMaxRestarts = 3;
    bool standby = false;
    for (const auto& n : st.nodes()) standby |= n.state() == v1::NODE_STANDBY;
    for (const auto& n : st.nodes()) {
      if (n.id() >= 0 && (n.state() == v1::NODE_ACTIVE || n.state() == v1::NODE_FINISHED)) {
        restarts_.erase(std::make_pair(static_cast<int>(n.role()), n.id()));  // recovered
      }
    }
    for (const auto& n : st.nodes()) {
      if (n.id() < 0 || n.state() != v1::NODE_DEAD) continue;
      if (n.role() == v1::ROLE_SERVER &&
          ((!HasParity(spec_.fault_tolerance.mode) && spec_.fault_tolerance.mode != "checkpoint") ||
           standby)) {
        continue;
      }
      const auto key = std::make_pair(static_cast<int>(n.role()), n.id());
      auto running = replacements_.find(key);
      if (running != replacements_.end() && !children_->child(running->second).exited) continue;
      int& count = restarts_[key];
      if (count >= kMaxRestarts) {
        const Child& last = children_->child(running->second);
        *failure = absl::StrFormat(
            "%s: %d replacements in a row died before it recovered (the last %s); giving up. "
            "Its log %s ends with:\n%s",
            NodeLabel(n.role(), n.id()), count, DescribeExit(last.exit_status), last.log_path,
            TailFile(last.log_path, 8));
        return;
      }
      ++count;
      const bool server = n.role() == v1::ROLE_SERVER;
      const std::string name = absl::StrCat(server ? "server-" : "worker-", n.id(), "-r", count);
      auto spawned = children_->Spawn(name, server ? ServerArgv(n.id()) : WorkerArgv(n.id()),
                                      {"ECPS_TOKEN=" + token_}, Log(name));
      if (!spawned.ok()) {
        AddEvent("cannot start a replacement " + NodeLabel(n.role(), n.id()) + ": " +
                     spawned.status().ToString(),
                 events);
        continue;
      }
      replacements_[key] = *spawned;
      AddEvent(absl::StrFormat("started a replacement %s (pid %d)", NodeLabel(n.role(), n.id()),
                               children_->child(*spawned).pid),
               events);
    }
  }

  // One event line per change in the coordinator's failure history.
  void FailureEvents(const v1::StatusResponse& st, std::string* events) {
    for (int i = 0; i < st.failures_size(); ++i) {
      const v1::FailureEvent& e = st.failures(i);
      int& seen = failure_states_[i];
      if (seen == e.state()) continue;
      const std::string label = NodeLabel(e.role(), e.id());
      if (seen < v1::FAILURE_DETECTED) {
        AddEvent(absl::StrFormat("%s (pid %d) declared dead: %s; detected in %.1f s", label,
                                 e.pid(), e.reason(), e.detection_s()),
                 events);
      }
      if (seen < v1::FAILURE_REPLACING && e.state() >= v1::FAILURE_REPLACING) {
        AddEvent(absl::StrFormat("%s replaced by %s (pid %d)%s", label,
                                 e.by_spare() ? "spare" : "a new process", e.replacement_pid(),
                                 e.role() == v1::ROLE_SERVER ? "; rebuilding online" : ""),
                 events);
      }
      if (e.state() == v1::FAILURE_RECOVERED) {
        std::string what = absl::StrFormat("%s recovered in %.1f s after replacement", label,
                                           e.rebuild_s());
        if (e.role() == v1::ROLE_SERVER && e.rows_rebuilt() > 0) {
          absl::StrAppend(&what, absl::StrFormat(" (%d rows rebuilt: %d on demand)",
                                                 e.rows_rebuilt(), e.on_demand_rebuilds()));
        }
        AddEvent(what, events);
      }
      seen = e.state();
    }
  }

  // When the failure happened on the launcher's timeline: the drill that caused it, else the
  // dead instance's last heartbeat.
  double FailedAt(const v1::FailureEvent& e) const {
    for (const DrillRecord& d : drills_) {
      if (d.pid == e.pid()) return d.t;
    }
    return LocalTime(e.last_heartbeat_unix_ms());
  }

  struct FailureFigures {
    double failed_at, detected_at, recovered_at, before, during, ratio;
  };
  FailureFigures Figures(const v1::FailureEvent& e) const {
    FailureFigures f;
    f.failed_at = FailedAt(e);
    f.detected_at = LocalTime(e.detected_unix_ms());
    f.recovered_at = LocalTime(e.recovered_unix_ms());
    // The 30 s before the failure, or as much of them as the job trained.
    f.before = RateBefore(timeline_, f.failed_at, 30);
    // While training ran: a recovery that outlasts the job does not count the time after it.
    f.during = f.recovered_at > f.failed_at
                   ? MeanRateWhileTraining(timeline_, f.failed_at, f.recovered_at)
                   : -1;
    f.ratio = f.before > 0 && f.during >= 0 ? f.during / f.before : -1;
    return f;
  }

  static std::string Num(double x, int decimals = 3) {
    return x < 0 ? std::string("null") : absl::StrFormat("%.*f", decimals, x);
  }

  std::string DrillsJson() const {
    std::string out = "[";
    for (size_t i = 0; i < drills_.size(); ++i) {
      const DrillRecord& d = drills_[i];
      absl::StrAppend(&out, i ? ",\n    " : "\n    ",
                      absl::StrFormat("{\"at_step\": %d, \"action\": \"%s\", \"target\": %d, "
                                      "\"duration_s\": %.3f, \"pid\": %d, \"time_s\": %.3f}",
                                      d.fault.at_step, d.fault.action, d.fault.target,
                                      d.fault.duration_s, d.pid, d.t));
    }
    return out + (drills_.empty() ? "]" : "\n  ]");
  }

  std::string FailuresJson(const v1::StatusResponse& st) const {
    std::string out = "[";
    for (int i = 0; i < st.failures_size(); ++i) {
      const v1::FailureEvent& e = st.failures(i);
      const FailureFigures f = Figures(e);
      const char* state = e.state() == v1::FAILURE_RECOVERED   ? "recovered"
                          : e.state() == v1::FAILURE_REPLACING ? "replacing"
                                                               : "detected";
      absl::StrAppend(
          &out, i ? ",\n    " : "\n    ",
          absl::StrFormat(
              "{\"node\": \"%s\", \"pid\": %d, \"reason\": \"%s\", \"state\": \"%s\", "
              "\"replacement\": \"%s\", \"replacement_pid\": %d, \"by_spare\": %s, "
              "\"failed_at_s\": %s, \"detected_at_s\": %s, \"recovered_at_s\": %s, "
              "\"detection_s\": %s, \"rebuild_s\": %s, \"recovery_s\": %s, "
              "\"rows_rebuilt\": %d, \"on_demand_rebuilds\": %d, \"rebuild_mb_s\": %s, "
              "\"samples_per_s_before\": %s, \"samples_per_s_during\": %s, "
              "\"throughput_during_vs_before\": %s}",
              NodeLabel(e.role(), e.id()), e.pid(), JsonEscape(e.reason()), state,
              JsonEscape(e.replacement()), e.replacement_pid(), e.by_spare() ? "true" : "false",
              Num(f.failed_at), Num(f.detected_at), Num(f.recovered_at), Num(e.detection_s()),
              Num(e.rebuild_s()), Num(e.recovery_s()), e.rows_rebuilt(), e.on_demand_rebuilds(),
              e.rebuild_mb_s() > 0 ? Num(e.rebuild_mb_s()) : std::string("null"),
              Num(f.before, 1), Num(f.during, 1), Num(f.ratio, 4)));
    }
    return out + (st.failures_size() == 0 ? "]" : "\n  ]");
  }

  void PrintFailures(const v1::StatusResponse& st) {
    for (const v1::FailureEvent& e : st.failures()) {
      const FailureFigures f = Figures(e);
      std::string line = absl::StrFormat("ecps: %s failed at %.1f s: detected in %.1f s",
                                         NodeLabel(e.role(), e.id()), f.failed_at, e.detection_s());
      if (e.state() == v1::FAILURE_RECOVERED) {
        absl::StrAppend(&line, absl::StrFormat(", %s in %.1f s", 
                                               e.role() == v1::ROLE_SERVER ? "rebuilt" : "resumed",
                                               e.rebuild_s()));
        if (e.rows_rebuilt() > 0) {
          absl::StrAppend(&line, absl::StrFormat(" (%d rows, %d on demand", e.rows_rebuilt(),
                                                 e.on_demand_rebuilds()));
          if (e.rebuild_mb_s() > 0) absl::StrAppend(&line, absl::StrFormat(", %.1f MB/s", e.rebuild_mb_s()));
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
      std::printf("%s\n", line.c_str());
    }
    std::fflush(stdout);
  }

  void PlotTimeline() {
    const std::string png = (fs::path(out_) / "timeline.png").string();
    absl::Status plotted = RunPythonScript("plot_timeline.py", {out_}, Log("plot"));
    if (plotted.ok() && fs::exists(png)) {
      std::printf("ecps: throughput timeline plot %s\n", png.c_str());
    } else {
      std::printf("ecps: no timeline plot: %s\n", std::string(plotted.message()).c_str());
    }
    std::fflush(stdout);
  }

  struct DrillRecord {
    FaultSpec fault;
    double t;
    int64_t pid;
  };
  struct Stopped {
    int index;
    Clock::time_point until;
    std::string label;
    int64_t pid;
  };

  JobSpec spec_;
  RunFlags flags_;
  ProgressPrinter printer_;
  std::unique_ptr<LaunchBackend> children_;
  std::string out_;
  std::string bind_host_;
  std::string token_;
  std::string address_;
  std::string self_;
  std::string spec_file_;
  double start_unix_ = 0;
  std::vector<TimelinePoint> timeline_;
  std::vector<bool> drill_done_;
  std::vector<DrillRecord> drills_;
  std::vector<Stopped> stopped_;
  std::set<pid_t> drill_victims_;
  std::map<std::pair<int, int>, int> replacements_;  // (role, id) -> child index
  std::map<std::pair<int, int>, int> restarts_;      // (role, id) -> replacements started
  std::map<int, int> failure_states_;                // failure index -> last state seen
};

}  // namespace

int RunJob(const RunFlags& flags) {
  auto spec = LoadSpecFile(flags.spec_path);
  if (!spec.ok()) {
    std::fprintf(stderr, "ecps: invalid spec:\n%s\n", std::string(spec.status().message()).c_str());
    return 2;
  }
  std::unique_ptr<LaunchBackend> backend;
  if (flags.backend == "local") {
    backend = MakeLocalBackend();
  } else if (flags.backend == "slurm") {
    auto slurm = MakeSlurmBackend();
    if (!slurm.ok()) {
      std::fprintf(stderr, "ecps: %s\n", std::string(slurm.status().message()).c_str());
      return 2;
    }
    backend = std::move(*slurm);
  } else {
    std::fprintf(stderr, "ecps: --backend must be local or slurm, got '%s'\n",
                 flags.backend.c_str());
    return 2;
  }
  if (absl::Status s = CheckDrills(*spec, backend->SignalsRoles()); !s.ok()) {
    std::fprintf(stderr, "ecps: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  struct sigaction sa = {};
  sa.sa_handler = OnSignal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGHUP, &sa, nullptr);
  Job job(std::move(*spec), flags, std::move(backend));
  return job.Run();
}

}  // namespace ecps
