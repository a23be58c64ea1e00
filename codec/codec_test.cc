#include "codec/codec.h"

#include <isa-l/erasure_code.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "codec/gf256.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ecps::codec {
namespace {

using Bytes = std::vector<uint8_t>;

Bytes RandomBytes(std::mt19937_64& rng, size_t n) {
  Bytes b(n);
  for (auto& x : b) x = static_cast<uint8_t>(rng());
  return b;
}

// ISA-L's own encode with the documented matrix: rows k..k+r-1 of gf_gen_cauchy1_matrix,
// or all ones for r == 1.
std::vector<Bytes> IsalParity(int k, int r, const std::vector<const uint8_t*>& data, size_t len) {
  Bytes a(static_cast<size_t>(k + r) * k);
  gf_gen_cauchy1_matrix(a.data(), k + r, k);
  if (r == 1) std::fill(a.begin() + k * k, a.end(), 1);
  Bytes tables(static_cast<size_t>(32) * k * r);
  ec_init_tables(k, r, a.data() + k * k, tables.data());
  std::vector<Bytes> parity(r, Bytes(len));
  std::vector<uint8_t*> d, p;
  for (auto* x : data) d.push_back(const_cast<uint8_t*>(x));
  for (auto& x : parity) p.push_back(x.data());
  ec_encode_data(static_cast<int>(len), k, r, tables.data(), d.data(), p.data());
  return parity;
}

// A stripe whose blocks live at an offset into larger buffers (unaligned pointers).
struct Stripe {
  Stripe(int k, int r, size_t len, size_t offset, std::mt19937_64& rng) : len(len) {
    for (int j = 0; j < k + r; ++j) storage.push_back(RandomBytes(rng, len + offset + 1));
    for (int j = 0; j < k + r; ++j) ptr.push_back(storage[j].data() + offset);
    for (int j = 0; j < k; ++j) data.push_back(ptr[j]);
    for (int q = 0; q < r; ++q) parity.push_back(ptr[k + q]);
  }
  Bytes Block(int id) const { return Bytes(ptr[id], ptr[id] + len); }
  size_t len;
  std::vector<Bytes> storage;
  std::vector<uint8_t*> ptr;
  std::vector<const uint8_t*> data;
  std::vector<uint8_t*> parity;
};

std::unique_ptr<ErasureCode> MustCreate(int k, int r, const std::string& backend) {
  auto code = ErasureCode::Create(k, r, backend);
  EXPECT_TRUE(code.ok()) << code.status();
  return code.ok() ? *std::move(code) : nullptr;
}

TEST(Gf256, MatrixIsIsalCauchyOrXor) {
  for (int k = 1; k <= 20; ++k) {
    for (int r = 1; r <= 6; ++r) {
      Bytes a(static_cast<size_t>(k + r) * k);
      gf_gen_cauchy1_matrix(a.data(), k + r, k);
      auto code = MustCreate(k, r, "ecps-portable");
      for (int q = 0; q < r; ++q) {
        for (int j = 0; j < k; ++j) {
          ASSERT_EQ(code->coefficient(q, j), r == 1 ? 1 : a[(k + q) * k + j]) << k << r << q << j;
        }
      }
    }
  }
}

TEST(Gf256, BitMatrixMatchesFieldProduct) {
  for (int c = 0; c < 256; ++c) {
    const uint64_t m = gf::AffineMatrix(static_cast<uint8_t>(c));
    for (int x = 0; x < 256; ++x) {
      ASSERT_EQ(gf::AffineApply(m, static_cast<uint8_t>(x)),
                gf::Mul(static_cast<uint8_t>(c), static_cast<uint8_t>(x)));
    }
    if (c != 0) {
      ASSERT_EQ(gf::Mul(static_cast<uint8_t>(c), gf::Inverse(static_cast<uint8_t>(c))), 1);
    }
  }
}

// Every backend, forced by name; skipped where this machine cannot run it.
class BackendTest : public ::testing::TestWithParam<std::string> {
 protected:
  std::unique_ptr<ErasureCode> CreateOrSkip(int k, int r) {
    auto code = ErasureCode::Create(k, r, GetParam());
    if (!code.ok() && code.status().code() == absl::StatusCode::kUnavailable) return nullptr;
    EXPECT_TRUE(code.ok()) << code.status();
    return code.ok() ? *std::move(code) : nullptr;
  }
};

#define CREATE_OR_SKIP(var, k, r)                                        \
  auto var = CreateOrSkip(k, r);                                         \
  if (var == nullptr) GTEST_SKIP() << GetParam() << " unavailable here"; \
  static_assert(true)

TEST_P(BackendTest, EncodeIsByteIdenticalToIsal) {
  CREATE_OR_SKIP(probe, 1, 1);
  std::mt19937_64 rng(1234);
  // Tiny, odd, around vector widths, and large.
  std::vector<size_t> lens = {1,   2,   3,   7,   8,   15,  31,   32,   33,   63,   64,    65,
                              127, 128, 129, 255, 256, 257, 1000, 4095, 4096, 4097, 65536, 70000};
  for (int t = 0; t < 24; ++t) lens.push_back(1 + rng() % 70000);
  for (size_t len : lens) {
    const int k = 1 + static_cast<int>(rng() % 16);
    const int r = 1 + static_cast<int>(rng() % 4);
    const size_t offset = rng() % 4;
    auto code = MustCreate(k, r, GetParam());
    ASSERT_NE(code, nullptr);
    EXPECT_EQ(code->backend(), probe->backend());
    Stripe s(k, r, len, offset, rng);
    ASSERT_TRUE(code->Encode(s.data, s.parity, len).ok());
    const auto want = IsalParity(k, r, s.data, len);
    for (int q = 0; q < r; ++q) {
      ASSERT_EQ(s.Block(k + q), want[q])
          << "k=" << k << " r=" << r << " q=" << q << " len=" << len << " offset=" << offset;
    }
  }
  // Every (k, r) shape once with a length that exercises the vector, unrolled and tail paths.
  for (int k = 1; k <= 16; ++k) {
    for (int r = 1; r <= 4; ++r) {
      const size_t len = 64 * 3 + 17;
      auto code = MustCreate(k, r, GetParam());
      Stripe s(k, r, len, 1, rng);
      ASSERT_TRUE(code->Encode(s.data, s.parity, len).ok());
      const auto want = IsalParity(k, r, s.data, len);
      for (int q = 0; q < r; ++q) ASSERT_EQ(s.Block(k + q), want[q]) << k << "," << r;
    }
  }
}

// All subsets of {0..n-1} of size 1..max_size.
std::vector<std::vector<int>> LossPatterns(int n, int max_size) {
  std::vector<std::vector<int>> out;
  for (uint32_t mask = 1; mask < (1u << n); ++mask) {
    if (__builtin_popcount(mask) > max_size) continue;
    std::vector<int> lost;
    for (int i = 0; i < n; ++i) {
      if (mask >> i & 1) lost.push_back(i);
    }
    out.push_back(lost);
  }
  return out;
}

TEST_P(BackendTest, EveryErasurePatternIsRebuilt) {
  CREATE_OR_SKIP(probe, 1, 1);
  std::mt19937_64 rng(99);
  const int shapes[][2] = {{4, 1}, {4, 2}, {3, 2}, {8, 3}, {10, 4}, {1, 3}, {6, 6}};
  for (const auto& shape : shapes) {
    const int k = shape[0], r = shape[1];
    const size_t len = GetParam() == "cuda" ? 4099 : 131;
    auto code = MustCreate(k, r, GetParam());
    Stripe s(k, r, len, 3, rng);
    ASSERT_TRUE(code->Encode(s.data, s.parity, len).ok());
    int patterns = 0;
    for (const auto& lost : LossPatterns(k + r, r)) {
      std::vector<int> ids;
      std::vector<const uint8_t*> avail;
      for (int id = 0; id < k + r; ++id) {
        if (std::find(lost.begin(), lost.end(), id) != lost.end()) continue;
        ids.push_back(id);
        avail.push_back(s.ptr[id]);
      }
      // Survivors in a scrambled order: Decode must not depend on it.
      std::vector<size_t> perm(ids.size());
      for (size_t i = 0; i < perm.size(); ++i) perm[i] = i;
      std::shuffle(perm.begin(), perm.end(), rng);
      std::vector<int> pids;
      std::vector<const uint8_t*> pavail;
      for (size_t i : perm) {
        pids.push_back(ids[i]);
        pavail.push_back(avail[i]);
      }
      std::vector<Bytes> out(lost.size(), Bytes(len));
      std::vector<uint8_t*> outp;
      for (auto& b : out) outp.push_back(b.data());
      ASSERT_TRUE(code->Decode(pids, pavail, lost, outp, len).ok());
      for (size_t w = 0; w < lost.size(); ++w) {
        ASSERT_EQ(out[w], s.Block(lost[w])) << "(" << k << "," << r << ") member " << lost[w];
      }
      // Exactly k survivors, highest ids (the most parity rows).
      std::vector<int> last_ids(ids.end() - k, ids.end());
      std::vector<const uint8_t*> last(avail.end() - k, avail.end());
      ASSERT_TRUE(code->Decode(last_ids, last, lost, outp, len).ok());
      for (size_t w = 0; w < lost.size(); ++w) ASSERT_EQ(out[w], s.Block(lost[w]));
      ++patterns;
    }
    EXPECT_GT(patterns, 0);
  }
}

TEST_P(BackendTest, UpdatesEqualFreshEncode) {
  CREATE_OR_SKIP(probe, 1, 1);
  std::mt19937_64 rng(5);
  const int shapes[][2] = {{4, 1}, {4, 2}, {8, 2}, {10, 4}, {3, 3}};
  for (const auto& shape : shapes) {
    const int k = shape[0], r = shape[1];
    for (size_t len : {size_t{1}, size_t{64}, size_t{100}, size_t{256}, size_t{1024}, size_t{2048},
                       size_t{2051}}) {
      auto code = MustCreate(k, r, GetParam());
      Stripe s(k, r, len, 1, rng);
      ASSERT_TRUE(code->Encode(s.data, s.parity, len).ok());
      for (int step = 0; step < 40; ++step) {
        const int j = static_cast<int>(rng() % k);
        Bytes fresh = RandomBytes(rng, len);
        Bytes delta(len);
        for (size_t i = 0; i < len; ++i) delta[i] = fresh[i] ^ s.ptr[j][i];
        std::memcpy(s.ptr[j], fresh.data(), len);
        if (step % 2 == 0) {
          ASSERT_TRUE(code->Update(j, delta.data(), s.parity, len).ok());
        } else {
          // Each parity holder applies its own row.
          for (int q = 0; q < r; ++q) {
            ASSERT_TRUE(code->UpdateParity(q, j, delta.data(), s.parity[q], len).ok());
          }
        }
      }
      std::vector<Bytes> want(r, Bytes(len));
      std::vector<uint8_t*> wp;
      for (auto& b : want) wp.push_back(b.data());
      ASSERT_TRUE(code->Encode(s.data, wp, len).ok());
      for (int q = 0; q < r; ++q) {
        ASSERT_EQ(s.Block(k + q), want[q]) << "(" << k << "," << r << ") len=" << len;
      }
    }
  }
}

TEST_P(BackendTest, ConcurrentDecodesShareTheCache) {
  CREATE_OR_SKIP(probe, 1, 1);
  const int k = 8, r = 3;
  const size_t len = 1000;
  std::mt19937_64 rng(17);
  auto code = MustCreate(k, r, GetParam());
  Stripe s(k, r, len, 0, rng);
  ASSERT_TRUE(code->Encode(s.data, s.parity, len).ok());
  const auto patterns = LossPatterns(k + r, r);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (size_t p = t; p < patterns.size(); p += 2) {  // threads overlap on patterns
        const auto& lost = patterns[p];
        std::vector<int> ids;
        std::vector<const uint8_t*> avail;
        for (int id = 0; id < k + r; ++id) {
          if (std::find(lost.begin(), lost.end(), id) == lost.end()) {
            ids.push_back(id);
            avail.push_back(s.ptr[id]);
          }
        }
        std::vector<Bytes> out(lost.size(), Bytes(len));
        std::vector<uint8_t*> outp;
        for (auto& b : out) outp.push_back(b.data());
        if (!code->Decode(ids, avail, lost, outp, len).ok()) ++failures;
        for (size_t w = 0; w < lost.size(); ++w) {
          if (out[w] != s.Block(lost[w])) ++failures;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
}

INSTANTIATE_TEST_SUITE_P(Backends, BackendTest,
                         ::testing::Values("auto", "ecps", "ecps-avx512-gfni", "ecps-avx2-gfni",
                                           "ecps-avx2", "ecps-portable", "isal", "cuda"),
                         [](const auto& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

TEST(CreateTest, ShapesAndNames) {
  EXPECT_EQ(ErasureCode::Create(0, 1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ErasureCode::Create(1, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ErasureCode::Create(-3, 2).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ErasureCode::Create(250, 6).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(ErasureCode::Create(250, 5).ok());
  EXPECT_TRUE(ErasureCode::Create(1, 254).ok());
  EXPECT_EQ(ErasureCode::Create(4, 2, "nope").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ErasureCode::Create(4, 2, "ecps-sse9").status().code(),
            absl::StatusCode::kInvalidArgument);
  auto code = MustCreate(4, 2, "auto");
  EXPECT_EQ(code->backend(), ErasureCode::AutoBackend());
  EXPECT_EQ(code->k(), 4);
  EXPECT_EQ(code->r(), 2);
  EXPECT_EQ(code->coefficient(2, 0), 0);  // out of range
  EXPECT_EQ(code->coefficient(0, 4), 0);
  EXPECT_THAT(ErasureCode::AvailableBackends(), ::testing::Contains("isal"));
  EXPECT_THAT(ErasureCode::AvailableBackends(), ::testing::Contains("ecps-portable"));
  EXPECT_THAT(ErasureCode::AvailableBackends(), ::testing::Contains(ErasureCode::AutoBackend()));
  auto ecps = MustCreate(4, 2, "ecps");
  EXPECT_EQ(ecps->backend().substr(0, 5), "ecps-");
  auto cuda = ErasureCode::Create(4, 2, "cuda");
  if (!cuda.ok()) {
    EXPECT_EQ(cuda.status().code(), absl::StatusCode::kUnavailable);
  }
}

// A long code with many wanted rows exercises row groups and L2 tiling in the kernels.
TEST(CreateTest, WideCodesRoundTrip) {
  std::mt19937_64 rng(3);
  for (const auto& backend : ErasureCode::AvailableBackends()) {
    const int k = 20, r = 40;
    const size_t len = 70001;
    auto code = MustCreate(k, r, backend);
    Stripe s(k, r, len, 1, rng);
    ASSERT_TRUE(code->Encode(s.data, s.parity, len).ok());
    const auto want = IsalParity(k, r, s.data, len);
    for (int q = 0; q < r; ++q) ASSERT_EQ(s.Block(k + q), want[q]) << backend << " q=" << q;
    // Lose data 0..19 (all of it) and rebuild it plus parity 0..9 from parity 10..39.
    std::vector<int> ids, lost;
    std::vector<const uint8_t*> avail;
    for (int id = k + 10; id < k + r; ++id) {
      ids.push_back(id);
      avail.push_back(s.ptr[id]);
    }
    for (int id = 0; id < k + 10; ++id) lost.push_back(id);
    std::vector<Bytes> out(lost.size(), Bytes(len));
    std::vector<uint8_t*> outp;
    for (auto& b : out) outp.push_back(b.data());
    ASSERT_TRUE(code->Decode(ids, avail, lost, outp, len).ok());
    for (size_t w = 0; w < lost.size(); ++w) ASSERT_EQ(out[w], s.Block(lost[w])) << backend;
  }
}

TEST(BadArguments, AreErrorsNotCrashes) {
  auto code = MustCreate(4, 2, "auto");
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  Bytes b[6];
  for (auto& x : b) x.assign(64, 7);
  const uint8_t* data[4] = {b[0].data(), b[1].data(), b[2].data(), b[3].data()};
  uint8_t* parity[2] = {b[4].data(), b[5].data()};
  const uint8_t* data_null[4] = {b[0].data(), nullptr, b[2].data(), b[3].data()};
  uint8_t* parity_null[2] = {b[4].data(), nullptr};
  const Bytes before4 = b[4];

  // Encode: wrong data count, wrong parity count, null data, null parity.
  EXPECT_EQ(code->Encode(absl::MakeSpan(data, 3), parity, 64).code(), kInvalid);
  EXPECT_EQ(code->Encode(data, absl::MakeSpan(parity, 1), 64).code(), kInvalid);
  EXPECT_EQ(code->Encode(data_null, parity, 64).code(), kInvalid);
  EXPECT_EQ(code->Encode(data, parity_null, 64).code(), kInvalid);
  EXPECT_EQ(b[4], before4);  // nothing written on error
  EXPECT_TRUE(code->Encode(data, parity, 0).ok());

  // UpdateParity: q, j out of range, null delta, null parity.
  EXPECT_EQ(code->UpdateParity(2, 0, b[0].data(), b[4].data(), 64).code(), kInvalid);
  EXPECT_EQ(code->UpdateParity(-1, 0, b[0].data(), b[4].data(), 64).code(), kInvalid);
  EXPECT_EQ(code->UpdateParity(0, 4, b[0].data(), b[4].data(), 64).code(), kInvalid);
  EXPECT_EQ(code->UpdateParity(0, 0, nullptr, b[4].data(), 64).code(), kInvalid);
  EXPECT_EQ(code->UpdateParity(0, 0, b[0].data(), nullptr, 64).code(), kInvalid);
  // Update: j out of range, wrong parity count, null delta, null parity.
  EXPECT_EQ(code->Update(4, b[0].data(), parity, 64).code(), kInvalid);
  EXPECT_EQ(code->Update(-1, b[0].data(), parity, 64).code(), kInvalid);
  EXPECT_EQ(code->Update(0, b[0].data(), absl::MakeSpan(parity, 1), 64).code(), kInvalid);
  EXPECT_EQ(code->Update(0, nullptr, parity, 64).code(), kInvalid);
  EXPECT_EQ(code->Update(0, b[0].data(), parity_null, 64).code(), kInvalid);
  EXPECT_EQ(b[4], before4);

  // Decode.
  const std::vector<int> ids4 = {0, 1, 2, 4};
  const uint8_t* avail4[4] = {b[0].data(), b[1].data(), b[2].data(), b[4].data()};
  uint8_t* out1[1] = {b[3].data()};
  const std::vector<int> want3 = {3};
  // ids/buffers count mismatch
  EXPECT_EQ(code->Decode({0, 1, 2}, avail4, want3, out1, 64).code(), kInvalid);
  EXPECT_EQ(code->Decode(ids4, avail4, {3, 5}, out1, 64).code(), kInvalid);
  // fewer than k survivors
  EXPECT_EQ(code->Decode({0, 1, 2}, absl::MakeSpan(avail4, 3), want3, out1, 64).code(), kInvalid);
  // duplicate available ids, duplicate wanted ids
  EXPECT_EQ(code->Decode({0, 1, 1, 4}, avail4, want3, out1, 64).code(), kInvalid);
  uint8_t* out2[2] = {b[3].data(), b[5].data()};
  EXPECT_EQ(code->Decode(ids4, avail4, {3, 3}, out2, 64).code(), kInvalid);
  // ids out of range (k + r = 6)
  EXPECT_EQ(code->Decode({0, 1, 2, 6}, avail4, want3, out1, 64).code(), kInvalid);
  EXPECT_EQ(code->Decode({0, 1, 2, -1}, avail4, want3, out1, 64).code(), kInvalid);
  EXPECT_EQ(code->Decode(ids4, avail4, {6}, out1, 64).code(), kInvalid);
  // null pointers
  const uint8_t* avail_null[4] = {b[0].data(), nullptr, b[2].data(), b[4].data()};
  EXPECT_EQ(code->Decode(ids4, avail_null, want3, out1, 64).code(), kInvalid);
  uint8_t* out_null[1] = {nullptr};
  EXPECT_EQ(code->Decode(ids4, avail4, want3, out_null, 64).code(), kInvalid);
  // A good call still works afterwards.
  EXPECT_TRUE(code->Decode(ids4, avail4, want3, out1, 64).ok());
  EXPECT_TRUE(code->Decode(ids4, avail4, {}, {}, 64).ok());
}

}  // namespace
}  // namespace ecps::codec
