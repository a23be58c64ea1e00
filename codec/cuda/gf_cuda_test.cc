// Tests of the standalone CUDA library. GPU tests skip cleanly without a device; the
// host/device-shared math is checked everywhere.
#include "codec/cuda/gf_cuda.h"

#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "codec/cuda/gf_math.h"
#include "gtest/gtest.h"

namespace ecps::codec::cuda {
namespace {

// Reference: log/exp-free, one byte at a time.
std::vector<std::vector<uint8_t>> Reference(const std::vector<uint8_t>& coef, int rows, int cols,
                                            const std::vector<std::vector<uint8_t>>& src,
                                            std::vector<std::vector<uint8_t>> dst, size_t len,
                                            bool accumulate) {
  for (int q = 0; q < rows; ++q) {
    for (size_t i = 0; i < len; ++i) {
      uint8_t a = accumulate ? dst[q][i] : 0;
      for (int j = 0; j < cols; ++j) a ^= GfMulByte(coef[q * cols + j], src[j][i]);
      dst[q][i] = a;
    }
  }
  return dst;
}

// Random source and destination blocks of `len` bytes through coder->Apply with `coef`,
// checked against Reference.
void ExpectApplyMatchesReference(HostStagedCoder* coder, const std::vector<uint8_t>& coef,
                                 int rows, int cols, size_t len, bool acc, std::mt19937* rng) {
  std::vector<std::vector<uint8_t>> src(cols, std::vector<uint8_t>(len));
  std::vector<std::vector<uint8_t>> dst(rows, std::vector<uint8_t>(len));
  for (auto& b : src)
    for (auto& x : b) x = static_cast<uint8_t>((*rng)());
  for (auto& b : dst)
    for (auto& x : b) x = static_cast<uint8_t>((*rng)());
  const auto want = Reference(coef, rows, cols, src, dst, len, acc);
  std::vector<const uint8_t*> s;
  std::vector<uint8_t*> d;
  for (auto& b : src) s.push_back(b.data());
  for (auto& b : dst) d.push_back(b.data());
  ASSERT_EQ(coder->Apply(coef.data(), rows, cols, s.data(), d.data(), len, acc), Error::kOk);
  ASSERT_EQ(dst, want) << rows << "x" << cols << " len=" << len << " acc=" << acc;
}

TEST(GfMath, WordProductMatchesByteProduct) {
  std::mt19937 rng(7);
  for (int c = 0; c < 256; ++c) {
    for (int t = 0; t < 64; ++t) {
      const uint32_t x = rng();
      uint32_t want = 0;
      for (int b = 0; b < 4; ++b) {
        want |= static_cast<uint32_t>(
                    GfMulByte(static_cast<uint8_t>(c), static_cast<uint8_t>(x >> (8 * b))))
                << (8 * b);
      }
      ASSERT_EQ(GfMulWord(static_cast<uint8_t>(c), x), want) << "c=" << c;
    }
  }
  // 0x11D field: 2 * 0x80 = 0x1D, and 0x8E is the inverse of 2.
  EXPECT_EQ(GfMulByte(2, 0x80), 0x1D);
  EXPECT_EQ(GfMulByte(2, 0x8E), 1);
}

TEST(GfCuda, DeviceCountNeverFails) { EXPECT_GE(DeviceCount(), 0); }

TEST(GfCuda, CreateWithoutDeviceIsAnError) {
  std::unique_ptr<HostStagedCoder> coder;
  const Error e = HostStagedCoder::Create(&coder);
  if (DeviceCount() == 0) {
    EXPECT_EQ(e, Error::kNoDevice);
    EXPECT_EQ(coder, nullptr);
  } else {
    EXPECT_EQ(e, Error::kOk);
  }
  EXPECT_EQ(HostStagedCoder::Create(nullptr), Error::kInvalidArgument);
}

TEST(GfCuda, HostStagedMatchesReference) {
  if (DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  std::unique_ptr<HostStagedCoder> coder;
  ASSERT_EQ(HostStagedCoder::Create(&coder), Error::kOk);
  std::mt19937 rng(42);
  const int shapes[][2] = {{1, 1}, {2, 4}, {4, 10}, {3, 8}, {7, 16}, {1, 200}, {130, 2}};
  const size_t lens[] = {1, 3, 4, 5, 63, 64, 1000, 4097, 65536 + 3};
  for (const auto& shape : shapes) {
    const int rows = shape[0], cols = shape[1];
    for (size_t len : lens) {
      for (bool acc : {false, true}) {
        std::vector<uint8_t> coef(rows * cols);
        for (auto& c : coef) c = static_cast<uint8_t>(rng());
        ExpectApplyMatchesReference(coder.get(), coef, rows, cols, len, acc, &rng);
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
  }
}

// Blocks longer than a chunk go through in several chunks on both streams; a matrix used again
// is not uploaded again, and another one of the same shape is.
TEST(GfCuda, HostStagedChunksAndReusesItsMatrix) {
  if (DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  std::unique_ptr<HostStagedCoder> coder;
  ASSERT_EQ(HostStagedCoder::Create(&coder), Error::kOk);
  std::mt19937 rng(7);
  const int rows = 2, cols = 4;
  const size_t len = 2 * HostStagedCoder::kChunk + 1003;
  std::vector<uint8_t> first(rows * cols), second(rows * cols);
  for (auto& c : first) c = static_cast<uint8_t>(rng());
  for (auto& c : second) c = static_cast<uint8_t>(rng());
  for (const auto* coef : {&first, &first, &second, &first}) {
    for (bool acc : {false, true}) {
      ExpectApplyMatchesReference(coder.get(), *coef, rows, cols, len, acc, &rng);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

TEST(GfCuda, BadArgumentsAreErrors) {
  if (DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  std::unique_ptr<HostStagedCoder> coder;
  ASSERT_EQ(HostStagedCoder::Create(&coder), Error::kOk);
  uint8_t coef = 1, a = 0, b = 0;
  const uint8_t* s[1] = {&a};
  uint8_t* d[1] = {&b};
  const uint8_t* null_src[1] = {nullptr};
  EXPECT_EQ(coder->Apply(nullptr, 1, 1, s, d, 1, false), Error::kInvalidArgument);
  EXPECT_EQ(coder->Apply(&coef, 0, 1, s, d, 1, false), Error::kInvalidArgument);
  EXPECT_EQ(coder->Apply(&coef, 1, 256, s, d, 1, false), Error::kInvalidArgument);
  EXPECT_EQ(coder->Apply(&coef, 1, 1, null_src, d, 1, false), Error::kInvalidArgument);
  EXPECT_EQ(GfMatrixApplyAsync(nullptr, 1, 1, &a, 1, &b, 1, 1, false, nullptr),
            Error::kInvalidArgument);
}

}  // namespace
}  // namespace ecps::codec::cuda
