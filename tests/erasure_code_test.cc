// Erasure-coded servers: parity stays byte-exact through training (every sparse optimizer,
// several codes, many workers on hot rows), delta batches are applied exactly once over a
// network that drops, delays and duplicates them, and with ack after_parity a push is
// acknowledged only once its parity is updated.
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>

#include "coordinator/scrub.h"
#include "gtest/gtest.h"
#include "domain/spec_config.h"
#include "proto/ecps.grpc.pb.h"
#include "ps/row_code.h"
#include "tests/test_cluster.h"
#include "worker/training_loop.h"

namespace ecps {
namespace {

constexpr char kToken[] = "ec-test";

JobSpec EcSpec(SparseOptimizerType optimizer, int k, int r, int extra_servers = 0) {
  JobSpec spec = SmallSpec(k + r + extra_servers, 30);
  spec.fault_tolerance.mode = FaultToleranceMode::kErasureCode;
  spec.fault_tolerance.k = k;
  spec.fault_tolerance.r = r;
  spec.fault_tolerance.dense_replicas = r;
  spec.optimizer.sparse.type = optimizer;
  spec.job.eval_samples = 256;
  return spec;
}

std::vector<std::string> Addresses(const TestCluster& cluster) {
  std::vector<std::string> out;
  for (const auto& s : cluster.map().servers()) out.push_back(s.address());
  return out;
}

// Trains `workers` workers at once (each with its own partition and client) to the end.
void Train(const JobSpec& spec, TestCluster* cluster, int workers) {
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] {
      JobSpec s = spec;
      s.cluster.workers = workers;
      auto model = Dlrm::Create(ToDlrmConfig(s.model), s.data.batch_size);
      std::vector<int64_t> sizes;
      for (const auto& t : (*model)->tensors()) sizes.push_back(t.size);
      auto ps = PsClient::Create(cluster->map(), s.model.table_rows, s.model.embedding_dim,
                                 sizes, kToken, "worker-" + std::to_string(w), 10000);
      ProgressBoard board;
      std::atomic<bool> stop{false};
      TrainingLoop loop(s, w, ps->get(), model->get(), &board, &stop);
      if (!loop.Train().ok()) ++failures;
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_EQ(failures.load(), 0);
}

void ExpectClean(const TestCluster& cluster) {
  v1::ScrubReport report = ScrubServers(Addresses(cluster), kToken, {1}, 10000);
  EXPECT_TRUE(report.error().empty()) << report.error();
  EXPECT_GT(report.stripes_checked(), 0);
  EXPECT_EQ(report.parity_mismatches(), 0) << report.DebugString();
  EXPECT_GT(report.dense_checked(), 0);
  EXPECT_EQ(report.dense_mismatches(), 0) << report.DebugString();
  EXPECT_TRUE(report.clean());
}

struct Case {
  SparseOptimizerType optimizer;
  int k;
  int r;
};

class ParityAfterTraining : public ::testing::TestWithParam<Case> {};

TEST_P(ParityAfterTraining, ScrubIsClean) {
  const Case& c = GetParam();
  JobSpec spec = EcSpec(c.optimizer, c.k, c.r, /*extra_servers=*/1);
  auto cluster = TestCluster::Start(spec, kToken);
  ASSERT_NE(cluster, nullptr);
  ExpectClean(*cluster);  // the initial encoding is consistent
  Train(spec, cluster.get(), 2);
  ExpectClean(*cluster);
}

INSTANTIATE_TEST_SUITE_P(Codes, ParityAfterTraining,
                         ::testing::Values(Case{SparseOptimizerType::kSgd, 2, 1},
                                           Case{SparseOptimizerType::kAdagrad, 4, 1},
                                           Case{SparseOptimizerType::kRowwiseAdagrad, 3, 2},
                                           Case{SparseOptimizerType::kAdagrad, 3, 2},
                                           Case{SparseOptimizerType::kSgd, 4, 1},
                                           Case{SparseOptimizerType::kRowwiseAdagrad, 2, 1}),
                         [](const auto& info) {
                           return std::string(ToString(info.param.optimizer)) + "_k" +
                                  std::to_string(info.param.k) + "_r" +
                                  std::to_string(info.param.r);
                         });

// fault_tolerance.parity_transport tcp: parity as exact as over gRPC, and the batches went
// over TCP (each stream's first goes over gRPC, whose ack offers the port).
TEST(ParityOverTcp, ScrubIsCleanAndTheBatchesWentOverTcp) {
  JobSpec spec = EcSpec(SparseOptimizerType::kAdagrad, 4, 1, /*extra_servers=*/1);
  spec.fault_tolerance.parity_transport = ParityTransport::kTcp;
  auto cluster = TestCluster::Start(spec, kToken);
  ASSERT_NE(cluster, nullptr);
  Train(spec, cluster.get(), 2);
  ExpectClean(*cluster);
  const int servers = spec.cluster.servers;
  int64_t batches = 0, over_tcp = 0;
  for (int s = 0; s < servers; ++s) {
    EXPECT_GT(cluster->tcp_port(s), 0);
    v1::ServerStats stats;
    cluster->core(s)->FillStats(&stats);
    batches += stats.delta_batches_sent();
    over_tcp += stats.delta_batches_sent_tcp();
  }
  ASSERT_GT(batches, 10 * servers * (servers - 1));
  EXPECT_GE(over_tcp, batches - servers * (servers - 1)) << over_tcp << " of " << batches;
}

// Totals over every server: parity batches sent, and of them over TCP.
std::pair<int64_t, int64_t> BatchesSent(TestCluster* cluster, int servers) {
  int64_t batches = 0, over_tcp = 0;
  for (int s = 0; s < servers; ++s) {
    v1::ServerStats stats;
    cluster->core(s)->FillStats(&stats);
    batches += stats.delta_batches_sent();
    over_tcp += stats.delta_batches_sent_tcp();
  }
  return {batches, over_tcp};
}

// A parity port that closes mid-job costs its senders a failed attempt each: their batches go
// over gRPC instead, and none is lost.
TEST(ParityOverTcp, AClosedPortSendsTheBatchesOverGrpcAndLosesNone) {
  JobSpec spec = EcSpec(SparseOptimizerType::kAdagrad, 2, 1);
  spec.fault_tolerance.parity_transport = ParityTransport::kTcp;
  auto cluster = TestCluster::Start(spec, kToken);
  ASSERT_NE(cluster, nullptr);
  Train(spec, cluster.get(), 1);
  const auto [batches, over_tcp] = BatchesSent(cluster.get(), 3);
  ASSERT_GT(over_tcp, 0);
  cluster->StopTcp(0);
  Train(spec, cluster.get(), 1);  // 30 more steps
  const auto [batches_after, over_tcp_after] = BatchesSent(cluster.get(), 3);
  // Servers 1 and 2 send server 0 its parity over gRPC now.
  EXPECT_GT(batches_after - batches, over_tcp_after - over_tcp + 20)
      << batches << " " << over_tcp << " " << batches_after << " " << over_tcp_after;
  ExpectClean(*cluster);
}

// Anyone who reaches the port can send a frame: without the job's token it changes nothing.
TEST(ParityOverTcp, ABatchWithoutTheTokenIsRefusedAndChangesNothing) {
  JobSpec spec = EcSpec(SparseOptimizerType::kAdagrad, 2, 1);
  spec.fault_tolerance.parity_transport = ParityTransport::kTcp;
  auto cluster = TestCluster::Start(spec, kToken);
  ASSERT_NE(cluster, nullptr);
  auto placement = Placement::Create(3, 2, 1, spec.model.table_rows);
  ASSERT_TRUE(placement.ok());
  // A stripe of table 0 with its parity on server 0 and its member j on server 1.
  const int table = 0, holder = 0, sender = 1;
  int64_t stripe = -1;
  int j = -1;
  for (int64_t s = 0; s < placement->stripes(table) && stripe < 0; ++s) {
    if (placement->ParityLocation(table, s, 0).server != holder) continue;
    for (int m = 0; m < 2; ++m) {
      if (placement->DataLocation(table, s * 2 + m).server == sender) {
        stripe = s;
        j = m;
      }
    }
  }
  ASSERT_GE(stripe, 0);
  std::vector<uint8_t> before;
  ASSERT_TRUE(cluster->core(holder)->ReadParityRow(table, stripe, &before).ok());

  DeltaStreams::Batch records;
  const std::vector<uint8_t> delta(before.size(), 0x5a);
  records.Add(DeltaStreams::Batch::Header{table, j, stripe, 0, 1}, delta.data(), delta.size());
  auto send = [&](const std::string& token) {
    v1::ParityDeltaBatch batch;
    FillHeader(batch.mutable_header(), token, 1, "server-1");
    batch.set_from_server(sender);
    batch.set_sender_instance("test-server-1");
    batch.set_seq(1);
    batch.set_delta_bytes(static_cast<int32_t>(delta.size()));
    batch.set_packed(records.packed);
    TcpDeltaConnection connection;
    // The frame's head signed with the same token: the listener's check of the head
    // refuses the wrong one before the batch is read.
    return connection.Send("127.0.0.1", cluster->tcp_port(holder), token, sender, 1,
                           batch.SerializeAsString(), "", 5000);
  };
  auto refused = send("not-the-token");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnauthenticated) << refused.status();
  EXPECT_TRUE(AnsweredByPeer(refused.status()));
  std::vector<uint8_t> after;
  ASSERT_TRUE(cluster->core(holder)->ReadParityRow(table, stripe, &after).ok());
  EXPECT_EQ(after, before);
  // The same frame with the token is applied: the refusal was the token's.
  auto applied = send(kToken);
  ASSERT_TRUE(applied.ok()) << applied.status();
  ASSERT_TRUE(cluster->core(holder)->ReadParityRow(table, stripe, &after).ok());
  EXPECT_NE(after, before);
}

// A rebuild reads a survivor's data and parity members in one ReadRows: its parity part
// answers as ReadParity does, and a stripe the server holds no parity of fails the whole read.
TEST(ReadRows, ReadsParityInTheSameRequest) {
  JobSpec spec = EcSpec(SparseOptimizerType::kAdagrad, 2, 1);
  auto cluster = TestCluster::Start(spec, kToken);
  ASSERT_NE(cluster, nullptr);
  Train(spec, cluster.get(), 1);
  auto placement = Placement::Create(3, 2, 1, spec.model.table_rows);
  ASSERT_TRUE(placement.ok());
  const int server = 0, table = 2;
  std::vector<int64_t> held, foreign;
  for (int64_t stripe = 0; stripe < placement->stripes(table); ++stripe) {
    (placement->ParityLocation(table, stripe, 0).server == server ? held : foreign)
        .push_back(stripe);
  }
  ASSERT_GE(held.size(), 3u);
  ASSERT_FALSE(foreign.empty());
  held.resize(3);
  const int64_t data_row = placement->RowAtDataSlot(table, server, 0);
  auto stub = v1::ParameterServer::NewStub(MakeChannel(cluster->address(server), Role::kServer));

  v1::ReadParityRequest alone;
  FillHeader(alone.mutable_header(), kToken, 1, "test");
  alone.set_table(table);
  for (int64_t stripe : held) alone.add_stripes(stripe);
  v1::ReadParityResponse want;
  grpc::ClientContext c1;
  ASSERT_TRUE(stub->ReadParity(&c1, alone, &want).ok());

  v1::ReadRowsRequest both;
  FillHeader(both.mutable_header(), kToken, 1, "test");
  v1::TableRows* rows = both.add_tables();
  rows->set_table(table);
  rows->add_rows(data_row);
  v1::TableStripes* parity = both.add_parity();
  parity->set_table(table);
  for (int64_t stripe : held) parity->add_stripes(stripe);
  v1::ReadRowsResponse got;
  grpc::ClientContext c2;
  ASSERT_TRUE(stub->ReadRows(&c2, both, &got).ok());
  EXPECT_EQ(got.versions_size(), 1);
  EXPECT_EQ(got.payloads().size(), static_cast<size_t>(got.payload_floats()) * sizeof(float));
  EXPECT_EQ(got.parity().payloads(), want.payloads());
  EXPECT_EQ(std::vector<uint32_t>(got.parity().versions().begin(), got.parity().versions().end()),
            std::vector<uint32_t>(want.versions().begin(), want.versions().end()));
  EXPECT_EQ(got.parity().settled_size(), 3);

  parity->add_stripes(foreign.front());
  v1::ReadRowsResponse refused;
  grpc::ClientContext c3;
  grpc::Status s = stub->ReadRows(&c3, both, &refused);
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(refused.payloads().empty());
}

// A coordinator that was taken over (a lower term than the servers heard of) can neither
// freeze nor scrub nor save: every call it makes is refused, naming both terms, and nothing
// stays frozen. Its successor, and a later one, are obeyed.
TEST(Scrub, ADeposedCoordinatorIsRefusedByEveryServer) {
  JobSpec spec = EcSpec(SparseOptimizerType::kAdagrad, 2, 1);
  auto cluster = TestCluster::Start(spec, kToken);
  ASSERT_NE(cluster, nullptr);
  for (int s = 0; s < 3; ++s) cluster->core(s)->ObserveCoordinatorTerm(2);
  const v1::ScrubReport deposed = ScrubServers(Addresses(*cluster), kToken, {1, 1}, 10000);
  EXPECT_FALSE(deposed.clean());
  EXPECT_NE(deposed.error().find("cannot freeze server 0"), std::string::npos) << deposed.error();
  EXPECT_NE(deposed.error().find("coordinator term 1 was deposed: term 2 took the job over"),
            std::string::npos)
      << deposed.error();
  auto stub = v1::ParameterServer::NewStub(MakeChannel(cluster->address(1), Role::kServer));
  for (auto call : {+[](v1::ParameterServer::Stub* stub, const v1::RequestHeader& header) {
                      v1::SaveCheckpointRequest req;
                      *req.mutable_header() = header;
                      req.set_tmp_dir("/nonexistent/never-written");
                      v1::SaveCheckpointResponse resp;
                      grpc::ClientContext ctx;
                      return stub->SaveCheckpoint(&ctx, req, &resp);
                    },
                    +[](v1::ParameterServer::Stub* stub, const v1::RequestHeader& header) {
                      v1::ScrubParityRequest req;
                      *req.mutable_header() = header;
                      v1::ScrubParityResponse resp;
                      grpc::ClientContext ctx;
                      return stub->ScrubParity(&ctx, req, &resp);
                    }}) {
    v1::RequestHeader header;
    FillHeader(&header, kToken, CoordinatorStamp{1, 1}, "coordinator");
    const grpc::Status refused = call(stub.get(), header);
    EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_NE(refused.error_message().find("was deposed"), std::string::npos)
        << refused.error_message();
  }
  const v1::ScrubReport current = ScrubServers(Addresses(*cluster), kToken, {1, 2}, 10000);
  EXPECT_TRUE(current.clean()) << current.error();
  const v1::ScrubReport later = ScrubServers(Addresses(*cluster), kToken, {1, 3}, 10000);
  EXPECT_TRUE(later.clean()) << later.error();
  for (int s = 0; s < 3; ++s) EXPECT_EQ(cluster->core(s)->coordinator_term(), 3u);
}

TEST(Scrub, DetectsACorruptedParityRow) {
  JobSpec spec = EcSpec(SparseOptimizerType::kAdagrad, 2, 1);
  auto cluster = TestCluster::Start(spec, kToken);
  ASSERT_NE(cluster, nullptr);
  // Flip one byte of one parity row through the parity delta path itself, as the data
  // member's server would (a stream the holder has not heard from yet starts anywhere).
  auto placement = Placement::Create(3, 2, 1, spec.model.table_rows);
  int holder = placement->ParityLocation(0, 5, 0).server;
  v1::ParityDeltaBatch batch;
  FillHeader(batch.mutable_header(), kToken, 1, "test");
  batch.set_from_server(placement->ServerOf(0, 5, 0));
  batch.set_sender_instance("test-corrupter");
  batch.set_seq(1);
  v1::ParityDelta* d = batch.add_deltas();
  d->set_table(0);
  d->set_stripe(5);
  d->set_j(0);
  std::string delta(sizeof(float) * (spec.model.embedding_dim * 2), '\0');
  delta[3] = 1;
  d->set_delta(delta);
  v1::ParityDeltaAck ack;
  ASSERT_TRUE(cluster->core(holder)->ApplyParityDeltas(batch, &ack).ok());
  v1::ScrubReport report = ScrubServers(Addresses(*cluster), kToken, {1}, 10000);
  EXPECT_EQ(report.parity_mismatches(), 1);
  EXPECT_FALSE(report.clean());
  ASSERT_GE(report.mismatches_size(), 1);
  EXPECT_NE(report.mismatches(0).find("table 0 stripe 5"), std::string::npos);
}

// A network that drops batches, loses acks (the batch was applied but the sender does not
// know), delivers duplicates and delays: the production sender must still apply each batch
// exactly once.
class FlakyTransport : public DeltaTransport {
 public:
  void Attach(std::vector<std::string> addresses) {
    for (const auto& a : addresses) stubs_.push_back(v1::ParameterServer::NewStub(MakeChannel(a, Role::kServer)));
  }
  absl::StatusOr<uint64_t> Send(int peer, const v1::ParityDeltaBatch& batch) override {
    int dice;
    {
      std::lock_guard<std::mutex> lock(mu_);
      dice = static_cast<int>(rng_() % 10);
    }
    if (dice == 0) {
      ++dropped;
      return absl::UnavailableError("dropped by the test");
    }
    if (dice == 1) std::this_thread::sleep_for(std::chrono::milliseconds(3));
    auto ack = Deliver(peer, batch);
    if (dice == 2 || dice == 3) {
      ++duplicated;
      ack = Deliver(peer, batch);  // a duplicate after a reconnect
    }
    if (dice == 4 && ack.ok()) {
      ++lost_acks;
      return absl::DeadlineExceededError("ack lost by the test");
    }
    return ack;
  }
  std::atomic<int> dropped{0}, duplicated{0}, lost_acks{0};

 private:
  absl::StatusOr<uint64_t> Deliver(int peer, const v1::ParityDeltaBatch& batch) {
    v1::ParityDeltaAck ack;
    grpc::ClientContext ctx;
    grpc::Status s = stubs_[peer]->ApplyParityDeltas(&ctx, batch, &ack);
    if (!s.ok()) return FromGrpcStatus(s);
    return ack.applied_seq();
  }
  std::mutex mu_;
  std::mt19937 rng_{1234};
  std::vector<std::unique_ptr<v1::ParameterServer::Stub>> stubs_;
};

TEST(ExactlyOnce, FlakyNetworkStillEndsClean) {
  JobSpec spec = EcSpec(SparseOptimizerType::kAdagrad, 3, 2);
  FlakyTransport flaky;
  // The transport needs the addresses, which exist only once the servers listen: start the
  // cluster with it, then attach (no delta flows before training starts).
  auto cluster = TestCluster::Start(spec, kToken, &flaky);
  ASSERT_NE(cluster, nullptr);
  flaky.Attach(Addresses(*cluster));
  Train(spec, cluster.get(), 2);
  EXPECT_GT(flaky.dropped.load(), 0);
  EXPECT_GT(flaky.duplicated.load(), 0);
  EXPECT_GT(flaky.lost_acks.load(), 0);
  ExpectClean(*cluster);
}

// Delays every delta batch, so a push acknowledged before its parity is applied is visible.
class SlowTransport : public DeltaTransport {
 public:
  void Attach(std::vector<std::string> addresses) {
    for (const auto& a : addresses) stubs_.push_back(v1::ParameterServer::NewStub(MakeChannel(a, Role::kServer)));
  }
  absl::StatusOr<uint64_t> Send(int peer, const v1::ParityDeltaBatch& batch) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    v1::ParityDeltaAck ack;
    grpc::ClientContext ctx;
    grpc::Status s = stubs_[peer]->ApplyParityDeltas(&ctx, batch, &ack);
    if (!s.ok()) return FromGrpcStatus(s);
    return ack.applied_seq();
  }

 private:
  std::vector<std::unique_ptr<v1::ParameterServer::Stub>> stubs_;
};

// Pushes one row and, the moment the push returns, compares the parity holder's row with a
// fresh encode of the stripe's current data. Returns whether they matched.
bool ParityCurrentWhenAcked(AckPolicy ack) {
  JobSpec spec = EcSpec(SparseOptimizerType::kAdagrad, 2, 1);
  spec.fault_tolerance.ack = ack;
  SlowTransport slow;
  auto cluster = TestCluster::Start(spec, kToken, &slow);
  slow.Attach(Addresses(*cluster));
  auto placement = Placement::Create(3, 2, 1, spec.model.table_rows);
  const int table = 1;
  const int64_t row = 10, stripe = row / 2;
  int data_server = placement->DataLocation(table, row).server;
  int parity_server = placement->ParityLocation(table, stripe, 0).server;

  auto stub = v1::ParameterServer::NewStub(MakeChannel(cluster->address(data_server), Role::kServer));
  v1::PushRequest push;
  FillHeader(push.mutable_header(), kToken, 1, "test");
  push.add_tables()->set_table(table);
  push.mutable_tables(0)->add_rows(row);
  std::vector<float> grad(spec.model.embedding_dim, 0.25f);
  push.add_grads()->assign(reinterpret_cast<const char*>(grad.data()), grad.size() * 4);
  v1::PushResponse unused;
  grpc::ClientContext ctx;
  EXPECT_TRUE(stub->Push(&ctx, push, &unused).ok());
  std::vector<uint8_t> parity;
  EXPECT_TRUE(cluster->core(parity_server)->ReadParityRow(table, stripe, &parity).ok());

  // The stripe's data rows as they are now.
  std::vector<std::vector<uint8_t>> data(2);
  for (int j = 0; j < 2; ++j) {
    int64_t r = stripe * 2 + j;
    auto s = v1::ParameterServer::NewStub(
        MakeChannel(cluster->address(placement->DataLocation(table, r).server), Role::kServer));
    v1::ReadRowsRequest req;
    FillHeader(req.mutable_header(), kToken, 1, "test");
    req.mutable_rows()->set_table(table);
    req.mutable_rows()->add_rows(r);
    v1::ReadRowsResponse resp;
    grpc::ClientContext c;
    EXPECT_TRUE(s->ReadRows(&c, req, &resp).ok());
    data[j].assign(resp.payloads().begin(), resp.payloads().end());
  }
  auto code = RowCode::Create(FaultToleranceMode::kErasureCode, 2, 1, "auto");
  std::vector<uint8_t> expect(parity.size());
  const uint8_t* d[2] = {data[0].data(), data[1].data()};
  uint8_t* p[1] = {expect.data()};
  EXPECT_TRUE((*code)->Encode(d, p, expect.size()).ok());
  return parity == expect;
}

TEST(AckAfterParity, ParityReflectsAPushWhenItIsAcknowledged) {
  EXPECT_TRUE(ParityCurrentWhenAcked(AckPolicy::kAfterParity));
}

TEST(AckAfterParity, AsyncAcknowledgesBeforeParity) {
  // The same check with ack async fails: the hook above would notice a wrong ack mode.
  EXPECT_FALSE(ParityCurrentWhenAcked(AckPolicy::kAsync));
}

TEST(Replication, CopiesStayIdenticalThroughTraining) {
  JobSpec spec = SmallSpec(3, 30);
  spec.fault_tolerance.mode = FaultToleranceMode::kReplication;
  spec.fault_tolerance.r = 2;
  spec.fault_tolerance.dense_replicas = 2;
  auto cluster = TestCluster::Start(spec, kToken);
  ASSERT_NE(cluster, nullptr);
  Train(spec, cluster.get(), 2);
  ExpectClean(*cluster);
}

}  // namespace
}  // namespace ecps
