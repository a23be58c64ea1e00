// Row versions: what lets a replacement read a stripe while training goes on and know the
// read is consistent (ps/rebuilder.h). Data rows count their updates; parity rows count the
// updates of each member they contain and notice when one is still missing.
#include <cstring>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "ps/embedding_store.h"
#include "ps/parity_store.h"
#include "ps/row_code.h"

namespace ecps {
namespace {

constexpr int kDim = 4;

struct Fixture {
  Fixture() {
    placement = std::make_unique<Placement>(*Placement::Create(3, 2, 1, {64}));
    code = *RowCode::Create(FaultToleranceMode::kErasureCode, 2, 1, "auto");
    optimizer.rule = SparseUpdateRule::kSgd;
  }
  // A stripe of table 0 whose parity server 0 holds.
  int64_t ParityStripe() const {
    for (int64_t s = 0; s < placement->stripes(0); ++s) {
      if (placement->ServerOf(0, s, 2) == 0) return s;
    }
    return -1;
  }
  std::unique_ptr<ParityStore> Parity(bool lost) const {
    return *ParityStore::Create(*placement, 0, kDim, optimizer, /*seed=*/7, code.get(), lost);
  }
  std::unique_ptr<Placement> placement;
  std::unique_ptr<RowCode> code;
  SparseOptimizerConfig optimizer;
};

// A delta of member j of `stripe` from version `from` to `to`, filled with `fill`.
struct Delta {
  std::vector<uint8_t> bytes;
  ParityStore::DeltaRef ref;
  Delta(int64_t stripe, int j, uint32_t from, uint32_t to, uint8_t fill)
      : bytes(kDim * sizeof(float), fill) {
    ref = ParityStore::DeltaRef{0, j, stripe, nullptr, from, to};
  }
  ParityStore::DeltaRef Ref() const {
    ParityStore::DeltaRef r = ref;
    r.data = bytes.data();
    return r;
  }
};

struct Read {
  std::vector<uint8_t> row;
  uint32_t versions[2] = {0, 0};
  bool settled = false;
};

Read ReadRow(const ParityStore& store, int64_t stripe) {
  Read out;
  out.row.resize(store.payload_bytes());
  EXPECT_TRUE(store.Read(0, stripe, out.row.data(), out.versions, &out.settled).ok());
  return out;
}

TEST(ParityVersions, OutOfOrderDeltasAreExactOnlyOnceTheMissingOneArrives) {
  Fixture f;
  const int64_t stripe = f.ParityStripe();
  ASSERT_GE(stripe, 0);
  auto in_order = f.Parity(false);
  auto reordered = f.Parity(false);
  Delta first(stripe, 1, 0, 1, 0x11), second(stripe, 1, 1, 2, 0x5a);
  ASSERT_TRUE(in_order->ApplyBatch({first.Ref(), second.Ref()}).ok());
  // Two pushes of one row queued in the other order: the second update arrives first.
  ASSERT_TRUE(reordered->ApplyBatch({second.Ref()}).ok());
  Read mid = ReadRow(*reordered, stripe);
  EXPECT_FALSE(mid.settled) << "update 1 is missing while update 2 is in: not exact";
  ASSERT_TRUE(reordered->ApplyBatch({first.Ref()}).ok());
  Read done = ReadRow(*reordered, stripe);
  EXPECT_TRUE(done.settled);
  EXPECT_EQ(done.versions[1], 2u);
  EXPECT_EQ(done.versions[0], 0u);
  EXPECT_EQ(done.row, ReadRow(*in_order, stripe).row);
  EXPECT_EQ(reordered->version_gaps(), 0);
}

TEST(ParityVersions, ReplacementRefusesAStaleInstallAndSkipsWhatItsRowContains) {
  Fixture f;
  const int64_t stripe = f.ParityStripe();
  ASSERT_GE(stripe, 0);
  auto store = f.Parity(/*lost=*/true);
  ASSERT_FALSE(store->IsValid(0, stripe));
  // Update 5 of member 0 reaches the replacement before its row is rebuilt: dropped.
  ASSERT_TRUE(store->ApplyBatch({Delta(stripe, 0, 4, 5, 0x33).Ref()}).ok());
  std::vector<uint8_t> rebuilt(store->payload_bytes(), 0x42);
  const uint32_t stale[2] = {4, 9};
  EXPECT_EQ(store->InstallRow(0, stripe, rebuilt.data(), stale), ParityStore::Install::kStale)
      << "data read at version 4 misses the dropped update 5";
  EXPECT_FALSE(store->IsValid(0, stripe));
  const uint32_t current[2] = {5, 9};
  ASSERT_EQ(store->InstallRow(0, stripe, rebuilt.data(), current),
            ParityStore::Install::kInstalled);
  EXPECT_EQ(store->InstallRow(0, stripe, rebuilt.data(), current),
            ParityStore::Install::kAlreadyValid);
  // A late delta the rebuilt row already contains changes nothing.
  ASSERT_TRUE(store->ApplyBatch({Delta(stripe, 1, 8, 9, 0x77).Ref()}).ok());
  Read after_late = ReadRow(*store, stripe);
  EXPECT_EQ(after_late.row, rebuilt);
  EXPECT_EQ(after_late.versions[1], 9u);
  EXPECT_TRUE(after_late.settled);
  // The next update is applied.
  ASSERT_TRUE(store->ApplyBatch({Delta(stripe, 1, 9, 10, 0x77).Ref()}).ok());
  Read after_next = ReadRow(*store, stripe);
  EXPECT_NE(after_next.row, rebuilt);
  EXPECT_EQ(after_next.versions[1], 10u);
  EXPECT_TRUE(after_next.settled);
  EXPECT_EQ(store->version_gaps(), 0);
  // A coalesced delta that straddles the install (updates 4..6 of member 0, installed at 5)
  // can be neither skipped nor applied exactly: it is counted.
  ASSERT_TRUE(store->ApplyBatch({Delta(stripe, 0, 4, 6, 0x01).Ref()}).ok());
  EXPECT_EQ(store->version_gaps(), 1);
}

TEST(DataVersions, EveryUpdateCountsAndTheDeltaCarriesBothVersions) {
  Fixture f;
  auto store = *EmbeddingStore::Create(*f.placement, 1, kDim, f.optimizer, /*seed=*/7);
  int64_t row = -1;
  for (int64_t r = 0; r < f.placement->rows(0) && row < 0; ++r) {
    if (f.placement->DataLocation(0, r).server == 1) row = r;
  }
  ASSERT_GE(row, 0);
  std::vector<std::pair<uint32_t, uint32_t>> seen;
  auto sink = [&](int64_t, uint32_t from, uint32_t to, const uint8_t*, size_t) {
    seen.push_back({from, to});
  };
  const std::vector<float> grad(kDim, 1.0f);
  ASSERT_TRUE(store->Push(0, {row}, grad.data(), sink).ok());
  ASSERT_TRUE(store->Push(0, {row}, grad.data(), sink).ok());
  EXPECT_EQ(seen, (std::vector<std::pair<uint32_t, uint32_t>>{{0, 1}, {1, 2}}));
  std::vector<float> payload(store->payload_floats());
  uint32_t version = 0;
  ASSERT_TRUE(store->ReadPayloads(0, {row}, payload.data(), &version).ok());
  EXPECT_EQ(version, 2u);
}

}  // namespace
}  // namespace ecps
