// Fused softmax + cross-entropy on the GPU against the CPU over a padded vocabulary: losses,
// in-place dlogits with zero padding, and logits left untouched when no gradient is asked for; fp32,
// and bf16 and f16 logits against the fp32 CPU op on the same (rounded) logits, over vocabularies of
// 1000, GPT-2's 50257, 70000 and Llama 3's 128256 (rows kept in shared memory between the passes up to
// 70000 in 16 bits and 50257 in fp32, re-read from global memory above); the vocabulary-parallel parts the same way on shards of GPT-2's.
// Every seventh row's target is ignored (loss masks); an ignored row of inf and NaN logits still has
// loss 0 and a gradient of zeros.
// bf16 and f16 logits on the CPU are refused.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "cuda/cuda_testing.h"
#include "core/cuda/device.h"
#include "core/ignored_target.h"
#include "ops/cross_entropy.h"
#include "ops/cross_entropy_shard.h"

namespace tessera {
namespace {

using testing::random_tensor;
using testing::to_gpu;

// (V, Vp) pairs: padded to a multiple of 128 as the model pads its vocabulary.
struct Vocab {
  int64_t V, Vp;
};
constexpr Vocab kVocabs[] = {{1000, 1024}, {50257, 50304}, {70000, 70016}, {128256, 128256}};

// Targets uniform in [0, V) but every seventh, kIgnoredTarget, and rows 1 and 2 the last and first
// real columns (the kernels test for the target and the padding only in the chunks that hold them).
Tensor targets_with_ignored(int64_t N, int64_t V, uint64_t seed) {
  Tensor targets = testing::random_ids({N}, V, seed);
  for (int64_t n = 0; n < N; n += 7) targets.data<int32_t>()[n] = kIgnoredTarget;
  targets.data<int32_t>()[1] = int32_t(V - 1);
  targets.data<int32_t>()[2] = 0;
  return targets;
}

// A loss sums V exponentials in fp32 in another order than the CPU: rounding grows like sqrt(V).
double loss_tolerance(int64_t V) { return 4.0 * std::sqrt(double(V)) * std::ldexp(1.0, -24); }

// Logits in `dtype` on the GPU against the f32 CPU op on the same (rounded) logits, every vocabulary.
// The GPU computes in fp32 from them: losses keep the fp32 tolerance; 16-bit dlogits, rounded once to
// the dtype, get it doubled plus half an ulp. Logits in [-6, 6] and dlogits below 1/N stay far inside
// f16's range; the many dlogits below its normal range (2^-14) are off by at most 2^-25, inside the
// absolute tolerance.
void expect_matches_cpu_in(DType dtype) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  const bool f32 = dtype == DType::f32;
  for (const auto [V, Vp] : kVocabs) {
    SCOPED_TRACE("V = " + std::to_string(V));
    const int64_t N = 66;
    const float dloss = 1.0f / float(N);
    Tensor logits = testing::rounded_to(random_tensor({N, Vp}, seed, -6.0f, 6.0f), dtype);
    Tensor logits_gpu = testing::to_gpu_as(logits, dtype);
    const Tensor targets = targets_with_ignored(N, V, seed + 1);
    const Tensor targets_gpu = to_gpu(targets);

    Tensor losses = Tensor::zeros({N});
    Tensor losses_gpu = testing::poisoned_gpu({N});
    softmax_cross_entropy(losses_gpu, logits_gpu, targets_gpu, V, 0.0f);  // forward only
    testing::expect_matches_cpu(logits_gpu, logits, 0.0, 0.0, 0.0, "logits after a forward-only call");

    softmax_cross_entropy(losses, logits, targets, V, dloss);
    softmax_cross_entropy(losses_gpu, logits_gpu, targets_gpu, V, dloss);
    const double tol = loss_tolerance(V);
    testing::expect_matches_cpu(losses_gpu, losses, tol, tol, tol, "losses");
    testing::expect_matches_cpu(logits_gpu, logits, f32 ? 1e-5 : testing::scaled_from_bf16(1e-2, dtype),
                                f32 ? 1e-7 : 2e-7, f32 ? 1e-4 : testing::rounding_of(dtype) + 2e-4, "dlogits");
    const Tensor dlogits = testing::to_f32(testing::to_cpu(logits_gpu));
    for (int64_t n = 0; n < N; n++)
      for (int64_t v = V; v < Vp; v++) ASSERT_EQ(dlogits.f32()[n * Vp + v], 0.0f) << "padding at " << n << "," << v;
  }
}

// The vocabulary-parallel parts on shards of GPT-2's padded vocabulary (50257 of 50304) against the
// CPU, logits in `dtype` (the CPU on the same rounded logits), with expect_matches_cpu_in's
// tolerances: the statistics, their rescaling to a global max, and the finish with its in-place
// gradient, on the second of two shards (16-byte vectors), the last of three uneven ones (scalar)
// and the padding alone (max -inf, sum 0, gradient 0). The global statistics stand in for the other
// ranks': a max above this shard's and a sum with theirs added, the same on the CPU and the GPU.
void expect_shard_parts_match_cpu_in(DType dtype) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  const bool f32 = dtype == DType::f32;
  const int64_t N = 66, V = 50257;
  struct Shard {
    int64_t first, cols;
  };
  for (const auto [first, cols] : {Shard{25152, 25152}, Shard{33538, 16766}, Shard{V, 47}}) {
    SCOPED_TRACE("first column " + std::to_string(first));
    Tensor logits = testing::rounded_to(random_tensor({N, cols}, seed, -6.0f, 6.0f), dtype);
    Tensor logits_gpu = testing::to_gpu_as(logits, dtype);
    const Tensor targets = targets_with_ignored(N, V, seed + 1), targets_gpu = to_gpu(targets);
    auto stats = [&](Device device) {
      std::vector<Tensor> t;
      for (int i = 0; i < 4; i++) t.push_back(Tensor::zeros({N}, DType::f32, device));
      return t;
    };
    std::vector<Tensor> cpu = stats(Device::cpu), gpu = stats(Device::cuda);
    cross_entropy_shard_stats(cpu[0], cpu[1], cpu[2], logits, targets, first, V);
    cross_entropy_shard_stats(gpu[0], gpu[1], gpu[2], logits_gpu, targets_gpu, first, V);
    const double tol = loss_tolerance(cols);
    testing::expect_identical(testing::to_cpu(gpu[0]), cpu[0], "shard max");
    testing::expect_matches_cpu(gpu[1], cpu[1], tol, tol, tol, "shard sum of exponentials");
    testing::expect_matches_cpu(gpu[2], cpu[2], 0.0, 0.0, 0.0, "shard target logit");
    for (int64_t n = 0; n < N; n++) cpu[3].f32()[n] = std::max(cpu[0].f32()[n], 0.0f) + 0.5f;
    copy_tensor(gpu[3], cpu[3]);
    cross_entropy_shard_rescale(cpu[1], cpu[0], cpu[3]);
    cross_entropy_shard_rescale(gpu[1], gpu[0], gpu[3]);
    testing::expect_matches_cpu(gpu[1], cpu[1], tol, tol, tol, "rescaled sum");
    for (int64_t n = 0; n < N; n++) cpu[1].f32()[n] += 1.0f;
    copy_tensor(gpu[1], cpu[1]);
    copy_tensor(gpu[2], cpu[2]);
    const float dloss = 1.0f / float(N);
    Tensor losses = Tensor::zeros({N}), losses_gpu = testing::poisoned_gpu({N});
    cross_entropy_shard_finish(losses, logits, targets, cpu[3], cpu[1], cpu[2], first, V, dloss);
    cross_entropy_shard_finish(losses_gpu, logits_gpu, targets_gpu, gpu[3], gpu[1], gpu[2], first, V, dloss);
    testing::expect_matches_cpu(losses_gpu, losses, tol, tol, tol, "shard losses");
    testing::expect_matches_cpu(logits_gpu, logits, f32 ? 1e-5 : testing::scaled_from_bf16(1e-2, dtype),
                                f32 ? 1e-7 : 2e-7, f32 ? 1e-4 : testing::rounding_of(dtype) + 2e-4, "shard dlogits");
  }
}

class CrossEntropyCuda : public testing::CudaTest {};

TEST_F(CrossEntropyCuda, LossesAndGradientsMatchCpu) { expect_matches_cpu_in(DType::f32); }

using CrossEntropyCudaLowPrecision = testing::CudaLowPrecisionTest;

TEST_P(CrossEntropyCudaLowPrecision, MatchesCpuOnRoundedLogits) { expect_matches_cpu_in(GetParam()); }

TEST_F(CrossEntropyCuda, ShardPartsMatchCpu) { expect_shard_parts_match_cpu_in(DType::f32); }

TEST_P(CrossEntropyCudaLowPrecision, ShardPartsMatchCpuOnRoundedLogits) {
  expect_shard_parts_match_cpu_in(GetParam());
}

// An ignored row is never predicted: with an inf and a NaN among its logits (and so in its statistics)
// its loss is 0 and its gradient row all 0, padding too, in the whole op and in a shard's finish; the
// next row, a real target, keeps finite values.
TEST_F(CrossEntropyCuda, IgnoredRowWithNonFiniteLogitsIsZero) {
  const int64_t N = 2, V = 1000, Vp = 1024;
  Tensor logits = random_tensor({N, Vp}, testing::fresh_seed(), -6.0f, 6.0f);
  logits.f32()[3] = INFINITY;
  logits.f32()[500] = testing::kNaN;
  Tensor targets = Tensor::zeros({N}, DType::i32);
  targets.data<int32_t>()[0] = kIgnoredTarget;
  targets.data<int32_t>()[1] = 7;
  const Tensor targets_gpu = to_gpu(targets);
  auto expect_row_zero_and_next_finite = [&](const Tensor& losses_gpu, const Tensor& dlogits_gpu, const char* what) {
    const Tensor losses = testing::to_cpu(losses_gpu), dlogits = testing::to_cpu(dlogits_gpu);
    EXPECT_EQ(losses.f32()[0], 0.0f) << what;
    EXPECT_TRUE(std::isfinite(losses.f32()[1])) << what;
    for (int64_t v = 0; v < Vp; v++) {
      ASSERT_EQ(dlogits.f32()[v], 0.0f) << what << " at column " << v;
      ASSERT_TRUE(std::isfinite(dlogits.f32()[Vp + v])) << what << " at column " << v;
    }
  };

  Tensor whole = to_gpu(logits), losses_gpu = testing::poisoned_gpu({N});
  softmax_cross_entropy(losses_gpu, whole, targets_gpu, V, 1.0f);
  expect_row_zero_and_next_finite(losses_gpu, whole, "whole");

  Tensor shard = to_gpu(logits), max = testing::poisoned_gpu({N}), sum = testing::poisoned_gpu({N});
  Tensor target_logit = testing::poisoned_gpu({N});
  losses_gpu = testing::poisoned_gpu({N});
  cross_entropy_shard_stats(max, sum, target_logit, shard, targets_gpu, 0, V);  // one rank: already global
  cross_entropy_shard_finish(losses_gpu, shard, targets_gpu, max, sum, target_logit, 0, V, 1.0f);
  expect_row_zero_and_next_finite(losses_gpu, shard, "shard");
}

INSTANTIATE_TEST_SUITE_P(Storage, CrossEntropyCudaLowPrecision, ::testing::ValuesIn(testing::kLowPrecisionDTypes),
                         testing::dtype_param_name);

// CPU kernels are the fp32 reference: bf16 or f16 logits on the CPU are an error naming the dtype.
TEST(CrossEntropyDtype, LowPrecisionOnTheCpuIsRefused) {
  for (const DType dtype : testing::kLowPrecisionDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor losses = Tensor::zeros({2}), logits = Tensor::zeros({2, 8}, dtype);
    const Tensor targets = Tensor::zeros({2}, DType::i32);
    const std::string message = testing::error_of([&] { softmax_cross_entropy(losses, logits, targets, 8, 1.0f); });
    EXPECT_TRUE(testing::names_dtype_on_cpu(message, dtype)) << message;
  }
}

}  // namespace
}  // namespace tessera
