#include "worker/data.h"

#include <sys/stat.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ecps {
namespace {

const std::string kDataDir = ECPS_TEST_DATA_DIR;

ModelSection CriteoModel(int64_t rows = 1000) {
  ModelSection m;
  m.table_rows.assign(26, rows);
  return m;
}

DataSection CriteoData(DataSourceType source, const std::string& file) {
  DataSection d;
  d.source = source;
  d.paths = {kDataDir + "/" + file};
  d.eval_fraction = 0;
  return d;
}

// Reads a whole partition in batches of `bs`.
Batch ReadAll(DataSource* src, int bs = 7) {
  Batch all, b;
  while (true) {
    auto more = src->Next(bs, &b);
    EXPECT_TRUE(more.ok()) << more.status();
    if (!more.ok()) break;
    all.size += b.size;
    all.dense.insert(all.dense.end(), b.dense.begin(), b.dense.end());
    all.sparse.insert(all.sparse.end(), b.sparse.begin(), b.sparse.end());
    all.labels.insert(all.labels.end(), b.labels.begin(), b.labels.end());
    if (!*more) break;
  }
  return all;
}

float L(double x) { return static_cast<float>(std::log1p(x)); }

TEST(CriteoReader, TsvRowsParseToTheRightValues) {
  auto src = MakeDataSource(CriteoData(DataSourceType::kCriteoTsv, "criteo_sample.tsv"),
                            CriteoModel(), 1, 0, 1, false);
  ASSERT_TRUE(src.ok()) << src.status();
  Batch all = ReadAll(src->get());
  ASSERT_EQ(all.size, 200);
  EXPECT_EQ((*src)->bad_lines(), 0);
  // Line 1: 0, I1 '', I2 3, I3 260, I4 '', I5 17668, I6/I7 '', I8 33, I9-I11 '', I12 0, I13 ''.
  EXPECT_EQ(all.labels[0], 0.0f);
  const std::vector<float> row1 = {0, L(3), L(260), 0, L(17668), 0, 0, L(33), 0, 0, 0, 0, 0};
  for (int j = 0; j < 13; ++j) EXPECT_FLOAT_EQ(all.dense[j], row1[j]) << "I" << j + 1;
  EXPECT_EQ(all.sparse[0], CriteoRowId(0x05db9164, 0, 1000));    // C1
  EXPECT_EQ(all.sparse[17], CriteoRowId(0x87c6f83c, 17, 1000));  // C18
  EXPECT_EQ(all.sparse[18], 0);                                  // C19 missing
  EXPECT_EQ(all.sparse[20], CriteoRowId(0x0429f84b, 20, 1000));  // C21
  EXPECT_EQ(all.sparse[25], 0);                                  // C26 missing
  // Line 2: I2 = -1 clamps to 0; I3 19.
  EXPECT_FLOAT_EQ(all.dense[13 + 1], 0.0f);
  EXPECT_FLOAT_EQ(all.dense[13 + 2], L(19));
  // Line 8: the first positive; I1 19, I13 2, C26 2fede552.
  EXPECT_EQ(all.labels[7], 1.0f);
  EXPECT_FLOAT_EQ(all.dense[7 * 13 + 0], L(19));
  EXPECT_FLOAT_EQ(all.dense[7 * 13 + 11], 0.0f);
  EXPECT_FLOAT_EQ(all.dense[7 * 13 + 12], L(2));
  EXPECT_EQ(all.sparse[7 * 26 + 25], CriteoRowId(0x2fede552, 25, 1000));
  int positives = 0;
  for (float y : all.labels) positives += y == 1.0f;
  EXPECT_EQ(positives, 49);
  for (int64_t id : all.sparse) {
    EXPECT_GE(id, 0);
    EXPECT_LT(id, 1000);
  }
}

TEST(CriteoReader, CsvAndTsvGiveIdenticalBatches) {
  auto tsv = MakeDataSource(CriteoData(DataSourceType::kCriteoTsv, "criteo_sample.tsv"),
                            CriteoModel(), 1, 0, 1, false);
  auto csv = MakeDataSource(CriteoData(DataSourceType::kCriteoCsv, "criteo_sample.txt"),
                            CriteoModel(), 1, 0, 1, false);
  ASSERT_TRUE(tsv.ok() && csv.ok());
  Batch a, b;
  int total = 0;
  while (true) {
    auto ma = (*tsv)->Next(64, &a);
    auto mb = (*csv)->Next(64, &b);
    ASSERT_TRUE(ma.ok() && mb.ok());
    ASSERT_EQ(a.size, b.size);
    EXPECT_EQ(a.dense, b.dense);
    EXPECT_EQ(a.sparse, b.sparse);
    EXPECT_EQ(a.labels, b.labels);
    total += a.size;
    ASSERT_EQ(*ma, *mb);
    if (!*ma) break;
  }
  EXPECT_EQ(total, 200);
}

TEST(CriteoReader, SplitsPartitionsAndSeek) {
  DataSection d = CriteoData(DataSourceType::kCriteoTsv, "criteo_sample.tsv");
  auto full = MakeDataSource(d, CriteoModel(), 1, 0, 1, false);
  ASSERT_TRUE(full.ok());
  Batch all = ReadAll(full->get());
  d.eval_fraction = 0.05;  // every 20th line (r % 20 == 19) is held out
  auto train = MakeDataSource(d, CriteoModel(), 1, 0, 1, false);
  auto eval = MakeDataSource(d, CriteoModel(), 1, 0, 1, true);
  ASSERT_TRUE(train.ok() && eval.ok());
  Batch tr = ReadAll(train->get()), ev = ReadAll(eval->get());
  EXPECT_EQ(tr.size, 190);
  EXPECT_EQ(ev.size, 10);
  EXPECT_EQ(ev.labels[0], all.labels[19]);
  EXPECT_TRUE(std::equal(ev.sparse.begin(), ev.sparse.begin() + 26, all.sparse.begin() + 19 * 26));
  // Two partitions of the training split: partition 1 gets train lines 1, 3, 5, ...
  auto p1 = MakeDataSource(d, CriteoModel(), 1, 1, 2, false);
  ASSERT_TRUE(p1.ok());
  Batch b1 = ReadAll(p1->get());
  EXPECT_EQ(b1.size, 95);
  EXPECT_TRUE(std::equal(b1.sparse.begin(), b1.sparse.begin() + 26, tr.sparse.begin() + 26));
  EXPECT_TRUE(
      std::equal(b1.sparse.begin() + 26, b1.sparse.begin() + 52, tr.sparse.begin() + 3 * 26));
  // Seek: resume after 2 batches of 16 in a fresh source.
  auto a = MakeDataSource(d, CriteoModel(), 1, 1, 2, false);
  Batch x, y;
  ASSERT_TRUE((*a)->Next(16, &x).ok());
  ASSERT_TRUE((*a)->Next(16, &x).ok());
  const int64_t pos = (*a)->position();
  EXPECT_EQ(pos, 32);
  ASSERT_TRUE((*a)->Next(16, &x).ok());
  auto c = MakeDataSource(d, CriteoModel(), 1, 1, 2, false);
  ASSERT_TRUE((*c)->Seek(pos).ok());
  ASSERT_TRUE((*c)->Next(16, &y).ok());
  EXPECT_EQ(x.sparse, y.sparse);
  EXPECT_EQ(x.dense, y.dense);
  EXPECT_FALSE((*c)->Seek(1000).ok());
  // max_samples caps the partition.
  auto capped = MakeDataSource(d, CriteoModel(), 1, 0, 1, true, 4);
  EXPECT_EQ(ReadAll(capped->get()).size, 4);
}

class MalformedInput : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = ::testing::TempDir() + "/ecps_bad_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".tsv";
    std::ifstream in(kDataDir + "/criteo_sample.tsv");
    std::vector<std::string> lines;
    std::string l;
    while (std::getline(in, l)) lines.push_back(l);
    ASSERT_GE(lines.size(), 6u) << "cannot read " << kDataDir << "/criteo_sample.tsv";
    std::ofstream out(path_);
    out << lines[0] << "\n";  // line 1 good
    out << "0\t1\t2\n";       // line 2: 3 columns
    out << lines[1] << "\n";  // line 3 good
    std::string bad_int = lines[2];
    bad_int.replace(bad_int.find('\t', 2) + 1, 0, "x");  // line 4: I2 'x0'
    out << bad_int << "\n";
    std::string bad_hex = lines[3];
    bad_hex.replace(bad_hex.find("05db9164"), 8, "05dz9164");  // line 5: bad hex in C1
    out << bad_hex << "\n";
    std::string bad_label = lines[4];
    bad_label[0] = '7';  // line 6: label 7
    out << bad_label << "\n";
    out << lines[5] << "\r\n";  // line 7 good (CRLF)
  }
  void TearDown() override { std::remove(path_.c_str()); }
  std::string path_;
};

TEST_F(MalformedInput, CountedAndReportedWithFileAndLine) {
  DataSection d;
  d.source = DataSourceType::kCriteoTsv;
  d.paths = {path_};
  d.eval_fraction = 0;
  d.max_bad_lines = 10;
  auto src = MakeDataSource(d, CriteoModel(), 1, 0, 1, false);
  ASSERT_TRUE(src.ok());
  Batch all = ReadAll(src->get());
  EXPECT_EQ(all.size, 3);
  EXPECT_EQ((*src)->bad_lines(), 4);
  EXPECT_EQ((*src)->position(), 7);
  auto ex = (*src)->bad_line_examples();
  ASSERT_EQ(ex.size(), 4u);
  EXPECT_THAT(ex[0], ::testing::StartsWith(path_ + ":2: expected 40 columns, found 3"));
  EXPECT_THAT(ex[1], ::testing::StartsWith(path_ + ":4: I2"));
  EXPECT_THAT(ex[2], ::testing::StartsWith(path_ + ":5: C1 '05dz9164'"));
  EXPECT_THAT(ex[3], ::testing::StartsWith(path_ + ":6: label"));
}

TEST_F(MalformedInput, PastMaxBadLinesIsAnError) {
  DataSection d;
  d.source = DataSourceType::kCriteoTsv;
  d.paths = {path_};
  d.eval_fraction = 0;
  d.max_bad_lines = 2;
  auto src = MakeDataSource(d, CriteoModel(), 1, 0, 1, false);
  ASSERT_TRUE(src.ok());
  Batch b;
  auto r = (*src)->Next(100, &b);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), ::testing::HasSubstr(path_ + ":5:"));
  EXPECT_THAT(std::string(r.status().message()), ::testing::HasSubstr("max_bad_lines"));
}

TEST(CriteoReader, ConfigurationErrors) {
  DataSection d = CriteoData(DataSourceType::kCriteoTsv, "no_such_file.tsv");
  EXPECT_EQ(MakeDataSource(d, CriteoModel(), 1, 0, 1, false).status().code(),
            absl::StatusCode::kInvalidArgument);
  d = CriteoData(DataSourceType::kCriteoTsv, "criteo_sample.tsv");
  ModelSection m = CriteoModel();
  m.table_rows.pop_back();
  EXPECT_EQ(MakeDataSource(d, m, 1, 0, 1, false).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MakeDataSource(d, CriteoModel(), 1, 2, 2, false).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Files that are not Criteo data are refused when the source is made, before any training,
// with INVALID_ARGUMENT naming the file and what is wrong with it.
class DataFileChecks : public ::testing::Test {
 protected:
  void TearDown() override {
    for (const std::string& p : written_) std::remove(p.c_str());
  }
  // A file of the test's own in the temp folder holding `content` (bytes, NULs included).
  std::string Write(const std::string& name, const std::string& content) {
    const std::string path = ::testing::TempDir() + "/ecps_check_" +
                             ::testing::UnitTest::GetInstance()->current_test_info()->name() + "_" +
                             name;
    std::ofstream(path, std::ios::binary) << content;
    written_.push_back(path);
    return path;
  }
  static absl::Status Open(const std::string& path,
                           DataSourceType source = DataSourceType::kCriteoTsv) {
    DataSection d;
    d.source = source;
    d.paths = {path};
    d.eval_fraction = 0;
    return MakeDataSource(d, CriteoModel(), 1, 0, 1, false).status();
  }
  // Expects `path` refused with INVALID_ARGUMENT, the message naming it and saying `what`.
  static void ExpectRefused(const std::string& path, const std::string& what,
                            DataSourceType source = DataSourceType::kCriteoTsv) {
    const absl::Status s = Open(path, source);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << path << ": " << s;
    EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("data.paths: " + path)) << s;
    EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr(what)) << s;
  }
  static std::string SampleLine(int i) {
    std::ifstream in(kDataDir + "/criteo_sample.tsv");
    std::string l;
    for (int k = 0; k <= i; ++k) std::getline(in, l);
    return l;
  }
  std::vector<std::string> written_;
};

TEST_F(DataFileChecks, NotARegularFile) {
  ExpectRefused(::testing::TempDir() + "/ecps_no_such_file.tsv", "does not exist");
  const std::string dir = ::testing::TempDir();
  ExpectRefused(dir, "is a directory");
  const std::string fifo = dir + "/ecps_check_fifo";
  std::remove(fifo.c_str());
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  written_.push_back(fifo);
  ExpectRefused(fifo, "is a FIFO, not a regular file");  // and returns: it does not open it
  ExpectRefused("/dev/null", "is a character device, not a regular file");
}

TEST_F(DataFileChecks, CompressedFiles) {
  const std::string rest = "\x01\x02 some compressed bytes";
  ExpectRefused(Write("a.tsv.gz", std::string("\x1f\x8b\x08\x00", 4) + rest),
                "is gzip-compressed: decompress it first");
  ExpectRefused(Write("a.tsv.bz2", "BZh91AY&SY" + rest), "is bzip2-compressed: decompress");
  ExpectRefused(Write("a.tsv.xz", std::string("\xfd\x37\x7a\x58\x5a\x00\x00\x04", 8) + rest),
                "is xz-compressed: decompress");
  ExpectRefused(Write("a.tsv.zst", "\x28\xb5\x2f\xfd" + rest), "is zstd-compressed: decompress");
  ExpectRefused(Write("a.zip", "PK\x03\x04" + rest), "is a zip archive: extract it first");
  // The CSV form is checked the same way (its header skip does not hide the magic).
  ExpectRefused(Write("b.csv.gz", std::string("\x1f\x8b\x08\x00", 4) + rest), "is gzip-compressed",
                DataSourceType::kCriteoCsv);
}

TEST_F(DataFileChecks, BinaryFiles) {
  // A real program, and a file that is mostly NUL bytes after a valid line.
  ExpectRefused("/bin/ls", "is a binary file (an ELF executable or library)");
  ExpectRefused(Write("nul.tsv", SampleLine(0) + "\n" + std::string(3000, '\0')),
                "% of its first");
  // No NUL, but mostly bytes that are not text (here 0x80-0xff and control bytes).
  std::string noise;
  for (int i = 0; i < 2000; ++i) noise += static_cast<char>(i % 2 ? 0x80 + i % 128 : 1 + i % 8);
  ExpectRefused(Write("noise.tsv", "0\t1\t2\n" + noise), "% of its first");
}

// The finding: a file whose 14th line held a NUL byte was refused whole as binary. Such a
// line is one malformed line: the file opens, the line is skipped and named, and it counts
// against data.max_bad_lines like any other.
TEST_F(DataFileChecks, ALineWithANulByteIsOneMalformedLine) {
  std::string content;
  for (int i = 0; i < 20; ++i) {
    std::string line = SampleLine(i);
    if (i == 13) line[0] = '\0';  // line 14: its label
    content += line + "\n";
  }
  const std::string path = Write("nul_line.tsv", content);
  auto read_all = [&](int max_bad_lines, int64_t* samples) -> absl::Status {
    DataSection d;
    d.source = DataSourceType::kCriteoTsv;
    d.paths = {path};
    d.eval_fraction = 0;
    d.max_bad_lines = max_bad_lines;
    auto source = MakeDataSource(d, CriteoModel(), 1, 0, 1, false);
    if (!source.ok()) return source.status();
    Batch batch;
    *samples = 0;
    while (true) {
      absl::StatusOr<bool> more = (*source)->Next(8, &batch);
      if (!more.ok()) return more.status();
      *samples += batch.size;
      if (!*more) break;
    }
    EXPECT_EQ((*source)->bad_lines(), 1);
    EXPECT_THAT((*source)->bad_line_examples(),
                ::testing::ElementsAre(::testing::StartsWith(path + ":14: ")));
    return absl::OkStatus();
  };
  int64_t samples = 0;
  ASSERT_TRUE(read_all(1, &samples).ok());
  EXPECT_EQ(samples, 19);
  const absl::Status below = read_all(0, &samples);
  EXPECT_EQ(below.code(), absl::StatusCode::kInvalidArgument) << below;
  EXPECT_THAT(std::string(below.message()), ::testing::HasSubstr(path + ":14: ")) << below;
  EXPECT_THAT(std::string(below.message()), ::testing::HasSubstr("\\x00")) << below;
  EXPECT_THAT(std::string(below.message()), ::testing::HasSubstr("data.max_bad_lines = 0"))
      << below;
}

TEST_F(DataFileChecks, FilesWithoutDataRows) {
  ExpectRefused(Write("empty.tsv", ""), "is empty: it has no data rows");
  ExpectRefused(Write("empty.csv", ""), "is empty", DataSourceType::kCriteoCsv);
  std::ifstream in(kDataDir + "/criteo_sample.txt");
  std::string header;
  std::getline(in, header);
  ASSERT_EQ(header.rfind("label,", 0), 0u);
  ExpectRefused(Write("header.csv", header + "\n"), "has no data rows (only a header line)",
                DataSourceType::kCriteoCsv);
  ExpectRefused(Write("blank.tsv", "\n\r\n\n"), "has no data rows (only blank lines)");
  ExpectRefused(Write("blank.csv", "\n\n"), "has no data rows (only blank lines)",
                DataSourceType::kCriteoCsv);
}

TEST_F(DataFileChecks, TextThatIsNotCriteoData) {
  // /etc/shadow is readable as root: text of one column a line, none of them a sample.
  const std::string shadow =
      "root:$6$Zq0x$kW1wJ8eWb3sVqTqN9fG0t/:19745:0:99999:7:::\n"
      "daemon:*:19745:0:99999:7:::\n"
      "bin:*:19745:0:99999:7:::\n"
      "sys:*:19745:0:99999:7:::\n";
  ExpectRefused(Write("shadow", shadow),
                "is not criteo_tsv data: none of its 4 lines parse (line 1: expected 40 "
                "columns, found 1)");
  // As CSV its first line reads as a header; the other three still do not parse.
  ExpectRefused(Write("shadow.csv", shadow), "is not criteo_csv data: none of its 3 lines parse",
                DataSourceType::kCriteoCsv);
  // A long file is judged on its first 100 data lines.
  std::string many;
  for (int i = 0; i < 150; ++i) many += "not criteo\n";
  many += SampleLine(0) + "\n";
  ExpectRefused(Write("long.txt", many), "none of its first 100 lines parse");
  // The other form's file: the message suggests the other source.
  ExpectRefused(kDataDir + "/criteo_sample.txt", "data.source criteo_csv?");
  ExpectRefused(kDataDir + "/criteo_sample.tsv", "data.source criteo_tsv?",
                DataSourceType::kCriteoCsv);
}

TEST_F(DataFileChecks, SomeMalformedLinesBeforeTheFirstGoodOneAreAccepted) {
  // The check wants one parsing line among the first 100; the rest is data.max_bad_lines'.
  const std::string path =
      Write("late.tsv", "junk\n0\t1\n\n" + SampleLine(0) + "\n" + SampleLine(1) + "\n");
  DataSection d;
  d.source = DataSourceType::kCriteoTsv;
  d.paths = {path};
  d.eval_fraction = 0;
  auto src = MakeDataSource(d, CriteoModel(), 1, 0, 1, false);
  ASSERT_TRUE(src.ok()) << src.status();
  EXPECT_EQ(ReadAll(src->get()).size, 2);
  EXPECT_EQ((*src)->bad_lines(), 3);  // the blank line is malformed when read, as before
}

TEST_F(DataFileChecks, EveryFileOfTheListIsChecked) {
  DataSection d;
  d.source = DataSourceType::kCriteoTsv;
  d.paths = {kDataDir + "/criteo_sample.tsv", Write("second.tsv", "")};
  d.eval_fraction = 0;
  const absl::Status s = MakeDataSource(d, CriteoModel(), 1, 0, 1, false).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr(d.paths[1] + " is empty"));
}

// An integer column past int64 is a malformed line naming the column; floats written for
// integers ("260.0") and the ends of the range still parse.
TEST_F(DataFileChecks, IntegersPastInt64AreMalformed) {
  const std::string good = SampleLine(0);  // I3 (the third field after the label) is 260
  auto with_i3 = [&good](const std::string& v) {
    std::string l = good;
    const size_t a = l.find('\t', l.find('\t', l.find('\t') + 1) + 1) + 1;  // start of I3
    l.replace(a, l.find('\t', a) - a, v);
    return l + "\n";
  };
  ASSERT_EQ(with_i3("260"), good + "\n");
  const std::vector<std::string> accepted = {
      "260.0", "9223372036854775807", "9223372036854775807.0", "-9223372036854775808", "1e18",
      "1e-400"};
  const std::vector<std::string> refused = {"9223372036854775808",
                                            "-9223372036854775809",
                                            "99999999999999999999",
                                            "99999999999999999999.0",
                                            "1e19",
                                            "-1e19",
                                            "1e400"};
  // Not a number at all, however long its digits run.
  const std::string not_a_number = "99999999999999999999x";
  std::string content = good + "\n";
  for (const std::string& v : accepted) content += with_i3(v);
  for (const std::string& v : refused) content += with_i3(v);
  DataSection d;
  d.source = DataSourceType::kCriteoTsv;
  d.paths = {Write("int64.tsv", content)};
  d.eval_fraction = 0;
  d.max_bad_lines = 100;
  auto src = MakeDataSource(d, CriteoModel(), 1, 0, 1, false);
  ASSERT_TRUE(src.ok()) << src.status();
  Batch all = ReadAll(src->get());
  ASSERT_EQ(all.size, 1 + static_cast<int>(accepted.size()));
  EXPECT_FLOAT_EQ(all.dense[13 + 2], L(260));
  EXPECT_FLOAT_EQ(all.dense[2 * 13 + 2], L(9223372036854775807.0));
  EXPECT_FLOAT_EQ(all.dense[4 * 13 + 2], 0.0f);  // negative: clamped to 0
  EXPECT_FLOAT_EQ(all.dense[5 * 13 + 2], L(1e18));
  EXPECT_FLOAT_EQ(all.dense[6 * 13 + 2], 0.0f);  // 1e-400 underflows to 0
  EXPECT_EQ((*src)->bad_lines(), static_cast<int64_t>(refused.size()));
  const auto ex = (*src)->bad_line_examples();
  ASSERT_EQ(ex.size(), 5u);  // the first five are kept
  // The first refused line's number.
  const int first = 2 + static_cast<int>(accepted.size());
  for (size_t i = 0; i < ex.size(); ++i) {
    EXPECT_EQ(ex[i], d.paths[0] + ":" + std::to_string(first + i) + ": I3 '" + refused[i] +
                         "' is past the 64-bit integer range");
  }
  d.paths = {Write("nan.tsv", good + "\n" + with_i3(not_a_number))};
  src = MakeDataSource(d, CriteoModel(), 1, 0, 1, false);
  ASSERT_TRUE(src.ok()) << src.status();
  EXPECT_EQ(ReadAll(src->get()).size, 1);
  ASSERT_EQ((*src)->bad_line_examples().size(), 1u);
  EXPECT_EQ((*src)->bad_line_examples()[0],
            d.paths[0] + ":2: I3 '" + not_a_number + "' is not a number");
}

TEST_F(DataFileChecks, CategoricalsPast64BitsAreMalformed) {
  std::string longer = SampleLine(1), not_hex = SampleLine(2);
  longer.replace(longer.find("68fd1e64"), 8, "168fd1e6468fd1e64");  // C1: 17 hex digits
  not_hex.replace(not_hex.find("05db9164"), 8, "05db9164zz");       // C1
  DataSection d;
  d.source = DataSourceType::kCriteoTsv;
  d.paths = {Write("hex.tsv", SampleLine(0) + "\n" + longer + "\n" + not_hex + "\n")};
  d.eval_fraction = 0;
  auto src = MakeDataSource(d, CriteoModel(), 1, 0, 1, false);
  ASSERT_TRUE(src.ok()) << src.status();
  EXPECT_EQ(ReadAll(src->get()).size, 1);
  const auto ex = (*src)->bad_line_examples();
  ASSERT_EQ(ex.size(), 2u);
  EXPECT_EQ(ex[0], d.paths[0] +
                       ":2: C1 '168fd1e6468fd1e64' has more than 16 hex digits (a "
                       "categorical is at most 64 bits)");
  EXPECT_EQ(ex[1], d.paths[0] + ":3: C1 '05db9164zz' is not hexadecimal");
}

TEST_F(DataFileChecks, ReasonsQuoteFieldsAsPrintableAscii) {
  // Reasons travel in protobuf strings (valid UTF-8 only) and end on a terminal.
  std::string bad = SampleLine(1);
  bad.replace(bad.find('\t', 2) + 1, 0, "\xff\x01" + std::string(40, 'x'));  // I2
  DataSection d;
  d.source = DataSourceType::kCriteoTsv;
  d.paths = {Write("bytes.tsv", SampleLine(0) + "\n" + bad + "\n")};
  d.eval_fraction = 0;
  auto src = MakeDataSource(d, CriteoModel(), 1, 0, 1, false);
  ASSERT_TRUE(src.ok()) << src.status();
  ReadAll(src->get());
  const auto ex = (*src)->bad_line_examples();
  ASSERT_EQ(ex.size(), 1u);
  EXPECT_EQ(ex[0],
            d.paths[0] + ":2: I2 '\\xff\\x01" + std::string(30, 'x') + "'... is not a number");
}

}  // namespace
}  // namespace ecps
