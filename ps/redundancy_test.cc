// The two Redundancy implementations on their own: three servers' stores in one process, the
// parity batches carried between them by a loopback transport (no gRPC).
#include "ps/redundancy.h"

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "proto/ecps.pb.h"
#include "ps/coded_redundancy.h"
#include "runtime/clock.h"

namespace ecps {
namespace {

constexpr int kServers = 3;
constexpr int kDim = 4;
constexpr int64_t kRows = 64;

SparseOptimizerConfig Adagrad() {
  SparseOptimizerConfig optimizer;
  optimizer.rule = SparseUpdateRule::kAdagrad;
  optimizer.lr = 0.1f;
  return optimizer;
}

std::unique_ptr<DenseStore> MakeDense(int server) {
  DenseOptimizerConfig dense;
  dense.rule = DenseUpdateRule::kSgd;
  return std::make_unique<DenseStore>(dense, kServers, server,
                                      std::vector<std::vector<float>>{{1, 1}, {2, 2}, {3, 3}});
}

// Hands a batch to the parity holder's redundancy, as the gRPC handler would.
class Loopback : public DeltaTransport {
 public:
  std::vector<Redundancy*> servers;
  int batches = 0;
  absl::StatusOr<uint64_t> Send(int peer, const v1::ParityDeltaBatch& batch) override {
    ++batches;
    v1::ParityDeltaAck ack;
    if (absl::Status s = servers[peer]->ApplyDeltas(batch, &ack); !s.ok()) return s;
    return ack.applied_seq();
  }
};

Redundancy::Hooks CountingHooks(int* refused) {
  Redundancy::Hooks hooks;
  hooks.check_peer = [](int, const std::string&, uint64_t, const char*) {
    return absl::OkStatus();
  };
  hooks.refuse = [refused](absl::Status s, const v1::RequestHeader&, const char*) {
    ++*refused;
    return s;
  };
  hooks.dense_ready = [] { return true; };
  return hooks;
}

// The rows of `table` that `server` holds, and a gradient for each.
void RowsOf(const Placement& placement, int server, std::vector<int64_t>* rows,
            std::string* grads) {
  rows->clear();
  std::vector<float> g;
  for (int64_t row = 0; row < kRows; ++row) {
    if (placement.DataLocation(0, row).server != server) continue;
    rows->push_back(row);
    for (int d = 0; d < kDim; ++d) g.push_back(0.01f * static_cast<float>(row + d + 1));
  }
  grads->assign(reinterpret_cast<const char*>(g.data()), g.size() * sizeof(float));
}

v1::PushRequest PushOf(const std::vector<int64_t>& rows, const std::string& grads) {
  v1::PushRequest push;
  v1::TableRows* t = push.add_tables();
  t->set_table(0);
  for (int64_t row : rows) t->add_rows(row);
  push.add_grads(grads);
  return push;
}

class CodedRedundancyTest : public ::testing::TestWithParam<AckPolicy> {
 protected:
  CodedRedundancyTest() : placement_(*Placement::Create(kServers, 2, 1, {kRows})) {
    for (int s = 0; s < kServers; ++s) {
      stores_.push_back(*EmbeddingStore::Create(placement_, s, kDim, Adagrad(), /*seed=*/7));
      dense_.push_back(MakeDense(s));
      auto code = *RowCode::Create(FaultToleranceMode::kErasureCode, 2, 1, "auto");
      auto parity =
          *ParityStore::Create(placement_, s, kDim, Adagrad(), /*seed=*/7, code.get());
      CodedRedundancy::Options options;
      options.server = s;
      options.instance = "i" + std::to_string(s);
      options.ack_after_parity = GetParam() == AckPolicy::kAfterParity;
      options.header = [](v1::RequestHeader*) {};
      options.test_transport = &loopback_;
      redundancies_.push_back(std::make_unique<CodedRedundancy>(
          std::move(options), stores_.back()->placement(), dense_.back().get(), std::move(code),
          std::move(parity),
          std::make_unique<PeerClient>(std::vector<std::string>(kServers), 1000)));
      redundancies_.back()->Start(CountingHooks(&refused_));
      loopback_.servers.push_back(redundancies_.back().get());
    }
  }
  ~CodedRedundancyTest() override {
    for (auto& r : redundancies_) r.reset();  // stop the senders before the stores go
  }

  // Every parity row equals the code applied to its stripe's data rows as the stores hold them.
  void ExpectParityMatchesData() {
    auto code = *RowCode::Create(FaultToleranceMode::kErasureCode, 2, 1, "auto");
    const size_t bytes = sizeof(float) * stores_[0]->payload_floats();
    for (int64_t stripe = 0; stripe < placement_.stripes(0); ++stripe) {
      std::vector<std::vector<uint8_t>> data(2, std::vector<uint8_t>(bytes, 0));
      for (int j = 0; j < 2; ++j) {
        const int64_t row = stripe * 2 + j;
        if (row >= kRows) continue;
        const int holder = placement_.ServerOf(0, stripe, j);
        ASSERT_TRUE(stores_[holder]
                        ->ReadPayloads(0, {row}, reinterpret_cast<float*>(data[j].data()))
                        .ok());
      }
      std::vector<uint8_t> expect(bytes), held;
      const uint8_t* dptr[2] = {data[0].data(), data[1].data()};
      uint8_t* pptr[1] = {expect.data()};
      ASSERT_TRUE(code->Encode(dptr, pptr, bytes).ok());
      const int holder = placement_.ServerOf(0, stripe, 2);
      ASSERT_TRUE(redundancies_[holder]->ReadParityRow(0, stripe, &held).ok());
      EXPECT_EQ(held, expect) << "stripe " << stripe << " on server " << holder;
    }
  }

  Placement placement_;
  Loopback loopback_;
  std::vector<std::unique_ptr<EmbeddingStore>> stores_;
  std::vector<std::unique_ptr<DenseStore>> dense_;
  std::vector<std::unique_ptr<CodedRedundancy>> redundancies_;
  int refused_ = 0;
};

TEST_P(CodedRedundancyTest, APushLeavesEveryParityRowEqualToAFreshEncode) {
  for (int round = 0; round < 3; ++round) {
    for (int s = 0; s < kServers; ++s) {
      std::vector<int64_t> rows;
      std::string grads;
      RowsOf(placement_, s, &rows, &grads);
      const v1::PushRequest push = PushOf(rows, grads);
      auto resolved = stores_[s]->Resolve(0, rows);
      ASSERT_TRUE(resolved.ok()) << resolved.status();
      const std::vector<EmbeddingStore::Rows> tables = {*resolved};
      ASSERT_TRUE(redundancies_[s]->ApplyPush(*stores_[s], tables, push).ok());
    }
  }
  // With async the push returned before the acks: a freeze's drain is the consistent point.
  for (auto& r : redundancies_) ASSERT_TRUE(r->Drain(std::chrono::seconds(10)).ok());
  EXPECT_GT(loopback_.batches, 0);
  ExpectParityMatchesData();
  // The pushes changed the rows: an unchanged store would match its initial parity too.
  std::vector<float> row(kDim), fresh(kDim);
  ASSERT_TRUE(stores_[placement_.DataLocation(0, 0).server]->Pull(0, {0}, row.data()).ok());
  auto untouched = *EmbeddingStore::Create(placement_, placement_.DataLocation(0, 0).server,
                                           kDim, Adagrad(), /*seed=*/7);
  ASSERT_TRUE(untouched->Pull(0, {0}, fresh.data()).ok());
  EXPECT_NE(row, fresh);
  EXPECT_EQ(refused_, 0);
}

TEST_P(CodedRedundancyTest, AParityWriteWithoutTheCallersFreezeIsRefused) {
  const int holder = placement_.ServerOf(0, 0, 2);
  v1::WriteParityRequest write;
  write.set_table(0);
  write.add_stripes(0);
  write.set_payloads(std::string(sizeof(float) * stores_[0]->payload_floats(), '\x5a'));
  write.add_versions(0);
  write.add_versions(0);
  write.set_owner("nobody");
  write.set_freeze_id(1);
  FakeClock clock;
  UpdateGate gate(&clock);
  std::vector<uint8_t> before, after;
  ASSERT_TRUE(redundancies_[holder]->ReadParityRow(0, 0, &before).ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(redundancies_[holder]->WriteParity(write, gate)));
  ASSERT_TRUE(redundancies_[holder]->ReadParityRow(0, 0, &after).ok());
  EXPECT_EQ(before, after);
  EXPECT_EQ(refused_, 1);
}

INSTANTIATE_TEST_SUITE_P(Acks, CodedRedundancyTest,
                         ::testing::Values(AckPolicy::kAfterParity, AckPolicy::kAsync),
                         [](const ::testing::TestParamInfo<AckPolicy>& info) {
                           return std::string(info.param == AckPolicy::kAsync ? "Async"
                                                                              : "AfterParity");
                         });

TEST(NoRedundancyTest, APushIsTheStoresOwnUpdateAndPeerRequestsAreRefused) {
  const Placement placement = *Placement::Create(kServers, 1, 0, {kRows});
  auto store = *EmbeddingStore::Create(placement, 1, kDim, Adagrad(), /*seed=*/7);
  auto twin = *EmbeddingStore::Create(placement, 1, kDim, Adagrad(), /*seed=*/7);
  NoRedundancy none(1);
  int refused = 0;
  none.Start(CountingHooks(&refused));
  std::vector<int64_t> rows;
  std::string grads;
  RowsOf(placement, 1, &rows, &grads);
  const std::vector<EmbeddingStore::Rows> tables = {*store->Resolve(0, rows)};
  ASSERT_TRUE(none.ApplyPush(*store, tables, PushOf(rows, grads)).ok());
  std::vector<float> g(grads.size() / sizeof(float));
  std::memcpy(g.data(), grads.data(), grads.size());
  ASSERT_TRUE(twin->Push(0, rows, g.data()).ok());
  std::vector<float> a(rows.size() * kDim), b(rows.size() * kDim), fresh(rows.size() * kDim);
  ASSERT_TRUE(store->Pull(0, rows, a.data()).ok());
  ASSERT_TRUE(twin->Pull(0, rows, b.data()).ok());
  EXPECT_EQ(a, b);
  auto untouched = *EmbeddingStore::Create(placement, 1, kDim, Adagrad(), /*seed=*/7);
  ASSERT_TRUE(untouched->Pull(0, rows, fresh.data()).ok());
  EXPECT_NE(a, fresh);

  v1::ParityDeltaAck ack;
  EXPECT_TRUE(absl::IsFailedPrecondition(none.ApplyDeltas(v1::ParityDeltaBatch(), &ack)));
  EXPECT_TRUE(absl::IsFailedPrecondition(none.ReplicateDense(v1::ReplicateDenseRequest())));
  EXPECT_EQ(refused, 2);
  std::vector<uint8_t> out;
  EXPECT_TRUE(absl::IsFailedPrecondition(none.ReadParityRow(0, 0, &out)));
  EXPECT_FALSE(none.rebuilds());
  EXPECT_EQ(none.backend(), "none");
}

}  // namespace
}  // namespace ecps
