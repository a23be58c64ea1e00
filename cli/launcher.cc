// `ecps run`: the job's life from the launcher's side. The pieces are apart: starting the
// roles (cli/role_spawner.h), the fault drills (cli/drills.h), the replacement supervisor
// (cli/replacement_supervisor.h), the progress line and metrics rows (cli/progress_line.h)
// and the final report (cli/run_report.h); this file prepares the job folder and runs the
// monitoring loop that ties them together.
#include "cli/launcher.h"

#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "absl/strings/str_format.h"
#include "checkpoint/layout.h"
#include "cli/drills.h"
#include "cli/interrupt.h"
#include "cli/job_dir.h"
#include "cli/launch_backend.h"
#include "cli/preflight.h"
#include "cli/process_group.h"
#include "cli/progress_line.h"
#include "cli/prometheus_targets.h"
#include "cli/python_script.h"
#include "cli/replacement_supervisor.h"
#include "cli/role_security.h"
#include "cli/role_spawner.h"
#include "cli/run_report.h"
#include "coordinator/coordinator_main.h"
#include "proto/ecps.pb.h"
#include "ps/server_main.h"
#include "ps/server_parts.h"
#include "runtime/coordinator_client.h"
#include "runtime/env.h"
#include "runtime/spec.h"
#include "runtime/status_macros.h"

namespace ecps {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// How many times in a row a job's coordinator is started again after dying before the job
// ended; one more death fails the job (a coordinator that cannot live is not worth a loop).
// "In a row": the count starts over once a coordinator has served kCoordinatorSettled, so a
// job of days survives a coordinator's death now and then.
constexpr int kMaxCoordinatorRestarts = 3;
constexpr auto kCoordinatorSettled = std::chrono::minutes(10);

// Whether a coordinator that exited so before the job ended is started again: killed or
// crashed (srun reports a task killed by signal N as exit 128+N), failed, or no longer
// leading in etcd (kExitLeadLost). Not for 0 (it ended the job's service, which the launcher
// has not seen end), 2 (a bad spec or flag, the same for any new one), kExitDataLost (the job
// failed for good) nor kExitStateDamaged (any new one would find the same damaged state).
bool CoordinatorRestartable(int exit_status) {
  if (WIFSIGNALED(exit_status)) return true;
  if (!WIFEXITED(exit_status)) return false;
  const int code = WEXITSTATUS(exit_status);
  return code != 0 && code != 2 && code != kExitDataLost && code != kExitStateDamaged;
}

std::string RandomToken() {
  std::random_device rd;
  std::string token;
  const char* hex = "0123456789abcdef";
  for (int i = 0; i < 32; ++i) token += hex[rd() % 16];
  return token;
}

// Checkpoints follow --output when the spec left checkpoint.dir at its default; the roles
// get it as an absolute path (they may run elsewhere).
void PlaceCheckpoints(const RunFlags& flags, const std::string& out, JobSpec* spec) {
  CheckpointSection& ckpt = spec->fault_tolerance.checkpoint;
  if (!flags.output_dir.empty() && ckpt.dir == spec->job.output_dir + "/checkpoints") {
    ckpt.dir = (fs::path(out) / "checkpoints").string();
  }
  std::error_code ec;
  ckpt.dir = fs::absolute(ckpt.dir, ec).string();
}

// The checkpoint job.resume_from names, checked before anything starts: a checkpoint that
// is missing, truncated, corrupt or of another model is refused (every file's size and
// checksum is checked). On success resume_from holds the checkpoint directory itself, as an
// absolute path.
absl::Status PrepareResume(JobSpec* spec) {
  auto manifest = OpenResumeCheckpoint(*spec, /*verify=*/true);
  if (!manifest.ok()) {
    return absl::Status(manifest.status().code(),
                        "cannot resume from " + spec->job.resume_from + ": " +
                            std::string(manifest.status().message()));
  }
  std::error_code ec;
  spec->job.resume_from = fs::absolute(manifest->dir, ec).string();
  std::printf("ecps: resuming from %s (step %lld, %zu reader positions)\n",
              spec->job.resume_from.c_str(), static_cast<long long>(manifest->layout.step),
              manifest->reader_positions.size());
  return absl::OkStatus();
}

class Job {
 public:
  Job(JobSpec spec, const RunFlags& flags, std::unique_ptr<LaunchBackend> backend)
      : spec_(std::move(spec)),
        flags_(flags),
        printer_(flags.progress && spec_.monitoring.progress),
        children_(std::move(backend)),
        interrupt_(children_.get(), &printer_) {}

  int Run() {
    out_ = flags_.output_dir.empty() ? spec_.job.output_dir : flags_.output_dir;
    if (absl::Status s = Preflight(); !s.ok()) return Fail(2, std::string(s.message()));
    auto spec_file = PrepareJobFolder();
    if (!spec_file.ok()) return Fail(2, std::string(spec_file.status().message()));
    std::printf("ecps: job '%s': %d servers (+%d spares), %d workers, mode %s; output in %s%s\n",
                spec_.job.name.c_str(), spec_.cluster.servers, spec_.cluster.spares,
                spec_.cluster.workers, ToString(spec_.fault_tolerance.mode), out_.c_str(),
                children_->name() == std::string("local") ? "" : "; roles as Slurm job steps");
    std::fflush(stdout);
    RoleSetup setup;
    setup.self = SelfPath();
    setup.spec_file = *spec_file;
    setup.out_dir = out_;
    setup.token = token_;
    setup.bind_host =
        spec_.cluster.host.empty() ? children_->DefaultBindHost() : spec_.cluster.host;
    RoleSpawner spawner(spec_, setup, children_.get(), InterruptStop::Flag());
    auto address = spawner.StartCoordinator();
    if (!address.ok()) return Fail(2, address.status().ToString());
    std::printf("ecps: coordinator at %s (ecps status --job %s)\n", address->c_str(),
                out_.c_str());
    if (absl::Status s = spawner.StartServersAndWorkers(); !s.ok()) return Fail(2, s.ToString());
    return Monitor(&spawner);
  }

 private:
  // What the machine must allow, checked before anything is written or started: every
  // folder the job writes into, and (all roles here) memory for the servers' tables.
  absl::Status Preflight() {
    PlaceCheckpoints(flags_, out_, &spec_);
    RETURN_IF_ERROR(CheckWritableFolder(
        flags_.output_dir.empty() ? "job.output_dir" : "--output", out_));
    RETURN_IF_ERROR(CheckWritableFolder("fault_tolerance.checkpoint.dir",
                                        spec_.fault_tolerance.checkpoint.dir));
    if (children_->name() == std::string("local")) {
      RETURN_IF_ERROR(CheckTablesFitThisMachine(spec_, AvailableMemoryBytes()));
    }
    return absl::OkStatus();
  }

  // The job folder: logs/, the token (the operator commands find it there: --job DIR;
  // nowhere else holds it), the checkpoint place, the resume check, and the resolved spec
  // every role reads. Returns that spec's path.
  absl::StatusOr<std::string> PrepareJobFolder() {
    std::error_code ec;
    fs::create_directories(fs::path(out_) / "logs", ec);
    if (ec) return absl::InternalError("cannot create output folder " + out_ + ": " + ec.message());
    token_ = spec_.job.token.empty() ? RandomToken() : spec_.job.token;
    // The operators' credential is the admin token: the secret stays with the launcher, the
    // coordinator and the servers, and out of the spec every role reads.
    spec_.job.token.clear();
    if (absl::Status s = WriteJobToken(out_, RoleToken(token_, Role::kAdmin)); !s.ok()) {
      return absl::Status(s.code(), s.ToString());
    }
    // With TLS the launcher is an admin, and leaves its certificate's place for --job DIR.
    if (spec_.security.tls.enabled()) {
      TlsFiles admin = TlsFilesFor(spec_.security.tls, Role::kAdmin);
      if (admin.cert.empty()) {
        return absl::InvalidArgumentError(
            "security.tls.admin is required for ecps run: the launcher and the operator "
            "commands talk to the coordinator as an admin (docs/security.md)");
      }
      if (absl::Status s = UseSpecTls(spec_.security.tls, Role::kAdmin); !s.ok()) return s;
      if (absl::Status s = WriteJobTls(out_, admin); !s.ok()) return s;
    }
    PlaceCheckpoints(flags_, out_, &spec_);
    if (!spec_.job.resume_from.empty()) {
      if (absl::Status s = PrepareResume(&spec_); !s.ok()) return s;
    }
    std::string spec_file = (fs::path(out_) / "spec.resolved.yaml").string();
    std::ofstream f(spec_file);
    f << SpecToYaml(spec_);
    if (!f) return absl::InternalError("cannot write " + spec_file);
    return spec_file;
  }

  int Fail(int code, const std::string& message) {
    // What a signal cut short is not a failure: the interrupt's own stop ends the process.
    if (interrupt_.interrupted()) interrupt_.AwaitExit();
    printer_.Finish();
    std::fprintf(stderr, "ecps: %s\n", message.c_str());
    StopChildren(std::chrono::seconds(3));
    return code;
  }

  // Stops every child: SIGTERM, `grace`, SIGKILL (ProcessGroup::StopAll). A stop that takes
  // longer than 3 s says what it waits for; the coordinator alone takes up to 2 s to shut
  // down, which is not worth a line at the end of every job.
  void StopChildren(std::chrono::milliseconds grace) {
    StopPlan plan;
    plan.grace = grace;
    plan.first_report = std::chrono::seconds(3);
    plan.report = [this](const std::string& line) { printer_.Event("ecps: " + line); };
    children_->StopAll(plan);
  }

  // Reaps the children that exited since the last poll: each an event (with the end of its
  // log when it failed, unless a drill killed it). Returns why the job must stop, or "".
  std::string ReapExited(const DrillRunner& drills, bool finished, EventLog* events) {
    std::string failure;
    for (int i : children_->Poll()) {
      const Child& c = children_->child(i);
      const std::string what = c.name + " exited (" + DescribeExit(c.exit_status) + ")";
      events->Note(what);
      const bool clean = WIFEXITED(c.exit_status) && WEXITSTATUS(c.exit_status) == 0;
      if (drills.IsVictim(c.pid)) {
        printer_.Event("ecps: " + what + " [drill]");
      } else if (c.name == "coordinator" || !clean) {
        printer_.Event("ecps: " + what + "; log " + c.log_path + ":\n" + TailFile(c.log_path, 8));
      }
      if (c.name == "coordinator" && !finished) {
        if (CoordinatorRestartable(c.exit_status)) {
          // Killed, crashed, failed or cut off from etcd: a new one takes the job over
          // (Monitor starts it, at once or after a drill's duration_s; with standbys one of
          // them already does, and the new one is a standby).
          coordinator_died_ = true;
          dead_coordinators_.push_back(i);
          coordinator_died_at_ = Clock::now();
          restart_coordinator_at_ =
              coordinator_died_at_ + std::chrono::milliseconds(
                                         static_cast<int64_t>(drills.DownFor(c.pid) * 1000));
        } else {
          failure = "the coordinator exited before the job finished (" +
                    DescribeExit(c.exit_status) + ")";
        }
      }
      if (WIFEXITED(c.exit_status) && WEXITSTATUS(c.exit_status) == kExitCannotAllocate &&
          failure.empty()) {
        // Another process of the same spec would fail the same way: stop here.
        failure = c.name + " cannot allocate its tables (" + c.log_path + "):\n" +
                  TailFile(c.log_path, 3);
      }
    }
    return failure;
  }

  // After a coordinator restart (`c`, the last of them): the downtime once the new one
  // answers `status` at `t` s (then an event, and *last_ok is now), then the step at which
  // training goes on.
  static void NoteRestartedCoordinator(const v1::StatusResponse& status, double t,
                                       RunRecord::CoordinatorFailure* c, EventLog* events,
                                       Clock::time_point* last_ok) {
    if (c->downtime_s < 0) {
      c->downtime_s = t - c->t;
      c->step_restored = status.step();
      events->Add(absl::StrFormat("the new coordinator answers after %.1f s down (saved step %d)",
                                  c->downtime_s, c->step_restored));
      *last_ok = Clock::now();
    } else if (c->step_at_restart < 0 &&
               (status.step() != c->step_restored || status.phase() == v1::JOB_FINISHED)) {
      c->step_at_restart = status.step();
    }
  }

  // Writes prometheus_targets.json for `last` when it differs from *targets (as last
  // written), whole and renamed: Prometheus re-reads it whenever it changes.
  void WritePrometheusTargets(const v1::StatusResponse& last, std::string* targets) {
    std::string now = PrometheusTargets(last);
    if (now == *targets) return;
    const std::string path = (fs::path(out_) / "prometheus_targets.json").string();
    if (absl::Status w = WriteFileDurably(path, now); w.ok()) {
      *targets = std::move(now);
    } else {
      printer_.Event("ecps: cannot write " + path + ": " + w.ToString());
    }
  }

  // Polls the coordinator every monitoring.metrics_interval_ms until the job ends: the
  // metrics row, the progress line, the failure history, the drills and the replacements.
  int Monitor(RoleSpawner* spawner) {
    // With the address file: a restarted coordinator may listen elsewhere.
    CoordinatorClient client(spawner->address(), RoleToken(token_, Role::kAdmin), "launcher",
                             spec_.cluster.rpc_timeout_ms, spawner->AddressFile());
    std::ofstream csv((fs::path(out_) / "metrics.csv").string());
    csv << kMetricsCsvHeader;
    const auto start = Clock::now();
    RunRecord run;
    run.start_unix = std::chrono::duration<double>(
                         std::chrono::system_clock::now().time_since_epoch()).count();
    DrillRunner drills(spec_.faults, children_.get());
    // With standbys, kill_coordinator kills the one that leads.
    if (spawner->replicas() > 1) {
      drills.set_active_coordinator([spawner] { return spawner->ActiveCoordinatorChild(); });
    }
    ReplacementSupervisor supervisor(spec_.fault_tolerance.mode, spawner, children_.get());
    EventLog events(&printer_);
    std::map<int, int> failure_states;
    std::string targets;  // prometheus_targets.json as last written
    auto last_ok = start;
    v1::StatusResponse last;
    std::string failure;
    while (true) {
      if (interrupt_.interrupted()) interrupt_.AwaitExit();
      if (spawner->replicas() > 1) {
        // Which one leads (the port file names it), remembered for when it dies.
        if (const int active = spawner->ActiveCoordinatorChild(); active >= 0) {
          led_.insert(active);
        }
      }
      failure = ReapExited(drills, run.have_status && last.phase() == v1::JOB_FINISHED, &events);
      drills.ContinueStopped(&events);
      if (failure.empty() && coordinator_died_ && Clock::now() >= restart_coordinator_at_) {
        failure = RestartCoordinator(spawner, start, last, &run, &events);
        // The silence that fails the job counts from the new coordinator's start (a Slurm
        // step may wait for a node), not from the old one's last answer.
        last_ok = Clock::now();
      }
      if (!failure.empty()) break;
      auto status = client.Status();
      double t = std::chrono::duration<double>(Clock::now() - start).count();
      if (status.ok() && !run.coordinator_failures.empty()) {
        NoteRestartedCoordinator(*status, t, &run.coordinator_failures.back(), &events, &last_ok);
      }
      if (status.ok()) {
        last = *status;
        run.have_status = true;
        last_ok = Clock::now();
        if (coordinator_restarts_ > 0 && last_ok - coordinator_started_at_ >= kCoordinatorSettled) {
          coordinator_restarts_ = 0;  // it lived: the next death is the first in a row again
        }
        run.timeline.push_back(TimelinePoint{t, static_cast<double>(last.samples())});
        for (const std::string& e : FailureHistoryEvents(last, &failure_states)) events.Add(e);
        const bool ended = last.phase() == v1::JOB_FINISHED || last.phase() == v1::JOB_FAILED;
        if (!ended) {
          drills.Run(last, t, &client, &events);
          failure = supervisor.Supervise(last, &events);
        }
        WritePrometheusTargets(last, &targets);
        csv << MetricsCsvRow(t, last, events.Take());
        csv.flush();
        printer_.Update(ProgressLine(last));
        if (ended) break;
      } else if (!coordinator_died_ && Clock::now() - last_ok > std::chrono::seconds(30)) {
        failure = "lost contact with the coordinator: " + status.status().ToString();
      }
      if (!failure.empty()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(spec_.monitoring.metrics_interval_ms));
    }
    printer_.Finish();
    run.wall_s = std::chrono::duration<double>(Clock::now() - start).count();
    run.ok = failure.empty() && run.have_status && last.phase() == v1::JOB_FINISHED;
    if (failure.empty() && run.have_status && last.phase() == v1::JOB_FAILED) {
      failure = last.error();
    }
    run.failure = failure;
    run.drills = drills.records();
    return Finish(run, last);
  }

  // The coordinator died before the job ended. With standbys (coordinator.replicas) one of
  // them takes the job over by itself, and each dead coordinator is replaced by a new standby
  // on its port; without, a new one is started on the same state (RoleSpawner::
  // RestartCoordinator), possibly elsewhere, and takes the job over. Either way at most
  // kMaxCoordinatorRestarts times in a row. Returns why the job must stop, or "".
  std::string RestartCoordinator(RoleSpawner* spawner, Clock::time_point start,
                                 const v1::StatusResponse& last, RunRecord* run,
                                 EventLog* events) {
    coordinator_died_ = false;
    coordinator_started_at_ = Clock::now();
    std::vector<int> dead;
    dead.swap(dead_coordinators_);
    if (spawner->replicas() > 1) {
      for (int child : dead) {
        // One that ever led was the active one when it died: a leader that loses its lease
        // exits (kExitLeadLost), it never goes back to standing by. Its successor may have
        // written the port file before this death was reaped.
        const bool was_active = led_.count(child) > 0;
        const int pid = children_->child(child).pid;
        if (was_active) {
          RunRecord::CoordinatorFailure c;
          c.t = std::chrono::duration<double>(coordinator_died_at_ - start).count();
          c.step_at_death = last.step();
          c.pid = pid;
          run->coordinator_failures.push_back(c);
        }
        const char* which = was_active ? "active" : "standby";
        if (++coordinator_restarts_ > kMaxCoordinatorRestarts) {
          events->Add(absl::StrFormat("the %s coordinator (pid %d) died at step %d", which, pid,
                                      last.step()));
          return absl::StrFormat("coordinators died %d times; not starting another",
                                 coordinator_restarts_);
        }
        events->Add(absl::StrFormat(
            "the %s coordinator (pid %d) died at step %d; starting a new standby (restart %d of "
            "%d)",
            which, pid, last.step(), coordinator_restarts_, kMaxCoordinatorRestarts));
        if (absl::Status s = spawner->RestartStandby(child); !s.ok()) {
          return "a coordinator died and a new standby could not start: " + s.ToString();
        }
      }
      return "";
    }
    RunRecord::CoordinatorFailure c;
    c.t = std::chrono::duration<double>(coordinator_died_at_ - start).count();
    c.step_at_death = last.step();
    for (int i = 0; i < children_->size(); ++i) {
      if (children_->child(i).name == "coordinator") c.pid = children_->child(i).pid;
    }
    run->coordinator_failures.push_back(c);
    if (++coordinator_restarts_ > kMaxCoordinatorRestarts) {
      events->Add(
          absl::StrFormat("the coordinator (pid %d) died at step %d", c.pid, c.step_at_death));
      return absl::StrFormat("the coordinator died %d times; not starting another",
                             coordinator_restarts_);
    }
    events->Add(absl::StrFormat(
        "the coordinator (pid %d) died at step %d; starting a new one (restart %d of %d)", c.pid,
        c.step_at_death, coordinator_restarts_, kMaxCoordinatorRestarts));
    if (absl::Status s = spawner->RestartCoordinator(); !s.ok()) {
      return "the coordinator died and a new one could not start: " + s.ToString();
    }
    events->Add("the new coordinator listens at " + spawner->address());
    return "";
  }

  // Writes report.json, stops what is left and prints the outcome. Returns the exit code.
  int Finish(const RunRecord& run, const v1::StatusResponse& last) {
    const JobFacts facts = FactsOf(spec_);
    std::ofstream((fs::path(out_) / "report.json").string()) << ReportJson(facts, run, last);
    StopChildren(std::chrono::seconds(5));
    std::printf("%s", FailureSummary(run, last).c_str());
    std::fflush(stdout);
    if (last.failures_size() > 0 || !run.drills.empty()) PlotTimeline();
    if (run.ok) {
      std::printf("%s", FinishedSummary(facts, last, out_).c_str());
      return 0;
    }
    std::printf("%s", BadLinesSummary(facts, CollectDataNotes(last)).c_str());
    std::fflush(stdout);
    std::fprintf(stderr, "ecps: job failed: %s (logs in %s/logs)\n",
                 run.failure.empty() ? "unknown error" : run.failure.c_str(), out_.c_str());
    return run.have_status && last.data_lost() ? kExitDataLost : 1;
  }

  void PlotTimeline() {
    const std::string png = (fs::path(out_) / "timeline.png").string();
    const std::string log = (fs::path(out_) / "logs" / "plot.log").string();
    absl::Status plotted = RunPythonScript("plot_timeline.py", {out_}, log);
    if (plotted.ok() && fs::exists(png)) {
      std::printf("ecps: throughput timeline plot %s\n", png.c_str());
    } else {
      std::printf("ecps: no timeline plot: %s\n", std::string(plotted.message()).c_str());
    }
    std::fflush(stdout);
  }

  JobSpec spec_;
  RunFlags flags_;
  ProgressPrinter printer_;
  std::unique_ptr<LaunchBackend> children_;
  // After children_ and printer_, which it uses: destroyed first.
  InterruptStop interrupt_;
  std::string out_;
  std::string token_;
  bool coordinator_died_ = false;  // ReapExited saw it killed: Monitor starts a new one
  Clock::time_point coordinator_died_at_;      // when ReapExited saw it
  Clock::time_point restart_coordinator_at_;   // when Monitor starts the new one
  std::vector<int> dead_coordinators_;  // their child indices
  std::set<int> led_;                   // with standbys: the children seen leading
  int coordinator_restarts_ = 0;        // coordinators started after one died, in a row
  Clock::time_point coordinator_started_at_;  // the latest of those
};

}  // namespace

int RunJob(const RunFlags& flags) {
  auto spec = LoadSpecFile(flags.spec_path);
  if (!spec.ok()) {
    std::fprintf(stderr, "ecps: invalid spec:\n%s\n", std::string(spec.status().message()).c_str());
    return 2;
  }
  std::unique_ptr<LaunchBackend> backend;
  if (flags.backend == LaunchBackendKind::kLocal) {
    backend = MakeLocalBackend();
  } else {
    auto slurm = MakeSlurmBackend(spec->cluster.worker_device == WorkerDevice::kCuda
                                      ? spec->cluster.gpus_per_worker
                                      : 0);
    if (!slurm.ok()) {
      std::fprintf(stderr, "ecps: %s\n", std::string(slurm.status().message()).c_str());
      return 2;
    }
    backend = std::move(*slurm);
  }
  if (absl::Status s = CheckDrills(*spec, backend->SignalsRoles()); !s.ok()) {
    std::fprintf(stderr, "ecps: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  InterruptStop::InstallHandlers();
  Job job(std::move(*spec), flags, std::move(backend));
  return job.Run();
}

}  // namespace ecps
