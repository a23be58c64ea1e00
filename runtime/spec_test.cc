// The job spec: every key's range, every cross-field rule, every error message and the
// rendering. Over 600 lines because it holds one test per rule, and the spec has many keys.
#include "runtime/spec.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ecps {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// A fresh temporary folder, removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = fs::temp_directory_path() / absl::StrCat("ecps_spec_test_", rd(), "_", rd());
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }
  fs::path Write(const std::string& name, const std::string& text) const {
    fs::path p = path_ / name;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
    return p;
  }

 private:
  fs::path path_;
};

std::string Msg(const absl::StatusOr<JobSpec>& s) { return std::string(s.status().message()); }

uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof(b));
  return b;
}
uint64_t Bits(double d) {
  uint64_t b;
  std::memcpy(&b, &d, sizeof(b));
  return b;
}

// Field-by-field equality (spec.h has no operator==); floats compare bit for bit.
void ExpectSpecEq(const JobSpec& a, const JobSpec& b) {
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
  EXPECT_EQ(a.data.max_bad_lines, b.data.max_bad_lines);
  EXPECT_EQ(a.data.synthetic.num_samples, b.data.synthetic.num_samples);
  EXPECT_EQ(Bits(a.data.synthetic.zipf_s), Bits(b.data.synthetic.zipf_s));
  EXPECT_EQ(a.data.synthetic.hidden_seed, b.data.synthetic.hidden_seed);
  EXPECT_EQ(Bits(a.data.synthetic.label_noise), Bits(b.data.synthetic.label_noise));

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

// ---------------------------------------------------------------------------------------

TEST(SpecTest, MinimalSpecGetsEveryDefault) {
  auto spec = ParseSpec("job:\n  name: mini\n", "mini.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->path, "");
  EXPECT_EQ(spec->job.name, "mini");
  EXPECT_EQ(spec->job.output_dir, "runs/mini");
  EXPECT_EQ(spec->job.steps, 1000);
  EXPECT_EQ(spec->job.eval_every, 0);
  EXPECT_EQ(spec->job.eval_samples, 8192);
  EXPECT_EQ(spec->job.seed, 42u);
  EXPECT_EQ(spec->job.token, "");
  EXPECT_EQ(spec->job.resume_from, "");
  EXPECT_FALSE(spec->job.synchronous);

  EXPECT_EQ(spec->cluster.servers, 2);
  EXPECT_EQ(spec->cluster.spares, 0);
  EXPECT_EQ(spec->cluster.workers, 1);
  EXPECT_EQ(spec->cluster.host, "");  // 127.0.0.1 under `ecps run`, else 0.0.0.0
  EXPECT_EQ(spec->cluster.advertise, "");
  EXPECT_EQ(spec->cluster.coordinator_port, 0);
  EXPECT_EQ(spec->cluster.coordinator, "");
  EXPECT_EQ(spec->cluster.connect_timeout_s, 300);
  EXPECT_EQ(spec->cluster.heartbeat_interval_ms, 200);
  EXPECT_EQ(spec->cluster.heartbeat_timeout_ms, 1500);
  EXPECT_EQ(spec->cluster.rpc_timeout_ms, 10000);
  EXPECT_EQ(spec->cluster.worker_threads, 1);
  EXPECT_EQ(spec->cluster.server_threads, 2);

  EXPECT_EQ(spec->model.num_dense, 13);
  EXPECT_EQ(spec->model.num_sparse, 26);
  EXPECT_EQ(spec->model.embedding_dim, 16);
  EXPECT_EQ(spec->model.table_rows, std::vector<int64_t>(26, 100000));
  EXPECT_EQ(spec->model.bottom_mlp, (std::vector<int>{64, 16}));
  EXPECT_EQ(spec->model.top_mlp, (std::vector<int>{64, 32}));
  EXPECT_EQ(spec->model.pooling, PoolingType::kSum);

  EXPECT_EQ(spec->optimizer.sparse.type, SparseOptimizerType::kAdagrad);
  EXPECT_EQ(spec->optimizer.sparse.lr, 0.05f);
  EXPECT_EQ(spec->optimizer.sparse.eps, 1e-8f);
  EXPECT_EQ(spec->optimizer.sparse.initial_accumulator, 0.0f);
  EXPECT_EQ(spec->optimizer.dense.type, DenseOptimizerType::kAdam);
  EXPECT_EQ(spec->optimizer.dense.lr, 0.001f);
  EXPECT_EQ(spec->optimizer.dense.beta1, 0.9f);
  EXPECT_EQ(spec->optimizer.dense.beta2, 0.999f);
  EXPECT_EQ(spec->optimizer.dense.eps, 1e-8f);

  EXPECT_EQ(spec->data.source, DataSourceType::kSynthetic);
  EXPECT_TRUE(spec->data.paths.empty());
  EXPECT_EQ(spec->data.batch_size, 512);
  EXPECT_EQ(spec->data.eval_fraction, 0.05);
  EXPECT_EQ(spec->data.max_bad_lines, 100);
  EXPECT_EQ(spec->data.synthetic.num_samples, 0);
  EXPECT_EQ(spec->data.synthetic.zipf_s, 1.05);
  EXPECT_EQ(spec->data.synthetic.hidden_seed, 7u);
  EXPECT_EQ(spec->data.synthetic.label_noise, 0.1);

  EXPECT_EQ(spec->fault_tolerance.mode, FaultToleranceMode::kNone);
  EXPECT_EQ(spec->fault_tolerance.k, 4);
  EXPECT_EQ(spec->fault_tolerance.r, 1);
  EXPECT_EQ(spec->fault_tolerance.ack, AckPolicy::kAfterParity);
  EXPECT_EQ(spec->fault_tolerance.async_window, 4096);
  EXPECT_EQ(spec->fault_tolerance.async_linger_ms, 0);
  EXPECT_EQ(spec->fault_tolerance.parity_transport, "grpc");
  EXPECT_EQ(spec->fault_tolerance.dense_replicas, 0);  // mode none: no backups
  EXPECT_EQ(spec->fault_tolerance.codec_backend, "auto");
  EXPECT_EQ(spec->fault_tolerance.rebuild_rate_mb_s, 0);
  EXPECT_EQ(spec->fault_tolerance.checkpoint.dir, "runs/mini/checkpoints");
  EXPECT_EQ(spec->fault_tolerance.checkpoint.interval_steps, 0);
  EXPECT_EQ(spec->fault_tolerance.checkpoint.interval_seconds, 0);
  EXPECT_TRUE(spec->fault_tolerance.checkpoint.save_final);
  EXPECT_EQ(spec->fault_tolerance.checkpoint.keep, 3);

  EXPECT_TRUE(spec->faults.empty());
  EXPECT_TRUE(spec->monitoring.progress);
  EXPECT_EQ(spec->monitoring.metrics_interval_ms, 1000);
  EXPECT_EQ(spec->monitoring.report_every_steps, 10);
  EXPECT_EQ(spec->monitoring.log_level, "info");
}

TEST(SpecTest, EmptyMapAndEmptySectionsAreAllDefaults) {
  auto a = ParseSpec("{}");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->job.name, "ecps-job");
  EXPECT_EQ(a->job.output_dir, "runs/ecps-job");
  auto b = ParseSpec("job:\ncluster:\nmodel:\nfaults:\nmonitoring:\n");
  ASSERT_TRUE(b.ok()) << b.status();
  ExpectSpecEq(*a, *b);
}

// cluster.worker_device: cuda parses in a build with CUDA, and a build without it refuses it
// at validation, saying so.
TEST(SpecTest, WorkerDeviceCudaNeedsACudaBuild) {
  auto spec = ParseSpec("cluster:\n  worker_device: cuda\n  gpus_per_worker: 2\n", "gpu.yaml");
  if (BuiltWithCuda()) {
    ASSERT_TRUE(spec.ok()) << spec.status();
    EXPECT_EQ(spec->cluster.worker_device, WorkerDevice::kCuda);
    EXPECT_EQ(spec->cluster.gpus_per_worker, 2);
    EXPECT_THAT(SpecToYaml(*spec), HasSubstr("worker_device: \"cuda\""));
  } else {
    EXPECT_THAT(Msg(spec), HasSubstr("gpu.yaml:2: cluster.worker_device: cuda, but this ecps was "
                                     "built without CUDA"));
  }
}

TEST(SpecTest, EmptyTextIsAnError) {
  auto spec = ParseSpec("# nothing here\n", "empty.yaml");
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(Msg(spec), HasSubstr("empty.yaml: the spec is empty"));
}

// Every key set to a non-default value.
constexpr char kFullSpec[] = R"(job:
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

TEST(SpecTest, FullSpecParsesEveryField) {
  TempDir dir;
  dir.Write("day_0.tsv", "0\t1\n");
  dir.Write("sub/day_1.tsv", "1\t2\n");
  fs::path file = dir.Write("full.yaml", kFullSpec);
  auto spec = LoadSpecFile(file.string());
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->path, file.string());
  EXPECT_EQ(spec->job.name, "full.job_1");
  EXPECT_EQ(spec->job.output_dir, "/tmp/ecps-out");
  EXPECT_EQ(spec->job.steps, 5000);
  EXPECT_EQ(spec->job.eval_every, 500);
  EXPECT_EQ(spec->job.eval_samples, 1000);
  EXPECT_EQ(spec->job.seed, 18446744073709551615ull);
  EXPECT_EQ(spec->job.token, "s3cret-token");
  EXPECT_EQ(spec->job.resume_from, "");
  EXPECT_TRUE(spec->job.synchronous);

  EXPECT_EQ(spec->cluster.servers, 6);
  EXPECT_EQ(spec->cluster.spares, 1);
  EXPECT_EQ(spec->cluster.workers, 3);
  EXPECT_EQ(spec->cluster.host, "0.0.0.0");
  EXPECT_EQ(spec->cluster.coordinator_port, 7000);
  EXPECT_EQ(spec->cluster.heartbeat_interval_ms, 100);
  EXPECT_EQ(spec->cluster.heartbeat_timeout_ms, 900);
  EXPECT_EQ(spec->cluster.rpc_timeout_ms, 5000);
  EXPECT_EQ(spec->cluster.worker_threads, 4);
  EXPECT_EQ(spec->cluster.server_threads, 3);

  EXPECT_EQ(spec->model.embedding_dim, 8);
  ASSERT_EQ(spec->model.table_rows.size(), 26u);
  EXPECT_EQ(spec->model.table_rows[0], 1);
  EXPECT_EQ(spec->model.table_rows[25], 10000000000);
  EXPECT_EQ(spec->model.bottom_mlp, (std::vector<int>{128, 32, 8}));
  EXPECT_TRUE(spec->model.top_mlp.empty());
  EXPECT_EQ(spec->model.pooling, PoolingType::kMean);

  EXPECT_EQ(spec->optimizer.sparse.type, SparseOptimizerType::kRowwiseAdagrad);
  EXPECT_EQ(spec->optimizer.sparse.lr, 0.123456789f);
  EXPECT_EQ(spec->optimizer.sparse.eps, 1.0e-6f);
  EXPECT_EQ(spec->optimizer.sparse.initial_accumulator, 0.1f);
  EXPECT_EQ(spec->optimizer.dense.type, DenseOptimizerType::kSgd);
  EXPECT_EQ(spec->optimizer.dense.lr, 3.3e-3f);
  EXPECT_EQ(spec->optimizer.dense.beta1, 0.5f);
  EXPECT_EQ(spec->optimizer.dense.beta2, 0.75f);
  EXPECT_EQ(spec->optimizer.dense.eps, 1e-7f);

  EXPECT_EQ(spec->data.source, DataSourceType::kCriteoTsv);
  // Relative data paths are resolved against the spec file's folder.
  ASSERT_EQ(spec->data.paths.size(), 2u);
  EXPECT_EQ(fs::path(spec->data.paths[0]), fs::absolute(dir.path() / "day_0.tsv"));
  EXPECT_EQ(fs::path(spec->data.paths[1]), fs::absolute(dir.path() / "sub/day_1.tsv"));
  EXPECT_EQ(spec->data.batch_size, 4096);
  EXPECT_EQ(spec->data.eval_fraction, 0.2);
  EXPECT_EQ(spec->data.max_bad_lines, 0);
  EXPECT_EQ(spec->data.synthetic.num_samples, 123456);
  EXPECT_EQ(spec->data.synthetic.zipf_s, 1.2);
  EXPECT_EQ(spec->data.synthetic.hidden_seed, 99u);
  EXPECT_EQ(spec->data.synthetic.label_noise, 0.0);

  EXPECT_EQ(spec->fault_tolerance.mode, FaultToleranceMode::kErasureCode);
  EXPECT_EQ(spec->fault_tolerance.k, 4);
  EXPECT_EQ(spec->fault_tolerance.r, 2);
  EXPECT_EQ(spec->fault_tolerance.ack, AckPolicy::kAsync);
  EXPECT_EQ(spec->fault_tolerance.async_window, 128);
  EXPECT_EQ(spec->fault_tolerance.async_linger_ms, 7);
  EXPECT_EQ(spec->fault_tolerance.parity_transport, "tcp");
  EXPECT_EQ(spec->fault_tolerance.dense_replicas, 2);  // -1 resolved to r
  EXPECT_EQ(spec->fault_tolerance.codec_backend, "isal");
  EXPECT_EQ(spec->fault_tolerance.rebuild_rate_mb_s, 250.5);
  EXPECT_EQ(spec->fault_tolerance.checkpoint.dir, "/tmp/ecps-ckpt");
  EXPECT_EQ(spec->fault_tolerance.checkpoint.interval_steps, 1000);
  EXPECT_EQ(spec->fault_tolerance.checkpoint.interval_seconds, 60.5);
  EXPECT_FALSE(spec->fault_tolerance.checkpoint.save_final);
  EXPECT_EQ(spec->fault_tolerance.checkpoint.keep, 5);

  ASSERT_EQ(spec->faults.size(), 3u);
  EXPECT_EQ(spec->faults[0].at_step, 100);
  EXPECT_EQ(spec->faults[0].action, "kill_server");
  EXPECT_EQ(spec->faults[0].target, 5);
  EXPECT_EQ(spec->faults[0].duration_s, 0);
  EXPECT_EQ(spec->faults[1].action, "stop_server");
  EXPECT_EQ(spec->faults[1].duration_s, 2.5);
  EXPECT_EQ(spec->faults[2].at_step, 5000);
  EXPECT_EQ(spec->faults[2].action, "kill_worker");
  EXPECT_EQ(spec->faults[2].target, 2);

  EXPECT_FALSE(spec->monitoring.progress);
  EXPECT_EQ(spec->monitoring.metrics_interval_ms, 250);
  EXPECT_EQ(spec->monitoring.report_every_steps, 50);
  EXPECT_EQ(spec->monitoring.log_level, "debug");
}

TEST(SpecTest, RoundTripsThroughSpecToYaml) {
  TempDir dir;
  dir.Write("day_0.tsv", "0\n");
  dir.Write("sub/day_1.tsv", "0\n");
  auto full = LoadSpecFile(dir.Write("full.yaml", kFullSpec).string());
  ASSERT_TRUE(full.ok()) << full.status();
  auto minimal = ParseSpec("job: {name: mini}\n");
  ASSERT_TRUE(minimal.ok()) << minimal.status();
  auto checkpointed = ParseSpec("fault_tolerance: {mode: checkpoint}\ncluster: {servers: 1}\n");
  ASSERT_TRUE(checkpointed.ok()) << checkpointed.status();

  for (const JobSpec* original : {&*full, &*minimal, &*checkpointed}) {
    std::string yaml = SpecToYaml(*original);
    auto again = ParseSpec(yaml, "roundtrip.yaml");
    ASSERT_TRUE(again.ok()) << again.status() << "\n" << yaml;
    ExpectSpecEq(*original, *again);
    EXPECT_EQ(SpecToYaml(*again), yaml);  // a fixed point
  }
}

TEST(SpecTest, SpecToYamlWritesEveryKey) {
  std::string yaml = SpecToYaml(*ParseSpec("{}"));
  for (const char* key : {"name:",
                          "output_dir:",
                          "steps:",
                          "eval_every:",
                          "eval_samples:",
                          "seed:",
                          "token:",
                          "resume_from:",
                          "synchronous:",
                          "servers:",
                          "spares:",
                          "workers:",
                          "host:",
                          "coordinator_port:",
                          "heartbeat_interval_ms:",
                          "heartbeat_timeout_ms:",
                          "rpc_timeout_ms:",
                          "worker_threads:",
                          "server_threads:",
                          "num_dense:",
                          "num_sparse:",
                          "embedding_dim:",
                          "table_rows:",
                          "bottom_mlp:",
                          "top_mlp:",
                          "pooling:",
                          "sparse:",
                          "dense:",
                          "type:",
                          "lr:",
                          "eps:",
                          "initial_accumulator:",
                          "beta1:",
                          "beta2:",
                          "source:",
                          "paths:",
                          "batch_size:",
                          "eval_fraction:",
                          "max_bad_lines:",
                          "synthetic:",
                          "num_samples:",
                          "zipf_s:",
                          "hidden_seed:",
                          "label_noise:",
                          "mode:",
                          "k:",
                          "r:",
                          "ack:",
                          "async_window:",
                          "async_linger_ms:",
                          "parity_transport:",
                          "dense_replicas:",
                          "codec_backend:",
                          "rebuild_rate_mb_s:",
                          "checkpoint:",
                          "dir:",
                          "interval_steps:",
                          "interval_seconds:",
                          "save_final:",
                          "faults:",
                          "progress:",
                          "metrics_interval_ms:",
                          "report_every_steps:",
                          "log_level:"}) {
    EXPECT_TRUE(yaml.find(absl::StrCat(" ", key)) != std::string::npos ||
                yaml.find(absl::StrCat("\n", key)) != std::string::npos)
        << key;
  }
}

TEST(SpecTest, StringsRoundTripWithSpecialCharacters) {
  JobSpec spec = *ParseSpec("{}");
  spec.job.output_dir = "runs/a \"b\" \\ c: #d [e] {f} 'g' \xc3\xa9\n\ttab";
  spec.job.token = "a\"b\\c:#{}[]'!&*";
  spec.fault_tolerance.checkpoint.dir = "- not a list";
  spec.cluster.host = "::1";
  auto again = ParseSpec(SpecToYaml(spec));
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << SpecToYaml(spec);
  ExpectSpecEq(spec, *again);
}

TEST(SpecTest, StandbyCoordinatorsWithEtcdRoundTrip) {
  auto spec = ParseSpec(
      "cluster: {coordinator: 'h1:7000, h2:7000'}\n"
      "coordinator:\n  replicas: 3\n  state_store: etcd\n"
      "  etcd_endpoints: [10.0.0.1:2379, 'http://etcd-2:2379']\n  lease_ttl_s: 5\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->coordinator.replicas, 3);
  EXPECT_EQ(spec->coordinator.state_store, StateStoreType::kEtcd);
  EXPECT_EQ(spec->coordinator.etcd_endpoints,
            (std::vector<std::string>{"10.0.0.1:2379", "http://etcd-2:2379"}));
  EXPECT_EQ(spec->coordinator.etcd_prefix, "/ecps/");
  EXPECT_EQ(spec->coordinator.lease_ttl_s, 5);
  auto again = ParseSpec(SpecToYaml(*spec));
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << SpecToYaml(*spec);
  ExpectSpecEq(*spec, *again);
  // The defaults: one coordinator and its state log.
  auto plain = ParseSpec("{}");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->coordinator.replicas, 1);
  EXPECT_EQ(plain->coordinator.state_store, StateStoreType::kFile);
}

TEST(SpecTest, FloatsRoundTripExactly) {
  std::mt19937 rng(1234);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::uniform_real_distribution<float> exponent(-30.0f, 3.0f);
  for (int i = 0; i < 300; ++i) {
    JobSpec spec = *ParseSpec("{}");
    spec.optimizer.sparse.lr = std::pow(10.0f, exponent(rng));
    spec.optimizer.dense.lr = std::nextafter(std::pow(10.0f, exponent(rng)), 1.0f);
    spec.optimizer.dense.beta1 = static_cast<float>(unit(rng) * 0.999);
    spec.data.synthetic.zipf_s = 0.01 + unit(rng) * 9;
    spec.data.synthetic.label_noise = unit(rng);
    spec.data.eval_fraction = unit(rng) * 0.99;
    spec.fault_tolerance.rebuild_rate_mb_s = unit(rng) * 1e6;
    auto again = ParseSpec(SpecToYaml(spec));
    ASSERT_TRUE(again.ok()) << again.status();
    ExpectSpecEq(spec, *again);
  }
}

TEST(SpecTest, DerivedDefaults) {
  // dense_replicas -1 becomes r in the redundant modes.
  auto ec = ParseSpec("cluster: {servers: 5}\nfault_tolerance: {mode: erasure_code, k: 3, r: 2}\n");
  ASSERT_TRUE(ec.ok()) << ec.status();
  EXPECT_EQ(ec->fault_tolerance.dense_replicas, 2);
  auto rep = ParseSpec("cluster: {servers: 3}\nfault_tolerance: {mode: replication, r: 2}\n");
  ASSERT_TRUE(rep.ok()) << rep.status();
  EXPECT_EQ(rep->fault_tolerance.dense_replicas, 2);
  // An explicit value stays.
  auto explicit_replicas = ParseSpec(
      "cluster: {servers: 5}\nfault_tolerance: {mode: erasure_code, k: 3, r: 2, "
      "dense_replicas: 4}\n");
  ASSERT_TRUE(explicit_replicas.ok()) << explicit_replicas.status();
  EXPECT_EQ(explicit_replicas->fault_tolerance.dense_replicas, 4);
  // Checkpoint mode without an interval checkpoints every steps/10 steps.
  auto ckpt = ParseSpec("job: {steps: 750}\nfault_tolerance: {mode: checkpoint}\n");
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_EQ(ckpt->fault_tolerance.checkpoint.interval_steps, 75);
  auto by_time =
      ParseSpec("fault_tolerance: {mode: checkpoint, checkpoint: {interval_seconds: 30}}\n");
  ASSERT_TRUE(by_time.ok()) << by_time.status();
  EXPECT_EQ(by_time->fault_tolerance.checkpoint.interval_steps, 0);
  // Output and checkpoint folders follow the job name and output_dir.
  auto dirs = ParseSpec("job: {name: a, output_dir: out/x}\n");
  ASSERT_TRUE(dirs.ok()) << dirs.status();
  EXPECT_EQ(dirs->fault_tolerance.checkpoint.dir, "out/x/checkpoints");
  // table_rows as one number repeats it for every table.
  auto rows = ParseSpec("model: {num_sparse: 3, table_rows: 77}\n");
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ(rows->model.table_rows, (std::vector<int64_t>{77, 77, 77}));
  // A single path may be written without a list.
  TempDir dir;
  dir.Write("one.csv", "label\n");
  auto one = LoadSpecFile(dir.Write("s.yaml", "data: {source: criteo_csv, paths: one.csv}\n"));
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->data.paths.size(), 1u);
}

TEST(SpecTest, ParseSpecResolvesDataPathsAgainstCwd) {
  TempDir dir;
  dir.Write("d.tsv", "0\n");
  fs::path old = fs::current_path();
  fs::current_path(dir.path());
  auto spec = ParseSpec("data: {source: criteo_tsv, paths: [d.tsv]}\n");
  auto missing = ParseSpec("data: {source: criteo_tsv, paths: [e.tsv]}\n", "cwd.yaml");
  fs::current_path(old);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->data.paths, std::vector<std::string>{"d.tsv"});
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(Msg(missing), HasSubstr("cwd.yaml:1: data.paths[0]: no such file: e.tsv"));
}

// ---------------------------------------------------------------------------------------
// Bad specs: each row is a spec and a substring its error must contain (file, line, key path).

struct BadSpec {
  const char* name;
  const char* yaml;
  const char* error;
};

const BadSpec kBadSpecs[] = {
    {"unknown_top_level", "jobs:\n  name: x\n",
     "bad.yaml:1: jobs: unknown key; did you mean \"job\"?"},
    {"unknown_nested", "model:\n  embeding_dim: 16\n",
     "bad.yaml:2: model.embeding_dim: unknown key; did you mean \"embedding_dim\"?"},
    {"key_in_wrong_section", "job:\n  name: x\nmodel:\n  batch_size: 5\n",
     "bad.yaml:4: model.batch_size: unknown key; did you mean \"data.batch_size\""},
    {"unknown_fault_key", "faults:\n  - at_step: 1\n    action: kill_worker\n    when: 3\n",
     "bad.yaml:4: faults[0].when: unknown key; known keys here: at_step, action, target, "
     "duration_s"},
    {"string_for_int", "job:\n  steps: abc\n",
     "bad.yaml:2: job.steps: expected an integer, got abc"},
    {"quoted_int", "job:\n  steps: \"100\"\n",
     "bad.yaml:2: job.steps: expected an integer, got the string \"100\""},
    {"non_integer", "data:\n  batch_size: 1.5\n",
     "bad.yaml:2: data.batch_size: expected an integer, got 1.5"},
    {"int_overflow", "job:\n  steps: 99999999999999999999\n",
     "bad.yaml:2: job.steps: must be between 1 and 1000000000000, got 99999999999999999999"},
    {"int32_overflow", "cluster:\n  servers: 4294967297\n",
     "bad.yaml:2: cluster.servers: must be between 1 and 1024, got 4294967297"},
    {"list_for_map", "cluster: [1, 2]\n", "bad.yaml:1: cluster: expected a map of keys"},
    {"map_for_int", "cluster:\n  servers: {a: 1}\n",
     "bad.yaml:2: cluster.servers: expected an integer, got a map"},
    {"list_for_string", "job:\n  name: [a, b]\n",
     "bad.yaml:2: job.name: expected a string, got a list"},
    {"empty_value", "job:\n  steps:\n", "bad.yaml:2: job.steps: has no value"},
    {"embedding_dim_zero", "job:\n  name: q\nmodel:\n  embedding_dim: 0\n",
     "bad.yaml:4: model.embedding_dim: must be between 1 and 1024, got 0"},
    {"bottom_mlp_mismatch", "model:\n  embedding_dim: 32\n  bottom_mlp: [64, 16]\n",
     "bad.yaml:3: model.bottom_mlp: last layer must equal model.embedding_dim (32)"},
    {"bottom_mlp_default_mismatch", "model:\n  embedding_dim: 32\n",
     "bad.yaml:2: model.bottom_mlp: last layer must equal model.embedding_dim (32)"},
    {"bottom_mlp_scalar", "model:\n  bottom_mlp: 16\n",
     "bad.yaml:2: model.bottom_mlp: expected a list of integers"},
    {"bottom_mlp_empty", "model:\n  bottom_mlp: []\n",
     "bad.yaml:2: model.bottom_mlp: must have between 1 and 16 entries, got 0"},
    {"table_rows_length", "model:\n  num_sparse: 3\n  table_rows: [10, 20]\n",
     "bad.yaml:3: model.table_rows: must have one entry per sparse feature (model.num_sparse = 3), "
     "got 2"},
    {"table_rows_zero_entry", "model:\n  num_sparse: 2\n  table_rows:\n    - 10\n    - 0\n",
     "bad.yaml:5: model.table_rows[1]: must be between 1 and 100000000000, got 0"},
    {"table_rows_negative", "model:\n  table_rows: -5\n",
     "bad.yaml:2: model.table_rows: must be between 1 and 100000000000, got -5"},
    // 26 tables of 10^11 rows of 128 floats on 2 servers: 667 TB each, before any state.
    {"table_rows_no_machine_has",
     "cluster:\n  servers: 2\nmodel:\n  embedding_dim: 128\n  bottom_mlp: [128]\n"
     "  table_rows: 100000000000\n",
     "bad.yaml:6: model.table_rows: 2600000000000 rows of 128 floats over 2 servers are 605 TiB "
     "of weights per server before optimizer state and parity, more than any machine has (the "
     "bound is 64 TiB)"},
    {"pooling", "model:\n  pooling: max\n",
     "bad.yaml:2: model.pooling: must be one of sum, mean; got \"max\""},
    {"ec_too_wide",
     "cluster:\n  servers: 3\nfault_tolerance:\n  mode: erasure_code\n  k: 3\n  r: 1\n",
     "bad.yaml:5: fault_tolerance.k: k + r must be at most cluster.servers (3)"},
    {"ec_over_255",
     "cluster:\n  servers: 300\nfault_tolerance:\n  mode: erasure_code\n  k: 254\n  r: 2\n",
     "bad.yaml:5: fault_tolerance.k: k + r must be at most 255"},
    {"k_zero", "fault_tolerance:\n  k: 0\n",
     "bad.yaml:2: fault_tolerance.k: must be between 1 and 254, got 0"},
    {"r_zero", "fault_tolerance:\n  r: 0\n",
     "bad.yaml:2: fault_tolerance.r: must be between 1 and 254, got 0"},
    {"replication_too_many", "fault_tolerance:\n  mode: replication\n  r: 2\n",
     "bad.yaml:3: fault_tolerance.r: replication keeps 1 + r copies on distinct servers, so 1 + r "
     "must be at most cluster.servers (2), got r = 2"},
    {"codec_backend", "fault_tolerance:\n  codec_backend: avx2\n",
     "bad.yaml:2: fault_tolerance.codec_backend: must be one of auto, ecps, ecps-avx512-gfni, "
     "ecps-avx2-gfni, ecps-avx2, ecps-portable, isal, cuda; got \"avx2\""},
    {"mode", "fault_tolerance:\n  mode: raid\n",
     "bad.yaml:2: fault_tolerance.mode: must be one of none, erasure_code, replication, "
     "checkpoint; got \"raid\""},
    {"ack", "fault_tolerance:\n  ack: sync\n",
     "bad.yaml:2: fault_tolerance.ack: must be one of after_parity, async; got \"sync\" (did you "
     "mean \"async\"?)"},
    {"parity_transport", "fault_tolerance:\n  parity_transport: udp\n",
     "bad.yaml:2: fault_tolerance.parity_transport: must be one of grpc, tcp"},
    {"parity_transport_tls",
     "security:\n  tls:\n    ca: ca.pem\nfault_tolerance:\n  parity_transport: tcp\n",
     "bad.yaml:5: fault_tolerance.parity_transport: tcp sends parity batches unencrypted"},
    {"dense_replicas_too_many", "fault_tolerance:\n  dense_replicas: 2\n",
     "bad.yaml:2: fault_tolerance.dense_replicas: must be between -1 and cluster.servers - 1 (1)"},
    {"source", "data:\n  source: criteo\n",
     "bad.yaml:2: data.source: must be one of synthetic, criteo_tsv, criteo_csv; got \"criteo\""},
    {"criteo_without_paths", "data:\n  source: criteo_tsv\n",
     "bad.yaml:2: data.paths: must list at least one input file when data.source is criteo_tsv"},
    {"criteo_missing_file", "data:\n  source: criteo_csv\n  paths: [/nonexistent/x.csv]\n",
     "bad.yaml:3: data.paths[0]: no such file: /nonexistent/x.csv"},
    {"criteo_wrong_num_dense",
     "model:\n  num_dense: 10\ndata:\n  source: criteo_csv\n  paths: [/]\n",
     "bad.yaml:2: model.num_dense: must be 13 when data.source is criteo_csv"},
    {"paths_with_synthetic", "data:\n  paths: [a.tsv]\n",
     "bad.yaml:2: data.paths: is only used when data.source is criteo_tsv or criteo_csv"},
    {"epochs_zero", "data:\n  epochs: 0\n",
     "bad.yaml:2: data.epochs: must be between 1 and 1000000, got 0"},
    {"epochs_negative", "data:\n  epochs: -2\n",
     "bad.yaml:2: data.epochs: must be between 1 and 1000000, got -2"},
    {"epochs_synthetic", "data:\n  epochs: 3\n",
     "bad.yaml:2: data.epochs: is 3, but epochs are passes over finite files (data.source "
     "criteo_tsv or criteo_csv); the synthetic source is a stream"},
    {"shuffle_synthetic", "data:\n  shuffle: true\n",
     "bad.yaml:2: data.shuffle: shuffles finite files (data.source criteo_tsv or criteo_csv)"},
    {"shuffle_block_zero", "data:\n  shuffle_block_lines: 0\n",
     "bad.yaml:2: data.shuffle_block_lines: must be between 1 and 16777216, got 0"},
    {"batch_size_too_big", "data:\n  batch_size: 2000000\n",
     "bad.yaml:2: data.batch_size: must be between 1 and 1000000, got 2000000"},
    {"eval_fraction_not_number", "data:\n  eval_fraction: half\n",
     "bad.yaml:2: data.eval_fraction: expected a number, got half"},
    {"zipf_infinite", "data:\n  synthetic:\n    zipf_s: inf\n",
     "bad.yaml:3: data.synthetic.zipf_s: must be a finite number, got inf"},
    {"float_underflow", "optimizer:\n  sparse:\n    eps: 1e-60\n",
     "bad.yaml:3: optimizer.sparse.eps: is out of range for a 32-bit float, got 1e-60"},
    {"float_quoted", "data:\n  eval_fraction: \"0.1\"\n",
     "bad.yaml:2: data.eval_fraction: expected a number, got the string \"0.1\""},
    {"sparse_optimizer_type", "optimizer:\n  sparse:\n    type: adam\n",
     "bad.yaml:3: optimizer.sparse.type: must be one of sgd, adagrad, rowwise_adagrad; got "
     "\"adam\""},
    {"dense_lr_zero", "optimizer:\n  dense:\n    lr: 0\n",
     "bad.yaml:3: optimizer.dense.lr: must be greater than 0, got 0"},
    {"sparse_lr_negative", "optimizer:\n  sparse: {lr: -0.1}\n",
     "bad.yaml:2: optimizer.sparse.lr: must be greater than 0, got -0.1"},
    {"beta1_one", "optimizer:\n  dense:\n    beta1: 1\n",
     "bad.yaml:3: optimizer.dense.beta1: must be at least 0 and less than 1, got 1"},
    {"workers_zero", "cluster:\n  workers: 0\n",
     "bad.yaml:2: cluster.workers: must be between 1 and 1024, got 0"},
    {"servers_zero", "cluster:\n  servers: 0\n",
     "bad.yaml:2: cluster.servers: must be between 1 and 1024, got 0"},
    {"heartbeat", "cluster:\n  heartbeat_interval_ms: 500\n  heartbeat_timeout_ms: 500\n",
     "bad.yaml:3: cluster.heartbeat_timeout_ms: must be greater than cluster.heartbeat_interval_ms "
     "(500), got 500"},
    {"replicas_without_etcd", "coordinator:\n  replicas: 3\n",
     "bad.yaml:2: coordinator.replicas: 3 coordinators (standbys) need coordinator.state_store: "
     "etcd, where they elect the active one; got state_store: file"},
    {"etcd_without_endpoints", "coordinator:\n  state_store: etcd\n",
     "bad.yaml:2: coordinator.etcd_endpoints: state_store: etcd needs the etcd members' client "
     "addresses (host:port each)"},
    {"etcd_endpoint_without_port",
     "coordinator:\n  state_store: etcd\n  etcd_endpoints: [10.0.0.1:2379, etcd-2]\n",
     "bad.yaml:3: coordinator.etcd_endpoints[1]: address 'etcd-2' has no port (want host:port, "
     "e.g. coordinator.example.org:7000 or 10.0.0.5:7000)"},
    {"etcd_https", "coordinator:\n  state_store: etcd\n  etcd_endpoints: https://e:2379\n",
     "bad.yaml:3: coordinator.etcd_endpoints[0]: https is not supported: etcd's client URLs on "
     "the cluster's network, plaintext (docs/deploy.md)"},
    {"endpoints_without_etcd", "coordinator:\n  etcd_endpoints: [e:2379]\n",
     "bad.yaml:2: coordinator.etcd_endpoints: is set but coordinator.state_store is file: set "
     "state_store: etcd to use etcd"},
    {"etcd_prefix", "coordinator:\n  etcd_prefix: ecps\n",
     "bad.yaml:2: coordinator.etcd_prefix: must start and end with / and hold no spaces (the "
     "job's keys are PREFIX<job.name>/leader and /state), got \"ecps\""},
    {"state_store", "coordinator:\n  state_store: zookeeper\n",
     "bad.yaml:2: coordinator.state_store: must be one of file, etcd; got \"zookeeper\""},
    {"coordinator_list", "cluster:\n  coordinator: a:1,,b:2\n",
     "bad.yaml:2: cluster.coordinator: 'a:1,,b:2' has an empty address (want "
     "host:port[,host:port...])"},
    {"port", "cluster:\n  coordinator_port: 70000\n",
     "bad.yaml:2: cluster.coordinator_port: must be between 0 and 65535, got 70000"},
    {"log_level", "monitoring:\n  log_level: verbose\n",
     "bad.yaml:2: monitoring.log_level: must be one of trace, debug, info, warn, error; got "
     "\"verbose\""},
    {"job_name", "job:\n  name: my job\n",
     "bad.yaml:2: job.name: must be 1 to 128 characters from A-Z a-z 0-9 . _ - (and not . or ..), "
     "got \"my job\""},
    {"bool", "job:\n  synchronous: maybe\n",
     "bad.yaml:2: job.synchronous: expected true or false, got maybe"},
    {"seed_negative", "job:\n  seed: -1\n",
     "bad.yaml:2: job.seed: must be between 0 and 18446744073709551615, got -1"},
    {"checkpoint_keep_zero", "fault_tolerance:\n  checkpoint:\n    keep: 0\n",
     "bad.yaml:3: fault_tolerance.checkpoint.keep: must be between 1 and 1000000, got 0"},
    {"checkpoint_keep_negative", "fault_tolerance:\n  checkpoint: {keep: -2}\n",
     "bad.yaml:2: fault_tolerance.checkpoint.keep: must be between 1 and 1000000, got -2"},
    {"checkpoint_keep_not_integer", "fault_tolerance:\n  checkpoint:\n    keep: all\n",
     "bad.yaml:3: fault_tolerance.checkpoint.keep: expected an integer, got all"},
    {"resume_from_missing", "job:\n  resume_from: /nonexistent/ckpt\n",
     "bad.yaml:2: job.resume_from: no such checkpoint directory: /nonexistent/ckpt"},
    {"faults_not_list", "faults:\n  at_step: 5\n", "bad.yaml:1: faults: expected a list of faults"},
    {"fault_action", "faults:\n  - at_step: 10\n    action: kill_srv\n",
     "bad.yaml:3: faults[0].action: must be one of kill_server, stop_server, kill_worker, "
     "kill_coordinator; got \"kill_srv\" (did you mean \"kill_server\"?)"},
    {"fault_missing_action", "faults:\n  - at_step: 5\n",
     "bad.yaml:2: faults[0].action: missing; must be one of kill_server, stop_server, "
     "kill_worker, kill_coordinator"},
    {"fault_missing_step", "faults:\n  - action: kill_worker\n",
     "bad.yaml:2: faults[0].at_step: missing"},
    {"fault_server_target", "faults:\n  - {at_step: 10, action: kill_server, target: 2}\n",
     "bad.yaml:2: faults[0].target: must be a server index between 0 and 1 (cluster.servers = 2), "
     "got 2"},
    {"fault_worker_target", "faults:\n  - at_step: 10\n    action: kill_worker\n    target: -1\n",
     "bad.yaml:4: faults[0].target: must be a worker index between 0 and 0 (cluster.workers = 1), "
     "got -1"},
    {"fault_after_last_step",
     "job:\n  steps: 100\nfaults:\n  - at_step: 101\n    action: kill_worker\n",
     "bad.yaml:4: faults[0].at_step: must be between 1 and job.steps (100), got 101"},
    {"fault_step_zero", "faults:\n  - {at_step: 0, action: kill_worker}\n",
     "bad.yaml:2: faults[0].at_step: must be between 1 and job.steps (1000), got 0"},
    {"stop_without_duration", "faults:\n  - at_step: 5\n    action: stop_server\n",
     "bad.yaml:2: faults[0].duration_s: stop_server needs duration_s greater than 0"},
    {"kill_with_duration", "faults:\n  - {at_step: 5, action: kill_server, duration_s: 3}\n",
     "bad.yaml:2: faults[0].duration_s: is only used by stop_server and kill_coordinator"},
    {"fault_not_map", "faults:\n  - kill_server\n", "bad.yaml:2: faults[0]: expected a map"},
    {"worker_device_unknown", "cluster:\n  worker_device: tpu\n",
     "bad.yaml:2: cluster.worker_device: must be one of cpu, cuda"},
    {"gpus_without_cuda", "cluster:\n  gpus_per_worker: 2\n",
     "bad.yaml:2: cluster.gpus_per_worker: 2 GPUs per worker need cluster.worker_device: cuda"},
    {"gpus_too_many", "cluster:\n  worker_device: cuda\n  gpus_per_worker: 17\n",
     "bad.yaml:3: cluster.gpus_per_worker: must be"},
    {"root_is_list", "- a\n- b\n", "bad.yaml:1: the spec must be a map of sections"},
    {"two_documents", "job: {}\n---\njob: {}\n", "a spec is one YAML document"},
    {"syntax_error", "job:\n  name: [unclosed\ncluster:\n", "bad.yaml:"},
};

class BadSpecTest : public ::testing::TestWithParam<BadSpec> {};

TEST_P(BadSpecTest, ReportsKeyLineAndAllowedValues) {
  const BadSpec& bad = GetParam();
  auto spec = ParseSpec(bad.yaml, "bad.yaml");
  ASSERT_FALSE(spec.ok()) << "accepted:\n" << bad.yaml;
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Msg(spec), HasSubstr(bad.error)) << bad.yaml;
}

INSTANTIATE_TEST_SUITE_P(Table, BadSpecTest, ::testing::ValuesIn(kBadSpecs),
                         [](const ::testing::TestParamInfo<BadSpec>& info) {
                           return std::string(info.param.name);
                         });

TEST(SpecTest, SyntaxErrorNamesTheLine) {
  auto spec = ParseSpec("job:\n  name: x\n  steps: [1, 2\ncluster:\n  servers: 2\n", "syn.yaml");
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(Msg(spec), ::testing::MatchesRegex("syn\\.yaml:[0-9]+: YAML syntax error: .*"));
  auto tabs = ParseSpec("job:\n\tname: x\n", "tab.yaml");
  ASSERT_FALSE(tabs.ok());
  EXPECT_THAT(Msg(tabs), HasSubstr("tab.yaml:2: YAML syntax error"));
}

TEST(SpecTest, DuplicateKeyIsAnError) {
  auto spec = ParseSpec("job:\n  steps: 10\n  steps: 20\n", "dup.yaml");
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(Msg(spec), HasSubstr("dup.yaml:3: job.steps: duplicate key (first given on line 2)"));
}

TEST(SpecTest, ReportsEveryErrorInLineOrder) {
  constexpr char kYaml[] = R"(job:
  name: bad name
  steps: 0
cluster:
  servers: 2
  wrkers: 2
model:
  embedding_dim: 2000
optimizer:
  sparse: {type: ftrl, lr: -1}
faults:
  - {at_step: 5, action: kill_server, target: 9}
monitoring:
  log_level: loud
)";
  auto spec = ParseSpec(kYaml, "many.yaml");
  ASSERT_FALSE(spec.ok());
  std::vector<std::string> lines = absl::StrSplit(Msg(spec), '\n');
  const std::vector<std::string> expected = {
      "many.yaml:2: job.name: must be 1 to 128 characters",
      "many.yaml:3: job.steps: must be between 1 and 1000000000000, got 0",
      "many.yaml:6: cluster.wrkers: unknown key; did you mean \"workers\"?",
      "many.yaml:8: model.embedding_dim: must be between 1 and 1024, got 2000",
      "many.yaml:10: optimizer.sparse.type: must be one of sgd, adagrad, rowwise_adagrad",
      "many.yaml:10: optimizer.sparse.lr: must be greater than 0, got -1",
      "many.yaml:12: faults[0].target: must be a server index between 0 and 1",
      "many.yaml:14: monitoring.log_level: must be one of trace, debug, info, warn, error",
  };
  ASSERT_EQ(lines.size(), expected.size()) << Msg(spec);
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_THAT(lines[i], ::testing::StartsWith(expected[i])) << i;
  }
}

TEST(SpecTest, UnknownKeySuggestions) {
  auto camel = ParseSpec("data:\n  batchSize: 8\n", "s.yaml");
  ASSERT_FALSE(camel.ok());
  EXPECT_THAT(Msg(camel),
              HasSubstr("s.yaml:2: data.batchSize: unknown key; did you mean \"batch_size\"?"));

  auto prefix = ParseSpec("fault_tolerance:\n  checkpoint:\n    interval: 5\n", "s.yaml");
  ASSERT_FALSE(prefix.ok());
  EXPECT_THAT(Msg(prefix),
              HasSubstr("s.yaml:3: fault_tolerance.checkpoint.interval: unknown key; did you "
                        "mean \"interval_steps\"?"));

  auto far = ParseSpec("monitoring:\n  colour: red\n", "s.yaml");
  ASSERT_FALSE(far.ok());
  EXPECT_THAT(Msg(far),
              HasSubstr("s.yaml:2: monitoring.colour: unknown key; known keys here: progress, "
                        "metrics_interval_ms, report_every_steps, log_level"));
}

TEST(SpecTest, MissingFileNamesThePath) {
  auto spec = LoadSpecFile("/nonexistent/folder/job.yaml");
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(Msg(spec), HasSubstr("/nonexistent/folder/job.yaml"));

  TempDir dir;
  auto folder = LoadSpecFile(dir.path().string());
  ASSERT_FALSE(folder.ok());
  EXPECT_THAT(Msg(folder), HasSubstr(dir.path().string()));
}

// Found by fuzz/spec: a few NUL bytes in an otherwise short text made yaml-cpp run for
// minutes and take gigabytes. Control characters are refused before the YAML parser runs,
// naming the line and byte.
TEST(SpecTest, ControlCharactersAreRefusedBeforeTheYamlParser) {
  std::string text = "job:\n  steps: 10\n# a comment";
  text += std::string(40, '\0');
  text += "\n";
  auto spec = ParseSpec(text, "nul.yaml");
  ASSERT_FALSE(spec.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(spec.status()));
  EXPECT_NE(std::string(spec.status().message()).find("nul.yaml:3: control character 0x00"),
            std::string::npos)
      << spec.status();
  EXPECT_FALSE(ParseSpec(std::string("job: {steps: 1}\x07\n"), "bell.yaml").ok());
  // Also found by fuzz/spec: a document starting with ',' never returned from yaml-cpp.
  for (const char* text : {",", "- a\n, b", "a: b\n---\n,"}) {
    auto comma = ParseSpec(text, "comma.yaml");
    ASSERT_FALSE(comma.ok()) << text;
    EXPECT_NE(std::string(comma.status().message()).find("a line cannot start with ','"),
              std::string::npos)
        << comma.status();
  }
  // CRLF line ends are text.
  EXPECT_TRUE(ParseSpec("job:\r\n  steps: 10\r\n").ok());
  EXPECT_FALSE(ParseSpec(std::string(2 << 20, '#'), "huge.yaml").ok());
}

TEST(SpecTest, FileErrorsNameTheFile) {
  TempDir dir;
  fs::path file = dir.Write(
      "job.yaml", "job:\n  name: ok\ndata:\n  source: criteo_tsv\n  paths:\n    - missing.tsv\n");
  auto spec = LoadSpecFile(file.string());
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(Msg(spec), HasSubstr(absl::StrCat(file.string(), ":6: data.paths[0]: no such file: ",
                                                (dir.path() / "missing.tsv").string())));
}

TEST(SpecTest, EveryExampleParses) {
  int count = 0;
  for (const auto& entry : fs::directory_iterator(ECPS_EXAMPLES_DIR)) {
    if (entry.path().extension() != ".yaml") continue;
    ++count;
    auto spec = LoadSpecFile(entry.path().string());
    ASSERT_TRUE(spec.ok()) << entry.path() << ": " << spec.status();
    auto again = ParseSpec(SpecToYaml(*spec));
    ASSERT_TRUE(again.ok()) << entry.path() << ": " << again.status();
    ExpectSpecEq(*spec, *again);
  }
  EXPECT_GE(count, 2);
}

TEST(SpecTest, ExamplesHaveTheAgreedShape) {
  auto quick = LoadSpecFile(std::string(ECPS_EXAMPLES_DIR) + "/quickstart.yaml");
  ASSERT_TRUE(quick.ok()) << quick.status();
  EXPECT_EQ(quick->data.source, DataSourceType::kSynthetic);
  EXPECT_EQ(quick->cluster.servers, 5);
  EXPECT_EQ(quick->cluster.workers, 1);
  EXPECT_EQ(quick->model.table_rows, std::vector<int64_t>(26, 10000));
  auto bench = LoadSpecFile(std::string(ECPS_EXAMPLES_DIR) + "/bench-small.yaml");
  ASSERT_TRUE(bench.ok()) << bench.status();
  EXPECT_EQ(bench->data.batch_size, 2048);
  EXPECT_EQ(bench->model.table_rows, std::vector<int64_t>(26, 50000));
  // bench/worker_bench's heavy model (HeavyJob), which docs/scaling.md compares modes on.
  auto heavy = LoadSpecFile(std::string(ECPS_EXAMPLES_DIR) + "/bench-heavy.yaml");
  ASSERT_TRUE(heavy.ok()) << heavy.status();
  EXPECT_EQ(heavy->data.batch_size, 2048);
  EXPECT_EQ(heavy->model.embedding_dim, 128);
  EXPECT_EQ(heavy->model.bottom_mlp, (std::vector<int>{512, 256, 128}));
  EXPECT_EQ(heavy->model.top_mlp, (std::vector<int>{1024, 1024, 512, 256}));
  EXPECT_EQ(heavy->model.table_rows, std::vector<int64_t>(26, 20000));
}

// docs/spec.md: its annotated example parses, and its error example prints what it shows.
TEST(SpecTest, DocumentationExamplesAreTrue) {
  std::ifstream in(ECPS_SPEC_DOC);
  ASSERT_TRUE(in) << ECPS_SPEC_DOC;
  std::vector<std::pair<std::string, std::string>> blocks;  // (language, text)
  std::string line;
  bool inside = false;
  while (std::getline(in, line)) {
    if (line.rfind("```", 0) == 0) {
      if (!inside) blocks.emplace_back(line.substr(3), "");
      inside = !inside;
    } else if (inside) {
      blocks.back().second += line + "\n";
    }
  }
  std::vector<std::string> yaml_blocks;
  std::string shown_errors;
  for (const auto& [language, text] : blocks) {
    if (language == "yaml") yaml_blocks.push_back(text);
    if (language.empty() && text.rfind("bad.yaml:", 0) == 0) shown_errors = text;
  }
  ASSERT_GE(yaml_blocks.size(), 2u);
  auto example = ParseSpec(yaml_blocks[0], "docs/spec.md example");
  ASSERT_TRUE(example.ok()) << example.status();
  EXPECT_EQ(example->fault_tolerance.mode, FaultToleranceMode::kErasureCode);
  EXPECT_EQ(example->faults.size(), 2u);

  auto bad = ParseSpec(yaml_blocks[1], "bad.yaml");
  ASSERT_FALSE(bad.ok());
  ASSERT_FALSE(shown_errors.empty());
  EXPECT_EQ(Msg(bad) + "\n", shown_errors);
}

// Every key the spec renders has its row in docs/spec.md's tables.
TEST(SpecTest, DocsListEveryKey) {
  std::ifstream in(ECPS_SPEC_DOC);
  ASSERT_TRUE(in) << ECPS_SPEC_DOC;
  std::stringstream doc;
  doc << in.rdbuf();
  int keys = 0;
  for (const std::string& path : SpecKeyPaths()) {
    // docs/spec.md has one table per top-level section; nested keys are "sub.key" there.
    const size_t dot = path.find('.');
    ASSERT_NE(dot, std::string::npos) << path;
    const std::string name = path.substr(dot + 1);
    ++keys;
    EXPECT_NE(doc.str().find("| `" + name + "` |"), std::string::npos)
        << "docs/spec.md has no row for " << path;
  }
  EXPECT_GT(keys, 40);
}

// The key list comes from the same tables that render the spec: every key SpecToYaml writes
// is in it, in the same order.
TEST(SpecTest, KeyPathsAreWhatSpecToYamlWrites) {
  auto spec = ParseSpec("faults: [{at_step: 1, action: kill_worker}]", "one-fault");
  ASSERT_TRUE(spec.ok()) << spec.status();
  std::istringstream yaml(SpecToYaml(*spec));
  std::vector<std::string> written;
  std::vector<std::string> parents;  // by indent / 2: the sections this line is inside
  std::string line;
  while (std::getline(yaml, line)) {
    size_t start = line.find_first_not_of(' ');
    const size_t colon = line.find(':');
    if (start == std::string::npos || colon == std::string::npos || line[start] == '#') continue;
    const bool item = line[start] == '-';
    if (item) start = line.find_first_not_of(' ', start + 1);
    const std::string key = line.substr(start, colon - start);
    const size_t depth = start / 2;
    parents.resize(std::min(parents.size(), depth));
    if (line.find_first_not_of(' ', colon + 1) == std::string::npos) {
      parents.resize(depth);
      parents.push_back(key);  // a section: its keys follow, indented
      continue;
    }
    std::string path;
    for (const std::string& p : parents) {
      path += (p == "faults" ? "faults[]" : p) + ".";
    }
    written.push_back(path + key);
  }
  EXPECT_EQ(written, SpecKeyPaths());
}

TEST(SpecTest, EnumNamesReadBack) {
  for (auto mode : {FaultToleranceMode::kNone, FaultToleranceMode::kErasureCode,
                    FaultToleranceMode::kReplication, FaultToleranceMode::kCheckpoint}) {
    auto spec = ParseSpec(
        absl::StrCat("fault_tolerance: {mode: ", ToString(mode), "}\ncluster: {servers: 6}"));
    ASSERT_TRUE(spec.ok()) << spec.status();
    EXPECT_EQ(spec->fault_tolerance.mode, mode);
  }
  EXPECT_STREQ(ToString(AckPolicy::kAsync), "async");
  EXPECT_STREQ(ToString(SparseOptimizerType::kRowwiseAdagrad), "rowwise_adagrad");
  EXPECT_STREQ(ToString(DenseOptimizerType::kAdam), "adam");
  EXPECT_STREQ(ToString(DataSourceType::kCriteoCsv), "criteo_csv");
  EXPECT_STREQ(ToString(PoolingType::kMean), "mean");
}

}  // namespace
}  // namespace ecps
