#include "worker/worker_main.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <future>
#include <mutex>
#include <thread>

#include "kernels/dense_ops.h"
#include "kernels/dlrm.h"
#include "proto/ecps.pb.h"
#include "runtime/checkpoint_job.h"
#include "runtime/coordinator_client.h"
#include "spdlog/spdlog.h"
#include "worker/ps_client.h"
#include "worker/training_loop.h"

namespace ecps {
namespace {

std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop.store(true); }

}  // namespace

int RunWorker(const WorkerOptions& options) {
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);
  const JobSpec& spec = options.spec;
  SetBlasThreads(spec.cluster.worker_threads);
  const std::string sender = "worker-" + std::to_string(options.id);
  const std::string instance = MakeInstanceId();
  CoordinatorClient coordinator(options.coordinator, options.token, sender,
                                spec.cluster.rpc_timeout_ms);
  auto registered = coordinator.Register(v1::ROLE_WORKER, "", options.id, instance,
                                         spec.cluster.connect_timeout_s * 1000);
  if (!registered.ok()) {
    spdlog::error("{}: cannot register with {}: {}", sender, options.coordinator,
                  registered.status().ToString());
    return 1;
  }
  coordinator.StartWatch();
  ProgressBoard board;
  // A replacement of a dead worker continues its partition from the last progress it reported
  // (steps it completed after that report are trained again: at-least-once).
  const v1::WorkerProgress resume = registered->resume();
  const bool resuming = resume.step() > 0 || resume.reader_position() > 0;
  if (resuming) {
    board.Step(resume.step(), resume.samples(), resume.loss(), resume.reader_position(),
               resume.bad_lines());
    if (resume.eval_auc() > 0) board.Eval(resume.eval_step(), resume.eval_auc(),
                                          resume.eval_logloss());
    board.Snapshot();  // the first heartbeat's rate counts only this process's samples
    spdlog::warn("{}: replacing a dead worker; resuming after step {} at reader position {}",
                 sender, resume.step(), resume.reader_position());
  }
  // A job resuming from a checkpoint continues at its step; each worker continues its
  // partition at its saved reader position when the worker count is the checkpoint's.
  int64_t resume_step = resume.step();
  int64_t resume_position = resume.reader_position();
  // A checkpoint records one step (the slowest worker's) but every worker's own reader
  // position. Where a position counts whole batches (synthetic data), it gives this worker's
  // own step, so a worker that was ahead does not train its extra batches twice.
  auto own_step = [&spec](int64_t step, int64_t position) {
    const int64_t batch = spec.data.batch_size;
    if (spec.data.source == "synthetic" && position > 0 && position % batch == 0) {
      return position / batch;
    }
    return step;
  };
  bool resume_loop = resuming;
  if (!resuming && !spec.job.resume_from.empty()) {
    auto dir = ResolveCheckpointDir(spec.job.resume_from);
    auto manifest = dir.ok() ? ReadManifest(*dir) : absl::StatusOr<Manifest>(dir.status());
    if (!manifest.ok()) {
      spdlog::error("{}: cannot resume: {}", sender, manifest.status().ToString());
      return 1;
    }
    resume_step = manifest->layout.step;
    resume_position = 0;
    if (static_cast<int>(manifest->reader_positions.size()) == spec.cluster.workers) {
      resume_position = manifest->reader_positions[options.id];
      resume_step = own_step(resume_step, resume_position);
      spdlog::info("{}: resuming from {} after step {} at reader position {}", sender, *dir,
                   resume_step, resume_position);
    } else {
      spdlog::warn(
          "{}: resuming from {} after step {}; it was saved by {} workers, this job has "
          "{}: every partition starts from its beginning",
          sender, *dir, resume_step, manifest->reader_positions.size(), spec.cluster.workers);
    }
    resume_loop = true;
    board.Step(resume_step, resume_position, 0, resume_position, 0);
    board.Snapshot();
  }
  std::atomic<int> exit_code{-1};
  std::atomic<bool> finished_training{false};
  // Mode checkpoint rollbacks (HeartbeatResponse.rollback): the heartbeat thread records the
  // latest and raises `halt`, which stops the training loop at its next step (and any RPC
  // retry); the loop then pauses until every server reloaded the checkpoint, and rewinds.
  std::atomic<bool> halt{false};
  std::atomic<uint64_t> rollback_wanted{0};
  std::atomic<uint64_t> rollback_handled{0};
  std::mutex rollback_mu;
  v1::Rollback latest_rollback;  // guarded by rollback_mu
  bool first_response = true;    // heartbeat thread only
  std::thread heartbeats([&] {
    while (exit_code.load() < 0) {
      v1::HeartbeatRequest hb;
      FillHeader(hb.mutable_header(), options.token, coordinator.epoch(), sender);
      hb.set_role(v1::ROLE_WORKER);
      hb.set_id(options.id);
      hb.set_instance(instance);
      hb.set_state(finished_training.load() ? v1::NODE_FINISHED : v1::NODE_ACTIVE);
      *hb.mutable_worker() = board.Snapshot();
      auto resp = coordinator.Heartbeat(hb);
      if (resp.ok()) {
        if (resp->kill()) {
          spdlog::warn("{}: killed by the coordinator (ecps kill)", sender);
          std::raise(SIGKILL);
        }
        if (resp->rollback().generation() > 0) {
          std::lock_guard<std::mutex> lock(rollback_mu);
          latest_rollback = resp->rollback();
          const uint64_t generation = resp->rollback().generation();
          if (first_response && resp->rollback().ready()) {
            rollback_handled.store(generation);  // over before this process trained
            board.Resumed(generation);
          }
          if (generation > rollback_wanted.load()) rollback_wanted.store(generation);
          if (rollback_wanted.load() > rollback_handled.load()) halt.store(true);
        }
        first_response = false;
        if (resp->fenced()) {
          spdlog::warn("{}: fenced by the coordinator; exiting", sender);
          exit_code.store(1);
          g_stop.store(true);
        } else if (resp->phase() == v1::JOB_FINISHED) {
          exit_code.store(0);
        } else if (resp->phase() == v1::JOB_FAILED) {
          exit_code.store(1);
          g_stop.store(true);
        }
      }
      if (g_stop.load()) halt.store(true);
      if (g_stop.load() && exit_code.load() < 0) exit_code.store(1);
      std::this_thread::sleep_for(std::chrono::milliseconds(spec.cluster.heartbeat_interval_ms));
    }
  });

  absl::Status status = [&]() -> absl::Status {
    auto map = coordinator.WaitForMap(
        [&](const v1::ClusterMap& m) {
          // A replacement worker may start while a server recovers: a RECOVERING server
          // serves (rebuilding rows on demand); a dead slot waits for its replacement.
          if (m.phase() != v1::JOB_RUNNING && m.phase() != v1::JOB_RECOVERING) return false;
          if (m.servers_size() != spec.cluster.servers) return false;
          for (const auto& s : m.servers()) {
            if (s.state() != v1::NODE_ACTIVE && s.state() != v1::NODE_RECOVERING) return false;
          }
          return true;
        },
        std::max(600000, spec.cluster.connect_timeout_s * 1000));
    if (!map.ok()) return map.status();
    auto model = Dlrm::Create(spec.model, spec.data.batch_size);
    if (!model.ok()) return model.status();
    std::vector<int64_t> sizes;
    for (const auto& t : (*model)->tensors()) sizes.push_back(t.size);
    auto ps = PsClient::Create(*map, spec.model.table_rows, spec.model.embedding_dim, sizes,
                               options.token, sender, spec.cluster.rpc_timeout_ms);
    if (!ps.ok()) return ps.status();
    // Follow the cluster through server failures: report an unreachable server once a
    // second at most, and retry against the latest map (a replacement, a new epoch).
    PsClient::FailureHandling handling;
    handling.map_source = [&coordinator] { return coordinator.map(); };
    handling.on_unavailable = [&coordinator](int server, const std::string& address) {
      coordinator.ReportServerUnreachable(server, "RPCs to the server fail", address);
    };
    handling.cancelled = [&halt] { return g_stop.load() || halt.load(); };
    (*ps)->SetFailureHandling(std::move(handling));
    spdlog::info("{}: training {} steps against {} servers (epoch {})", sender, spec.job.steps,
                 map->servers_size(), map->epoch());
    while (true) {
      TrainingLoop loop(spec, options.id, ps->get(), model->get(), &board, &halt);
      if (resume_loop) loop.ResumeAt(resume_step, resume_position);
      absl::Status trained = loop.Train();
      if (g_stop.load() || rollback_wanted.load() <= rollback_handled.load()) return trained;
      // A rollback: this worker pushes nothing more until every server has reloaded.
      uint64_t generation = rollback_wanted.load();
      board.Paused(generation);
      spdlog::warn(
          "{}: stopped for rollback {} (a server failed); waiting for every server to "
          "reload the last checkpoint",
          sender, generation);
      v1::Rollback target;
      while (true) {
        if (g_stop.load()) return absl::CancelledError("worker interrupted");
        {
          std::lock_guard<std::mutex> lock(rollback_mu);
          if (rollback_wanted.load() > generation) {  // another failure meanwhile
            generation = rollback_wanted.load();
            board.Paused(generation);
          }
          if (latest_rollback.generation() == generation && latest_rollback.ready()) {
            target = latest_rollback;
            rollback_handled.store(generation);
            halt.store(false);
            break;
          }
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      resume_loop = true;
      resume_position = std::max<int64_t>(target.reader_position(), 0);
      resume_step = own_step(target.step(), resume_position);
      board.Rewind(generation, resume_step, resume_position);
      spdlog::warn("{}: rolled back to {}: resuming after step {} at reader position {}{}", sender,
                   target.dir(), resume_step, resume_position,
                   target.reader_position() < 0 ? " (worker count differs: from the start)" : "");
    }
  }();

  if (status.ok()) {
    board.Done();
    finished_training.store(true);
    spdlog::info("{}: done", sender);
  } else {
    spdlog::error("{}: {}", sender, status.ToString());
    board.Fail(status.ToString());
  }
  // Wait until the coordinator has seen the final report and ends the job.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (exit_code.load() < 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (exit_code.load() < 0) exit_code.store(status.ok() ? 0 : 1);
  heartbeats.join();
  return status.ok() ? exit_code.load() : 1;
}

}  // namespace ecps
