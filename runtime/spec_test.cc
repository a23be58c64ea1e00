// The job spec: defaults, every key parsed and rendered, round trips, the examples and the
// docs. The errors (every key's range, every cross-field rule, every message) are in
// spec_errors_test.cc.
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
#include "runtime/spec_test_util.h"

namespace ecps {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// TempDir and Msg: runtime/spec_test_util.h.

// Bits, ExpectSpecEq and kFullSpec: runtime/spec_test_util.h.

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
  EXPECT_EQ(spec->fault_tolerance.parity_transport, ParityTransport::kGrpc);
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

// kFullSpec's job, cluster and model sections.
void ExpectFullShape(const JobSpec& spec) {
  EXPECT_EQ(spec.job.name, "full.job_1");
  EXPECT_EQ(spec.job.output_dir, "/tmp/ecps-out");
  EXPECT_EQ(spec.job.steps, 5000);
  EXPECT_EQ(spec.job.eval_every, 500);
  EXPECT_EQ(spec.job.eval_samples, 1000);
  EXPECT_EQ(spec.job.seed, 18446744073709551615ull);
  EXPECT_EQ(spec.job.token, "s3cret-token");
  EXPECT_EQ(spec.job.resume_from, "");
  EXPECT_TRUE(spec.job.synchronous);

  EXPECT_EQ(spec.cluster.servers, 6);
  EXPECT_EQ(spec.cluster.spares, 1);
  EXPECT_EQ(spec.cluster.workers, 3);
  EXPECT_EQ(spec.cluster.host, "0.0.0.0");
  EXPECT_EQ(spec.cluster.coordinator_port, 7000);
  EXPECT_EQ(spec.cluster.heartbeat_interval_ms, 100);
  EXPECT_EQ(spec.cluster.heartbeat_timeout_ms, 900);
  EXPECT_EQ(spec.cluster.rpc_timeout_ms, 5000);
  EXPECT_EQ(spec.cluster.worker_threads, 4);
  EXPECT_EQ(spec.cluster.server_threads, 3);

  EXPECT_EQ(spec.model.embedding_dim, 8);
  ASSERT_EQ(spec.model.table_rows.size(), 26u);
  EXPECT_EQ(spec.model.table_rows[0], 1);
  EXPECT_EQ(spec.model.table_rows[25], 10000000000);
  EXPECT_EQ(spec.model.bottom_mlp, (std::vector<int>{128, 32, 8}));
  EXPECT_TRUE(spec.model.top_mlp.empty());
  EXPECT_EQ(spec.model.pooling, PoolingType::kMean);
}

// kFullSpec's fault_tolerance, faults and monitoring sections.
void ExpectFullRecovery(const JobSpec& spec) {
  EXPECT_EQ(spec.fault_tolerance.mode, FaultToleranceMode::kErasureCode);
  EXPECT_EQ(spec.fault_tolerance.k, 4);
  EXPECT_EQ(spec.fault_tolerance.r, 2);
  EXPECT_EQ(spec.fault_tolerance.ack, AckPolicy::kAsync);
  EXPECT_EQ(spec.fault_tolerance.async_window, 128);
  EXPECT_EQ(spec.fault_tolerance.async_linger_ms, 7);
  EXPECT_EQ(spec.fault_tolerance.parity_transport, ParityTransport::kTcp);
  EXPECT_EQ(spec.fault_tolerance.dense_replicas, 2);  // -1 resolved to r
  EXPECT_EQ(spec.fault_tolerance.codec_backend, "isal");
  EXPECT_EQ(spec.fault_tolerance.rebuild_rate_mb_s, 250.5);
  EXPECT_EQ(spec.fault_tolerance.checkpoint.dir, "/tmp/ecps-ckpt");
  EXPECT_EQ(spec.fault_tolerance.checkpoint.interval_steps, 1000);
  EXPECT_EQ(spec.fault_tolerance.checkpoint.interval_seconds, 60.5);
  EXPECT_FALSE(spec.fault_tolerance.checkpoint.save_final);
  EXPECT_EQ(spec.fault_tolerance.checkpoint.keep, 5);

  ASSERT_EQ(spec.faults.size(), 3u);
  EXPECT_EQ(spec.faults[0].at_step, 100);
  EXPECT_EQ(spec.faults[0].action, FaultAction::kKillServer);
  EXPECT_EQ(spec.faults[0].target, 5);
  EXPECT_EQ(spec.faults[0].duration_s, 0);
  EXPECT_EQ(spec.faults[1].action, FaultAction::kStopServer);
  EXPECT_EQ(spec.faults[1].duration_s, 2.5);
  EXPECT_EQ(spec.faults[2].at_step, 5000);
  EXPECT_EQ(spec.faults[2].action, FaultAction::kKillWorker);
  EXPECT_EQ(spec.faults[2].target, 2);

  EXPECT_FALSE(spec.monitoring.progress);
  EXPECT_EQ(spec.monitoring.metrics_interval_ms, 250);
  EXPECT_EQ(spec.monitoring.report_every_steps, 50);
  EXPECT_EQ(spec.monitoring.log_level, "debug");
}

// Every key set to a non-default value.
TEST(SpecTest, FullSpecParsesEveryField) {
  TempDir dir;
  dir.Write("day_0.tsv", "0\t1\n");
  dir.Write("sub/day_1.tsv", "1\t2\n");
  fs::path file = dir.Write("full.yaml", kFullSpec);
  auto spec = LoadSpecFile(file.string());
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->path, file.string());
  ASSERT_NO_FATAL_FAILURE(ExpectFullShape(*spec));

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

  ASSERT_NO_FATAL_FAILURE(ExpectFullRecovery(*spec));
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

}  // namespace
}  // namespace ecps
