#include "cli/status_command.h"

#include <thread>

#include "runtime/clock.h"
#include "coordinator/coordinator_service.h"
#include "coordinator/coordinator_test_util.h"
#include "coordinator/grpc_coordinator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/ecps.grpc.pb.h"
#include "proto/ecps.pb.h"
#include "runtime/rpc.h"

namespace ecps {
namespace {

using ::testing::HasSubstr;
using testing::kToken;
using testing::ServerHeartbeat;
using testing::ServerRegistration;
using testing::TestSpec;
using testing::WorkerHeartbeat;
using testing::WorkerRegistration;

v1::StatusResponse SampleStatus() {
  v1::StatusResponse status;
  status.set_job("criteo-small");
  status.set_phase(v1::JOB_RUNNING);
  status.set_epoch(3);
  status.set_step(120);
  status.set_total_steps(1000);
  status.set_samples_per_s(4210.5);
  status.set_loss(0.4521);
  status.set_eval_auc(0.7123);
  status.set_elapsed_s(62);
  status.set_eta_s(495);
  status.set_mode("erasure_code");
  status.set_k(4);
  status.set_r(1);
  v1::NodeInfo* server = status.add_nodes();
  server->set_role(v1::ROLE_SERVER);
  server->set_id(0);
  server->set_address("127.0.0.1:41234");
  server->set_state(v1::NODE_ACTIVE);
  server->set_heartbeat_age_ms(120);
  server->set_pid(4242);
  server->mutable_server()->set_data_rows(1000);
  server->mutable_server()->set_parity_rows(250);
  server->mutable_server()->set_bytes(3 << 20);
  v1::NodeInfo* spare = status.add_nodes();
  spare->set_role(v1::ROLE_SERVER);
  spare->set_id(-1);
  spare->set_address("127.0.0.1:41240");
  spare->set_state(v1::NODE_STANDBY);
  spare->set_heartbeat_age_ms(1500);
  v1::NodeInfo* worker = status.add_nodes();
  worker->set_role(v1::ROLE_WORKER);
  worker->set_id(0);
  worker->set_state(v1::NODE_ACTIVE);
  worker->set_heartbeat_age_ms(80);
  worker->set_pid(4243);
  worker->mutable_worker()->set_step(120);
  worker->mutable_worker()->set_samples_per_s(4210.5);
  return status;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

TEST(FormatStatusTableTest, JobLineAndOneRowPerNode) {
  const std::string text = FormatStatusTable(SampleStatus());
  const std::vector<std::string> lines = Lines(text);
  ASSERT_EQ(lines.size(), 5u) << text;
  EXPECT_THAT(lines[0], HasSubstr("criteo-small"));
  EXPECT_THAT(lines[0], HasSubstr("RUNNING"));
  EXPECT_THAT(lines[0], HasSubstr("step 120/1000 (12.0%)"));
  EXPECT_THAT(lines[0], HasSubstr("4210.5 samples/s"));
  EXPECT_THAT(lines[0], HasSubstr("loss 0.4521"));
  EXPECT_THAT(lines[0], HasSubstr("AUC 0.7123"));
  EXPECT_THAT(lines[0], HasSubstr("elapsed 1m02s"));
  EXPECT_THAT(lines[0], HasSubstr("ETA 8m15s"));
  EXPECT_THAT(lines[0], HasSubstr("epoch 3"));
  EXPECT_THAT(lines[0], HasSubstr("mode erasure_code k=4 r=1"));
  EXPECT_THAT(lines[1], HasSubstr("ROLE"));
  EXPECT_THAT(lines[1], HasSubstr("HEARTBEAT"));
  EXPECT_THAT(lines[2], HasSubstr("server"));
  EXPECT_THAT(lines[2], HasSubstr("127.0.0.1:41234"));
  EXPECT_THAT(lines[2], HasSubstr("ACTIVE"));
  EXPECT_THAT(lines[2], HasSubstr("120ms"));
  EXPECT_THAT(lines[2], HasSubstr("4242"));
  EXPECT_THAT(lines[2], HasSubstr("rows 1000 (+250 parity)"));
  EXPECT_THAT(lines[2], HasSubstr("3.0 MiB"));
  EXPECT_THAT(lines[3], HasSubstr("STANDBY"));
  EXPECT_THAT(lines[3], HasSubstr("1.5s"));
  EXPECT_THAT(lines[4], HasSubstr("worker"));
  EXPECT_THAT(lines[4], HasSubstr("step 120"));
  // Columns line up: the STATE column starts at the same offset in every row.
  const size_t column = lines[1].find("STATE");
  EXPECT_EQ(lines[2].find("ACTIVE"), column);
  EXPECT_EQ(lines[3].find("STANDBY"), column);
}

TEST(FormatStatusTableTest, FailedJobShowsItsErrorAndUnknowns) {
  v1::StatusResponse status;
  status.set_job("j");
  status.set_phase(v1::JOB_FAILED);
  status.set_eval_auc(-1);
  status.set_eta_s(-1);
  status.set_error("server 1 declared dead");
  const std::string text = FormatStatusTable(status);
  EXPECT_THAT(text, HasSubstr("FAILED"));
  EXPECT_THAT(text, HasSubstr("error: server 1 declared dead"));
  EXPECT_THAT(text, HasSubstr("AUC -"));
  EXPECT_THAT(text, HasSubstr("ETA -"));
  EXPECT_THAT(text, HasSubstr("loss -"));
}

TEST(FormatStatusTableTest, RecoveringServerShowsItsRebuild) {
  v1::StatusResponse status = SampleStatus();
  v1::NodeInfo* server = status.mutable_nodes(0);
  server->set_state(v1::NODE_RECOVERING);
  v1::ServerStats* s = server->mutable_server();
  s->set_rebuild_rows_done(450);
  s->set_rebuild_rows_total(1000);
  s->set_on_demand_rebuilds(120);
  s->set_on_demand_batches(6);
  s->set_rebuild_rows_per_s(900);
  EXPECT_THAT(FormatStatusTable(status),
              HasSubstr("rebuilt 45% (450/1000 rows), 120 on demand in 6 batches, 900 rows/s"));
  s->set_on_demand_batches(0);
  s->set_on_demand_rebuilds(0);
  EXPECT_THAT(FormatStatusTable(status), HasSubstr("(450/1000 rows), 0 on demand, 900 rows/s"));
}

TEST(FormatStatusJsonTest, IsTheStatusAsJson) {
  const std::string json = FormatStatusJson(SampleStatus());
  EXPECT_THAT(json, HasSubstr("\"phase\": \"JOB_RUNNING\""));
  EXPECT_THAT(json, HasSubstr("\"total_steps\": \"1000\""));
  EXPECT_THAT(json, HasSubstr("\"127.0.0.1:41234\""));
}

// RunStatusCommand against a real coordinator on a free port.
class StatusCommandTest : public testing::ServedCoordinatorFixture {
 protected:
  void SetUp() override {
    ServedCoordinatorFixture::SetUp();
    v1::HeartbeatResponse hb;
    ASSERT_TRUE(service_->Heartbeat(ServerHeartbeat(0, "s0"), &hb).ok());
    ASSERT_TRUE(service_->Heartbeat(WorkerHeartbeat(0, "w0", 7), &hb).ok());
    ASSERT_EQ(hb.phase(), v1::JOB_RUNNING);
  }
  void FinishJob() {
    v1::HeartbeatResponse hb;
    ASSERT_TRUE(service_->Heartbeat(WorkerHeartbeat(0, "w0", 100, true), &hb).ok());
    ASSERT_EQ(hb.phase(), v1::JOB_FINISHED);
  }
};

TEST_F(StatusCommandTest, PrintsTheTableWithEveryNode) {
  ::testing::internal::CaptureStdout();
  const int code = RunStatusCommand(server_.address, kToken, false, false);
  const std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(code, kStatusOk);
  EXPECT_THAT(out, HasSubstr("test-job  RUNNING"));
  EXPECT_THAT(out, HasSubstr("127.0.0.1:7000"));
  EXPECT_THAT(out, HasSubstr("step 7"));
  EXPECT_EQ(Lines(out).size(), 4u) << out;  // job line, header, server, worker
}

TEST_F(StatusCommandTest, PrintsJson) {
  ::testing::internal::CaptureStdout();
  EXPECT_EQ(RunStatusCommand(server_.address, kToken, true, false), kStatusOk);
  const std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_THAT(out, HasSubstr("\"phase\": \"JOB_RUNNING\""));
  EXPECT_THAT(out, HasSubstr("\"instance\": \"w0\""));
}

TEST_F(StatusCommandTest, WrongTokenReturnsThree) {
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(RunStatusCommand(server_.address, "wrong", false, false), kStatusBadToken);
  EXPECT_THAT(::testing::internal::GetCapturedStderr(),
              HasSubstr("ecps status: refused by the coordinator at " + server_.address +
                        ": UNAUTHENTICATED"));
}

TEST_F(StatusCommandTest, UnreachableCoordinatorReturnsTwo) {
  const std::string address = server_.address;
  service_->Shutdown();
  server_.server->Shutdown();
  server_.server->Wait();
  server_.server.reset();
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(RunStatusCommand(address, kToken, false, false), kStatusUnreachable);
  EXPECT_THAT(::testing::internal::GetCapturedStderr(),
              HasSubstr("ecps status: cannot connect to the coordinator at " + address +
                        ": nothing listens there"));
}

// Serves Status from a CoordinatorService and counts the calls it answered.
class CountingStatusService final : public v1::Coordinator::Service {
 public:
  explicit CountingStatusService(CoordinatorService* service) : service_(service) {}
  grpc::Status Status(grpc::ServerContext*, const v1::StatusRequest* request,
                      v1::StatusResponse* response) override {
    grpc::Status status = ToGrpcStatus(service_->Status(*request, response));
    absl::MutexLock lock(&mu_);
    ++calls_;
    return status;
  }
  bool WaitForCalls(int n) {
    absl::MutexLock lock(&mu_);
    auto reached = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return calls_ >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&reached), absl::Seconds(30));
  }

 private:
  CoordinatorService* const service_;
  absl::Mutex mu_;
  int calls_ ABSL_GUARDED_BY(mu_) = 0;
};

TEST_F(StatusCommandTest, WatchRepeatsUntilTheJobFinishes) {
  CountingStatusService counting(service_.get());
  auto server = StartGrpcServer("127.0.0.1", 0, {&counting});
  ASSERT_TRUE(server.ok()) << server.status();
  int code = -1;
  ::testing::internal::CaptureStdout();
  std::thread watcher(
      [&] { code = RunStatusCommand(server->address, kToken, false, true, /*interval=*/10); });
  ASSERT_TRUE(counting.WaitForCalls(1));  // the first table shows the job RUNNING
  FinishJob();
  watcher.join();  // returns only because the job finished
  const std::string out = ::testing::internal::GetCapturedStdout();
  server->server->Shutdown();
  EXPECT_EQ(code, kStatusOk);
  EXPECT_THAT(out, HasSubstr("RUNNING"));
  EXPECT_THAT(out, HasSubstr("FINISHED"));
}

}  // namespace
}  // namespace ecps
