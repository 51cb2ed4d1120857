// The --batch grammar and byte sizes: a table of good inputs with their expansion, and every error the parser
// names (flag and item).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "batchsweep/errors.hpp"
#include "batchsweep/sweep.hpp"

namespace bsw {
namespace {

struct GoodCase {
  std::string text;
  std::vector<int64_t> batches;
};

class BatchGrammarGood : public ::testing::TestWithParam<GoodCase> {};

TEST_P(BatchGrammarGood, ExpandsSortedAndUnique) {
  const BatchSpec spec = parse_batch_spec(GetParam().text, "--batch");
  EXPECT_FALSE(spec.auto_search);
  EXPECT_EQ(spec.batches, GetParam().batches) << GetParam().text;
}

INSTANTIATE_TEST_SUITE_P(
    Table, BatchGrammarGood,
    ::testing::Values(GoodCase{"64", {64}}, GoodCase{"1,8,64", {1, 8, 64}}, GoodCase{"64,8,1,8", {1, 8, 64}},
                      GoodCase{" 1 , 8 ", {1, 8}}, GoodCase{"8:32:+8", {8, 16, 24, 32}},
                      GoodCase{"8:30:+8", {8, 16, 24}},  // stop not landed on: not included
                      GoodCase{"1:16:*2", {1, 2, 4, 8, 16}}, GoodCase{"1:20:*3", {1, 3, 9}},
                      GoodCase{"16:128", {16, 32, 64, 128}},  // default factor *2
                      GoodCase{"5:5", {5}}, GoodCase{"4:4:+1", {4}},
                      GoodCase{"1,2:8:*2,6,8:12:+2", {1, 2, 4, 6, 8, 10, 12}}, GoodCase{"1e3", {1000}},
                      GoodCase{"16777216", {16777216}},
                      GoodCase{"1:16777216:*2",
                               [] {
                                 std::vector<int64_t> v;
                                 for (int64_t b = 1; b <= (int64_t{1} << 24); b *= 2) v.push_back(b);
                                 return v;
                               }()},
                      GoodCase{"1:4096:+1", [] {
                                 std::vector<int64_t> v;
                                 for (int64_t b = 1; b <= 4096; ++b) v.push_back(b);
                                 return v;
                               }()}));

TEST(BatchGrammar, AutoAlone) {
  const BatchSpec spec = parse_batch_spec(" auto ", "--batch");
  EXPECT_TRUE(spec.auto_search);
  EXPECT_TRUE(spec.batches.empty());
  EXPECT_EQ(spec.text, "auto");
}

struct BadCase {
  std::string text;
  std::string expected;  // a piece of the message besides the flag and the item
  std::string item;      // the item the message must quote
};

class BatchGrammarBad : public ::testing::TestWithParam<BadCase> {};

TEST_P(BatchGrammarBad, UsageErrorNamesFlagAndItem) {
  try {
    (void)parse_batch_spec(GetParam().text, "--batch");
    FAIL() << "accepted '" << GetParam().text << "'";
  } catch (const UsageError& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.rfind("--batch: ", 0), 0u) << message;
    EXPECT_NE(message.find(GetParam().expected), std::string::npos) << message;
    EXPECT_NE(message.find("'" + GetParam().item + "'"), std::string::npos) << message;
    EXPECT_EQ(e.exit_code(), kExitUsage);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Table, BatchGrammarBad,
    ::testing::Values(BadCase{"0", "below the minimum 1", "0"}, BadCase{"-4", "below the minimum 1", "-4"},
                      BadCase{"8,-4", "below the minimum 1", "-4"},
                      BadCase{"8:2", "stop 2 is below start 8", "8:2"},
                      BadCase{"abc", "not an integer", "abc"}, BadCase{"1.5", "not an integer", "1.5"},
                      BadCase{"AUTO", "did you mean auto (lower case)?", "AUTO"},
                      BadCase{"1,,8", "empty item", ""}, BadCase{"1,", "empty item", ""},
                      BadCase{"1:8:*1", "below the minimum 2", "1:8:*1"},
                      BadCase{"1:8:+0", "below the minimum 1", "1:8:+0"},
                      BadCase{"1:8:2",
                              "must start with + (arithmetic) or * (geometric): 1:8:*2 multiplies by 2, "
                              "1:8:+2 adds 2",
                              "1:8:2"},
                      BadCase{"1:8:", "step is missing", "1:8:"},
                      BadCase{"1:", "the range's stop is missing (start:stop)", "1:"},
                      BadCase{" :8", "the range's start is missing (start:stop)", ":8"},
                      BadCase{"1:2:3:4", "a range is", "1:2:3:4"},
                      BadCase{"1:1e9", "above the maximum 16777216 (2^24)", "1:1e9"},
                      BadCase{"16777217", "above the maximum 16777216 (2^24)", "16777217"},
                      BadCase{"99999999999999999999999", "above the maximum", "99999999999999999999999"},
                      BadCase{"auto,8", "cannot be combined", "auto"},
                      BadCase{"1:5000:+1", "more than 4096 batches", "1:5000:+1"},
                      BadCase{"1:16777216:+1", "more than 4096 batches", "1:16777216:+1"}));

TEST(BatchGrammar, EmptyListNamesTheFlag) {
  EXPECT_THROW((void)parse_batch_spec("", "--batch"), UsageError);
  try {
    (void)parse_batch_spec("  ", "--sweep-batch");
  } catch (const UsageError& e) {
    EXPECT_STREQ(e.what(), "--sweep-batch: the batch list is empty");
  }
}

TEST(BatchGrammar, TooManyBatchesAcrossItems) {
  // Each item alone is fine; together, after de-duplication, more than 4096 batches remain.
  try {
    (void)parse_batch_spec("1:4000:+1,5000:6000:+1", "--batch");
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("more than 4096 batches"), std::string::npos) << e.what();
  }
  // Overlapping items de-duplicate to at most 4096 and pass.
  EXPECT_EQ(parse_batch_spec("1:4096:+1,1:4096:+2", "--batch").batches.size(), 4096u);
}

struct SizeCase {
  std::string text;
  uint64_t bytes;
};

class SizeGood : public ::testing::TestWithParam<SizeCase> {};

TEST_P(SizeGood, Parses) {
  EXPECT_EQ(parse_size(GetParam().text, "--memory-limit"), GetParam().bytes);
}

INSTANTIATE_TEST_SUITE_P(
    Table, SizeGood,
    ::testing::Values(SizeCase{"4096B", 4096}, SizeCase{"1048576", 1ULL << 20},
                      SizeCase{"24GiB", 24ULL << 30}, SizeCase{"80GB", 80'000'000'000ULL},
                      SizeCase{"512MiB", 512ULL << 20}, SizeCase{"1.5TiB", 3ULL << 39},
                      SizeCase{"24 gib", 24ULL << 30}, SizeCase{"1KB", 1000}, SizeCase{"1kib", 1024},
                      SizeCase{"100B", 100}, SizeCase{"0.5KiB", 512}, SizeCase{"1.3GB", 1'300'000'000ULL},
                      SizeCase{"1e9", 1'000'000'000ULL}, SizeCase{"1.5e+10", 15'000'000'000ULL},
                      SizeCase{"1E3B", 1000}, SizeCase{"2e3MiB", 2000ULL << 20},
                      SizeCase{"1e005GB", 100'000'000'000'000ULL}, SizeCase{"1e0000000009", 1'000'000'000ULL},
                      SizeCase{"1.8e19", 18'000'000'000'000'000'000ULL}));

TEST(Size, RoundsFractionsToTheNearestByte) {
  EXPECT_EQ(parse_size("0.1KiB", "--memory-limit"), 102u);  // 102.4
  EXPECT_EQ(parse_size("1.0009765625KiB", "--memory-limit"), 1025u);
  EXPECT_EQ(parse_size("18446744073709551615", "--memory-limit"), UINT64_MAX);
}

struct SizeBad {
  std::string text;
  std::string expected;
};

class SizeErrors : public ::testing::TestWithParam<SizeBad> {};

TEST_P(SizeErrors, UsageErrorNamesFlag) {
  try {
    (void)parse_size(GetParam().text, "--memory-limit");
    FAIL() << "accepted '" << GetParam().text << "'";
  } catch (const UsageError& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.rfind("--memory-limit: invalid size", 0), 0u) << message;
    EXPECT_NE(message.find(GetParam().expected), std::string::npos) << message;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Table, SizeErrors,
    ::testing::Values(
        SizeBad{"12XB", "unknown unit 'XB'"}, SizeBad{"", "empty"},
        SizeBad{"GiB", "does not start with a number"}, SizeBad{"-1GiB", "negative"},
        SizeBad{"0", "at least 1 byte"}, SizeBad{"0.0001KB", "at least 1 byte"},
        SizeBad{"1.5", "not a whole number of bytes"},
        SizeBad{"24", "a number without a unit is bytes; write 24GiB (or 24B if bytes are meant)"},
        SizeBad{"1048575", "1048575 B is under a MiB; give it a unit (1048575B if bytes are meant)"},
        SizeBad{"2.5B", "not a whole number of bytes"},
        SizeBad{"18446744073709551616", "does not fit in 64 bits"},
        SizeBad{"16384PiB", "does not fit in 64 bits"}, SizeBad{"1.2.3GiB", "more than one decimal point"},
        SizeBad{"80,5GiB", "a decimal comma: write 80.5GiB"},
        SizeBad{"1,024MiB", "a comma: write 1024MiB (thousands) or 1.024MiB (a decimal)"},
        SizeBad{"80Gb", "'Gb' is bits (a capital prefix and a lower-case b"},
        SizeBad{"40G",
                "'G' could be binary or decimal: write 40GiB (powers of 2, as CUDA and docker count) or "
                "40GB (powers of 10, as a datasheet does)"},
        SizeBad{"512m", "'m' could be binary or decimal: write 512MiB"},
        SizeBad{"1Mib",
                "'Mib' is bits (a capital prefix and a lower-case b, as network speeds are written); sizes "
                "are in bytes: MiB"},
        SizeBad{"1e20", "does not fit in 64 bits"}, SizeBad{"1e100", "does not fit in 64 bits"},
        SizeBad{"2e19", "does not fit in 64 bits"}, SizeBad{"1e", "unknown unit 'e'"},
        SizeBad{"1e-3GiB", "a negative exponent (write it as a decimal: 0.001GiB)"},
        SizeBad{"5e-1TiB", "a negative exponent (write it as a decimal: 0.5TiB)"},
        SizeBad{"1.25e-2 GiB", "(write it as a decimal: 0.0125 GiB)"},
        SizeBad{"25e-1GiB", "(write it as a decimal: 2.5GiB)"},
        SizeBad{"0.5B", "a fraction takes a larger unit, as in 1.5KiB"},
        SizeBad{"1e0020", "does not fit in 64 bits"},
        SizeBad{"1.1234567890123456789GiB", "more than 18 digits"}));

TEST(FormatBytes, BinaryUnitsTwoDecimals) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(1023), "1023 B");
  EXPECT_EQ(format_bytes(1024), "1.00 KiB");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(3ULL << 29), "1.50 GiB");
  EXPECT_EQ(format_bytes(80ULL << 30), "80.00 GiB");
  EXPECT_EQ(format_bytes((1ULL << 30) - 1), "1.00 GiB");  // never "1024.00 MiB"
  EXPECT_EQ(format_bytes(UINT64_MAX), "16.00 EiB");
}

}  // namespace
}  // namespace bsw
