// The MoE ops on the GPU against the CPU: the router (softmax and sigmoid with a selection bias; E
// within one warp lane's share, across lanes and at the 256 maximum; the same chosen experts, scores,
// weights, lse, losses and dlogits, from f32 and from bf16/f16 logits), the permutation (the same plan
// with and without capacity drops; gather exact, its backward, combine and combine's backward close)
// and the grouped GEMM (an empty group, rows past offsets[E] untouched, dweight accumulating), in f32
// and in bf16/f16, and its row counts sharing their bucket's cuBLASLt algorithm. Skipped without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>

#include "cuda/cuda_testing.h"
#include "ops/grouped_matmul.h"
#include "ops/moe_dispatch.h"
#include "ops/moe_router.h"

#ifdef TESSERA_WITH_CUDA
#include "ops/cuda/matmul_cuda.h"
#endif

namespace tessera {
namespace {

using testing::random_tensor;
using testing::to_cpu;
using testing::to_gpu;

// fp32 results of the same inputs, summed in another order: a few ulps times the reduction length.
constexpr double kTol = 1e-5;

void expect_same_ids(const Tensor& gpu, const Tensor& cpu, const char* what) {
  const Tensor got = to_cpu(gpu);
  ASSERT_EQ(got.numel(), cpu.numel()) << what;
  EXPECT_EQ(std::memcmp(got.raw_data(), cpu.raw_data(), cpu.bytes()), 0) << what << " differ";
}

struct RouterCase {
  int64_t E, K;
  RouterScore kind;
  bool renormalize = true;  // false: the chosen scores as they are (norm_topk_prob false)
  RouterGroups groups = {};  // DeepSeek's group limit
  float bias_shift = 0;  // added to the sigmoid router's bias, U(-0.2, 0.2)
};

class MoeRouterCuda : public testing::CudaTest, public ::testing::WithParamInterface<RouterCase> {};

TEST_P(MoeRouterCuda, ForwardLossesAndBackwardMatchCpu) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  const auto [E, K, kind, renormalize, groups, bias_shift] = GetParam();
  const int64_t N = 300;
  const bool sigmoid = kind == RouterScore::sigmoid;
  const Tensor bias = sigmoid ? random_tensor({E}, seed + 2, bias_shift - 0.2f, bias_shift + 0.2f) : Tensor();
  const Tensor dweights = random_tensor({N, K}, seed + 3);
  for (const DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dtype));
    // The CPU takes the logits the GPU sees, rounded to its dtype.
    const Tensor logits = testing::rounded_to(random_tensor({N, E}, seed, -3.0f, 3.0f), dtype);
    Tensor experts = Tensor::zeros({N, K}, DType::i32), weights = Tensor::zeros({N, K});
    Tensor scores = Tensor::zeros({N, E}), lse = Tensor::zeros({N});
    moe_router_forward(experts, weights, scores, lse, logits, bias, kind, renormalize, groups);
    Tensor experts_gpu = to_gpu(Tensor::zeros({N, K}, DType::i32)), weights_gpu = testing::poisoned_gpu({N, K});
    Tensor scores_gpu = testing::poisoned_gpu({N, E}), lse_gpu = testing::poisoned_gpu({N});
    const Tensor logits_gpu = testing::to_gpu_as(logits, dtype), bias_gpu = sigmoid ? to_gpu(bias) : Tensor();
    moe_router_forward(experts_gpu, weights_gpu, scores_gpu, lse_gpu, logits_gpu, bias_gpu, kind, renormalize,
                       groups);
    expect_same_ids(experts_gpu, experts, "experts");
    testing::expect_matches_cpu(scores_gpu, scores, kTol, 1e-7, kTol, "scores");
    testing::expect_matches_cpu(weights_gpu, weights, kTol, 1e-7, kTol, "weights");
    testing::expect_matches_cpu(lse_gpu, lse, kTol, kTol, kTol, "lse");

    const RouterLosses cpu_losses = moe_router_losses(experts, scores, lse, kind);
    const RouterLosses gpu_losses = moe_router_losses(experts_gpu, scores_gpu, lse_gpu, kind);
    EXPECT_NEAR(gpu_losses.aux, cpu_losses.aux, kTol * std::fabs(cpu_losses.aux));
    EXPECT_NEAR(gpu_losses.z, cpu_losses.z, kTol * std::fabs(cpu_losses.z));

    // Both backwards from the CPU's routing; dlogits in the logits' dtype on the GPU.
    Tensor dlogits = Tensor::zeros({N, E}), dlogits_gpu = testing::poisoned_gpu({N, E}, dtype);
    moe_router_backward(dlogits, dweights, experts, weights, scores, lse, logits, kind, 0.3f, 0.02f, nullptr,
                        renormalize);
    moe_router_backward(dlogits_gpu, to_gpu(dweights), to_gpu(experts), to_gpu(weights), to_gpu(scores),
                        to_gpu(lse), logits_gpu, kind, 0.3f, 0.02f, nullptr, renormalize);
    const double rounding = dtype == DType::f32 ? 0.0 : testing::rounding_of(dtype);
    testing::expect_matches_cpu(dlogits_gpu, dlogits, kTol + rounding, 1e-6 + rounding * testing::max_abs(dlogits),
                                kTol + rounding, "dlogits");
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, MoeRouterCuda,
                         ::testing::Values(RouterCase{8, 2, RouterScore::softmax}, RouterCase{40, 6, RouterScore::softmax},
                                           RouterCase{256, 8, RouterScore::softmax},
                                           RouterCase{8, 2, RouterScore::sigmoid}, RouterCase{64, 4, RouterScore::sigmoid},
                                           RouterCase{64, 6, RouterScore::softmax, false},
                                           RouterCase{64, 8, RouterScore::sigmoid, false},
                                           RouterCase{256, 8, RouterScore::sigmoid, true, {8, 4}},
                                           // 64 experts a group, two a lane: the per-lane top-2 merges
                                           RouterCase{256, 8, RouterScore::sigmoid, true, {4, 2}},
                                           // values mostly below 0: dropped groups' experts, at 0, are chosen
                                           RouterCase{128, 4, RouterScore::sigmoid, true, {4, 1}, -0.9f},
                                           RouterCase{160, 6, RouterScore::softmax, false, {8, 3}}),
                         [](const ::testing::TestParamInfo<RouterCase>& info) {
                           return std::string(info.param.kind == RouterScore::sigmoid ? "sigmoid" : "softmax") + "_E" +
                                  std::to_string(info.param.E) + "_K" + std::to_string(info.param.K) +
                                  (info.param.renormalize ? "" : "_unrenormalised") +
                                  (info.param.groups.limits() ? "_groups" + std::to_string(info.param.groups.count) +
                                                                    "_keep" + std::to_string(info.param.groups.kept)
                                                              : "") +
                                  (info.param.bias_shift < 0 ? "_negative_bias" : "");
                         });

class MoeDispatchCuda : public testing::CudaTest {};

TEST_F(MoeDispatchCuda, PlanGatherCombineAndBackwardsMatchCpu) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  const int64_t N = 300, K = 2, E = 8, C = 48;
  // Distinct experts per token, as the router gives them.
  Tensor experts = Tensor::zeros({N, K}, DType::i32);
  const Tensor draw = testing::random_ids({N, K}, E, seed);
  for (int64_t n = 0; n < N; n++) {
    const int32_t first = draw.data<int32_t>()[n * K], second = draw.data<int32_t>()[n * K + 1];
    experts.data<int32_t>()[n * K] = first;
    experts.data<int32_t>()[n * K + 1] = second != first ? second : int32_t((first + 1) % E);
  }
  const Tensor weights = random_tensor({N, K}, seed + 1, 0.0f, 1.0f);
  for (const int64_t capacity : {int64_t(0), int64_t(60)}) {
    SCOPED_TRACE("capacity " + std::to_string(capacity));
    Tensor order = Tensor::zeros({N * K}, DType::i32), offsets = Tensor::zeros({E + 1}, DType::i32);
    Tensor order_gpu = to_gpu(order), offsets_gpu = Tensor::zeros({E + 1}, DType::i32);
    const int64_t M = moe_dispatch_plan(order, offsets, experts, E, capacity);
    ASSERT_EQ(moe_dispatch_plan(order_gpu, offsets_gpu, to_gpu(experts), E, capacity), M);
    expect_same_ids(order_gpu, order, "order");
    EXPECT_EQ(std::memcmp(offsets_gpu.raw_data(), offsets.raw_data(), offsets.bytes()), 0) << "offsets differ";
    if (capacity > 0) {
      EXPECT_LT(M, N * K) << "the capacity drops nothing; the test does not cover drops";
    }

    for (const DType dtype : {DType::f32, DType::bf16, DType::f16}) {
      SCOPED_TRACE(dtype_name(dtype));
      const double rounding = dtype == DType::f32 ? 0.0 : testing::rounding_of(dtype);
      const Tensor x = testing::rounded_to(random_tensor({N, C}, seed + 2), dtype);
      const Tensor rows = testing::rounded_to(random_tensor({N * K, C}, seed + 3), dtype);
      const Tensor dout = testing::rounded_to(random_tensor({N, C}, seed + 4), dtype);
      Tensor xs = Tensor::zeros({N * K, C}), xs_gpu = testing::poisoned_gpu({N * K, C}, dtype);
      moe_gather(xs, x, order, M, K);
      moe_gather(xs_gpu, testing::to_gpu_as(x, dtype), order_gpu, M, K);
      testing::expect_matches_cpu(xs_gpu.view(0, {M, C}), xs.view(0, {M, C}), 0.0, 0.0, 0.0, "gathered rows");

      const Tensor rows_gpu = testing::to_gpu_as(rows, dtype);
      Tensor dx = Tensor::zeros({N, C}), dx_gpu = testing::poisoned_gpu({N, C}, dtype);
      moe_gather_backward(dx, rows, order, M, K);
      moe_gather_backward(dx_gpu, rows_gpu, order_gpu, M, K);
      testing::expect_matches_cpu(dx_gpu, dx, kTol + rounding, 1e-6, kTol + rounding, "gather backward");

      Tensor out = Tensor::zeros({N, C}), out_gpu = testing::poisoned_gpu({N, C}, dtype);
      moe_combine(out, rows, weights, order, M, K);
      moe_combine(out_gpu, rows_gpu, to_gpu(weights), order_gpu, M, K);
      testing::expect_matches_cpu(out_gpu, out, kTol + rounding, 1e-6, kTol + rounding, "combine");

      Tensor dys = Tensor::zeros({N * K, C}), dweights = Tensor::zeros({N, K});
      Tensor dys_gpu = testing::poisoned_gpu({N * K, C}, dtype), dweights_gpu = testing::poisoned_gpu({N, K});
      moe_combine_backward(dys, dweights, dout, rows, weights, order, M, K);
      moe_combine_backward(dys_gpu, dweights_gpu, testing::to_gpu_as(dout, dtype), rows_gpu, to_gpu(weights),
                           order_gpu, M, K);
      testing::expect_matches_cpu(dys_gpu.view(0, {M, C}), dys.view(0, {M, C}), kTol + rounding, 1e-6,
                                  kTol + rounding, "combine backward dys");
      testing::expect_matches_cpu(dweights_gpu, dweights, kTol, 1e-5, kTol, "combine backward dweights");
    }
  }
}

class GroupedMatmulCuda : public testing::CudaTest {};

TEST_F(GroupedMatmulCuda, ForwardAndBackwardMatchCpu) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  const int64_t M_rows = 200, C = 32, OC = 48, E = 4;
  Tensor offsets = Tensor::zeros({E + 1}, DType::i32);
  const int32_t bounds[] = {0, 56, 56, 120, 192};  // expert 1 empty; rows 192.. belong to nobody
  std::memcpy(offsets.raw_data(), bounds, sizeof(bounds));
  for (const DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const double rounding = dtype == DType::f32 ? 0.0 : testing::rounding_of(dtype);
    const Tensor x = testing::rounded_to(random_tensor({M_rows, C}, seed), dtype);
    const Tensor weight = testing::rounded_to(random_tensor({E, OC, C}, seed + 1), dtype);
    const Tensor dout = testing::rounded_to(random_tensor({M_rows, OC}, seed + 2), dtype);
    const Tensor dweight_start = random_tensor({E, OC, C}, seed + 3);
    const Tensor x_gpu = testing::to_gpu_as(x, dtype), weight_gpu = testing::to_gpu_as(weight, dtype);

    Tensor out = Tensor::zeros({M_rows, OC}), out_gpu = testing::poisoned_gpu({M_rows, OC}, dtype);
    grouped_matmul_forward(out, x, weight, offsets);
    grouped_matmul_forward(out_gpu, x_gpu, weight_gpu, offsets);
    testing::expect_matches_cpu(out_gpu.view(0, {192, OC}), out.view(0, {192, OC}), kTol + rounding,
                                kTol + rounding * testing::max_abs(out), kTol + rounding, "out");
    const Tensor tail = testing::to_f32(to_cpu(out_gpu.view(192 * OC, {M_rows - 192, OC})));
    for (int64_t i = 0; i < tail.numel(); i++) ASSERT_TRUE(std::isnan(tail.f32()[i])) << "row past offsets[E] written";

    Tensor dx = Tensor::zeros({M_rows, C}), dx_gpu = testing::poisoned_gpu({M_rows, C}, dtype);
    Tensor dweight = to_cpu(to_gpu(dweight_start)), dweight_gpu = to_gpu(dweight_start);  // fresh copies to add to
    grouped_matmul_backward(dx, dweight, dout, x, weight, offsets);
    grouped_matmul_backward(dx_gpu, dweight_gpu, testing::to_gpu_as(dout, dtype), x_gpu, weight_gpu, offsets);
    testing::expect_matches_cpu(dx_gpu.view(0, {192, C}), dx.view(0, {192, C}), kTol + rounding,
                                kTol + rounding * testing::max_abs(dx), kTol + rounding, "dx");
    testing::expect_matches_cpu(dweight_gpu, dweight, kTol, kTol * testing::max_abs(dweight), kTol, "dweight");
  }
}

#ifdef TESSERA_WITH_CUDA
// Row counts in one bucket (2000, 2010 and 2047 all round to 2048) share one algorithm: after the first
// call of each GEMM (forward, dx, dweight) asks cuBLASLt's heuristic for the bucket's largest shape, the
// other counts make their own plans without asking again; every result still matches the CPU.
TEST_F(GroupedMatmulCuda, RowCountsInOneBucketShareOneHeuristicQuery) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  const int64_t M_rows = 2048, C = 40, OC = 56;  // a shape no other test uses
  const DType dtype = DType::bf16;
  const double rounding = testing::rounding_of(dtype);
  const Tensor x = testing::rounded_to(random_tensor({M_rows, C}, seed), dtype);
  const Tensor weight = testing::rounded_to(random_tensor({1, OC, C}, seed + 1), dtype);
  const Tensor dout = testing::rounded_to(random_tensor({M_rows, OC}, seed + 2), dtype);
  const Tensor x_gpu = testing::to_gpu_as(x, dtype), weight_gpu = testing::to_gpu_as(weight, dtype);
  const Tensor dout_gpu = testing::to_gpu_as(dout, dtype);
  for (const int32_t rows : {2000, 2010, 2047}) {
    SCOPED_TRACE(rows);
    Tensor offsets = Tensor::zeros({2}, DType::i32);
    offsets.data<int32_t>()[1] = rows;
    const cuda::MatmulPlanCacheStats before = cuda::matmul_plan_cache_stats();
    Tensor out = Tensor::zeros({M_rows, OC}), out_gpu = testing::poisoned_gpu({M_rows, OC}, dtype);
    grouped_matmul_forward(out, x, weight, offsets);
    grouped_matmul_forward(out_gpu, x_gpu, weight_gpu, offsets);
    Tensor dx = Tensor::zeros({M_rows, C}), dx_gpu = testing::poisoned_gpu({M_rows, C}, dtype);
    Tensor dweight = Tensor::zeros({1, OC, C}), dweight_gpu = to_gpu(Tensor::zeros({1, OC, C}));
    grouped_matmul_backward(dx, dweight, dout, x, weight, offsets);
    grouped_matmul_backward(dx_gpu, dweight_gpu, dout_gpu, x_gpu, weight_gpu, offsets);
    const cuda::MatmulPlanCacheStats after = cuda::matmul_plan_cache_stats();
    EXPECT_EQ(after.misses - before.misses, 3) << "three new shapes: forward, dx and dweight";
    EXPECT_EQ(after.heuristic_queries - before.heuristic_queries, rows == 2000 ? 3 : 0)
        << "one query per GEMM for the bucket, on its first use only";
    testing::expect_matches_cpu(out_gpu.view(0, {rows, OC}), out.view(0, {rows, OC}), kTol + rounding,
                                kTol + rounding * testing::max_abs(out), kTol + rounding, "out");
    testing::expect_matches_cpu(dx_gpu.view(0, {rows, C}), dx.view(0, {rows, C}), kTol + rounding,
                                kTol + rounding * testing::max_abs(dx), kTol + rounding, "dx");
    testing::expect_matches_cpu(dweight_gpu, dweight, kTol, kTol * testing::max_abs(dweight), kTol, "dweight");
  }
}
#endif

}  // namespace
}  // namespace tessera
