// Checked size arithmetic: exact results where they fit, a UsageError naming the quantity and
// both operands at the first step that would overflow.
#include "core/checked_math.h"

#include <gtest/gtest.h>

#include <limits>

#include "core/error.h"
#include "testing/usage_error.h"

namespace mg {
namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

TEST(CheckedMath, ExactWhereItFits) {
  EXPECT_EQ(checked_mul(int64_t(1) << 31, int64_t(1) << 31, "x"), int64_t(1) << 62);
  EXPECT_EQ(checked_mul(-3, 5, "x"), -15);
  EXPECT_EQ(checked_add(kMax - 1, 1, "x"), kMax);
  EXPECT_EQ(checked_product({2048, 50304, 4}, "x"), int64_t(2048) * 50304 * 4);
  EXPECT_EQ(ceil_div(kMax, 2), int64_t(1) << 62);
  EXPECT_EQ(ceil_div(10, 5), 2);
  EXPECT_EQ(ceil_div(11, 5), 3);
  EXPECT_EQ(ceil_div(0, 5), 0);
}

TEST(CheckedMath, OverflowNamesWhatAndTheOperands) {
  // The issue's --max-position-embeddings 9223372036854775807 times --hidden-size 16.
  const std::string m = testing::usage_error_of([] {
    checked_mul(kMax, 16,
                "elements of the position table (--max-position-embeddings x "
                "--hidden-size)");
  });
  EXPECT_EQ(m,
            "elements of the position table (--max-position-embeddings x --hidden-size): "
            "9223372036854775807 x 16 overflows a 64-bit integer; lower the sizes that drive it");
  EXPECT_NE(testing::usage_error_of([] {
              checked_add(kMax, 1, "bytes");
            }).find("9223372036854775807 + 1"),
            std::string::npos);
  // The product stops at the step that overflows: 2^31 * 2^31 fits, * 4 does not.
  EXPECT_NE(testing::usage_error_of([] {
              checked_product({int64_t(1) << 31, int64_t(1) << 31, 4}, "p");
            }).find("4611686018427387904 x 4"),
            std::string::npos);
  EXPECT_NE(testing::usage_error_of(
                [] { checked_mul(std::numeric_limits<int64_t>::min(), -1, "m"); }),
            "(no UsageError)");
}

}  // namespace
}  // namespace mg
