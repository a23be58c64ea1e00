// Erasure-code throughput: the ecps kernel ("ecps", best for this CPU) and ISA-L side by side,
// single thread, with memcpy of the same bytes as the bandwidth reference. Bytes/s count
// the data processed: k * len for encode and decode, len for update and memcpy.
//
//   codec_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>
#include <isa-l/erasure_code.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "codec/codec.h"

namespace {

using ecps::codec::ErasureCode;

constexpr const char* kBackends[] = {"ecps", "isal"};
constexpr int kShapes[][2] = {{4, 1}, {4, 2}, {8, 2}, {10, 4}};
constexpr size_t kEncodeLens[] = {64 * 1024, 1024 * 1024};
constexpr size_t kUpdateLens[] = {64, 256, 1024};

struct Buffers {
  Buffers(int n, size_t len) {
    std::mt19937_64 rng(n * 131 + len);
    for (int i = 0; i < n; ++i) {
      // 64-byte aligned, as the parameter-server arenas are.
      auto* p = static_cast<uint8_t*>(std::aligned_alloc(64, (len + 63) / 64 * 64));
      for (size_t b = 0; b < len; b += 8) {
        const uint64_t v = rng();
        std::memcpy(p + b, &v, std::min<size_t>(8, len - b));
      }
      blocks.emplace_back(p, &std::free);
    }
  }
  uint8_t* operator[](int i) { return blocks[i].get(); }
  std::vector<std::unique_ptr<uint8_t, decltype(&std::free)>> blocks;
};

std::unique_ptr<ErasureCode> CreateOrDie(int k, int r, const char* backend,
                                         benchmark::State& state) {
  auto code = ErasureCode::Create(k, r, backend);
  if (!code.ok()) {
    state.SkipWithError(code.status().ToString().c_str());
    return nullptr;
  }
  state.SetLabel(std::string(code.value()->backend()));
  return *std::move(code);
}

void BM_Encode(benchmark::State& state, const char* backend, int k, int r, size_t len) {
  auto code = CreateOrDie(k, r, backend, state);
  if (code == nullptr) return;
  Buffers buf(k + r, len);
  std::vector<const uint8_t*> data;
  std::vector<uint8_t*> parity;
  for (int j = 0; j < k; ++j) data.push_back(buf[j]);
  for (int q = 0; q < r; ++q) parity.push_back(buf[k + q]);
  for (auto _ : state) {
    if (!code->Encode(data, parity, len).ok()) state.SkipWithError("encode failed");
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * k * len);
}

// Loses data blocks 0..lost-1 and rebuilds them from the remaining data and the first
// `lost` parity blocks.
void BM_Decode(benchmark::State& state, const char* backend, int k, int r, size_t len, int lost) {
  auto code = CreateOrDie(k, r, backend, state);
  if (code == nullptr) return;
  Buffers buf(k + r + lost, len);
  std::vector<const uint8_t*> data;
  std::vector<uint8_t*> parity;
  for (int j = 0; j < k; ++j) data.push_back(buf[j]);
  for (int q = 0; q < r; ++q) parity.push_back(buf[k + q]);
  if (!code->Encode(data, parity, len).ok()) state.SkipWithError("encode failed");
  std::vector<int> ids, wanted;
  std::vector<const uint8_t*> avail;
  std::vector<uint8_t*> out;
  for (int id = lost; id < k + lost; ++id) {
    ids.push_back(id);
    avail.push_back(buf[id]);
  }
  for (int w = 0; w < lost; ++w) {
    wanted.push_back(w);
    out.push_back(buf[k + r + w]);
  }
  for (auto _ : state) {
    if (!code->Decode(ids, avail, wanted, out, len).ok()) state.SkipWithError("decode failed");
    benchmark::ClobberMemory();
  }
  if (std::memcmp(out[0], buf[0], len) != 0) state.SkipWithError("decode mismatch");
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * k * len);
}

// Applies one row's delta to all r parity blocks (the common server-side path).
void BM_Update(benchmark::State& state, const char* backend, int r, size_t len) {
  const int k = 8;
  auto code = CreateOrDie(k, r, backend, state);
  if (code == nullptr) return;
  Buffers buf(1 + r, len);
  std::vector<uint8_t*> parity;
  for (int q = 0; q < r; ++q) parity.push_back(buf[1 + q]);
  int j = 0;
  for (auto _ : state) {
    if (!code->Update(j, buf[0], parity, len).ok()) state.SkipWithError("update failed");
    j = (j + 1) % k;
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * len);
}

// One parity holder's update (UpdateParity), r = 2 code, row q = 1.
void BM_UpdateParity(benchmark::State& state, const char* backend, size_t len) {
  const int k = 8;
  auto code = CreateOrDie(k, 2, backend, state);
  if (code == nullptr) return;
  Buffers buf(2, len);
  int j = 0;
  for (auto _ : state) {
    if (!code->UpdateParity(1, j, buf[0], buf[1], len).ok()) state.SkipWithError("failed");
    j = (j + 1) % k;
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * len);
}

// ISA-L's per-ISA entry points called directly (what "isal" would run on an AVX2-only or
// SSE-only CPU), for the backend selection table.
using IsalEncodeFn = void (*)(int, int, int, unsigned char*, unsigned char**, unsigned char**);

void BM_IsalDirect(benchmark::State& state, IsalEncodeFn fn, int k, int r, size_t len) {
  std::vector<uint8_t> a(static_cast<size_t>(k + r) * k), tables(32 * k * r);
  gf_gen_cauchy1_matrix(a.data(), k + r, k);
  ec_init_tables(k, r, a.data() + k * k, tables.data());
  Buffers buf(k + r, len);
  std::vector<uint8_t*> data, parity;
  for (int j = 0; j < k; ++j) data.push_back(buf[j]);
  for (int q = 0; q < r; ++q) parity.push_back(buf[k + q]);
  for (auto _ : state) {
    fn(static_cast<int>(len), k, r, tables.data(), data.data(), parity.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * k * len);
}

void BM_Memcpy(benchmark::State& state, size_t bytes) {
  Buffers buf(2, bytes);
  for (auto _ : state) {
    std::memcpy(buf[1], buf[0], bytes);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * bytes);
}

std::string LenName(size_t len) {
  if (len >= 1024 * 1024) return std::to_string(len / (1024 * 1024)) + "MiB";
  if (len >= 1024) return std::to_string(len / 1024) + "KiB";
  return std::to_string(len) + "B";
}

const int kRegistered = [] {
  std::set<size_t> memcpy_sizes;
  for (const auto& s : kShapes) {
    for (size_t len : kEncodeLens) {
      const std::string shape =
          "k" + std::to_string(s[0]) + "r" + std::to_string(s[1]) + "/" + LenName(len);
      for (const char* b : kBackends) {
        benchmark::RegisterBenchmark(("encode/" + shape + "/" + b).c_str(), BM_Encode, b, s[0],
                                     s[1], len);
      }
      for (int lost : {1, s[1]}) {
        for (const char* b : kBackends) {
          benchmark::RegisterBenchmark(
              ("decode" + std::to_string(lost) + "/" + shape + "/" + b).c_str(), BM_Decode, b, s[0],
              s[1], len, lost);
        }
        if (s[1] == 1) break;  // lost 1 == lost r
      }
      memcpy_sizes.insert(len);
      memcpy_sizes.insert(s[0] * len);  // the bytes an encode reads
    }
  }
  for (size_t bytes : memcpy_sizes) {
    benchmark::RegisterBenchmark(("memcpy/" + LenName(bytes)).c_str(), BM_Memcpy, bytes);
  }
  for (int r : {1, 2}) {
    for (size_t len : kUpdateLens) {
      for (const char* b : kBackends) {
        benchmark::RegisterBenchmark(
            ("update/r" + std::to_string(r) + "/" + LenName(len) + "/" + b).c_str(), BM_Update, b,
            r, len);
      }
    }
  }
  for (size_t len : kUpdateLens) {
    for (const char* b : kBackends) {
      benchmark::RegisterBenchmark(("update_parity/r2/" + LenName(len) + "/" + b).c_str(),
                                   BM_UpdateParity, b, len);
    }
  }
  // Every kernel on two shapes: the data behind ErasureCode::AutoBackend()'s table.
  for (const auto& s : {std::pair{8, 2}, std::pair{10, 4}}) {
    for (size_t len : kEncodeLens) {
      const std::string shape =
          "k" + std::to_string(s.first) + "r" + std::to_string(s.second) + "/" + LenName(len) + "/";
      for (const char* b : {"ecps-avx512-gfni", "ecps-avx2-gfni", "ecps-avx2", "ecps-portable"}) {
        benchmark::RegisterBenchmark(("variants/encode/" + shape + b).c_str(), BM_Encode, b,
                                     s.first, s.second, len);
      }
      benchmark::RegisterBenchmark(("variants/encode/" + shape + "isal-avx2").c_str(),
                                   BM_IsalDirect, &ec_encode_data_avx2, s.first, s.second, len);
      benchmark::RegisterBenchmark(("variants/encode/" + shape + "isal-sse").c_str(), BM_IsalDirect,
                                   &ec_encode_data_sse, s.first, s.second, len);
    }
  }
  return 0;
}();

}  // namespace

BENCHMARK_MAIN();
