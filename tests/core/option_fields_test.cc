// SPDX-License-Identifier: Apache-2.0
// dspipe/option_fields.h: the lists name every field of their struct exactly once (the header's
// static_asserts check the count at build time; this test shows the count check fails for a
// list that misses a field, and that every listed member is a distinct field).
#include "dspipe/option_fields.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <tuple>

namespace dspipe {

struct Probe {
  int a = 1;
  std::string b;
  SamplerOptions nested;
  bool c = false;
};
template <>
struct OptionFields<Probe> {
  static constexpr std::string_view kName = "Probe";
  static constexpr auto kFields = std::make_tuple(Field("a", &Probe::a), Field("b", &Probe::b),
                                                  Field("nested", &Probe::nested));  // no c
};

namespace {

static_assert(option_fields_internal::CountFields<Probe>() == 4);
static_assert(!option_fields_internal::Complete<Probe>(), "c is missing: the build must fail");
static_assert(option_fields_internal::CountFields<LoaderOptions>() == 23);  // with mean_std
static_assert(EnumName(SampleOrder::kShards) == "shards");
static_assert(EnumName(MeanStdSource::kIdentity) == "identity");

// Every listed member of S is a distinct field at a distinct offset, and the names are unique.
template <class S>
void ExpectDistinct() {
  const S s{};
  std::set<std::string_view> names;
  std::set<const void*> addresses;
  ForEachOptionField<S>([&](const auto& f) {
    names.insert(f.name);
    addresses.insert(static_cast<const void*>(&(s.*(f.member))));
  });
  const size_t n = std::tuple_size_v<decltype(OptionFields<S>::kFields)>;
  EXPECT_EQ(names.size(), n) << OptionFields<S>::kName;
  EXPECT_EQ(addresses.size(), n) << OptionFields<S>::kName;
}

TEST(OptionFieldsTest, EveryListIsCompleteAndDistinct) {
  std::apply([](auto... s) { (ExpectDistinct<decltype(s)>(), ...); }, ListedOptionStructs{});
}

TEST(OptionFieldsTest, EnumNamesRoundTrip) {
  for (const auto& [name, value] : EnumNames<RemainderRule>::kValues) {
    RemainderRule r{};
    ASSERT_TRUE(ParseEnum(name, &r));
    EXPECT_EQ(r, value);
    EXPECT_EQ(EnumName(value), name);
  }
  OnError e{};
  EXPECT_FALSE(ParseEnum("ignore", &e));
}

}  // namespace
}  // namespace dspipe
