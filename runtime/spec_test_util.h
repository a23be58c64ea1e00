// What the spec tests share: a temporary folder, a parse error's text, a field-by-field
// comparison of two specs and a spec that sets every key.
#ifndef ECPS_RUNTIME_SPEC_TEST_UTIL_H_
#define ECPS_RUNTIME_SPEC_TEST_UTIL_H_

#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "runtime/spec.h"

namespace ecps {

// A fresh temporary folder, removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() / absl::StrCat("ecps_spec_test_", rd(), "_", rd());
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path Write(const std::string& name, const std::string& text) const {
    std::filesystem::path p = path_ / name;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p) << text;
    return p;
  }

 private:
  std::filesystem::path path_;
};

inline std::string Msg(const absl::StatusOr<JobSpec>& s) { return std::string(s.status().message()); }

inline uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof(b));
  return b;
}
inline uint64_t Bits(double d) {
  uint64_t b;
  std::memcpy(&b, &d, sizeof(b));
  return b;
}

// ExpectSpecEq's sections: job, cluster, coordinator and model.
inline void ExpectShapeSectionsEq(const JobSpec& a, const JobSpec& b) {
  EXPECT_EQ(a.job.name, b.job.name);
  EXPECT_EQ(a.job.output_dir, b.job.output_dir);
  EXPECT_EQ(a.job.steps, b.job.steps);
  EXPECT_EQ(a.job.eval_every, b.job.eval_every);
  EXPECT_EQ(a.job.eval_samples, b.job.eval_samples);
  EXPECT_EQ(a.job.seed, b.job.seed);
  EXPECT_EQ(a.job.token, b.job.token);
  EXPECT_EQ(a.job.resume_from, b.job.resume_from);
  EXPECT_EQ(a.job.synchronous, b.job.synchronous);

  EXPECT_EQ(a.cluster.servers, b.cluster.servers);
  EXPECT_EQ(a.cluster.spares, b.cluster.spares);
  EXPECT_EQ(a.cluster.workers, b.cluster.workers);
  EXPECT_EQ(a.cluster.host, b.cluster.host);
  EXPECT_EQ(a.cluster.coordinator_port, b.cluster.coordinator_port);
  EXPECT_EQ(a.cluster.heartbeat_interval_ms, b.cluster.heartbeat_interval_ms);
  EXPECT_EQ(a.cluster.heartbeat_timeout_ms, b.cluster.heartbeat_timeout_ms);
  EXPECT_EQ(a.cluster.rpc_timeout_ms, b.cluster.rpc_timeout_ms);
  EXPECT_EQ(a.cluster.worker_threads, b.cluster.worker_threads);
  EXPECT_EQ(a.cluster.server_threads, b.cluster.server_threads);
  EXPECT_EQ(a.cluster.coordinator, b.cluster.coordinator);

  EXPECT_EQ(a.coordinator.replicas, b.coordinator.replicas);
  EXPECT_EQ(a.coordinator.state_store, b.coordinator.state_store);
  EXPECT_EQ(a.coordinator.etcd_endpoints, b.coordinator.etcd_endpoints);
  EXPECT_EQ(a.coordinator.etcd_prefix, b.coordinator.etcd_prefix);
  EXPECT_EQ(a.coordinator.lease_ttl_s, b.coordinator.lease_ttl_s);

  EXPECT_EQ(a.model.num_dense, b.model.num_dense);
  EXPECT_EQ(a.model.num_sparse, b.model.num_sparse);
  EXPECT_EQ(a.model.embedding_dim, b.model.embedding_dim);
  EXPECT_EQ(a.model.table_rows, b.model.table_rows);
  EXPECT_EQ(a.model.bottom_mlp, b.model.bottom_mlp);
  EXPECT_EQ(a.model.top_mlp, b.model.top_mlp);
  EXPECT_EQ(a.model.pooling, b.model.pooling);
}

// ExpectSpecEq's sections: optimizer and data.
inline void ExpectTrainingSectionsEq(const JobSpec& a, const JobSpec& b) {
  EXPECT_EQ(a.optimizer.sparse.type, b.optimizer.sparse.type);
  EXPECT_EQ(Bits(a.optimizer.sparse.lr), Bits(b.optimizer.sparse.lr));
  EXPECT_EQ(Bits(a.optimizer.sparse.eps), Bits(b.optimizer.sparse.eps));
  EXPECT_EQ(Bits(a.optimizer.sparse.initial_accumulator),
            Bits(b.optimizer.sparse.initial_accumulator));
  EXPECT_EQ(a.optimizer.dense.type, b.optimizer.dense.type);
  EXPECT_EQ(Bits(a.optimizer.dense.lr), Bits(b.optimizer.dense.lr));
  EXPECT_EQ(Bits(a.optimizer.dense.beta1), Bits(b.optimizer.dense.beta1));
  EXPECT_EQ(Bits(a.optimizer.dense.beta2), Bits(b.optimizer.dense.beta2));
  EXPECT_EQ(Bits(a.optimizer.dense.eps), Bits(b.optimizer.dense.eps));

  EXPECT_EQ(a.data.source, b.data.source);
  EXPECT_EQ(a.data.paths, b.data.paths);
  EXPECT_EQ(a.data.batch_size, b.data.batch_size);
  EXPECT_EQ(Bits(a.data.eval_fraction), Bits(b.data.eval_fraction));
  EXPECT_EQ(a.data.epochs, b.data.epochs);
  EXPECT_EQ(a.data.shuffle, b.data.shuffle);
  EXPECT_EQ(a.data.shuffle_block_lines, b.data.shuffle_block_lines);
  EXPECT_EQ(a.data.max_bad_lines, b.data.max_bad_lines);
  EXPECT_EQ(a.data.synthetic.num_samples, b.data.synthetic.num_samples);
  EXPECT_EQ(Bits(a.data.synthetic.zipf_s), Bits(b.data.synthetic.zipf_s));
  EXPECT_EQ(a.data.synthetic.hidden_seed, b.data.synthetic.hidden_seed);
  EXPECT_EQ(Bits(a.data.synthetic.label_noise), Bits(b.data.synthetic.label_noise));
}

// ExpectSpecEq's sections: fault_tolerance, faults and monitoring (not compared when the
// fault lists differ in length).
inline void ExpectRecoverySectionsEq(const JobSpec& a, const JobSpec& b) {
  const auto& fa = a.fault_tolerance;
  const auto& fb = b.fault_tolerance;
  EXPECT_EQ(fa.mode, fb.mode);
  EXPECT_EQ(fa.k, fb.k);
  EXPECT_EQ(fa.r, fb.r);
  EXPECT_EQ(fa.ack, fb.ack);
  EXPECT_EQ(fa.async_window, fb.async_window);
  EXPECT_EQ(fa.async_linger_ms, fb.async_linger_ms);
  EXPECT_EQ(fa.parity_transport, fb.parity_transport);
  EXPECT_EQ(fa.dense_replicas, fb.dense_replicas);
  EXPECT_EQ(fa.codec_backend, fb.codec_backend);
  EXPECT_EQ(Bits(fa.rebuild_rate_mb_s), Bits(fb.rebuild_rate_mb_s));
  EXPECT_EQ(fa.checkpoint.dir, fb.checkpoint.dir);
  EXPECT_EQ(fa.checkpoint.interval_steps, fb.checkpoint.interval_steps);
  EXPECT_EQ(Bits(fa.checkpoint.interval_seconds), Bits(fb.checkpoint.interval_seconds));
  EXPECT_EQ(fa.checkpoint.save_final, fb.checkpoint.save_final);
  EXPECT_EQ(fa.checkpoint.keep, fb.checkpoint.keep);
  EXPECT_EQ(Bits(fa.scrub.interval_s), Bits(fb.scrub.interval_s));
  EXPECT_EQ(Bits(fa.scrub.rate_mb_s), Bits(fb.scrub.rate_mb_s));

  ASSERT_EQ(a.faults.size(), b.faults.size());
  for (size_t i = 0; i < a.faults.size(); ++i) {
    EXPECT_EQ(a.faults[i].at_step, b.faults[i].at_step) << i;
    EXPECT_EQ(a.faults[i].action, b.faults[i].action) << i;
    EXPECT_EQ(a.faults[i].target, b.faults[i].target) << i;
    EXPECT_EQ(Bits(a.faults[i].duration_s), Bits(b.faults[i].duration_s)) << i;
  }

  EXPECT_EQ(a.monitoring.progress, b.monitoring.progress);
  EXPECT_EQ(a.monitoring.metrics_interval_ms, b.monitoring.metrics_interval_ms);
  EXPECT_EQ(a.monitoring.report_every_steps, b.monitoring.report_every_steps);
  EXPECT_EQ(a.monitoring.log_level, b.monitoring.log_level);
}

// Field-by-field equality (spec.h has no operator==); floats compare bit for bit.
inline void ExpectSpecEq(const JobSpec& a, const JobSpec& b) {
  ExpectShapeSectionsEq(a, b);
  ExpectTrainingSectionsEq(a, b);
  ExpectRecoverySectionsEq(a, b);
}

// ---------------------------------------------------------------------------------------

inline constexpr char kFullSpec[] = R"(job:
  name: full.job_1
  output_dir: /tmp/ecps-out
  steps: 5000
  eval_every: 500
  eval_samples: 1000
  seed: 18446744073709551615
  token: s3cret-token
  resume_from: ""
  synchronous: true
cluster:
  servers: 6
  spares: 1
  workers: 3
  host: 0.0.0.0
  coordinator_port: 7000
  heartbeat_interval_ms: 100
  heartbeat_timeout_ms: 900
  rpc_timeout_ms: 5000
  worker_threads: 4
  server_threads: 3
model:
  num_dense: 13
  num_sparse: 26
  embedding_dim: 8
  table_rows: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21,
               22, 23, 24, 25, 10000000000]
  bottom_mlp: [128, 32, 8]
  top_mlp: []
  pooling: mean
optimizer:
  sparse:
    type: rowwise_adagrad
    lr: 0.123456789
    eps: 1.0e-6
    initial_accumulator: 0.1
  dense:
    type: sgd
    lr: 3.3e-3
    beta1: 0.5
    beta2: 0.75
    eps: 1e-7
data:
  source: criteo_tsv
  paths:
    - day_0.tsv
    - sub/day_1.tsv
  batch_size: 4096
  eval_fraction: 0.2
  max_bad_lines: 0
  synthetic:
    num_samples: 123456
    zipf_s: 1.2
    hidden_seed: 99
    label_noise: 0.0
fault_tolerance:
  mode: erasure_code
  k: 4
  r: 2
  ack: async
  async_window: 128
  async_linger_ms: 7
  parity_transport: tcp
  dense_replicas: -1
  codec_backend: isal
  rebuild_rate_mb_s: 250.5
  checkpoint:
    dir: /tmp/ecps-ckpt
    interval_steps: 1000
    interval_seconds: 60.5
    save_final: false
    keep: 5
faults:
  - at_step: 100
    action: kill_server
    target: 5
  - {at_step: 200, action: stop_server, target: 0, duration_s: 2.5}
  - at_step: 5000
    action: kill_worker
    target: 2
monitoring:
  progress: false
  metrics_interval_ms: 250
  report_every_steps: 50
  log_level: debug
)";

}  // namespace ecps

#endif  // ECPS_RUNTIME_SPEC_TEST_UTIL_H_
