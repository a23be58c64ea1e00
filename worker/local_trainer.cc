#include "worker/local_trainer.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "kernels/dense_ops.h"
#include "kernels/optimizers.h"
#include "domain/spec_config.h"
#include "runtime/status_macros.h"
#include "worker/metrics.h"

namespace ecps {

absl::StatusOr<std::unique_ptr<LocalTrainer>> LocalTrainer::Create(const JobSpec& spec) {
  std::unique_ptr<LocalTrainer> t(new LocalTrainer());
  t->sparse_optimizer_ = ToSparseOptimizerConfig(spec.optimizer.sparse);
  t->dense_optimizer_ = ToDenseOptimizerConfig(spec.optimizer.dense);
  RETURN_IF_ERROR(ValidateSparseOptimizer(t->sparse_optimizer_));
  RETURN_IF_ERROR(ValidateDenseOptimizer(t->dense_optimizer_));
  if (spec.data.batch_size < 1) return absl::InvalidArgumentError("data.batch_size must be >= 1");
  t->spec_ = spec;
  // The step's threads are the model's (batch slices, pooling, aggregation, optimizers);
  // BLAS runs single-threaded inside each.
  SetBlasThreads(1);
  ASSIGN_OR_RETURN(t->model_, Dlrm::Create(ToDlrmConfig(spec.model), spec.data.batch_size,
                                           spec.cluster.worker_threads));
  ASSIGN_OR_RETURN(t->data_, MakeDataSource(spec.data, spec.model, spec.job.seed, 0, 1, false));
  t->dim_ = spec.model.embedding_dim;
  t->num_sparse_ = spec.model.num_sparse;
  t->stride_ = t->dim_ + SparseStateFloats(t->sparse_optimizer_, t->dim_);
  for (int64_t rows : spec.model.table_rows) {
    t->tables_.emplace_back(new float[static_cast<size_t>(rows) * t->stride_]);
    t->initialised_.emplace_back(static_cast<size_t>(rows), 0);
  }
  t->model_->InitDense(spec.job.seed, &t->dense_);
  const auto& infos = t->model_->tensors();
  for (size_t i = 0; i < infos.size(); ++i) {
    t->dense_state_.emplace_back(DenseStateFloats(t->dense_optimizer_, infos[i].size), 0.0f);
    t->dense_grads_.emplace_back(infos[i].size, 0.0f);
    t->param_ptrs_.push_back(t->dense_[i].data());
    t->grad_ptrs_.push_back(t->dense_grads_[i].data());
  }
  return t;
}

float* LocalTrainer::MutableRow(int table, int64_t row) const {
  float* p = tables_[table].get() + static_cast<size_t>(row) * stride_;
  if (!initialised_[table][row]) {
    InitSparseRow(sparse_optimizer_, spec_.job.seed, table, row, dim_,
                  spec_.model.table_rows[table], p);
    initialised_[table][row] = 1;
  }
  return p;
}

const float* LocalTrainer::row_payload(int table, int64_t row) const {
  return MutableRow(table, row);
}

absl::StatusOr<float> LocalTrainer::Step() {
  const auto start = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(bool more, data_->Next(spec_.data.batch_size, &batch_));
  if (!more && batch_.size == 0) {  // epoch boundary: start over
    RETURN_IF_ERROR(data_->Seek(0));
    ASSIGN_OR_RETURN(more, data_->Next(spec_.data.batch_size, &batch_));
    if (batch_.size == 0) return absl::FailedPreconditionError("the training data is empty");
  }
  seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return StepOnBatch(batch_);
}

absl::Status LocalTrainer::Train(int64_t steps) {
  for (int64_t i = 0; i < steps; ++i) {
    ASSIGN_OR_RETURN(float loss, Step());
    (void)loss;
  }
  return absl::OkStatus();
}

float LocalTrainer::StepOnBatch(const Batch& b) {
  const auto start = std::chrono::steady_clock::now();
  const int T = num_sparse_, d = dim_, n = b.size;
  Dedupe(b, T, &unique_);
  rows_data_.resize(T);
  rows_ptrs_.resize(T);
  ParallelRunner* runner = model_->runner();
  runner->Run(T, [&](int t) {  // a table's rows (and their lazy init) on one thread
    const auto& rows = unique_.rows[t];
    rows_data_[t].resize(rows.size() * d);
    for (size_t i = 0; i < rows.size(); ++i) {
      std::memcpy(rows_data_[t].data() + i * d, MutableRow(t, rows[i]), sizeof(float) * d);
    }
    rows_ptrs_[t] = rows_data_[t].data();
  });
  pooled_.resize(static_cast<size_t>(n) * T * d);
  d_pooled_.resize(pooled_.size());
  PoolEmbeddings(unique_, rows_ptrs_, n, T, d, pooled_.data(), runner);
  const float loss = model_->ForwardBackward(n, b.dense.data(), pooled_.data(), b.labels.data(),
                                             param_ptrs_, d_pooled_.data(), grad_ptrs_);
  AggregateRowGrads(unique_, d_pooled_.data(), n, T, d, &row_grads_, runner);
  // Each table's rows, and each dense tensor, are updated by one thread: disjoint state.
  payload_ptrs_.resize(T);
  runner->Run(T, [&](int t) {
    const auto& rows = unique_.rows[t];
    std::vector<float*>& ptrs = payload_ptrs_[t];
    ptrs.resize(rows.size());
    for (size_t i = 0; i < rows.size(); ++i) ptrs[i] = MutableRow(t, rows[i]);
    ApplySparseUpdates(sparse_optimizer_, d, static_cast<int64_t>(rows.size()),
                       row_grads_[t].data(), ptrs.data());
  });
  ++steps_;
  runner->Run(static_cast<int>(dense_.size()), [&](int i) {
    ApplyDenseUpdate(dense_optimizer_, steps_, static_cast<int64_t>(dense_[i].size()),
                     dense_grads_[i].data(), dense_[i].data(), dense_state_[i].data());
  });
  samples_ += n;
  seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return loss;
}

void LocalTrainer::Predict(const Batch& b, std::vector<float>* probs) {
  const int T = num_sparse_, d = dim_, n = b.size;
  pooled_.resize(static_cast<size_t>(n) * T * d);
  for (int s = 0; s < n; ++s) {
    for (int t = 0; t < T; ++t) {
      const size_t slot = static_cast<size_t>(s) * T + t;
      std::memcpy(pooled_.data() + slot * d, MutableRow(t, b.sparse[slot]), sizeof(float) * d);
    }
  }
  probs->resize(n);
  model_->Forward(n, b.dense.data(), pooled_.data(), param_ptrs_, probs->data());
}

absl::StatusOr<EvalResult> LocalTrainer::Evaluate() {
  ASSIGN_OR_RETURN(auto eval, MakeDataSource(spec_.data, spec_.model, spec_.job.seed, 0, 1, true,
                                             spec_.job.eval_samples));
  std::vector<float> all_probs, all_labels, probs;
  Batch b;
  const int chunk = std::max(spec_.data.batch_size, 1024);
  while (true) {
    ASSIGN_OR_RETURN(bool more, eval->Next(chunk, &b));
    if (b.size > 0) {
      Predict(b, &probs);
      all_probs.insert(all_probs.end(), probs.begin(), probs.end());
      all_labels.insert(all_labels.end(), b.labels.begin(), b.labels.end());
    }
    if (!more || b.size == 0) break;
  }
  EvalResult r;
  r.samples = static_cast<int64_t>(all_probs.size());
  r.auc = Auc(all_probs, all_labels);
  r.logloss = LogLoss(all_probs, all_labels);
  return r;
}

double LocalTrainer::samples_per_second() const {
  return seconds_ > 0 ? static_cast<double>(samples_) / seconds_ : 0.0;
}

}  // namespace ecps
