#include "ps/parity_receiver.h"

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "proto/ecps.pb.h"
#include "ps/delta_stream.h"

namespace ecps {
namespace {

constexpr int kDim = 4;

// Server 0 of three (k = 2, r = 1) receiving from its peers; every check of the sender's
// identity passes unless `peer_error` is set, and refusals are counted.
class ParityReceiverTest : public ::testing::Test {
 protected:
  ParityReceiverTest()
      : placement_(*Placement::Create(3, 2, 1, {64})),
        code_(*RowCode::Create(FaultToleranceMode::kErasureCode, 2, 1, "auto")) {
    optimizer_.rule = SparseUpdateRule::kSgd;
    parity_ = *ParityStore::Create(placement_, 0, kDim, optimizer_, /*seed=*/7, code_.get());
    DenseOptimizerConfig dense;
    dense.rule = DenseUpdateRule::kSgd;
    dense.lr = 1.0f;
    // Tensor t's primary is server t, its replica server t + 1 (mod 3): tensor 2 is
    // replicated here.
    dense_ = std::make_unique<DenseStore>(
        dense, 3, 0, std::vector<std::vector<float>>{{1, 1}, {2, 2}, {3, 3}}, /*replicas=*/1);
    ParityReceiver::Hooks hooks;
    hooks.check_peer = [this](int, const std::string&, uint64_t, const char*) {
      return peer_error_;
    };
    hooks.refuse = [this](absl::Status s, const v1::RequestHeader&, const char*) {
      ++refused_;
      return s;
    };
    hooks.dense_ready = [this] { return dense_ready_; };
    receiver_ = std::make_unique<ParityReceiver>(0, placement_, parity_.get(), dense_.get(),
                                                 std::move(hooks));
    for (int64_t s = 0; s < placement_.stripes(0); ++s) {
      if (placement_.ServerOf(0, s, 2) == 0) {
        stripe_ = s;
        break;
      }
    }
    sender_ = placement_.ServerOf(0, stripe_, 0);
  }

  // A batch from data member 0 of stripe_ (held by sender_) with one delta filled with
  // `fill`, taking the row from version `from` to from + 1.
  v1::ParityDeltaBatch Batch(uint64_t seq, uint8_t fill, uint32_t from,
                             const std::string& instance = "a") const {
    v1::ParityDeltaBatch b;
    b.set_from_server(sender_);
    b.set_sender_instance(instance);
    b.set_seq(seq);
    v1::ParityDelta* d = b.add_deltas();
    d->set_table(0);
    d->set_stripe(stripe_);
    d->set_j(0);
    d->set_delta(std::string(parity_->payload_bytes(), static_cast<char>(fill)));
    d->set_from_version(from);
    d->set_to_version(from + 1);
    return b;
  }
  std::vector<uint8_t> Row() const {
    std::vector<uint8_t> row(parity_->payload_bytes());
    EXPECT_TRUE(parity_->Read(0, stripe_, row.data()).ok());
    return row;
  }
  uint32_t Version() const {
    std::vector<uint8_t> row(parity_->payload_bytes());
    uint32_t versions[2] = {0, 0};
    EXPECT_TRUE(parity_->Read(0, stripe_, row.data(), versions).ok());
    return versions[0];
  }
  absl::Status Apply(const v1::ParityDeltaBatch& b, uint64_t* acked = nullptr) {
    v1::ParityDeltaAck ack;
    absl::Status s = receiver_->ApplyDeltas(b, &ack);
    if (acked != nullptr) *acked = ack.applied_seq();
    return s;
  }

  Placement placement_;
  std::unique_ptr<RowCode> code_;
  SparseOptimizerConfig optimizer_;
  std::unique_ptr<ParityStore> parity_;
  std::unique_ptr<DenseStore> dense_;
  std::unique_ptr<ParityReceiver> receiver_;
  absl::Status peer_error_;
  bool dense_ready_ = true;
  int refused_ = 0;
  int64_t stripe_ = -1;
  int sender_ = -1;
};

TEST_F(ParityReceiverTest, EachBatchAppliesExactlyOnce) {
  ASSERT_GE(stripe_, 0);
  const std::vector<uint8_t> before = Row();
  uint64_t acked = 0;
  ASSERT_TRUE(Apply(Batch(1, 0x5a, 0), &acked).ok());
  EXPECT_EQ(acked, 1u);
  const std::vector<uint8_t> once = Row();
  EXPECT_NE(once, before);
  EXPECT_EQ(Version(), 1u);
  // A resend after a lost ack is acknowledged again and applies nothing.
  ASSERT_TRUE(Apply(Batch(1, 0x5a, 0), &acked).ok());
  EXPECT_EQ(acked, 1u);
  EXPECT_EQ(Row(), once);
  EXPECT_EQ(Version(), 1u);
  EXPECT_EQ(receiver_->applied(sender_), 1u);
  ASSERT_TRUE(Apply(Batch(2, 0x5a, 1), &acked).ok());
  EXPECT_EQ(acked, 2u);
  EXPECT_EQ(Row(), before) << "the same delta twice cancels out";
  EXPECT_EQ(refused_, 0);
}

TEST_F(ParityReceiverTest, AGapIsRefusedAndAppliesNothing) {
  ASSERT_TRUE(Apply(Batch(1, 0x11, 0)).ok());
  const std::vector<uint8_t> row = Row();
  absl::Status gap = Apply(Batch(3, 0x22, 1));
  EXPECT_TRUE(absl::IsFailedPrecondition(gap)) << gap;
  EXPECT_EQ(Row(), row);
  EXPECT_EQ(receiver_->applied(sender_), 1u);
  EXPECT_EQ(refused_, 1);
}

TEST_F(ParityReceiverTest, TheFirstBatchOfASenderStartsItsStreamWhereItIs) {
  // A replacement parity server joins a stream at batch 41.
  ASSERT_TRUE(Apply(Batch(41, 0x11, 0)).ok());
  EXPECT_EQ(receiver_->applied(sender_), 41u);
  EXPECT_TRUE(absl::IsFailedPrecondition(Apply(Batch(43, 0x11, 1))));
  EXPECT_TRUE(Apply(Batch(42, 0x11, 1)).ok());
}

TEST_F(ParityReceiverTest, ANewInstanceOfTheSenderStartsAgainAtOne) {
  ASSERT_TRUE(Apply(Batch(1, 0x11, 0, "a")).ok());
  ASSERT_TRUE(Apply(Batch(2, 0x22, 1, "a")).ok());
  const std::vector<uint8_t> row = Row();
  EXPECT_TRUE(absl::IsFailedPrecondition(Apply(Batch(3, 0x33, 2, "b"))));
  EXPECT_EQ(Row(), row);
  uint64_t acked = 0;
  ASSERT_TRUE(Apply(Batch(1, 0x33, 2, "b"), &acked).ok());
  EXPECT_EQ(acked, 1u);
  EXPECT_NE(Row(), row);
  EXPECT_EQ(receiver_->applied(sender_), 1u);
}

TEST_F(ParityReceiverTest, TheWholeBatchIsValidatedBeforeAnyDeltaApplies) {
  const std::vector<uint8_t> row = Row();
  // A good delta followed by one for a data row the sender does not hold.
  v1::ParityDeltaBatch b = Batch(1, 0x11, 0);
  *b.add_deltas() = b.deltas(0);
  b.mutable_deltas(1)->set_j(1);
  EXPECT_TRUE(absl::IsInvalidArgument(Apply(b)));
  // A good delta followed by one of the wrong size.
  b = Batch(1, 0x11, 0);
  *b.add_deltas() = b.deltas(0);
  b.mutable_deltas(1)->set_delta("xy");
  EXPECT_TRUE(absl::IsInvalidArgument(Apply(b)));
  EXPECT_TRUE(absl::IsInvalidArgument(Apply(Batch(0, 0x11, 0))));
  EXPECT_TRUE(absl::IsInvalidArgument(Apply(Batch(UINT64_MAX, 0x11, 0))));
  EXPECT_EQ(Row(), row);
  EXPECT_EQ(refused_, 4);
  // Nothing of the sender's stream was taken up: it still starts where its first batch is.
  EXPECT_EQ(receiver_->applied(sender_), 0u);
  EXPECT_TRUE(Apply(Batch(7, 0x11, 0)).ok());
}

TEST_F(ParityReceiverTest, PackedDeltasApplyAsTheirMessagesDo) {
  v1::ParityDeltaBatch plain = Batch(1, 0x3c, 0);
  ASSERT_TRUE(Apply(plain).ok());
  const std::vector<uint8_t> expect = Row();
  ASSERT_TRUE(Apply(Batch(2, 0x3c, 1)).ok());  // back to the start
  DeltaStreams::Batch packed;
  DeltaStreams::Batch::Header h;
  h.stripe = stripe_;
  h.from = 2;
  h.to = 3;
  const std::vector<uint8_t> delta(parity_->payload_bytes(), 0x3c);
  packed.Add(h, delta.data(), delta.size());
  v1::ParityDeltaBatch b = Batch(3, 0, 0);
  b.clear_deltas();
  b.set_packed(packed.packed);
  b.set_delta_bytes(static_cast<int32_t>(delta.size()));
  ASSERT_TRUE(Apply(b).ok());
  EXPECT_EQ(Row(), expect);
  EXPECT_EQ(Version(), 3u);
}

TEST_F(ParityReceiverTest, ASenderThePeerCheckRefusesChangesNothing) {
  peer_error_ = absl::FailedPreconditionError("not the holder of that id");
  const std::vector<uint8_t> row = Row();
  EXPECT_TRUE(absl::IsFailedPrecondition(Apply(Batch(1, 0x11, 0))));
  EXPECT_EQ(Row(), row);
  EXPECT_EQ(refused_, 1);
}

TEST_F(ParityReceiverTest, WithoutParityEveryBatchIsRefused) {
  ParityReceiver::Hooks hooks;
  hooks.check_peer = [](int, const std::string&, uint64_t, const char*) {
    return absl::OkStatus();
  };
  hooks.refuse = [](absl::Status s, const v1::RequestHeader&, const char*) { return s; };
  hooks.dense_ready = [] { return true; };
  ParityReceiver none(0, placement_, nullptr, dense_.get(), std::move(hooks));
  v1::ParityDeltaAck ack;
  EXPECT_TRUE(absl::IsFailedPrecondition(none.ApplyDeltas(Batch(1, 0x11, 0), &ack)));
}

// Dense replica updates of tensor 2: primary server 2, replica here (server 0).
v1::ReplicateDenseRequest DenseUpdate(int from, int64_t version, std::vector<float> grad) {
  v1::ReplicateDenseRequest r;
  r.set_tensor(2);
  r.set_from_server(from);
  r.set_sender_instance("p");
  r.set_version(version);
  r.set_grad(std::string(reinterpret_cast<const char*>(grad.data()), grad.size() * sizeof(float)));
  return r;
}

TEST_F(ParityReceiverTest, DenseReplicaUpdatesOnlyFromThePrimary) {
  ASSERT_TRUE(dense_->Holds(2));
  ASSERT_EQ(dense_->PrimaryOf(2), 2);
  EXPECT_TRUE(absl::IsFailedPrecondition(receiver_->ReplicateDense(DenseUpdate(1, 1, {1, 1}))));
  EXPECT_EQ(refused_, 1);
  ASSERT_TRUE(receiver_->ReplicateDense(DenseUpdate(2, 1, {1, 1})).ok());
  std::vector<float> w, state;
  int64_t version = 0;
  ASSERT_TRUE(dense_->Snapshot(2, &w, &state, &version).ok());
  EXPECT_EQ(version, 1);
  EXPECT_EQ(w, std::vector<float>({2, 2}));  // sgd, lr 1: 3 - 1
  // A non-finite gradient is refused, and applies nothing.
  EXPECT_TRUE(absl::IsInvalidArgument(
      receiver_->ReplicateDense(DenseUpdate(2, 2, {1, std::nanf("")}))));
  EXPECT_EQ(refused_, 2);
  ASSERT_TRUE(dense_->Snapshot(2, &w, &state, &version).ok());
  EXPECT_EQ(version, 1);
}

TEST_F(ParityReceiverTest, DenseUpdatesBeforeTheRestoreAreDropped) {
  dense_ready_ = false;
  ASSERT_TRUE(receiver_->ReplicateDense(DenseUpdate(2, 1, {1, 1})).ok());
  std::vector<float> w, state;
  int64_t version = 0;
  ASSERT_TRUE(dense_->Snapshot(2, &w, &state, &version).ok());
  EXPECT_EQ(version, 0);
  EXPECT_EQ(w, std::vector<float>({3, 3}));
}

}  // namespace
}  // namespace ecps
