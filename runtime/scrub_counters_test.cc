#include "runtime/scrub_counters.h"

#include <set>
#include <string>

#include "gtest/gtest.h"

namespace ecps {
namespace {

using google::protobuf::FieldDescriptor;

// Every scrub_* field of ServerStats, by the proto's own descriptor: a counter added to the
// proto and forgotten in kScrubCounters fails here, not silently in a report.
std::set<std::string> ScrubFieldsOfTheProto() {
  std::set<std::string> names;
  const google::protobuf::Descriptor* d = v1::ServerStats::descriptor();
  for (int i = 0; i < d->field_count(); ++i) {
    const std::string name(d->field(i)->name());
    if (name.rfind("scrub_", 0) == 0) names.insert(name);
  }
  return names;
}

TEST(ScrubCountersTest, TheTableHoldsEveryScrubFieldOnce) {
  std::set<std::string> in_table;
  for (const ScrubCounter& c : kScrubCounters) {
    EXPECT_TRUE(in_table.insert(std::string("scrub_") + c.name).second) << c.name << " twice";
  }
  EXPECT_EQ(in_table, ScrubFieldsOfTheProto());
}

TEST(ScrubCountersTest, EachEntryReadsAndWritesTheFieldItNames) {
  const google::protobuf::Descriptor* d = v1::ServerStats::descriptor();
  for (const ScrubCounter& c : kScrubCounters) {
    const FieldDescriptor* field = d->FindFieldByName(std::string("scrub_") + c.name);
    ASSERT_NE(field, nullptr) << c.name;
    ASSERT_EQ(field->cpp_type(), FieldDescriptor::CPPTYPE_INT64) << c.name;
    v1::ServerStats s;
    (s.*c.set)(41);
    // Only that field moved, and the getter reads it.
    EXPECT_EQ(s.GetReflection()->GetInt64(s, field), 41) << c.name;
    EXPECT_EQ((s.*c.get)(), 41) << c.name;
    s.GetReflection()->SetInt64(&s, field, 0);
    EXPECT_EQ(s.ByteSizeLong(), 0u) << c.name << " wrote another field too";
  }
}

TEST(ScrubCountersTest, AddScrubCountsAddsTheScrubFieldsAndNothingElse) {
  v1::ServerStats from, into;
  const google::protobuf::Descriptor* d = v1::ServerStats::descriptor();
  int64_t value = 1;
  for (const std::string& name : ScrubFieldsOfTheProto()) {
    const FieldDescriptor* field = d->FindFieldByName(name);
    from.GetReflection()->SetInt64(&from, field, value);
    into.GetReflection()->SetInt64(&into, field, 100 * value);
    ++value;
  }
  from.set_bytes(7);  // a gauge: not a scrub count
  into.set_bytes(9);
  AddScrubCounts(from, &into);
  value = 1;
  for (const std::string& name : ScrubFieldsOfTheProto()) {
    EXPECT_EQ(into.GetReflection()->GetInt64(into, d->FindFieldByName(name)), 101 * value)
        << name;
    ++value;
  }
  EXPECT_EQ(into.bytes(), 9);
}

}  // namespace
}  // namespace ecps
