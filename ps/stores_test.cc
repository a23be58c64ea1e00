// Unit tests of the parameter server's stores and its row code, on their own: the embedding
// rows (deterministic initial values wherever a row lives, all-or-nothing pushes, the
// deltas parity is kept with), the dense tensors (primary and replicas in version order) and
// the code that keeps parity (an updated parity row equals a fresh encode; decode gives the
// lost member back).
#include <cstring>
#include <memory>
#include <vector>

#include "codec/codec.h"
#include "gtest/gtest.h"
#include "ps/dense_store.h"
#include "ps/embedding_store.h"
#include "ps/row_code.h"
#include "runtime/error_kind.h"
#include "domain/placement.h"

namespace ecps {
namespace {

constexpr int kDim = 4;

SparseOptimizerConfig Sgd(float lr) {
  SparseOptimizerConfig opt;
  opt.rule = SparseUpdateRule::kSgd;
  opt.lr = lr;
  return opt;
}

std::vector<float> PullOne(const EmbeddingStore& store, int64_t row) {
  std::vector<float> out(kDim);
  const std::vector<int64_t> rows = {row};
  EXPECT_TRUE(store.Pull(0, rows, out.data()).ok());
  return out;
}

TEST(EmbeddingStoreTest, ARowStartsTheSameWhicheverServerHoldsIt) {
  const Placement one = *Placement::Create(1, 1, 0, {40});
  const Placement three = *Placement::Create(3, 1, 0, {40});
  auto alone = *EmbeddingStore::Create(one, 0, kDim, Sgd(0.1f), /*seed=*/5);
  for (int s = 0; s < 3; ++s) {
    auto store = *EmbeddingStore::Create(three, s, kDim, Sgd(0.1f), /*seed=*/5);
    for (int64_t row = 0; row < 40; ++row) {
      if (three.DataLocation(0, row).server != s) continue;
      EXPECT_EQ(PullOne(*store, row), PullOne(*alone, row)) << "row " << row;
    }
  }
  auto other_seed = *EmbeddingStore::Create(one, 0, kDim, Sgd(0.1f), /*seed=*/6);
  EXPECT_NE(PullOne(*other_seed, 3), PullOne(*alone, 3)) << "the seed picks the values";
}

TEST(EmbeddingStoreTest, APushWithOneBadRowAppliesNothing) {
  const Placement placement = *Placement::Create(2, 1, 0, {10});
  auto store = *EmbeddingStore::Create(placement, 0, kDim, Sgd(0.5f), 1);
  int64_t mine = -1, theirs = -1;
  for (int64_t row = 0; row < 10; ++row) {
    (placement.DataLocation(0, row).server == 0 ? mine : theirs) = row;
  }
  const std::vector<float> before = PullOne(*store, mine);
  const std::vector<float> grads(2 * kDim, 1.0f);
  const std::vector<int64_t> rows = {mine, theirs};
  EXPECT_EQ(store->Push(0, rows, grads.data()).code(), absl::StatusCode::kInvalidArgument)
      << "row " << theirs << " is not held here";
  const std::vector<int64_t> out_of_range = {mine, 10};
  EXPECT_EQ(store->Push(0, out_of_range, grads.data()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->Push(1, std::vector<int64_t>{mine}, grads.data()).code(),
            absl::StatusCode::kInvalidArgument) << "no table 1";
  EXPECT_EQ(PullOne(*store, mine), before);
}

TEST(EmbeddingStoreTest, APushAppliesTheRuleAndReportsItsDeltaAndVersions) {
  const Placement placement = *Placement::Create(1, 1, 0, {8});
  auto store = *EmbeddingStore::Create(placement, 0, kDim, Sgd(0.5f), 1);
  const std::vector<float> before = PullOne(*store, 2);
  std::vector<float> old_payload(store->payload_floats());
  ASSERT_TRUE(store->ReadPayloads(0, std::vector<int64_t>{2}, old_payload.data()).ok());
  const std::vector<float> grads = {1, 2, 3, 4};
  std::vector<uint8_t> delta;
  uint32_t from = 99, to = 99;
  ASSERT_TRUE(store
                  ->Push(0, std::vector<int64_t>{2}, grads.data(),
                         [&](int64_t row, uint32_t f, uint32_t t, const uint8_t* d, size_t len) {
                           EXPECT_EQ(row, 2);
                           from = f;
                           to = t;
                           delta.assign(d, d + len);
                         })
                  .ok());
  const std::vector<float> after = PullOne(*store, 2);
  for (int i = 0; i < kDim; ++i) EXPECT_FLOAT_EQ(after[i], before[i] - 0.5f * grads[i]);
  EXPECT_EQ(from, 0u);
  EXPECT_EQ(to, 1u);
  // The delta is old XOR new over the whole payload: applying it to the old gives the new.
  std::vector<float> new_payload(store->payload_floats());
  uint32_t version = 0;
  ASSERT_TRUE(
      store->ReadPayloads(0, std::vector<int64_t>{2}, new_payload.data(), &version).ok());
  EXPECT_EQ(version, 1u);
  ASSERT_EQ(delta.size(), new_payload.size() * sizeof(float));
  std::vector<uint8_t> rebuilt(delta.size());
  std::memcpy(rebuilt.data(), old_payload.data(), rebuilt.size());
  for (size_t i = 0; i < rebuilt.size(); ++i) rebuilt[i] ^= delta[i];
  EXPECT_EQ(std::memcmp(rebuilt.data(), new_payload.data(), rebuilt.size()), 0);
}

TEST(EmbeddingStoreTest, ALostStoreServesOnlyInstalledRows) {
  const Placement placement = *Placement::Create(1, 1, 0, {4});
  auto lost = *EmbeddingStore::Create(placement, 0, kDim, Sgd(0.1f), 1, /*lost=*/true);
  EXPECT_FALSE(lost->all_valid());
  std::vector<float> out(kDim);
  EXPECT_EQ(lost->Pull(0, std::vector<int64_t>{1}, out.data()).code(),
            absl::StatusCode::kUnavailable);
  const std::vector<float> payload(lost->payload_floats(), 0.25f);
  EXPECT_TRUE(lost->InstallRow(0, 1, payload.data(), /*version=*/7));
  EXPECT_FALSE(lost->InstallRow(0, 1, payload.data(), 8)) << "a valid row is left alone";
  EXPECT_EQ(PullOne(*lost, 1), std::vector<float>(kDim, 0.25f));
  EXPECT_EQ(lost->invalid_rows(), 3);
}

TEST(DenseStoreTest, ReplicasApplyInVersionOrderAndStayIdentical) {
  DenseOptimizerConfig adam;
  const std::vector<std::vector<float>> initial = {{1, 2, 3}, {4, 5}};
  DenseStore primary(adam, /*servers=*/2, /*server=*/0, initial, /*replicas=*/1);
  DenseStore replica(adam, 2, 1, initial, 1);
  ASSERT_TRUE(primary.Owns(0));
  ASSERT_TRUE(replica.Holds(0));
  EXPECT_FALSE(replica.Owns(0));
  EXPECT_EQ(primary.ReplicasOf(0), std::vector<int>{1});

  const std::vector<float> g1 = {0.5f, -1, 2}, g2 = {1, 1, 1};
  std::vector<int64_t> shipped;
  auto ship = [&](int64_t version, const std::vector<float>&, const std::vector<float>&) {
    shipped.push_back(version);
    return absl::OkStatus();
  };
  ASSERT_TRUE(primary.ApplyAndShip(0, g1.data(), 3, ship).ok());
  ASSERT_TRUE(primary.ApplyAndShip(0, g2.data(), 3, ship).ok());
  EXPECT_EQ(shipped, (std::vector<int64_t>{1, 2}));

  const absl::Status gap = replica.ApplyReplica(0, 2, g2.data(), 3);
  EXPECT_EQ(gap.code(), absl::StatusCode::kFailedPrecondition) << "version 1 is missing";
  EXPECT_TRUE(HasErrorKind(gap, ErrorKind::kReplicaBehind)) << gap;
  ASSERT_TRUE(replica.ApplyReplica(0, 1, g1.data(), 3).ok());
  ASSERT_TRUE(replica.ApplyReplica(0, 1, g1.data(), 3).ok()) << "a resend is ignored";
  ASSERT_TRUE(replica.ApplyReplica(0, 2, g2.data(), 3).ok());
  uint64_t want = 0, got = 0;
  int64_t want_version = 0, got_version = 0;
  ASSERT_TRUE(primary.Checksum(0, &want, &want_version).ok());
  ASSERT_TRUE(replica.Checksum(0, &got, &got_version).ok());
  EXPECT_EQ(got_version, 2);
  EXPECT_EQ(got, want) << "bit-identical to the primary";
  EXPECT_EQ(replica.ApplyReplica(0, 3, g2.data(), 2).code(), absl::StatusCode::kInvalidArgument)
      << "wrong size";
}

TEST(RowCodeTest, TheXorPathOfUnitCoefficientsMatchesTheCodecByteForByte) {
  // RowCode XORs itself where a coefficient is 1 (all of r = 1): the rows must be exactly
  // what the codec makes, for every (q, j) and lengths around the 64- and 16-byte steps.
  for (int r : {1, 2, 3}) {
    auto code = *RowCode::Create(FaultToleranceMode::kErasureCode, 4, r, "auto");
    auto codec = *codec::ErasureCode::Create(4, r, "auto");
    for (size_t len : {4u, 8u, 12u, 16u, 20u, 60u, 64u, 68u, 128u, 132u, 200u}) {
      std::vector<uint8_t> delta(len);
      for (size_t i = 0; i < len; ++i) delta[i] = static_cast<uint8_t>(i * 29 + len + r);
      for (int q = 0; q < r; ++q) {
        for (int j = 0; j < 4; ++j) {
          std::vector<uint8_t> ours(len), theirs(len);
          for (size_t i = 0; i < len; ++i) ours[i] = theirs[i] = static_cast<uint8_t>(i ^ 0x5a);
          ASSERT_TRUE(code->UpdateParity(q, j, delta.data(), ours.data(), len).ok());
          ASSERT_TRUE(codec->UpdateParity(q, j, delta.data(), theirs.data(), len).ok());
          EXPECT_EQ(ours, theirs) << "r=" << r << " q=" << q << " j=" << j << " len=" << len;
        }
      }
    }
    std::vector<uint8_t> row(16), delta(16);
    EXPECT_FALSE(code->UpdateParity(r, 0, delta.data(), row.data(), 16).ok()) << "q out of range";
    EXPECT_FALSE(code->UpdateParity(0, 4, delta.data(), row.data(), 16).ok()) << "j out of range";
  }
  auto copies = *RowCode::Create(FaultToleranceMode::kReplication, 1, 2, "auto");
  std::vector<uint8_t> row = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  const std::vector<uint8_t> delta = {1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3};
  ASSERT_TRUE(copies->UpdateParity(1, 0, delta.data(), row.data(), row.size()).ok());
  EXPECT_EQ(row, (std::vector<uint8_t>{0, 3, 2, 5, 7, 4, 5, 10, 10, 9, 8, 15}));
}

TEST(EmbeddingStoreTest, PushWithDeltasWritesWhatPushHandsItsSink) {
  const Placement placement = *Placement::Create(3, 2, 1, {40});
  SparseOptimizerConfig adagrad;
  adagrad.rule = SparseUpdateRule::kAdagrad;
  adagrad.lr = 0.1f;
  auto a = *EmbeddingStore::Create(placement, 0, kDim, adagrad, /*seed=*/9);
  auto b = *EmbeddingStore::Create(placement, 0, kDim, adagrad, /*seed=*/9);
  std::vector<int64_t> rows;
  for (int64_t row = 0; row < 40; ++row) {
    if (placement.DataLocation(0, row).server == 0) rows.push_back(row);
  }
  ASSERT_GE(rows.size(), 4u);
  rows.push_back(rows[0]);  // a row twice in one push: versions 1 and 2
  std::vector<float> grads(rows.size() * kDim);
  for (size_t i = 0; i < grads.size(); ++i) grads[i] = 0.01f * static_cast<float>(i % 7) - 0.02f;
  const size_t bytes = sizeof(float) * a->payload_floats();
  struct Seen {
    int64_t row;
    uint32_t from, to;
    std::vector<uint8_t> delta;
  };
  std::vector<Seen> by_sink, by_slot;
  ASSERT_TRUE(a->Push(0, rows, grads.data(),
                      [&](int64_t row, uint32_t from, uint32_t to, const uint8_t* d, size_t len) {
                        by_sink.push_back({row, from, to, std::vector<uint8_t>(d, d + len)});
                      })
                  .ok());
  ASSERT_TRUE(b->PushWithDeltas(0, rows, grads.data(),
                                [&](int64_t row, uint32_t from, uint32_t to) {
                                  by_slot.push_back({row, from, to, std::vector<uint8_t>(bytes)});
                                  return by_slot.back().delta.data();
                                })
                  .ok());
  ASSERT_EQ(by_sink.size(), by_slot.size());
  for (size_t i = 0; i < by_sink.size(); ++i) {
    EXPECT_EQ(by_sink[i].row, by_slot[i].row);
    EXPECT_EQ(by_sink[i].from, by_slot[i].from);
    EXPECT_EQ(by_sink[i].to, by_slot[i].to);
    EXPECT_EQ(by_sink[i].delta, by_slot[i].delta) << "row " << by_sink[i].row;
  }
  EXPECT_EQ(by_slot.back().from, 1u);
  EXPECT_EQ(by_slot.back().to, 2u);
  std::vector<float> pa(rows.size() * a->payload_floats()), pb(pa.size());
  std::vector<uint32_t> va(rows.size()), vb(rows.size());
  ASSERT_TRUE(a->ReadPayloads(0, rows, pa.data(), va.data()).ok());
  ASSERT_TRUE(b->ReadPayloads(0, rows, pb.data(), vb.data()).ok());
  EXPECT_EQ(0, std::memcmp(pa.data(), pb.data(), pa.size() * sizeof(float)));
  EXPECT_EQ(va, vb);
  EXPECT_EQ(a->pushes(), b->pushes());
}

TEST(RowCodeTest, AnUpdatedParityRowEqualsAFreshEncodeAndDecodesTheLostMember) {
  auto code = *RowCode::Create(FaultToleranceMode::kErasureCode, 2, 2, "auto");
  constexpr size_t kLen = 32;
  std::vector<uint8_t> d0(kLen), d1(kLen), p0(kLen), p1(kLen);
  for (size_t i = 0; i < kLen; ++i) {
    d0[i] = static_cast<uint8_t>(i * 7 + 1);
    d1[i] = static_cast<uint8_t>(i * 13 + 5);
  }
  const uint8_t* data[] = {d0.data(), d1.data()};
  uint8_t* parity[] = {p0.data(), p1.data()};
  ASSERT_TRUE(code->Encode(data, parity, kLen).ok());

  // Member 1 changes: each parity row takes the delta instead of a re-encode.
  std::vector<uint8_t> d1_new(kLen), delta(kLen);
  for (size_t i = 0; i < kLen; ++i) {
    d1_new[i] = static_cast<uint8_t>(d1[i] + 3);
    delta[i] = d1[i] ^ d1_new[i];
  }
  ASSERT_TRUE(code->UpdateParity(0, 1, delta.data(), p0.data(), kLen).ok());
  ASSERT_TRUE(code->UpdateParity(1, 1, delta.data(), p1.data(), kLen).ok());
  std::vector<uint8_t> f0(kLen), f1(kLen);
  const uint8_t* fresh_data[] = {d0.data(), d1_new.data()};
  uint8_t* fresh[] = {f0.data(), f1.data()};
  ASSERT_TRUE(code->Encode(fresh_data, fresh, kLen).ok());
  EXPECT_EQ(p0, f0);
  EXPECT_EQ(p1, f1);

  // Both data members lost: the two parity rows give them back byte for byte.
  const int available_ids[] = {2, 3};
  const uint8_t* available[] = {p0.data(), p1.data()};
  const int wanted_ids[] = {0, 1};
  std::vector<uint8_t> r0(kLen), r1(kLen);
  uint8_t* out[] = {r0.data(), r1.data()};
  ASSERT_TRUE(code->Decode(available_ids, available, wanted_ids, out, kLen).ok());
  EXPECT_EQ(r0, d0);
  EXPECT_EQ(r1, d1_new);
}

TEST(RowCodeTest, ReplicationCopiesAndModesWithoutParityAreRefused) {
  auto copies = *RowCode::Create(FaultToleranceMode::kReplication, 1, 2, "auto");
  const std::vector<uint8_t> d = {1, 2, 3, 4};
  std::vector<uint8_t> c0(4), c1(4);
  const uint8_t* data[] = {d.data()};
  uint8_t* parity[] = {c0.data(), c1.data()};
  ASSERT_TRUE(copies->Encode(data, parity, 4).ok());
  EXPECT_EQ(c0, d);
  EXPECT_EQ(c1, d);
  EXPECT_EQ(RowCode::Create(FaultToleranceMode::kNone, 1, 0, "auto").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(RowCode::Create(FaultToleranceMode::kReplication, 2, 1, "auto").ok())
      << "replication needs k = 1";
}

}  // namespace
}  // namespace ecps
