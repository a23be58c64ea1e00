#include "export/safetensors.h"

#include <cstring>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace ecps {
namespace {

// The header's JSON and where the data starts, as a reader finds them.
nlohmann::json ReadHeader(const std::string& file, size_t* data_start) {
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<uint8_t>(file[i])) << (8 * i);
  *data_start = 8 + n;
  return nlohmann::json::parse(file.substr(8, n));
}

TEST(SafetensorsTest, HeaderDescribesEveryTensorAndDataFollowsAligned) {
  std::string file;
  auto writer = SafetensorsWriter::Start(
      MemorySink(&file), {{"a", "F32", {2, 3}}, {"b", "I64", {2}}, {"c", "F32", {0, 4}}},
      {{"job", "j"}});
  ASSERT_TRUE(writer.ok()) << writer.status();
  const float a[6] = {1, 2, 3, 4, 5, 6};
  const int64_t b[2] = {-1, 1LL << 40};
  // Bytes may cross from one tensor into the next.
  std::string bytes(reinterpret_cast<const char*>(a), sizeof(a));
  bytes.append(reinterpret_cast<const char*>(b), sizeof(b));
  ASSERT_TRUE((*writer)->Append(bytes.substr(0, 10)).ok());
  ASSERT_TRUE((*writer)->Append(bytes.substr(10)).ok());
  ASSERT_TRUE((*writer)->Finish().ok());

  size_t start = 0;
  nlohmann::json h = ReadHeader(file, &start);
  EXPECT_EQ(start % 8, 0u);
  EXPECT_EQ(h["__metadata__"]["job"], "j");
  EXPECT_EQ(h["a"]["dtype"], "F32");
  EXPECT_EQ(h["a"]["shape"], nlohmann::json({2, 3}));
  EXPECT_EQ(h["a"]["data_offsets"], nlohmann::json({0, 24}));
  EXPECT_EQ(h["b"]["dtype"], "I64");
  EXPECT_EQ(h["b"]["data_offsets"], nlohmann::json({24, 40}));
  EXPECT_EQ(h["c"]["data_offsets"], nlohmann::json({40, 40}));
  ASSERT_EQ(file.size(), start + 40);
  EXPECT_EQ(std::memcmp(file.data() + start, a, sizeof(a)), 0);
  EXPECT_EQ(std::memcmp(file.data() + start + 24, b, sizeof(b)), 0);
  EXPECT_EQ((*writer)->plan().file_bytes(), static_cast<int64_t>(file.size()));
  EXPECT_EQ((*writer)->plan().begin, (std::vector<int64_t>{0, 24, 40}));
}

TEST(SafetensorsTest, RefusesBadTensors) {
  EXPECT_FALSE(PlanSafetensors({{"a", "F16", {1}}}, {}).ok());
  EXPECT_FALSE(PlanSafetensors({{"a", "F32", {1}}, {"a", "F32", {1}}}, {}).ok());
  EXPECT_FALSE(PlanSafetensors({{"", "F32", {1}}}, {}).ok());
  EXPECT_FALSE(PlanSafetensors({{"__metadata__", "F32", {1}}}, {}).ok());
  EXPECT_FALSE(PlanSafetensors({{"a", "F32", {-1}}}, {}).ok());
  EXPECT_FALSE(PlanSafetensors({{"a", "F32", {1LL << 40, 1LL << 30}}}, {}).ok());
}

TEST(SafetensorsTest, TooMuchOrTooLittleDataIsRefused) {
  std::string file;
  auto writer = SafetensorsWriter::Start(MemorySink(&file), {{"a", "F32", {2}}}, {});
  ASSERT_TRUE(writer.ok());
  const float v[3] = {1, 2, 3};
  EXPECT_EQ((*writer)->AppendFloats(v, 3).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE((*writer)->AppendFloats(v, 1).ok());
  absl::Status s = (*writer)->Finish();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("4 of 8 data bytes"), absl::string_view::npos) << s;
}

TEST(SafetensorsTest, AFailingSinkFailsTheWrite) {
  std::string file;
  auto writer = SafetensorsWriter::Start(MemorySink(&file, 100), {{"a", "F32", {100}}}, {});
  ASSERT_TRUE(writer.ok());
  std::vector<float> v(100, 1.0f);
  EXPECT_FALSE((*writer)->AppendFloats(v.data(), 100).ok());
  std::string header_only;
  EXPECT_FALSE(SafetensorsWriter::Start(MemorySink(&header_only, 4), {{"a", "F32", {1}}}, {}).ok());
}

}  // namespace
}  // namespace ecps
