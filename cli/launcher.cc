#include "cli/launcher.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "absl/strings/str_format.h"
#include "cli/process_group.h"
#include "google/protobuf/util/json_util.h"
#include "proto/ecps.pb.h"
#include "runtime/coordinator_client.h"
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

std::string SelfPath() {
  std::error_code ec;
  fs::path p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("ecps") : p.string();
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

std::string ProgressLine(const v1::StatusResponse& st) {
  double pct = st.total_steps() > 0 ? 100.0 * st.step() / st.total_steps() : 0;
  std::string auc = st.eval_auc() >= 0 ? absl::StrFormat("%.4f", st.eval_auc()) : "--";
  return absl::StrFormat("[%s] step %d/%d (%.0f%%) | %.0f samples/s | loss %.4f | AUC %s | "
                         "epoch %d | elapsed %s | ETA %s",
                         PhaseName(st.phase()), st.step(), st.total_steps(), pct,
                         st.samples_per_s(), st.loss(), auc, st.epoch(),
                         FormatDuration(st.elapsed_s()), FormatDuration(st.eta_s()));
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
  Job(JobSpec spec, const RunFlags& flags) : spec_(std::move(spec)), flags_(flags),
      printer_(flags.progress && spec_.monitoring.progress) {}

  int Run() {
    out_ = flags_.output_dir.empty() ? spec_.job.output_dir : flags_.output_dir;
    std::error_code ec;
    fs::create_directories(fs::path(out_) / "logs", ec);
    if (ec) return Fail(2, "cannot create output folder " + out_ + ": " + ec.message());
    token_ = spec_.job.token.empty() ? RandomToken() : spec_.job.token;
    std::string spec_file = (fs::path(out_) / "spec.resolved.yaml").string();
    {
      std::ofstream f(spec_file);
      f << SpecToYaml(spec_);
      if (!f) return Fail(2, "cannot write " + spec_file);
    }
    std::printf("ecps: job '%s': %d servers (+%d spares), %d workers, mode %s; output in %s\n",
                spec_.job.name.c_str(), spec_.cluster.servers, spec_.cluster.spares,
                spec_.cluster.workers, spec_.fault_tolerance.mode.c_str(), out_.c_str());
    std::fflush(stdout);

    const std::string self = SelfPath();
    const std::vector<std::string> env = {"ECPS_TOKEN=" + token_};
    std::string port_file = (fs::path(out_) / "coordinator.port").string();
    fs::remove(port_file, ec);
    auto coord = children_.Spawn("coordinator",
                                 {self, "coordinator", "--spec", spec_file, "--port-file",
                                  port_file, "--host", spec_.cluster.host, "--port",
                                  std::to_string(spec_.cluster.coordinator_port)},
                                 env, Log("coordinator"));
    if (!coord.ok()) return Fail(2, coord.status().ToString());
    auto address = WaitForPort(port_file);
    if (!address.ok()) return Fail(2, address.status().ToString());
    address_ = *address;
    std::printf("ecps: coordinator at %s (ecps status %s)\n", address_.c_str(), address_.c_str());
    for (int i = 0; i < spec_.cluster.servers + spec_.cluster.spares; ++i) {
      int id = i < spec_.cluster.servers ? i : -1;
      std::string name = i < spec_.cluster.servers ? "server-" + std::to_string(i)
                                                   : "spare-" + std::to_string(i - spec_.cluster.servers);
      auto s = children_.Spawn(name, {self, "server", "--spec", spec_file, "--coordinator",
                                      address_, "--id", std::to_string(id), "--host",
                                      spec_.cluster.host},
                               env, Log(name));
      if (!s.ok()) return Fail(2, s.status().ToString());
    }
    for (int w = 0; w < spec_.cluster.workers; ++w) {
      std::string name = "worker-" + std::to_string(w);
      auto s = children_.Spawn(name, {self, "worker", "--spec", spec_file, "--coordinator",
                                      address_, "--id", std::to_string(w)},
                               env, Log(name));
      if (!s.ok()) return Fail(2, s.status().ToString());
    }
    return Monitor();
  }

 private:
  std::string Log(const std::string& name) const {
    return (fs::path(out_) / "logs" / (name + ".log")).string();
  }

  int Fail(int code, const std::string& message) {
    printer_.Finish();
    std::fprintf(stderr, "ecps: %s\n", message.c_str());
    children_.StopAll(3000);
    return code;
  }

  absl::StatusOr<std::string> WaitForPort(const std::string& port_file) {
    auto deadline = Clock::now() + std::chrono::seconds(30);
    while (Clock::now() < deadline) {
      if (g_signal.load() != 0) return absl::CancelledError("interrupted");
      std::ifstream f(port_file);
      int port = 0;
      if (f >> port && port > 0) return spec_.cluster.host + ":" + std::to_string(port);
      for (int i : children_.Poll()) {
        return absl::InternalError("the coordinator exited (" +
                                   DescribeExit(children_.child(i).exit_status) +
                                   ") before listening; its log " + children_.child(i).log_path +
                                   " ends with:\n" + TailFile(children_.child(i).log_path, 10));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return absl::DeadlineExceededError("the coordinator did not start listening within 30 s");
  }

  int Monitor() {
    CoordinatorClient client(address_, token_, "launcher", spec_.cluster.rpc_timeout_ms);
    std::ofstream csv((fs::path(out_) / "metrics.csv").string());
    csv << "time_s,phase,epoch,step,samples,samples_per_s,loss,eval_auc,eval_logloss,"
           "servers_active,event\n";
    const auto start = Clock::now();
    auto last_ok = start;
    v1::StatusResponse last;
    bool have_status = false;
    std::string failure;
    while (true) {
      if (g_signal.load() != 0) {
        printer_.Event("ecps: interrupted; stopping every process");
        children_.StopAll(3000);
        return 130;
      }
      std::string events;
      for (int i : children_.Poll()) {
        const Child& c = children_.child(i);
        std::string what = c.name + " exited (" + DescribeExit(c.exit_status) + ")";
        events += (events.empty() ? "" : "; ") + what;
        bool clean = WIFEXITED(c.exit_status) && WEXITSTATUS(c.exit_status) == 0;
        if (c.name == "coordinator" || !clean) {
          printer_.Event("ecps: " + what + "; log " + c.log_path + ":\n" + TailFile(c.log_path, 8));
        }
        if (c.name == "coordinator" && !(have_status && last.phase() == v1::JOB_FINISHED)) {
          failure = "the coordinator exited before the job finished";
        }
      }
      auto status = client.Status();
      double t = std::chrono::duration<double>(Clock::now() - start).count();
      if (status.ok()) {
        last = *status;
        have_status = true;
        last_ok = Clock::now();
        int active = 0;
        for (const auto& n : last.nodes()) {
          active += n.role() == v1::ROLE_SERVER && n.state() == v1::NODE_ACTIVE;
        }
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
    children_.StopAll(5000);
    if (ok) {
      double rate = last.elapsed_s() > 0 ? last.samples() / last.elapsed_s() : 0;
      std::printf("ecps: finished %lld steps, %lld samples in %.1f s (%.0f samples/s); "
                  "AUC %.4f, logloss %.4f\n",
                  static_cast<long long>(last.step()), static_cast<long long>(last.samples()),
                  last.elapsed_s(), rate, last.eval_auc(), last.eval_logloss());
      if (last.scrub().done()) {
        std::printf("ecps: scrub %s: %lld stripes and %lld dense replicas checked in %.2f s\n",
                    last.scrub().clean() ? "clean" : "NOT CLEAN",
                    static_cast<long long>(last.scrub().stripes_checked()),
                    static_cast<long long>(last.scrub().dense_checked()), last.scrub().seconds());
      }
      std::printf("ecps: report %s/report.json, metrics %s/metrics.csv\n", out_.c_str(),
                  out_.c_str());
      return 0;
    }
    std::fprintf(stderr, "ecps: job failed: %s (logs in %s/logs)\n",
                 failure.empty() ? "unknown error" : failure.c_str(), out_.c_str());
    return 1;
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
    std::string escaped;
    for (char c : failure) {
      if (c == '"' || c == '\\') escaped += '\\';
      if (c == '\n') { escaped += "\\n"; continue; }
      escaped += c;
    }
    std::ofstream f((fs::path(out_) / "report.json").string());
    f << absl::StrFormat(
        "{\n  \"job\": \"%s\",\n  \"ok\": %s,\n  \"error\": \"%s\",\n  \"mode\": \"%s\",\n"
        "  \"servers\": %d,\n  \"workers\": %d,\n  \"steps\": %d,\n  \"samples\": %d,\n"
        "  \"train_seconds\": %.3f,\n  \"wall_seconds\": %.3f,\n  \"samples_per_s\": %.1f,\n"
        "  \"eval_auc\": %.6f,\n  \"eval_logloss\": %.6f,\n"
        "  \"scrub\": {\"done\": %s, \"clean\": %s, \"stripes_checked\": %d, "
        "\"parity_mismatches\": %d, \"dense_checked\": %d, \"dense_mismatches\": %d},\n"
        "  \"final_status\": %s\n}\n",
        spec_.job.name, ok ? "true" : "false", escaped, spec_.fault_tolerance.mode,
        spec_.cluster.servers, spec_.cluster.workers, last.step(), last.samples(),
        last.elapsed_s(), wall, rate, last.eval_auc(), last.eval_logloss(),
        last.scrub().done() ? "true" : "false", last.scrub().clean() ? "true" : "false",
        last.scrub().stripes_checked(), last.scrub().parity_mismatches(),
        last.scrub().dense_checked(), last.scrub().dense_mismatches(), status_json);
  }

  JobSpec spec_;
  RunFlags flags_;
  ProgressPrinter printer_;
  ProcessGroup children_;
  std::string out_;
  std::string token_;
  std::string address_;
};

}  // namespace

int RunJob(const RunFlags& flags) {
  auto spec = LoadSpecFile(flags.spec_path);
  if (!spec.ok()) {
    std::fprintf(stderr, "ecps: invalid spec:\n%s\n", std::string(spec.status().message()).c_str());
    return 2;
  }
  struct sigaction sa = {};
  sa.sa_handler = OnSignal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGHUP, &sa, nullptr);
  Job job(std::move(*spec), flags);
  return job.Run();
}

}  // namespace ecps
