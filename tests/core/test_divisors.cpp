// divisors_up_to: the divisors of n up to a bound, largest first, each once.
#include <gtest/gtest.h>

#include "core/divisors.h"

namespace tessera {
namespace {

using Sizes = std::vector<int64_t>;

TEST(Divisors, LargestFirstUpToTheBound) {
  EXPECT_EQ(divisors_up_to(12, 100), (Sizes{12, 6, 4, 3, 2, 1}));
  EXPECT_EQ(divisors_up_to(12, 5), (Sizes{4, 3, 2, 1}));
  EXPECT_EQ(divisors_up_to(36, 6), (Sizes{6, 4, 3, 2, 1}));  // 6 x 6: once
  EXPECT_EQ(divisors_up_to(1, 1), (Sizes{1}));
  EXPECT_EQ(divisors_up_to(7, 0), (Sizes{}));
  EXPECT_EQ(divisors_up_to(0, 5), (Sizes{}));
}

TEST(Divisors, LargeNumbersInSquareRootSteps) {
  EXPECT_EQ(divisors_up_to(99999999999, 1000), (Sizes{9, 3, 1}));  // 3^2 x 21649 x 513239
  EXPECT_EQ(divisors_up_to(99999999999, 99999999999).size(), 12u);
  EXPECT_EQ(divisors_up_to(int64_t(1) << 40, int64_t(1) << 40).size(), 41u);
}

}  // namespace
}  // namespace tessera
