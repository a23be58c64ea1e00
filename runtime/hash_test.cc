#include "runtime/hash.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace ecps {
namespace {

// Reference XXH64 values, the ones the project's own XXH64 produced before libxxhash replaced
// it: checkpoints written then must still verify.
TEST(Hash64Test, MatchesReferenceXxh64) {
  EXPECT_EQ(Hash64("", 0, 0), 0xEF46DB3751D8E999ULL);
  EXPECT_EQ(Hash64("a", 1, 0), 0xD24EC4F1A98C6E5BULL);
  EXPECT_EQ(Hash64("abc", 3, 0), 0x44BC2CF5AD770999ULL);
  EXPECT_EQ(Hash64("abc", 3, 1234), 0x2151859F42F363E2ULL);
  const char* text = "Nobody inspects the spammish repetition";
  EXPECT_EQ(Hash64(text, std::strlen(text), 0), 0xFBCEA83C8A378BF1ULL);
  unsigned char bytes[100];
  std::iota(bytes, bytes + 100, 0);
  EXPECT_EQ(Hash64(bytes, 100, 0), 0x6AC1E58032166597ULL);
  EXPECT_EQ(Hash64(bytes, 100, 0x9E3779B97F4A7C15ULL), 0x3B97D91EBA03E785ULL);
}

TEST(Hash64Test, StreamOfAnyPiecesEqualsOneShot) {
  std::vector<unsigned char> data(1000);
  std::mt19937 rng(7);
  for (unsigned char& b : data) b = static_cast<unsigned char>(rng());
  for (size_t total : {size_t{0}, size_t{5}, size_t{31}, size_t{32}, size_t{33}, size_t{1000}}) {
    const uint64_t want = Hash64(data.data(), total, 42);
    for (size_t piece : {size_t{1}, size_t{7}, size_t{32}, size_t{100}}) {
      Hash64Stream stream(42);
      for (size_t at = 0; at < total; at += piece) {
        stream.Update(data.data() + at, std::min(piece, total - at));
      }
      EXPECT_EQ(stream.Digest(), want) << total << " bytes in pieces of " << piece;
    }
  }
  Hash64Stream other_seed(43);
  other_seed.Update(data.data(), 100);
  EXPECT_NE(other_seed.Digest(), Hash64(data.data(), 100, 42));
}

}  // namespace
}  // namespace ecps
