// server_bench: one parameter server's stores on their own, with no network and no threads:
// what a row update costs inside the process, on each side of the parity path
// (docs/scaling.md, "Per delta, per message, and what the stores themselves cost").
// bench/ft_cost.sh measures the whole servers (gRPC, TCP on loopback, wake-ups); the
// difference between the two is what the transport costs.
//
//   BM_Push            a push's rows applied by the embedding store (mode none)
//   BM_PushWithDeltas  the same, each row's delta (old XOR new) written into the outgoing
//                      records of its parity server, as CodedRedundancy::ApplyPush does
//                      (the data side of erasure_code (4,1))
//   BM_ApplyDeltas     the parity side: a batch's packed records read back and applied to the
//                      parity store, as ParityReceiver::ApplyDeltas does
//
// Shapes are bench-small's on six servers (26 tables of 50,000 rows, dim 16, Adagrad: 128-byte
// payloads) and what server 0 gets per step there: 160 distinct rows per table, drawn
// uniformly from the rows it holds (uniform is the cache's worst case; a Zipf batch repeats hot
// rows, which then stay cached). items_per_second is row updates per second; its inverse is
// the cost of one.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "ps/delta_stream.h"
#include "ps/embedding_store.h"
#include "ps/parity_receiver.h"
#include "ps/parity_store.h"
#include "ps/row_code.h"
#include "domain/placement.h"

namespace ecps {
namespace {

constexpr int kServers = 6, kK = 4, kR = 1, kTables = 26, kDim = 16;
constexpr int64_t kRows = 50000;
constexpr int kRowsPerTable = 160;
constexpr int kBatches = 64;  // distinct pushes, cycled, so no batch is still cached

SparseOptimizerConfig Adagrad() {
  SparseOptimizerConfig opt;
  opt.rule = SparseUpdateRule::kAdagrad;
  opt.lr = 0.05f;
  return opt;
}

const Placement& Layout() {
  static const Placement* placement = new Placement(
      *Placement::Create(kServers, kK, kR, std::vector<int64_t>(kTables, kRows)));
  return *placement;
}

// kBatches pushes of `server`'s rows: per table, kRowsPerTable distinct rows it holds.
std::vector<std::vector<std::vector<int64_t>>> Pushes(int server) {
  const Placement& placement = Layout();
  std::vector<std::vector<int64_t>> mine(kTables);
  for (int t = 0; t < kTables; ++t) {
    for (int64_t row = 0; row < kRows; ++row) {
      if (placement.DataLocation(t, row).server == server) mine[t].push_back(row);
    }
  }
  std::mt19937_64 rng(7);
  std::vector<std::vector<std::vector<int64_t>>> pushes(kBatches);
  for (auto& push : pushes) {
    push.resize(kTables);
    for (int t = 0; t < kTables; ++t) {
      std::vector<int64_t>& rows = push[t];
      std::vector<int64_t> pool = mine[t];
      std::shuffle(pool.begin(), pool.end(), rng);
      rows.assign(pool.begin(), pool.begin() + kRowsPerTable);
    }
  }
  return pushes;
}

std::vector<float> Gradients() {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-0.01f, 0.01f);
  std::vector<float> grads(static_cast<size_t>(kRowsPerTable) * kDim);
  for (float& g : grads) g = u(rng);
  return grads;
}

void BM_Push(benchmark::State& state) {
  auto store = *EmbeddingStore::Create(Layout(), 0, kDim, Adagrad(), 42);
  const auto pushes = Pushes(0);
  const std::vector<float> grads = Gradients();
  size_t b = 0;
  for (auto _ : state) {
    const auto& push = pushes[b++ % kBatches];
    for (int t = 0; t < kTables; ++t) {
      if (!store->Push(t, push[t], grads.data()).ok()) state.SkipWithError("push failed");
    }
  }
  state.SetItemsProcessed(state.iterations() * kTables * kRowsPerTable);
}
BENCHMARK(BM_Push);

// The records of one push per parity server, built as ApplyPush builds them.
void PushIntoRecords(EmbeddingStore* store, const std::vector<std::vector<int64_t>>& push,
                     const float* grads, std::vector<DeltaStreams::Batch>* outgoing,
                     benchmark::State& state) {
  const Placement& placement = Layout();
  const size_t delta_bytes = sizeof(float) * store->payload_floats();
  for (int t = 0; t < kTables; ++t) {
    absl::Status s = store->PushWithDeltas(
        t, push[t], grads, [&](int64_t row, uint32_t from, uint32_t to) {
          const auto h = DeltaStreams::Batch::Header::ForRow(t, row, kK, from, to);
          return (*outgoing)[placement.ServerOf(t, h.stripe, kK)].AddRecord(h, delta_bytes);
        });
    if (!s.ok()) state.SkipWithError("push failed");
  }
}

void BM_PushWithDeltas(benchmark::State& state) {
  auto store = *EmbeddingStore::Create(Layout(), 0, kDim, Adagrad(), 42);
  const auto pushes = Pushes(0);
  const std::vector<float> grads = Gradients();
  const size_t record =
      DeltaStreams::Batch::kHeader + sizeof(float) * store->payload_floats();
  std::vector<DeltaStreams::Batch> outgoing(kServers);
  size_t b = 0;
  for (auto _ : state) {
    for (DeltaStreams::Batch& batch : outgoing) {
      batch = DeltaStreams::Batch();  // ApplyPush starts each push with fresh buffers
      batch.packed.reserve(record * kTables * kRowsPerTable * 2 / kServers);
    }
    PushIntoRecords(store.get(), pushes[b++ % kBatches], grads.data(), &outgoing, state);
    benchmark::DoNotOptimize(outgoing.data());
  }
  state.SetItemsProcessed(state.iterations() * kTables * kRowsPerTable);
}
BENCHMARK(BM_PushWithDeltas);

void BM_ApplyDeltas(benchmark::State& state) {
  // The deltas server 0 receives as a parity holder: every other server's pushes, recorded
  // once before the clock starts, for server 0's stripes only.
  auto code = *RowCode::Create(FaultToleranceMode::kErasureCode, kK, kR, "auto");
  auto parity = *ParityStore::Create(Layout(), 0, kDim, Adagrad(), 42, code.get());
  const std::vector<float> grads = Gradients();
  std::vector<std::string> batches;  // packed records, one message's worth each
  size_t deltas = 0;
  for (int sender = 1; sender < kServers; ++sender) {
    auto store = *EmbeddingStore::Create(Layout(), sender, kDim, Adagrad(), 42);
    const auto pushes = Pushes(sender);
    for (int i = 0; i < kBatches / (kServers - 1); ++i) {
      std::vector<DeltaStreams::Batch> outgoing(kServers);
      PushIntoRecords(store.get(), pushes[i], grads.data(), &outgoing, state);
      deltas += outgoing[0].count;
      batches.push_back(std::move(outgoing[0].packed));
    }
  }
  std::vector<ParityStore::DeltaRef> refs;
  size_t b = 0, applied = 0;
  for (auto _ : state) {
    refs.clear();
    AppendPackedDeltas(batches[b++ % batches.size()], parity->payload_bytes(), &refs);
    if (!parity->ApplyBatch(refs).ok()) state.SkipWithError("apply failed");
    applied += refs.size();
  }
  state.SetItemsProcessed(static_cast<int64_t>(applied));
  state.counters["deltas_per_batch"] = static_cast<double>(deltas) / batches.size();
}
BENCHMARK(BM_ApplyDeltas);

}  // namespace
}  // namespace ecps

BENCHMARK_MAIN();
