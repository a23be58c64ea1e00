// The job spec rendered and read back (SpecToYaml round trips, exactly, every key), and the
// spec as the project shows it: every example under deploy/examples and every example in
// docs/spec.md parses, and docs/spec.md lists every key. Parsing and defaults are in
// spec_test.cc, errors in spec_errors_test.cc.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/spec.h"
#include "runtime/spec_test_util.h"

namespace ecps {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

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
                          "scrub:",
                          "interval_s:",
                          "rate_mb_s:",
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
    spec.fault_tolerance.scrub.interval_s = unit(rng) * 1e4;
    spec.fault_tolerance.scrub.rate_mb_s = 0.001 + unit(rng) * 1e3;
    auto again = ParseSpec(SpecToYaml(spec));
    ASSERT_TRUE(again.ok()) << again.status();
    ExpectSpecEq(spec, *again);
  }
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
