// PowerSGD's reduction against values computed by hand, on 2 and 4 ranks: a sum of rank-one
// matrices sharing their column space comes through rank-1 factors exactly; over several steps of
// full-rank gradients, error feedback loses nothing (the compressed sums plus the ranks' remaining
// errors are the true sums); elements outside the factored matrices are summed exactly; a matrix
// whose factors would not be at most half its size travels whole; step_skipped() forgets the errors
// and takes back the step's Q, so a NaN step leaves the next steps' sums as if it had never run.
#include <gtest/gtest.h>

#include <cmath>

#include "comm_testing.h"
#include "core/rng.h"
#include "parallel/dp/powersgd.h"

namespace tessera::testing {
namespace {

// The flat gradient: a 4-element vector, a 32×16 matrix (factored at rank ≤ 5), a 3×3 one (whole).
constexpr int64_t kRows = 32, kCols = 16, kMatrix = 4, kSmall = kMatrix + kRows * kCols, kTotal = kSmall + 9;
const std::vector<GradMatrix> kMatrices{{kMatrix, kRows, kCols, "w"}, {kSmall, 3, 3, "small"}};

Bucket whole_bucket() { return Bucket{0, kTotal, 0, kTotal, 0, kTotal, 0}; }

Tensor reduce(PowerSgd& powersgd, Comm& comm, Tensor grads) {
  PowerSgd::Round round = powersgd.start(comm, grads, whole_bucket());
  powersgd.complete(comm, grads, round);
  return grads;
}

float normal(uint64_t seed, int64_t i) { return normal_at(seed, uint64_t(world_rank()), uint64_t(i)); }

TEST(PowerSgd, RankOneSumsComeThroughExactly) {
  auto comm = world_comm("dp");
  const int r = comm->rank(), n = comm->size();
  PowerSgd powersgd(kMatrices, 1, 7, Device::cpu);
  EXPECT_EQ(powersgd.compressed_elements(), kRows * kCols);
  // Every rank's matrix is u v_rᵀ, u shared: the sum u (Σ v_r)ᵀ has rank one.
  auto u = [](int64_t i) { return float(i % 5) - 1.5f; };
  auto v = [](int rank, int64_t j) { return float((j + rank) % 3) + 0.25f * float(rank); };
  auto value = [&](int rank, int64_t k) -> float {
    if (k < kMatrix) return float(rank + 1) * float(k);
    if (k < kSmall) return u((k - kMatrix) / kCols) * v(rank, (k - kMatrix) % kCols);
    return float(rank) - float(k - kSmall);
  };
  const Tensor sum = reduce(powersgd, *comm, f32_tensor(kTotal, [&](int64_t k) { return value(r, k); }));
  for (int64_t k = 0; k < kTotal; ++k) {
    double want = 0;
    for (int q = 0; q < n; ++q) want += value(q, k);
    ASSERT_NEAR(sum.f32()[k], want, 1e-4 * (1 + std::fabs(want))) << k;
  }
}

TEST(PowerSgd, ErrorFeedbackLosesNothingOverSteps) {
  auto comm = world_comm("dp");
  PowerSgd powersgd(kMatrices, 2, 11, Device::cpu);
  Tensor delivered = Tensor::zeros({kRows * kCols}), truth = Tensor::zeros({kRows * kCols});
  for (int step = 0; step < 4; ++step) {
    Tensor grads = f32_tensor(kTotal, [&](int64_t k) { return normal(uint64_t(step), k); });
    Tensor mine = f32_tensor(kRows * kCols, [&](int64_t k) { return grads.f32()[kMatrix + k]; });
    comm->all_reduce(mine);
    const Tensor sum = reduce(powersgd, *comm, grads);
    for (int64_t k = 0; k < kRows * kCols; ++k) {
      delivered.f32()[k] += sum.f32()[kMatrix + k];
      truth.f32()[k] += mine.f32()[k];
    }
    // The compression is lossy at rank 2: a step's sum is not the true one.
    if (step == 0) {
      double gap = 0;
      for (int64_t k = 0; k < kRows * kCols; ++k) gap += std::fabs(sum.f32()[kMatrix + k] - mine.f32()[k]);
      EXPECT_GT(gap, 1e-2);
    }
  }
  Tensor errors = Tensor::zeros({kRows * kCols});
  std::copy_n(powersgd.error_of(kMatrix).f32(), kRows * kCols, errors.f32());
  comm->all_reduce(errors);
  for (int64_t k = 0; k < kRows * kCols; ++k)
    ASSERT_NEAR(delivered.f32()[k] + errors.f32()[k], truth.f32()[k], 1e-4 * (1 + std::fabs(truth.f32()[k]))) << k;
  powersgd.step_skipped();
  for (int64_t k = 0; k < kRows * kCols; ++k) ASSERT_EQ(powersgd.error_of(kMatrix).f32()[k], 0.0f);
  EXPECT_THROW(powersgd.error_of(kSmall), Error);  // travels whole
}

// A step whose gradient holds a NaN on one rank, then skipped: its sums are NaN, but Q is back to
// step 0's and the steps after it sum exactly as in a run that forgot its errors after step 0 (a
// poisoned warm start would make every later step NaN, and the bad-step guard stop the run).
TEST(PowerSgd, SkippedNanStepLeavesTheNextStepsAlone) {
  auto comm = world_comm("dp");
  auto grads_of = [](uint64_t step) { return f32_tensor(kTotal, [&](int64_t k) { return normal(step, k); }); };
  PowerSgd skipping(kMatrices, 2, 11, Device::cpu), clean(kMatrices, 2, 11, Device::cpu);
  reduce(skipping, *comm, grads_of(0));
  reduce(clean, *comm, grads_of(0));
  Tensor poisoned = grads_of(1);
  if (comm->rank() == 0) poisoned.f32()[kMatrix + 5] = std::nanf("");
  EXPECT_TRUE(std::isnan(reduce(skipping, *comm, poisoned).f32()[kMatrix]));
  skipping.step_skipped();
  const Tensor q_after_step_0 = clean.qt_of(0);
  EXPECT_EQ(std::vector<float>(skipping.qt_of(0).f32(), skipping.qt_of(0).f32() + q_after_step_0.numel()),
            std::vector<float>(q_after_step_0.f32(), q_after_step_0.f32() + q_after_step_0.numel()));
  // The reference forgets its errors and keeps step 0's Q (set_qt makes it the one a skip returns to).
  clean.set_qt(0, q_after_step_0);
  clean.step_skipped();
  for (uint64_t step = 2; step < 4; ++step) {
    const Tensor got = reduce(skipping, *comm, grads_of(step)), want = reduce(clean, *comm, grads_of(step));
    for (int64_t k = 0; k < kTotal; ++k) ASSERT_EQ(got.f32()[k], want.f32()[k]) << "step " << step << ", element " << k;
  }
  EXPECT_TRUE(std::isfinite(skipping.qt_of(0).f32()[0]));
}

}  // namespace
}  // namespace tessera::testing
