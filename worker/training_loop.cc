#include "worker/training_loop.h"

#include <future>

#include "spdlog/spdlog.h"
#include "worker/metrics.h"

namespace ecps {



absl::Status TrainingLoop::Train() {
    auto source = MakeDataSource(spec_.data, spec_.model, spec_.job.seed, worker_,
                                 spec_.cluster.workers,
                                 /*eval=*/false);
    if (!source.ok()) return source.status();
    source_ = std::move(*source);
    if (start_position_ > 0) {
      if (absl::Status s = source_->Seek(start_position_); !s.ok()) return s;
    }
    const int batch_size = spec_.data.batch_size;
    const int ns = spec_.model.num_sparse, dim = spec_.model.embedding_dim;
    const auto& infos = model_->tensors();
    std::vector<std::vector<float>> dense, dense_grads(infos.size());
    for (size_t i = 0; i < infos.size(); ++i) dense_grads[i].resize(infos[i].size);
    std::vector<float> pooled, d_pooled;
    std::vector<std::vector<float>> row_grads;

    auto prepare = [&](PreparedBatch* p) -> absl::Status {
      auto more = source_->Next(batch_size, &p->batch);
      if (!more.ok()) return more.status();
      p->valid = *more && p->batch.size > 0;
      p->end_position = source_->position();
      if (!p->valid) return absl::OkStatus();
      Dedupe(p->batch, ns, &p->ids);
      return ps_->PullRows(p->ids, &p->rows);
    };

    PreparedBatch current, next;
    if (absl::Status s = prepare(&current); !s.ok()) return s;
    int64_t samples = start_position_;
    for (int64_t step = start_step_ + 1; step <= spec_.job.steps && current.valid; ++step) {
      if (stop_->load()) return absl::CancelledError("worker interrupted");
      // Prefetch the next batch's rows while this one computes (async mode).
      std::future<absl::Status> prefetch;
      bool last = step == spec_.job.steps;
      if (!spec_.job.synchronous && !last) {
        prefetch = std::async(std::launch::async, [&] { return prepare(&next); });
      }
      if (absl::Status s = ps_->PullDense(&dense); !s.ok()) return s;
      const int b = current.batch.size;
      pooled.resize(static_cast<size_t>(b) * ns * dim);
      d_pooled.resize(pooled.size());
      std::vector<const float*> rows_ptr, params;
      for (const auto& r : current.rows) rows_ptr.push_back(r.data());
      PoolEmbeddings(current.ids, rows_ptr, b, ns, dim, pooled.data());
      for (const auto& t : dense) params.push_back(t.data());
      std::vector<float*> grads;
      for (auto& g : dense_grads) grads.push_back(g.data());
      float loss = model_->ForwardBackward(b, current.batch.dense.data(), pooled.data(),
                                           current.batch.labels.data(), params, d_pooled.data(),
                                           grads);
      AggregateRowGrads(current.ids, d_pooled.data(), b, ns, dim, &row_grads);
      absl::Status pushed = ps_->Push(current.ids, row_grads, dense_grads);
      if (prefetch.valid()) {
        absl::Status s = prefetch.get();
        if (!s.ok()) return s;
      }
      if (!pushed.ok()) return pushed;
      samples += b;
      // The position after the batch just trained, not after the one prefetched: a job that
      // resumes from this report (a checkpoint, a replacement worker) trains the next batch.
      board_->Step(step, samples, loss, current.end_position, source_->bad_lines());
      if (spec_.job.synchronous && !last) {
        if (absl::Status s = prepare(&next); !s.ok()) return s;
      }
      if (worker_ == 0 && spec_.job.eval_every > 0 && step % spec_.job.eval_every == 0 &&
          !last) {
        if (absl::Status s = Evaluate(step); !s.ok()) return s;
      }
      if (!last) std::swap(current, next);
    }
    if (source_->bad_lines() > 0) {
      std::string examples;
      for (const std::string& e : source_->bad_line_examples()) examples += "\n  " + e;
      spdlog::warn("worker {}: skipped {} malformed input lines (data.max_bad_lines {}):{}",
                   worker_, source_->bad_lines(), spec_.data.max_bad_lines, examples);
    }
    if (worker_ == 0) {
      if (absl::Status s = Evaluate(spec_.job.steps); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

absl::Status TrainingLoop::Evaluate(int64_t step) {
    auto source = MakeDataSource(spec_.data, spec_.model, spec_.job.seed, 0, 1, /*eval=*/true);
    if (!source.ok()) return source.status();
    std::vector<std::vector<float>> dense;
    if (absl::Status s = ps_->PullDense(&dense); !s.ok()) return s;
    std::vector<const float*> params;
    for (const auto& t : dense) params.push_back(t.data());
    const int ns = spec_.model.num_sparse, dim = spec_.model.embedding_dim;
    std::vector<float> probs, labels, pooled, batch_probs;
    PreparedBatch p;
    while (static_cast<int64_t>(labels.size()) < spec_.job.eval_samples) {
      int want = static_cast<int>(std::min<int64_t>(spec_.data.batch_size,
                                                    spec_.job.eval_samples - labels.size()));
      auto more = (*source)->Next(want, &p.batch);
      if (!more.ok()) return more.status();
      if (!*more || p.batch.size == 0) break;
      Dedupe(p.batch, ns, &p.ids);
      if (absl::Status s = ps_->PullRows(p.ids, &p.rows); !s.ok()) return s;
      std::vector<const float*> rows_ptr;
      for (const auto& r : p.rows) rows_ptr.push_back(r.data());
      const int b = p.batch.size;
      pooled.resize(static_cast<size_t>(b) * ns * dim);
      batch_probs.resize(b);
      PoolEmbeddings(p.ids, rows_ptr, b, ns, dim, pooled.data());
      model_->Forward(b, p.batch.dense.data(), pooled.data(), params, batch_probs.data());
      probs.insert(probs.end(), batch_probs.begin(), batch_probs.end());
      labels.insert(labels.end(), p.batch.labels.begin(), p.batch.labels.end());
    }
    if (labels.empty()) return absl::OkStatus();
    double auc = Auc(probs, labels), ll = LogLoss(probs, labels);
    board_->Eval(step, auc, ll);
    spdlog::info("worker 0: step {} eval AUC {:.4f} logloss {:.4f} on {} samples", step, auc, ll,
                 labels.size());
    return absl::OkStatus();
  }

}  // namespace ecps
