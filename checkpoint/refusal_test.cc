// What a reader refuses: truncated and corrupt files, malformed or inconsistent manifests,
// checkpoints of another model. Every refusal names the file at fault.

#include <filesystem>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_replace.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ecps {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// ---- Refusals ------------------------------------------------------------------------------

TEST_F(CheckpointTest, TruncatedTableFileIsRefused) {
  std::string dir = WriteCheckpoint(SmallLayout(11));
  std::string file = (fs::path(dir) / "table-001.rows").string();
  fs::resize_file(file, 37 * 8 * 4 - 4);
  absl::Status st = VerifyCheckpoint(dir);
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(Msg(st), HasSubstr(file));
  EXPECT_THAT(Msg(st), HasSubstr("truncated"));
  absl::StatusOr<Manifest> m = ReadManifest(dir);
  ASSERT_TRUE(m.ok());
  auto reader = TableReader::Open(*m, 1);
  EXPECT_EQ(reader.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(Msg(reader.status()), HasSubstr(file));
  EXPECT_TRUE(TableReader::Open(*m, 0).ok());  // the other tables stay readable
}

TEST_F(CheckpointTest, FlippedByteInTableFileIsRefused) {
  std::string dir = WriteCheckpoint(SmallLayout(12));
  std::string file = (fs::path(dir) / "table-000.rows").string();
  FlipByte(file, 517 * 8 * 4 + 5);
  absl::Status st = VerifyCheckpoint(dir);
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(Msg(st), HasSubstr(file));
  EXPECT_THAT(Msg(st), HasSubstr("checksum mismatch"));
}

TEST_F(CheckpointTest, FlippedByteInDenseFileIsRefused) {
  std::string dir = WriteCheckpoint(SmallLayout(13));
  std::string file = (fs::path(dir) / "dense-001.bin").string();
  for (int64_t offset : {kDenseHeaderBytes + 5, int64_t{17}}) {  // in the weights, the header
    FlipByte(file, offset);
    absl::Status st = VerifyCheckpoint(dir);
    EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(Msg(st), HasSubstr(file));
    absl::StatusOr<Manifest> m = ReadManifest(dir);
    ASSERT_TRUE(m.ok());
    std::vector<float> w, s;
    int64_t version;
    st = ReadDense(*m, 1, &w, &s, &version);
    EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(Msg(st), HasSubstr(file));
    EXPECT_TRUE(ReadDense(*m, 0, &w, &s, &version).ok());
    FlipByte(file, offset);  // restore
    EXPECT_TRUE(VerifyCheckpoint(dir).ok());
  }
}

TEST_F(CheckpointTest, MissingManifestIsRefused) {
  std::string dir = WriteCheckpoint(SmallLayout(14));
  std::string file = (fs::path(dir) / "MANIFEST.json").string();
  fs::remove(file);
  absl::StatusOr<Manifest> m = ReadManifest(dir);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Msg(m.status()), file + ": missing");
  EXPECT_EQ(VerifyCheckpoint(dir).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(LatestCheckpoint(root_).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(CheckpointTest, MalformedManifestsAreRefusedNamingTheFile) {
  std::string dir = WriteCheckpoint(SmallLayout(15));
  std::string file = (fs::path(dir) / "MANIFEST.json").string();
  const std::string good = ReadText(file);
  ASSERT_TRUE(ReadManifest(dir).ok());
  ASSERT_THAT(good, HasSubstr("\"rows\": 37, \"bytes\": 1184,"));

  struct Case {
    std::string name, from, to, why;
  };
  std::vector<Case> cases = {
      {"truncated", "", "", "unexpected end"},
      {"trailing text", "\n}\n", "\n}\n}", "expected end of input"},
      {"unknown field", "\"step\": 15,", "\"step\": 15, \"colour\": 1,", "unknown field colour"},
      {"missing field", "\"embedding_dim\": 4,", "", "missing field embedding_dim"},
      {"wrong type", "\"step\": 15,", "\"step\": \"15\",", "step must be an integer"},
      {"float", "\"step\": 15,", "\"step\": 15.0,", "integers"},
      {"beyond int64", "\"step\": 15,", "\"step\": 9223372036854775808,", "out of range"},
      {"duplicate", "\"step\": 15,", "\"step\": 15, \"step\": 15,", "duplicate field"},
      {"bad checksum", "\"checksum\": \"", "\"checksum\": \"x", "hex digits"},
      {"unknown table field", "\"rows\": 37,", "\"rows\": 37, \"x\": 0,", "tables[1].x"},
      {"path escape", "\"table-002.rows\"", "\"../table-002.rows\"", "tables[2].file"},
      {"bytes disagree", "\"bytes\": 1184", "\"bytes\": 1180", "tables[1].bytes is 1180"},
      {"rows disagree", "\"rows\": 37,", "\"rows\": 38,", "tables[1].bytes is 1184"},
      {"dense bytes", "\"state_floats\": 6,", "\"state_floats\": 7,", "dense[1].bytes"},
      {"payload below dim", "\"payload_floats\": 8", "\"payload_floats\": 2", "payload_floats"},
      {"negative reader", "\"reader_positions\": [100", "\"reader_positions\": [-1",
       "reader_positions[0]"},
      {"not an object", good, "[1, 2]", "must be an object"},
      {"other format", "\"ecps-checkpoint\"", "\"other\"", "format is \"other\""},
  };
  for (const Case& c : cases) {
    std::string text = c.name == "truncated" ? good.substr(0, good.find("\"tables\": [") + 11)
                                             : absl::StrReplaceAll(good, {{c.from, c.to}});
    if (c.name != "truncated") {
      ASSERT_NE(text, good) << c.name;
    }
    WriteText(file, text);
    absl::StatusOr<Manifest> m = ReadManifest(dir);
    EXPECT_EQ(m.status().code(), absl::StatusCode::kDataLoss) << c.name << ": " << m.status();
    EXPECT_THAT(Msg(m.status()), HasSubstr(file + ": not valid: ")) << c.name;
    EXPECT_THAT(Msg(m.status()), HasSubstr(c.why)) << c.name;
    EXPECT_EQ(VerifyCheckpoint(dir).code(), absl::StatusCode::kDataLoss) << c.name;
  }

  // A newer format version is refused as such, not as a schema error.
  WriteText(file, absl::StrReplaceAll(
                      good, {{"\"format_version\": 1,", "\"format_version\": 2, \"new\": 1,"}}));
  absl::StatusOr<Manifest> m = ReadManifest(dir);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(Msg(m.status()), HasSubstr(file));
  EXPECT_THAT(Msg(m.status()), HasSubstr("format_version 2"));

  WriteText(file, good);
  EXPECT_TRUE(VerifyCheckpoint(dir).ok());
}

TEST_F(CheckpointTest, ManifestSizesThatDisagreeWithTheFilesOrModelAreRefused) {
  CheckpointLayout l = SmallLayout(16);
  std::string dir = WriteCheckpoint(l);
  std::string manifest_file = (fs::path(dir) / "MANIFEST.json").string();
  const std::string good = ReadText(manifest_file);

  // A self-consistent manifest (rows and bytes edited together) whose table file is smaller.
  WriteText(manifest_file, absl::StrReplaceAll(good, {{"\"rows\": 37, \"bytes\": 1184,",
                                                       "\"rows\": 38, \"bytes\": 1216,"}}));
  absl::StatusOr<Manifest> m = ReadManifest(dir);
  ASSERT_TRUE(m.ok()) << m.status();
  absl::Status st = VerifyCheckpoint(dir);
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(Msg(st), HasSubstr((fs::path(dir) / "table-001.rows").string()));
  EXPECT_THAT(Msg(st), HasSubstr("size is 1184 bytes, the manifest says 1216"));
  WriteText(manifest_file, good);

  // A good checkpoint that does not fit the model the caller expects.
  m = ReadManifest(dir);
  ASSERT_TRUE(m.ok());
  EXPECT_TRUE(CheckLayoutMatches(*m, l).ok());
  CheckpointLayout other = l;
  other.table_rows[2] = 6;
  st = CheckLayoutMatches(*m, other);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(Msg(st), HasSubstr(manifest_file));
  EXPECT_THAT(Msg(st), HasSubstr("tables[2].rows is 5 in the checkpoint, 6 expected"));
  other = l;
  other.dim = 8;
  other.payload_floats = 16;
  EXPECT_THAT(Msg(CheckLayoutMatches(*m, other)), HasSubstr("embedding_dim"));
  other = l;
  other.dense_state_floats[0] = 30;
  EXPECT_THAT(Msg(CheckLayoutMatches(*m, other)), HasSubstr("dense[0].state_floats"));
}

}  // namespace
}  // namespace ecps
