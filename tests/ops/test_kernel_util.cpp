// The CPU kernels' vectorisable exp and tanh against libm over their whole range, and the split of
// columns over threads.
#include <gtest/gtest.h>

#include <cmath>

#include "ops/cpu/kernel_util.h"

namespace tessera::cpu {
namespace {

TEST(KernelUtil, ExpApproxIsWithinTwoUlpOfLibm) {
  double worst = 0.0;
  for (float x = -87.0f; x <= 88.0f; x += 0.001953125f) {  // 2^-9 steps: every range-reduction branch
    const double ref = std::exp(double(x));
    worst = std::max(worst, std::fabs(double(exp_approx(x)) - ref) / ref);
  }
  EXPECT_LT(worst, 2.5e-7);  // 2 ulp of fp32 is 2.4e-7 relative
  EXPECT_EQ(exp_approx(0.0f), 1.0f);
  EXPECT_EQ(exp_approx(-88.0f), 0.0f);  // flushed: no denormals
  EXPECT_EQ(exp_approx(-INFINITY), 0.0f);
  EXPECT_TRUE(std::isfinite(exp_approx(1000.0f)));  // clamped to e^88
  EXPECT_TRUE(std::isnan(exp_approx(NAN)));
}

TEST(KernelUtil, TanhApproxTracksLibmAndSaturates) {
  for (float x = -20.0f; x <= 20.0f; x += 0.01f) EXPECT_NEAR(tanh_approx(x), std::tanh(x), 2e-7) << x;
  EXPECT_EQ(tanh_approx(100.0f), 1.0f);
  EXPECT_EQ(tanh_approx(-100.0f), -1.0f);
}

TEST(KernelUtil, ThreadColumnsCoverEveryColumnOnceInWholeLines) {
  for (int threads : {1, 2, 3, 5}) {
    for (int64_t C : {int64_t(1), int64_t(20), int64_t(150), int64_t(256)}) {
      std::vector<int> owners(size_t(C), 0);
#pragma omp parallel num_threads(threads)
      {
        const ColumnRange cols = thread_columns(C);
        EXPECT_TRUE(cols.begin == cols.end || cols.begin % 16 == 0) << cols.begin;
#pragma omp critical
        for (int64_t c = cols.begin; c < cols.end; c++) owners[size_t(c)]++;
      }
      for (int64_t c = 0; c < C; c++) EXPECT_EQ(owners[size_t(c)], 1) << "C=" << C << " threads=" << threads;
    }
  }
}

}  // namespace
}  // namespace tessera::cpu
