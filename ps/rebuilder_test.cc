// The Rebuilder against a fake StripeSource: the peers' stripes are whatever the test says,
// so a stripe caught mid-update is there on every read, not by chance.
#include "ps/rebuilder.h"

#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "proto/ecps.pb.h"

namespace ecps {
namespace {

constexpr int kDim = 4;
constexpr int kServers = 3, kK = 2, kR = 1;
constexpr int64_t kRows = 8;  // table 0: 4 stripes

// The two surviving servers of three (k = 2, r = 1), server 0 being rebuilt. Every row has
// a payload of its own at version 0, except one data row of the stripe `torn`, which was
// just updated (version 1, a new payload) while its delta has not reached the stripe's
// parity yet: the parity still encodes the old row and says version 0. The delta arrives
// when a freeze of that stripe drains the streams, as on a real server.
class FakePeers : public StripeSource {
 public:
  FakePeers(const Placement& placement, const RowCode& code, size_t bytes, int64_t torn)
      : placement_(placement), code_(code), bytes_(bytes), torn_(torn) {
    for (int64_t row = 0; row < kRows; ++row) {
      std::vector<float> floats(bytes / sizeof(float));
      for (size_t f = 0; f < floats.size(); ++f) floats[f] = 100.0f * row + f + 0.25f;
      rows_[row] = Bytes(floats);
    }
    // The updated member of the torn stripe: the data member no one rebuilds.
    updated_j_ = placement_.MemberAt(0, torn_, 0) == 0 ? 1 : 0;
    const int64_t updated = torn_ * kK + updated_j_;
    old_row_ = rows_[updated];
    for (uint8_t& b : rows_[updated]) b ^= 0x5a;
  }

  // The payload server 0 had of `row` (what the rebuild must install, byte for byte).
  const std::vector<uint8_t>& Row(int64_t row) const { return rows_.at(row); }
  int torn_reads() const {
    absl::MutexLock lock(&mu_);
    return torn_reads_;
  }
  int frozen_reads() const {
    absl::MutexLock lock(&mu_);
    return frozen_reads_;
  }

  void ReadRowsFromEach(const std::vector<int>& peers,
                        const std::vector<v1::ReadRowsRequest>& requests,
                        std::vector<v1::ReadRowsResponse>* responses,
                        std::vector<absl::Status>* statuses) override {
    absl::MutexLock lock(&mu_);
    responses->assign(peers.size(), v1::ReadRowsResponse());
    statuses->assign(peers.size(), absl::OkStatus());
    for (size_t i = 0; i < peers.size(); ++i) {
      const v1::ReadRowsRequest& req = requests[i];
      v1::ReadRowsResponse& resp = (*responses)[i];
      EXPECT_NE(peers[i], 0) << "the lost server is never read";
      resp.set_payload_floats(static_cast<int>(bytes_ / sizeof(float)));
      for (const v1::TableRows& t : req.tables()) {
        for (int64_t row : t.rows()) {
          EXPECT_EQ(placement_.ServerOf(0, row / kK, static_cast<int>(row % kK)), peers[i]);
          resp.mutable_payloads()->append(Chars(rows_.at(row)));
          resp.add_versions(row == torn_ * kK + updated_j_ ? 1 : 0);
        }
      }
      for (const v1::TableStripes& t : req.parity()) {
        for (int64_t stripe : t.stripes()) {
          EXPECT_EQ(placement_.ServerOf(0, stripe, kK), peers[i]);
          const bool stale = stripe == torn_ && !delivered_;
          if (stripe == torn_) ++(stale ? torn_reads_ : frozen_reads_);
          v1::ReadParityResponse* p = resp.mutable_parity();
          p->mutable_payloads()->append(Chars(Parity(stripe, stale)));
          for (int j = 0; j < kK; ++j) {
            p->add_versions(stripe == torn_ && j == updated_j_ && !stale ? 1 : 0);
          }
          p->add_settled(true);
        }
      }
    }
  }

  absl::Status Freeze(int, const v1::FreezeRequest& request) override {
    absl::MutexLock lock(&mu_);
    if (!request.freeze()) return absl::OkStatus();
    for (const v1::TableStripes& t : request.stripes()) {
      for (int64_t stripe : t.stripes()) delivered_ |= t.table() == 0 && stripe == torn_;
    }
    return absl::OkStatus();
  }
  absl::Status WriteParity(int, const v1::WriteParityRequest&) override {
    return absl::UnimplementedError("r = 1: the rebuild writes no parity");
  }
  absl::Status HotRows(int, const v1::HotRowsRequest&, v1::HotRowsResponse*) override {
    return absl::OkStatus();
  }
  absl::Status ReadDense(int, const v1::ReadDenseRequest&, v1::ReadDenseResponse*) override {
    return absl::NotFoundError("no dense tensors");
  }

 private:
  static std::vector<uint8_t> Bytes(const std::vector<float>& f) {
    std::vector<uint8_t> b(f.size() * sizeof(float));
    std::memcpy(b.data(), f.data(), b.size());
    return b;
  }
  static std::string Chars(const std::vector<uint8_t>& b) {
    return std::string(reinterpret_cast<const char*>(b.data()), b.size());
  }
  // The parity of `stripe`; `stale`: from the torn member's old payload.
  std::vector<uint8_t> Parity(int64_t stripe, bool stale) const {
    std::vector<const uint8_t*> data(kK);
    for (int j = 0; j < kK; ++j) {
      data[j] = stale && j == updated_j_ ? old_row_.data() : rows_.at(stripe * kK + j).data();
    }
    std::vector<uint8_t> parity(bytes_);
    uint8_t* out = parity.data();
    EXPECT_TRUE(code_.Encode(data, absl::MakeSpan(&out, 1), bytes_).ok());
    return parity;
  }

  const Placement& placement_;
  const RowCode& code_;
  const size_t bytes_;
  const int64_t torn_;
  int updated_j_ = 0;
  std::map<int64_t, std::vector<uint8_t>> rows_;
  std::vector<uint8_t> old_row_;
  mutable absl::Mutex mu_;
  bool delivered_ ABSL_GUARDED_BY(mu_) = false;
  int torn_reads_ ABSL_GUARDED_BY(mu_) = 0;    // reads of the torn stripe's stale parity
  int frozen_reads_ ABSL_GUARDED_BY(mu_) = 0;  // and of it after the freeze
};

TEST(RebuilderTest, AStripeCaughtMidUpdateIsReadAgainUnderAFreezeAndInstalledExactly) {
  const Placement placement = *Placement::Create(kServers, kK, kR, {kRows});
  std::unique_ptr<RowCode> code =
      *RowCode::Create(FaultToleranceMode::kErasureCode, kK, kR, "auto");
  SparseOptimizerConfig optimizer;
  optimizer.rule = SparseUpdateRule::kSgd;
  auto embeddings = *EmbeddingStore::Create(placement, 0, kDim, optimizer, 7, /*lost=*/true);
  auto parity = *ParityStore::Create(placement, 0, kDim, optimizer, 7, code.get(), /*lost=*/true);
  DenseOptimizerConfig dense_optimizer;
  DenseStore dense(dense_optimizer, kServers, 0, {});
  const size_t bytes = sizeof(float) * embeddings->payload_floats();
  // A stripe with a data member on server 0: the one to tear.
  int64_t torn = -1, lost_row = -1;
  for (int64_t s = 0; s < placement.stripes(0) && torn < 0; ++s) {
    const int m = placement.MemberAt(0, s, 0);
    if (m < kK) {
      torn = s;
      lost_row = s * kK + m;
    }
  }
  ASSERT_GE(torn, 0);
  FakePeers peers(placement, *code, bytes, torn);

  RebuildOptions options;
  options.server = 0;
  options.instance = "replacement";
  options.token = "t";
  options.epoch = [] { return uint64_t{1}; };
  options.unusable = [] { return std::set<int>{}; };
  options.live_peers = [] { return std::vector<int>{1, 2}; };
  options.hot_rows = 0;
  options.settle_ms = 1;
  Rebuilder rebuilder(options, code.get(), embeddings.get(), parity.get(), &dense, &peers);
  rebuilder.Start();
  const std::vector<int64_t> rows = {lost_row};
  const TableRowsRef ref{0, rows};
  ASSERT_TRUE(rebuilder.EnsureRows(absl::MakeConstSpan(&ref, 1), 60000).ok());

  EXPECT_GE(peers.torn_reads(), 1) << "the first reads saw the stripe mid-update";
  EXPECT_GE(peers.frozen_reads(), 1) << "and it was read again once frozen";
  EXPECT_GE(rebuilder.progress().frozen_stripes, 1);
  std::vector<float> got(embeddings->payload_floats());
  uint32_t version = 99;
  ASSERT_TRUE(embeddings->ReadPayloads(0, rows, got.data(), &version).ok());
  EXPECT_EQ(std::memcmp(got.data(), peers.Row(lost_row).data(), bytes), 0)
      << "the row was decoded from the stripe as it was after the update, byte for byte";
  EXPECT_EQ(version, 0u);
}

}  // namespace
}  // namespace ecps
