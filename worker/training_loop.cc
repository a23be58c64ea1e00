#include "worker/training_loop.h"

#include <cmath>
#include <future>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/error_kind.h"
#include "spdlog/spdlog.h"
#include "worker/metrics.h"

namespace ecps {

absl::Status TrainingLoop::Train() {
  auto source = MakeDataSource(spec_.data, spec_.model, spec_.job.seed, worker_,
                               spec_.cluster.workers,
                               /*eval=*/false);
  if (!source.ok()) return source.status();
  source_ = std::move(*source);
  trained_step_ = start_step_;
  trained_samples_ = start_position_;
  if (start_position_ > 0) {
    if (absl::Status s = source_->Seek(start_position_); !s.ok()) return s;
  }
  board_->TrainingStarts();
  const absl::Status trained = spec_.job.synchronous ? TrainInLockstep() : TrainPipelined();
  // Also when training failed (past data.max_bad_lines, say): the report names the lines.
  board_->Data(source_->bad_lines(), source_->bad_line_examples(), /*exhausted=*/false);
  if (!trained.ok()) return trained;
  if (source_->bad_lines() > 0) {
    std::string examples;
    for (const std::string& e : source_->bad_line_examples()) examples += "\n  " + e;
    spdlog::warn("worker {}: skipped {} malformed input lines (data.max_bad_lines {}):{}",
                 worker_, source_->bad_lines(), spec_.data.max_bad_lines, examples);
  }
  const int64_t steps = spec_.job.steps, batch = spec_.data.batch_size;
  if (start_step_ < steps && trained_samples_ == 0) return NothingTrained();
  // Every step asked for a full batch: a missing step or a short batch means the reader ran
  // out (a batch is short only at the partition's end; malformed lines are read past).
  if (trained_step_ < steps || trained_samples_ - start_position_ < (steps - start_step_) * batch) {
    spdlog::warn(
        "worker {}: data ran out at step {} of {}: trained {} samples of the {} asked "
        "(job.steps {} x data.batch_size {}) in data.epochs {}",
        worker_, trained_step_, steps, trained_samples_, steps * batch, steps, batch,
        spec_.data.epochs);
    board_->Data(source_->bad_lines(), source_->bad_line_examples(), /*exhausted=*/true);
  }
  // The final evaluation, at the last step trained (before job.steps when a finite
  // partition ran out first).
  if (worker_ == 0) return Evaluate(board_->Snapshot().step());
  return absl::OkStatus();
}

void TrainingLoop::Reported(int64_t step, int64_t samples, double loss,
                            const PreparedBatch& batch) {
  trained_step_ = step;
  trained_samples_ = samples;
  board_->Step(step, samples, loss, batch.end_position, source_->bad_lines());
  board_->DataEpoch(static_cast<int>(batch.epoch) + 1, spec_.data.epochs);
}

absl::Status TrainingLoop::NothingTrained() const {
  const std::string data =
      spec_.data.source == DataSourceType::kSynthetic
          ? absl::StrCat("data.synthetic.num_samples = ", spec_.data.synthetic.num_samples)
          : absl::StrCat("data.paths [", absl::StrJoin(spec_.data.paths, ", "), "]");
  const std::string partition = absl::StrCat("its partition (", worker_, " of ",
                                             spec_.cluster.workers, " workers) of ", data);
  if (source_->bad_lines() > 0) {
    const auto examples = source_->bad_line_examples();
    return absl::InvalidArgumentError(absl::StrCat(
        "worker ", worker_, " trained 0 samples: all ", source_->bad_lines(), " lines of ",
        partition, " are malformed, the first: ", examples.empty() ? "?" : examples[0]));
  }
  std::string why;
  if (spec_.cluster.workers > 1) {
    why = absl::StrCat(": the training split has fewer rows than cluster.workers (",
                       spec_.cluster.workers, ")");
  }
  return absl::InvalidArgumentError(
      absl::StrCat("worker ", worker_, " trained 0 samples: ", partition, " is empty", why));
}

bool TrainingLoop::EvaluatesAfter(int64_t step) const {
  return worker_ == 0 && spec_.job.eval_every > 0 && step % spec_.job.eval_every == 0 &&
         step < spec_.job.steps;  // the last step is evaluated by Train itself
}

absl::Status TrainingLoop::Read(PreparedBatch* p) {
  auto more = source_->Next(spec_.data.batch_size, &p->batch);
  if (!more.ok()) return more.status();
  if (spec_.data.epochs > 1 && source_->epoch() != read_epoch_) {
    read_epoch_ = source_->epoch();
    spdlog::info("worker {}: reading epoch {}/{} (reader position {})", worker_, read_epoch_ + 1,
                 spec_.data.epochs, source_->position());
  }
  // The last batch of a finite partition comes with `false` and may be short: it trains too.
  p->valid = p->batch.size > 0;
  p->end_position = source_->position();
  p->epoch = source_->epoch();
  if (p->valid) Dedupe(p->batch, spec_.model.num_sparse, &p->ids);
  return absl::OkStatus();
}

absl::Status TrainingLoop::Prepare(PreparedBatch* p) {
  if (absl::Status s = Read(p); !s.ok() || !p->valid) return s;
  return ps_->PullRows(p->ids, &p->rows);
}

absl::Status TrainingLoop::PrepareAfter(const PreparedBatch& previous, PreparedBatch* p) {
  if (absl::Status s = Read(p); !s.ok() || !p->valid) return s;
  return PullAfter(previous, p);
}

absl::Status TrainingLoop::PullAfter(const PreparedBatch& previous, PreparedBatch* p) {
  FindSharedRows(previous.ids, p->ids, &p->shared);
  return ps_->PullRowsWithState(p->ids, p->shared.positions, &p->rows, &p->shared.payloads,
                                &p->shared.payload_floats);
}

absl::Status TrainingLoop::CatchUp(const StepGrads& grads, PreparedBatch* next,
                                   PulledDense* dense) const {
  if (absl::Status s = ReplaySparse(sparse_optimizer_, spec_.model.embedding_dim, grads.rows,
                                    &next->shared, &next->rows);
      !s.ok()) {
    return s;
  }
  return ReplayDense(dense_optimizer_, grads.dense, dense);
}

namespace {

// The DenseMath's view of a prepared batch: pointers into it, nothing copied.
StepInput InputOf(const PreparedBatch& p, const std::vector<std::vector<float>>& dense) {
  StepInput in;
  in.batch = p.batch.size;
  in.dense_x = p.batch.dense.data();
  in.labels = p.batch.labels.data();
  in.index = p.ids.index.data();
  for (size_t t = 0; t < p.ids.rows.size(); ++t) {
    in.rows.push_back(p.rows[t].data());
    in.row_count.push_back(static_cast<int64_t>(p.ids.rows[t].size()));
  }
  for (const auto& t : dense) in.params.push_back(t.data());
  return in;
}

}  // namespace

absl::StatusOr<float> TrainingLoop::Compute(int64_t step, const PreparedBatch& p,
                                            const std::vector<std::vector<float>>& dense,
                                            StepGrads* grads) {
  const int ns = spec_.model.num_sparse, dim = spec_.model.embedding_dim;
  const auto& infos = model_->tensors();
  const StepInput in = InputOf(p, dense);
  StepOutput out;
  grads->rows.resize(ns);
  for (int t = 0; t < ns; ++t) {
    grads->rows[t].resize(p.ids.rows[t].size() * dim);
    out.row_grads.push_back(grads->rows[t].data());
  }
  grads->dense.resize(infos.size());
  for (size_t i = 0; i < infos.size(); ++i) {
    grads->dense[i].resize(infos[i].size);
    out.dense_grads.push_back(grads->dense[i].data());
  }
  const std::string e = math_->TrainStep(in, &out);
  if (absl::Status s = CountDetections(step, !e.empty()); !s.ok()) return s;
  if (!e.empty()) {
    return absl::InternalError(
        absl::StrCat("step ", step, ": the ", math_->device(), " dense math failed: ", e));
  }
  return static_cast<float>(out.loss);
}

absl::Status TrainingLoop::CountDetections(int64_t step, bool failed) {
  if (const int64_t cleared = math_->abft_cleared(); cleared != abft_cleared_seen_) {
    spdlog::info("worker {}: step {}: {} GEMM checksum columns missed the probabilistic bound and "
                 "were cleared (computed again to the same bits, within the rounding bound; {} "
                 "so far): not a detection",
                 worker_, step, cleared - abft_cleared_seen_, cleared);
    abft_cleared_seen_ = cleared;
  }
  const int64_t total = math_->abft_detections();
  if (total == abft_seen_) return absl::OkStatus();
  board_->AbftDetections(total - abft_seen_);
  abft_seen_ = total;
  abft_steps_.push_back(step);
  const int64_t window_start = step - WorkerSection::kAbftDetectionWindow;
  while (abft_steps_.front() <= window_start) abft_steps_.pop_front();
  const int max = spec_.worker.abft_max_detections;
  spdlog::warn("worker {}: step {} failed a GEMM checksum and was computed again ({} of the last "
               "{} steps; worker.abft_max_detections {})",
               worker_, step, abft_steps_.size(), WorkerSection::kAbftDetectionWindow, max);
  if (max == 0) return absl::OkStatus();
  std::string why;
  if (failed) {
    why = absl::StrCat("step ", step, " failed its GEMM checksums every time it was computed");
  } else if (static_cast<int64_t>(abft_steps_.size()) >= max) {
    why = absl::StrCat(abft_steps_.size(), " steps computed again after failed GEMM checksums "
                       "within the last ", WorkerSection::kAbftDetectionWindow,
                       " steps (worker.abft_max_detections ", max, ")");
  } else {
    return absl::OkStatus();
  }
  return WithErrorKind(
      absl::InternalError(absl::StrCat("worker ", worker_, " computes wrongly: ", why)),
      ErrorKind::kUnhealthyWorker);
}

absl::Status TrainingLoop::CheckFinite(int64_t step, float loss, const StepGrads& grads) {
  if (!std::isfinite(loss)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "step ", step, ": the training loss is ", loss,
        " (not finite): the model diverged; nothing of this step was pushed (try a smaller "
        "optimizer lr)"));
  }
  for (size_t t = 0; t < grads.dense.size(); ++t) {
    for (float g : grads.dense[t]) {
      if (!std::isfinite(g)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "step ", step, ": a gradient of dense tensor ", t, " is ", g,
            " (not finite): the model diverged; nothing of this step was pushed"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status TrainingLoop::TrainInLockstep() {
  PreparedBatch current;
  std::vector<std::vector<float>> dense;
  StepGrads grads;
  int64_t samples = start_position_;
  for (int64_t step = start_step_ + 1; step <= spec_.job.steps; ++step) {
    if (stop_->load()) return absl::CancelledError("worker interrupted");
    if (absl::Status s = Prepare(&current); !s.ok()) return s;
    if (!current.valid) break;
    if (absl::Status s = ps_->PullDense(&dense); !s.ok()) return s;
    auto computed = Compute(step, current, dense, &grads);
    if (!computed.ok()) return computed.status();
    const float loss = *computed;
    if (absl::Status s = CheckFinite(step, loss, grads); !s.ok()) return s;
    if (absl::Status s = ps_->Push(current.ids, grads.rows, grads.dense); !s.ok()) return s;
    samples += current.batch.size;
    // The position after the batch just trained: a job that resumes from this report (a
    // checkpoint, a replacement worker) trains the next batch.
    Reported(step, samples, loss, current);
    if (EvaluatesAfter(step)) {
      if (absl::Status s = Evaluate(step); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

// TrainPipelined's state. Batches rotate over kSlots slots (pushed, computing, pulled, read
// ahead), gradients, losses and dense values over two.
struct TrainingLoop::Pipeline {
  static constexpr int kHintLead = 2;
  static constexpr int kSlots = 3 + kHintLead;
  Pipeline(int64_t first_step, int64_t position) : first(first_step), samples(position) {}
  // Waits for the background task before an early return. FinishPush leaves no task behind
  // (after an evaluation, say), and wait() on that would throw.
  void Settle() {
    if (background.valid()) background.wait();
  }

  const int64_t first;  // the first step trained
  PreparedBatch batches[kSlots];
  PulledDense dense[2];
  StepGrads grads[2];
  float losses[2] = {0, 0};
  int64_t samples;           // the reader's position after the last step reported
  int64_t pushed_step = -1;  // the step the background task pushes, -1: none
  // Declared last, so destroyed (waited for) first: its task uses the members above.
  std::future<absl::Status> background;
};

namespace {

// After a step's background task: the tensors it found unmoved at the version this worker
// replayed them to are this step's own (`own`), bit for bit: the next step takes them over
// (this step is done with them, and the task launched next overwrites or keeps the slot it
// leaves them). Returns the versions the servers hold after this step's push, as CatchUp
// replays it.
std::vector<int64_t> TakeOverUnmoved(PulledDense* pulled, PulledDense* own) {
  for (size_t k = 0; k < pulled->as_held.size(); ++k) {
    if (!pulled->as_held[k]) continue;
    std::swap(pulled->tensors[k], own->tensors[k]);
    std::swap(pulled->states[k], own->states[k]);
    pulled->as_held[k] = 0;
  }
  std::vector<int64_t> held(pulled->versions.size());
  for (size_t k = 0; k < held.size(); ++k) held[k] = pulled->versions[k] + 1;
  return held;
}

}  // namespace

// Step i computes on the main thread while one background task pushes step i - 1 and then
// pulls the dense tensors and the rows for step i + 1. Those pulls see every update of this
// worker up to step i - 1 (whose push was acknowledged first) but not step i's, still being
// computed: once it is, CatchUp applies step i's update to what they pulled, as the servers
// will (the rows step i also updates come whole, with their optimizer state, and so do the
// dense tensors), and step i + 1 computes on what the servers hold after step i's push. The
// server round trips (including, with ack after_parity, the parity holders') hide behind the
// computation. The task also reads the batch of step i + 1 + kHintLead ahead, so that while a
// server recovers, the hint naming the rows that batch will pull reaches it kHintLead steps
// before the pull: the lost ones are rebuilt off the critical path, and with two steps of
// lead the server can rebuild two steps' hints in one batch (Rebuilder::Prefetch). Batches
// rotate over 3 + kHintLead slots (pushed, computing, pulled, read ahead), gradients and
// dense values over two. A step is reported (progress, reader position) only once its push
// is acknowledged.
absl::Status TrainingLoop::TrainPipelined() {
  Pipeline p(start_step_ + 1, start_position_);
  const int64_t first = p.first;
  if (first > spec_.job.steps) return absl::OkStatus();
  if (absl::Status s = StartPipeline(&p); !s.ok()) return s;
  for (int64_t step = first; step <= spec_.job.steps; ++step) {
    const int64_t i = step - first;
    PreparedBatch& current = p.batches[i % Pipeline::kSlots];
    if (!current.valid) break;
    if (stop_->load()) {
      p.Settle();
      return absl::CancelledError("worker interrupted");
    }
    auto computed = Compute(step, current, p.dense[i % 2].tensors, &p.grads[i % 2]);
    if (!computed.ok()) {
      // An unhealthy worker stops for a replacement, which resumes after the last step
      // reported: the push in flight (a step that passed its checks) is waited for and
      // reported, so that the replacement does not apply it a second time.
      if (HasErrorKind(computed.status(), ErrorKind::kUnhealthyWorker)) {
        FinishPush(&p).IgnoreError();
      } else {
        p.Settle();
      }
      return computed.status();
    }
    p.losses[i % 2] = *computed;
    if (absl::Status s = CheckFinite(step, p.losses[i % 2], p.grads[i % 2]); !s.ok()) {
      p.Settle();
      return s;
    }
    if (absl::Status s = FinishPush(&p); !s.ok()) return s;
    std::vector<int64_t> held = TakeOverUnmoved(&p.dense[(i + 1) % 2], &p.dense[i % 2]);
    PreparedBatch& following = p.batches[(i + 1) % Pipeline::kSlots];
    const bool follows = step + 1 <= spec_.job.steps && following.valid;
    LaunchPush(&p, step, std::move(held));
    // The task reads this step's gradients and step i + 1's ids; this writes step i + 1's
    // rows and the other dense slot: nothing the task writes.
    if (follows) {
      if (absl::Status s = CatchUp(p.grads[i % 2], &following, &p.dense[(i + 1) % 2]); !s.ok()) {
        p.Settle();
        return s;
      }
    }
    if (EvaluatesAfter(step)) {
      if (absl::Status s = FinishPush(&p); !s.ok()) return s;
      if (absl::Status s = Evaluate(step); !s.ok()) return s;
    }
  }
  return FinishPush(&p);
}

absl::Status TrainingLoop::StartPipeline(Pipeline* p) {
  // The first step misses nothing: its pulls come before any push.
  if (absl::Status s = Prepare(&p->batches[0]); !s.ok()) return s;
  if (absl::Status s = ps_->PullDense(&p->dense[0].tensors); !s.ok()) return s;
  // The task for step 0's time: prefetch step 1, read the kHintLead steps after it.
  p->background = std::async(std::launch::async, [this, p]() -> absl::Status {
    const int64_t first = p->first;
    if (!p->batches[0].valid || first + 1 > spec_.job.steps) return absl::OkStatus();
    if (absl::Status s = PullDenseInto(&p->dense[1]); !s.ok()) return s;
    if (absl::Status s = PrepareAfter(p->batches[0], &p->batches[1]); !s.ok()) return s;
    for (int j = 2; j < 2 + Pipeline::kHintLead; ++j) {
      if (!p->batches[j - 1].valid || first + j > spec_.job.steps) break;
      if (absl::Status s = ReadAhead(&p->batches[j]); !s.ok()) return s;
    }
    return absl::OkStatus();
  });
  return absl::OkStatus();
}

void TrainingLoop::LaunchPush(Pipeline* p, int64_t step, std::vector<int64_t> held) {
  constexpr int kHintLead = Pipeline::kHintLead, kSlots = Pipeline::kSlots;
  const int64_t i = step - p->first;
  // Push this step, then pull what step i + 2 needs (its batch was read kHintLead tasks
  // ago) and read step i + 2 + kHintLead's into the slot of step i - 1, whose push is done;
  // dense values land in the slot this step used. A batch is read only while the one before
  // it in the partition was valid. Step i + 1's batch and dense values were pulled by the
  // task just finished; this step's update is replayed on them beside the push.
  PreparedBatch& following = p->batches[(i + 1) % kSlots];
  PreparedBatch& next = p->batches[(i + 2) % kSlots];
  const bool fetch = step + 2 <= spec_.job.steps && next.valid;
  const bool ahead =
      step + 2 + kHintLead <= spec_.job.steps && p->batches[(i + 1 + kHintLead) % kSlots].valid;
  PreparedBatch& read_slot = p->batches[(i + 2 + kHintLead) % kSlots];
  read_slot.valid = false;
  p->pushed_step = step;
  p->background = std::async(
      std::launch::async,
      [this, p, i, fetch, ahead, pull = &next, after = &following, held = std::move(held),
       read = &read_slot]() -> absl::Status {
        // The read ahead runs beside the push and the pulls (it is needed only by a later
        // task): reading and deduplicating a batch fills the time spent waiting for servers.
        std::future<absl::Status> reader;
        if (ahead) {
          reader = std::async(std::launch::async, [this, read] { return ReadAhead(read); });
        }
        absl::Status status =
            ps_->Push(p->batches[i % kSlots].ids, p->grads[i % 2].rows, p->grads[i % 2].dense);
        if (status.ok() && fetch) {
          status = PullDenseInto(&p->dense[i % 2], held.empty() ? nullptr : &held);
        }
        if (status.ok() && fetch) status = PullAfter(*after, pull);
        absl::Status read_status = reader.valid() ? reader.get() : absl::OkStatus();
        return status.ok() ? read_status : status;
      });
}

absl::Status TrainingLoop::FinishPush(Pipeline* p) {
  absl::Status s = p->background.valid() ? p->background.get() : absl::OkStatus();
  if (!s.ok()) return s;
  if (p->pushed_step >= 0) {
    const PreparedBatch& b = p->batches[(p->pushed_step - p->first) % Pipeline::kSlots];
    p->samples += b.batch.size;
    Reported(p->pushed_step, p->samples, p->losses[(p->pushed_step - p->first) % 2], b);
    p->pushed_step = -1;
  }
  return absl::OkStatus();
}

absl::Status TrainingLoop::ReadAhead(PreparedBatch* p) {
  if (absl::Status s = Read(p); !s.ok()) return s;
  if (p->valid) ps_->PrefetchRows(p->ids);
  return absl::OkStatus();
}

absl::Status TrainingLoop::PullDenseInto(PulledDense* d, const std::vector<int64_t>* held) {
  return ps_->PullDense(&d->tensors, &d->states, &d->versions, held, &d->as_held);
}

absl::Status TrainingLoop::Evaluate(int64_t step) {
    auto source = MakeDataSource(spec_.data, spec_.model, spec_.job.seed, 0, 1, /*eval=*/true);
    if (!source.ok()) return source.status();
    std::vector<std::vector<float>> dense;
    if (absl::Status s = ps_->PullDense(&dense); !s.ok()) return s;
    const int ns = spec_.model.num_sparse;
    std::vector<float> probs, labels, batch_probs;
    PreparedBatch p;
    while (static_cast<int64_t>(labels.size()) < spec_.job.eval_samples) {
      int want = static_cast<int>(std::min<int64_t>(spec_.data.batch_size,
                                                    spec_.job.eval_samples - labels.size()));
      auto more = (*source)->Next(want, &p.batch);
      if (!more.ok()) return more.status();
      if (p.batch.size == 0) break;
      Dedupe(p.batch, ns, &p.ids);
      if (absl::Status s = ps_->PullRows(p.ids, &p.rows); !s.ok()) return s;
      batch_probs.resize(p.batch.size);
      if (std::string e = math_->Predict(InputOf(p, dense), batch_probs.data()); !e.empty()) {
        return absl::InternalError(absl::StrCat("step ", step, ": evaluation on the ",
                                                math_->device(), " failed: ", e));
      }
      probs.insert(probs.end(), batch_probs.begin(), batch_probs.end());
      labels.insert(labels.end(), p.batch.labels.begin(), p.batch.labels.end());
      if (!*more) break;  // that was the held-out split's last (possibly short) batch
    }
    if (labels.empty()) return absl::OkStatus();
    double auc = Auc(probs, labels), ll = LogLoss(probs, labels);
    board_->Eval(step, auc, ll);
    spdlog::info("worker 0: step {} eval AUC {:.4f} logloss {:.4f} on {} samples", step, auc, ll,
                 labels.size());
    return absl::OkStatus();
  }

}  // namespace ecps
