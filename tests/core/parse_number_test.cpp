// Flag values as numbers: whole integers within their type, finite floats within theirs; every
// refusal names the flag and the text.
#include "core/parse_number.h"

#include <gtest/gtest.h>

#include "testing/usage_error.h"

namespace mg {
namespace {

TEST(ParseNumber, AcceptsValuesOfTheirType) {
  EXPECT_EQ(parse_number<int64_t>("--n", "9223372036854775807"), INT64_MAX);
  EXPECT_EQ(parse_number<int64_t>("--n", "-5"), -5);
  EXPECT_EQ(parse_number<int>("--tp", "2147483647"), 2147483647);
  EXPECT_EQ(parse_number<uint32_t>("--seed", "4294967295"), 4294967295u);
  EXPECT_DOUBLE_EQ(parse_number<double>("--lr", "1e-3"), 1e-3);
  EXPECT_FLOAT_EQ(parse_number<float>("--eps", "1e-5"), 1e-5f);
  EXPECT_DOUBLE_EQ(parse_number<double>("--lr", "1e300"), 1e300);
}

TEST(ParseNumber, RefusesOutOfRangeIntegers) {
  EXPECT_EQ(testing::usage_error_of(
                [] { parse_number<int64_t>("--num-layers", "9223372036854775808"); }),
            "--num-layers 9223372036854775808 is out of range: it must be in "
            "[-9223372036854775808, 9223372036854775807]");
  EXPECT_EQ(testing::usage_error_of(
                [] { parse_number<int>("--tensor-model-parallel-size", "2147483648"); }),
            "--tensor-model-parallel-size 2147483648 is out of range: it must be in "
            "[-2147483648, 2147483647]");
  EXPECT_EQ(testing::usage_error_of([] { parse_number<uint32_t>("--seed", "-1"); }),
            "--seed expects a non-negative integer, got '-1'");
  EXPECT_EQ(testing::usage_error_of([] { parse_number<int64_t>("--hidden-size", "1e3"); }),
            "--hidden-size expects an integer, got '1e3'");
  EXPECT_EQ(testing::usage_error_of([] { parse_number<int64_t>("--hidden-size", ""); }),
            "--hidden-size expects an integer, got ''");
}

TEST(ParseNumber, RefusesNonFiniteFloats) {
  for (const char* text : {"inf", "-inf", "nan", "NaN", "infinity", "1e400"})
    EXPECT_EQ(testing::usage_error_of([&] { parse_number<double>("--lr", text); }),
              std::string("--lr expects a finite number, got '") + text + "'");
  // Finite as a double, infinite as the float the field holds.
  EXPECT_EQ(testing::usage_error_of([] { parse_number<float>("--norm-epsilon", "1e39"); }),
            "--norm-epsilon 1e39 is out of range: it must be within ±3.40282e+38");
  EXPECT_EQ(testing::usage_error_of([] { parse_number<float>("--adam-eps", "x"); }),
            "--adam-eps expects a number, got 'x'");
}

}  // namespace
}  // namespace mg
