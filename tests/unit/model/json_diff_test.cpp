#include "batchsweep/json_diff.hpp"

#include <gtest/gtest.h>

namespace bsw {
namespace {

using nlohmann::json;

TEST(JsonDifference, EqualValuesHaveNone) {
  EXPECT_FALSE(
      first_difference(json::parse(R"({"a": [1, {"b": 2}]})"), json::parse(R"({"a": [1, {"b": 2}]})")));
}

TEST(JsonDifference, NamesThePathOfTheFirstDifferenceInKeyOrder) {
  const json a = json::parse(R"({"name": "m", "layers": [{"type": "linear", "out_features": 128}], "z": 1})");
  const json b =
      json::parse(R"({"name": "m", "layers": [{"type": "linear", "out_features": 4096}], "z": 2})");
  const auto d = first_difference(a, b, "settings.model");
  ASSERT_TRUE(d);
  EXPECT_EQ(d->where, "settings.model.layers[0].out_features");
  EXPECT_EQ(d->first, "128");
  EXPECT_EQ(d->second, "4096");
  // Without a root the path starts at the key.
  EXPECT_EQ(first_difference(a, b)->where, "layers[0].out_features");
}

TEST(JsonDifference, AKeyOnOneSideIsAbsentOnTheOther) {
  // "b" comes before "c" whichever side has it.
  const auto d =
      first_difference(json::parse(R"({"a": 1, "c": 3})"), json::parse(R"({"a": 1, "b": 2, "c": 4})"));
  ASSERT_TRUE(d);
  EXPECT_EQ(d->where, "b");
  EXPECT_FALSE(d->first);
  EXPECT_EQ(d->second, "2");
  const auto e = first_difference(json::parse(R"({"x": {"k": true}})"), json::parse(R"({"x": {}})"));
  ASSERT_TRUE(e);
  EXPECT_EQ(e->where, "x.k");
  EXPECT_EQ(e->first, "true");
  EXPECT_FALSE(e->second);
}

TEST(JsonDifference, ArraysThatAgreeAsFarAsTheShorterSayTheirLengths) {
  const auto d = first_difference(json::parse("[1, 2]"), json::parse("[1, 2, 3]"), "layers");
  ASSERT_TRUE(d);
  EXPECT_EQ(d->where, "layers");
  EXPECT_EQ(d->first, "2 entries");
  EXPECT_EQ(d->second, "3 entries");
  EXPECT_EQ(first_difference(json::parse("[1]"), json::parse("[1, 2]"))->first, "1 entry");
}

TEST(JsonDifference, ValuesOfOtherTypesDifferAtTheirPathAndLongOnesAreCut) {
  const auto d =
      first_difference(json::parse(R"({"a": [1]})"), json::parse(R"({"a": "abcdefghijklmnop"})"), "", 10);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->where, "a");
  EXPECT_EQ(d->first, "[1]");
  EXPECT_EQ(d->second, "\"abcdef...");
  EXPECT_EQ(d->second->size(), 10u);
  EXPECT_EQ(first_difference(json(1), json(2))->where, "");
}

}  // namespace
}  // namespace bsw
