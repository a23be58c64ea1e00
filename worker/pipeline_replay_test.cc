#include "worker/pipeline_replay.h"

#include <cstring>
#include <map>
#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ecps {
namespace {

using ::testing::HasSubstr;

UniqueIds Ids(std::vector<std::vector<int64_t>> rows) {
  UniqueIds u;
  u.rows = std::move(rows);
  return u;
}

TEST(PipelineReplay, FindsTheRowsBothBatchesHold) {
  const UniqueIds previous = Ids({{1, 4, 7, 9}, {2}, {5}});
  const UniqueIds next = Ids({{0, 4, 9, 12}, {3}, {5, 6}});
  SharedRows shared;
  shared.positions = {{99}, {99}, {99}, {99}};  // reused: stale content must go
  FindSharedRows(previous, next, &shared);
  ASSERT_EQ(shared.positions.size(), 3u);
  EXPECT_EQ(shared.positions[0], (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(shared.previous[0], (std::vector<int32_t>{1, 3}));
  EXPECT_TRUE(shared.positions[1].empty());
  EXPECT_EQ(shared.positions[2], (std::vector<int32_t>{0}));
  EXPECT_EQ(shared.previous[2], (std::vector<int32_t>{0}));
  EXPECT_EQ(shared.count(), 3);
}

// A server's table, one payload per row, updated as EmbeddingStore::Push does.
struct FakeTable {
  SparseOptimizerConfig opt;
  int dim;
  std::map<int64_t, std::vector<float>> payloads;
  int pf() const { return dim + SparseStateFloats(opt, dim); }
  std::vector<float>& Row(int64_t row) {
    auto& p = payloads[row];
    if (p.empty()) {
      p.resize(pf());
      InitSparseRow(opt, 3, 0, row, dim, 100, p.data());
    }
    return p;
  }
  void Push(const std::vector<int64_t>& rows, const std::vector<float>& grads) {
    for (size_t i = 0; i < rows.size(); ++i) {
      ApplySparseUpdate(opt, dim, grads.data() + i * dim, Row(rows[i]).data());
    }
  }
};

// Step A's batch is pushed after step B's rows were pulled; replaying A's gradients on what B
// pulled must give, bit for bit, what the server holds after A's push, for every row of B.
TEST(PipelineReplay, SparseReplayGivesWhatTheServerHoldsAfterThePush) {
  for (SparseUpdateRule rule :
       {SparseUpdateRule::kSgd, SparseUpdateRule::kAdagrad, SparseUpdateRule::kRowwiseAdagrad}) {
    FakeTable server{SparseOptimizerConfig{rule, 0.05f, 1e-8f, 0.1f}, 4, {}};
    const int dim = server.dim, pf = server.pf();
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0, 1);
    // Some history first, so the optimizer state is not the initial one.
    const std::vector<int64_t> a_rows = {2, 3, 5, 8, 13}, b_rows = {1, 3, 8, 13, 21};
    for (int round = 0; round < 3; ++round) {
      std::vector<float> g(a_rows.size() * dim);
      for (float& x : g) x = normal(rng);
      server.Push(a_rows, g);
    }
    std::vector<std::vector<float>> a_grads(1, std::vector<float>(a_rows.size() * dim));
    for (float& x : a_grads[0]) x = normal(rng);

    // B pulls before A's push: weights of every row, the shared ones whole.
    const UniqueIds a = Ids({a_rows}), b = Ids({b_rows});
    SharedRows shared;
    FindSharedRows(a, b, &shared);
    ASSERT_EQ(shared.count(), 3);
    std::vector<std::vector<float>> rows(1, std::vector<float>(b_rows.size() * dim));
    for (size_t i = 0; i < b_rows.size(); ++i) {
      std::memcpy(rows[0].data() + i * dim, server.Row(b_rows[i]).data(), sizeof(float) * dim);
    }
    shared.payload_floats = pf;
    shared.payloads.assign(1, {});
    for (int32_t p : shared.positions[0]) {
      const auto& row = server.Row(b_rows[p]);
      shared.payloads[0].insert(shared.payloads[0].end(), row.begin(), row.end());
    }

    server.Push(a_rows, a_grads[0]);
    ASSERT_TRUE(ReplaySparse(server.opt, dim, a_grads, &shared, &rows).ok());
    for (size_t i = 0; i < b_rows.size(); ++i) {
      EXPECT_EQ(
          std::memcmp(rows[0].data() + i * dim, server.Row(b_rows[i]).data(), sizeof(float) * dim),
          0)
          << "rule " << static_cast<int>(rule) << " row " << b_rows[i];
    }
    for (size_t j = 0; j < shared.positions[0].size(); ++j) {
      const auto& row = server.Row(b_rows[shared.positions[0][j]]);
      EXPECT_EQ(std::memcmp(shared.payloads[0].data() + j * pf, row.data(), sizeof(float) * pf), 0)
          << "the optimizer state replays too";
    }
  }
}

TEST(PipelineReplay, SparseReplayRefusesAnotherOptimizersPayloads) {
  SharedRows shared;
  FindSharedRows(Ids({{4}}), Ids({{4}}), &shared);
  shared.payload_floats = 4;  // sgd's payload of dim 4; the job says adagrad (8)
  shared.payloads = {std::vector<float>(4)};
  std::vector<std::vector<float>> grads = {std::vector<float>(4)}, rows = grads;
  const absl::Status s = ReplaySparse(SparseOptimizerConfig{}, 4, grads, &shared, &rows);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(s.message(), HasSubstr("another"));
  // Nothing shared: nothing to check, nothing pulled whole.
  FindSharedRows(Ids({{4}}), Ids({{5}}), &shared);
  shared.payload_floats = 0;
  EXPECT_TRUE(ReplaySparse(SparseOptimizerConfig{}, 4, grads, &shared, &rows).ok());
}

// The primary counts an update, then applies it at the new count (Adam's bias correction):
// the replay on a snapshot at version v is the primary's update v + 1.
TEST(PipelineReplay, DenseReplayIsThePrimarysNextUpdate) {
  const DenseOptimizerConfig opt;  // adam
  const int64_t size = 6;
  std::vector<float> weights = {0.5f, -0.25f, 1, 2, -3, 0.125f}, state(2 * size, 0.0f);
  std::vector<float> g1 = {1, 2, 3, 4, 5, 6}, g2 = {-1, 0.5f, 0.25f, 2, -2, 1};
  ApplyDenseUpdate(opt, 1, size, g1.data(), weights.data(), state.data());
  PulledDense pulled{{weights}, {state}, {1}, {0}};
  ApplyDenseUpdate(opt, 2, size, g2.data(), weights.data(), state.data());
  ASSERT_TRUE(ReplayDense(opt, {g2}, &pulled).ok());
  EXPECT_EQ(pulled.versions[0], 2);
  EXPECT_EQ(std::memcmp(pulled.tensors[0].data(), weights.data(), sizeof(float) * size), 0);
  EXPECT_EQ(std::memcmp(pulled.states[0].data(), state.data(), sizeof(float) * 2 * size), 0);

  PulledDense no_state{{weights}, {{}}, {2}, {0}};  // a pull without state cannot be replayed
  EXPECT_EQ(ReplayDense(opt, {g2}, &no_state).code(), absl::StatusCode::kInternal);
  EXPECT_EQ(ReplayDense(opt, {g2, g2}, &pulled).code(), absl::StatusCode::kInternal);
}

}  // namespace
}  // namespace ecps
