#include "cli/slurm_script.h"

#include <string>

#include "absl/strings/match.h"
#include "cli/launch_backend.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ecps {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

JobSpec Spec(const std::string& yaml) {
  auto spec = ParseSpec(yaml, "test.yaml");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : JobSpec();
}

SlurmScriptPaths Paths() {
  return SlurmScriptPaths{"/shared/job's spec.yaml", "/shared/runs/j", "/opt/ecps/bin/ecps"};
}

TEST(SlurmScriptTest, TheSpecsKeysBecomeSbatchLines) {
  JobSpec spec = Spec(R"(
job: {name: ctr}
cluster: {servers: 5, spares: 1, workers: 2}
fault_tolerance: {mode: erasure_code, k: 4, r: 1}
slurm:
  partition: gpu
  nodes: 3
  time: "02:00:00"
  account: recsys
  sbatch_options: ["--mem=8G", "--exclusive"]
)");
  auto script = SlurmScript(spec, Paths());
  ASSERT_TRUE(script.ok()) << script.status();
  EXPECT_TRUE(absl::StartsWith(*script, "#!/bin/bash\n"));
  for (const char* line :
       {"#SBATCH --job-name=ctr\n", "#SBATCH --nodes=3\n",
        "#SBATCH --ntasks=9\n",  // coordinator + 5 servers + 1 spare + 2 workers
        "#SBATCH --overcommit\n", "#SBATCH --output=/shared/runs/j/slurm-%j.out\n",
        "#SBATCH --partition=gpu\n", "#SBATCH --time=02:00:00\n", "#SBATCH --account=recsys\n",
        "#SBATCH --mem=8G\n", "#SBATCH --exclusive\n"}) {
    EXPECT_THAT(*script, HasSubstr(line));
  }
  // The launcher inside the allocation, every path quoted for the shell.
  EXPECT_THAT(*script, HasSubstr("exec '/opt/ecps/bin/ecps' run '/shared/job'\\''s spec.yaml' "
                                 "--backend slurm --output '/shared/runs/j' --no-progress\n"));
}

TEST(SlurmScriptTest, GpuWorkersAllocateTheirGpus) {
  // Only a build with CUDA accepts worker_device: cuda.
  if (!BuiltWithCuda()) GTEST_SKIP() << "built without CUDA";
  auto script = SlurmScript(
      Spec("cluster: {workers: 3, worker_device: cuda, gpus_per_worker: 2}\n"), Paths());
  ASSERT_TRUE(script.ok()) << script.status();
  EXPECT_THAT(*script, HasSubstr("#SBATCH --gpus=6\n"));
  auto cpu = SlurmScript(Spec("cluster: {workers: 3}\n"), Paths());
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_THAT(*cpu, Not(HasSubstr("--gpus")));
}

TEST(SlurmScriptTest, NoTokenAndNoPartitionUnlessAsked) {
  auto script = SlurmScript(Spec("job: {name: j, token: s3cret-token}\n"), Paths());
  ASSERT_TRUE(script.ok()) << script.status();
  EXPECT_THAT(*script, Not(HasSubstr("s3cret-token")));
  EXPECT_THAT(*script, Not(HasSubstr("--partition")));
  EXPECT_THAT(*script, Not(HasSubstr("--time")));
}

TEST(SlurmScriptTest, WhatCannotRunUnderSlurmIsRefusedNamingTheKey) {
  auto loopback = SlurmScript(Spec("cluster: {host: 127.0.0.1}\nslurm: {nodes: 2}\n"), Paths());
  ASSERT_FALSE(loopback.ok());
  EXPECT_THAT(loopback.status().message(), HasSubstr("cluster.host"));
  EXPECT_TRUE(SlurmScript(Spec("cluster: {host: 127.0.0.1}\n"), Paths()).ok());  // one node

  auto stop = SlurmScript(Spec(R"(
cluster: {servers: 3}
fault_tolerance: {mode: erasure_code, k: 2, r: 1}
faults: [{at_step: 10, action: stop_server, target: 1, duration_s: 2}]
)"),
                          Paths());
  ASSERT_FALSE(stop.ok());
  EXPECT_THAT(stop.status().message(), HasSubstr("stop_server"));
}

TEST(SlurmScriptTest, SbatchValuesThatCouldBreakTheScriptAreRefusedBySpec) {
  for (const char* yaml : {"slurm: {partition: \"a b\"}\n", "slurm: {time: \"1:00;rm\"}\n",
                           "slurm: {sbatch_options: [\"--mem=$(id)\"]}\n",
                           "slurm: {sbatch_options: [\"mem=8G\"]}\n"}) {
    auto spec = ParseSpec(yaml, "bad.yaml");
    ASSERT_FALSE(spec.ok()) << yaml;
    EXPECT_THAT(spec.status().message(), HasSubstr("slurm.")) << yaml;
  }
}

TEST(SrunCommandTest, OneTaskOnTheChosenNodeSharingTheAllocation) {
  EXPECT_THAT(SrunCommand("/usr/bin/srun", "server-2", 1, {"/opt/ecps", "server", "--id", "2"}),
              ElementsAre("/usr/bin/srun", "--nodes=1", "--ntasks=1", "--relative=1", "--overlap",
                          "--kill-on-bad-exit=0", "--job-name=server-2", "--quiet", "--export=ALL",
                          "--", "/opt/ecps", "server", "--id", "2"));
}

TEST(SrunCommandTest, AGpuWorkersStepAsksForItsGpus) {
  EXPECT_THAT(SrunCommand("/usr/bin/srun", "worker-0", 0, {"/opt/ecps", "worker"}, 2),
              ElementsAre("/usr/bin/srun", "--nodes=1", "--ntasks=1", "--relative=0", "--overlap",
                          "--kill-on-bad-exit=0", "--job-name=worker-0", "--quiet", "--export=ALL",
                          "--gpus=2", "--", "/opt/ecps", "worker"));
}

TEST(SlurmNodePickerTest, RoundRobinAndARestartedStepMovesOn) {
  SlurmNodePicker nodes(2);
  EXPECT_EQ(nodes.Place("coordinator"), 0);
  EXPECT_EQ(nodes.Place("server-0"), 1);
  EXPECT_EQ(nodes.Place("server-1"), 0);
  EXPECT_EQ(nodes.Place("worker-0"), 1);
  // The coordinator started again goes to the node after its last, and on around.
  EXPECT_EQ(nodes.Place("coordinator"), 1);
  EXPECT_EQ(nodes.Place("coordinator"), 0);
  // New names carry on the round-robin where it was.
  EXPECT_EQ(nodes.Place("server-1-r1"), 0);
  SlurmNodePicker one(1);
  EXPECT_EQ(one.Place("coordinator"), 0);
  EXPECT_EQ(one.Place("coordinator"), 0);
}

TEST(LaunchBackendTest, SlurmNeedsAnAllocation) {
  unsetenv("SLURM_JOB_ID");
  auto backend = MakeSlurmBackend();
  ASSERT_FALSE(backend.ok());
  EXPECT_THAT(backend.status().message(), HasSubstr("SLURM_JOB_ID"));
  EXPECT_EQ(MakeLocalBackend()->DefaultBindHost(), "127.0.0.1");
}

}  // namespace
}  // namespace ecps
