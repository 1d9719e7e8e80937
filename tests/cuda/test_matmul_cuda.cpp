// The linear layer through cuBLASLt against OpenBLAS on the CPU, in f32 (fp32 compute, no TF32)
// and in bf16 and f16 (16-bit storage, fp32 accumulation; the CPU runs in f32 on the same rounded
// inputs): forward with and without the bias epilogue, dx written over poison, dweight and dbias
// accumulated onto existing values, a weight view at an offset of one element (4- or 2-byte
// alignment); the fused GELU forward and DGELU backward against their CPU compositions, their
// refusal of rows cuBLASLt cannot fuse, the bias gradient's column sums with 16-byte and with scalar
// loads, and the plan cache (a repeat is a hit, bitwise the same).
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <string>

#include "cuda/cuda_testing.h"
#include "ops/matmul.h"

#ifdef TESSERA_WITH_CUDA
#include "ops/cuda/matmul_cuda.h"
#endif

namespace tessera {
namespace {

using testing::random_tensor;
using testing::rounded_to;  // what the GPU really computes on: the host values rounded to the dtype
using testing::to_gpu;
using testing::to_gpu_as;

struct Tolerance {
  double rel_l2, atol, rtol;
};

// A K-term fp32 sum of products of values in [-1,1] differs from the CPU's only in summation order:
// a few ulps (2^-24) of the partial sums per term at worst, typically sqrt(K) of them.
double sum_order_atol(int64_t K) { return 4.0 * double(K) * std::ldexp(1.0, -24); }

// An output `ref` stored in the activation dtype after a K-term reduction. bf16 and f16 add roundings
// to nearest of half an ulp each: cuBLASLt's epilogues (bias, GELU, DGELU) may round the fp32
// accumulator to the dtype before they apply, so an element sees up to two, relative to the magnitude
// of its terms (bounded by the output's largest magnitude), not to their possibly cancelling sum (seen
// on an H100 in bf16).
Tolerance activation_tolerance(DType dtype, int64_t K, const Tensor& ref) {
  const double half_ulp = testing::rounding_of(dtype);
  if (dtype == DType::f32) return {1e-6, sum_order_atol(K), 1e-5};
  return {2 * half_ulp, sum_order_atol(K) + half_ulp * testing::max_abs(ref), 2 * half_ulp};
}

// dweight and dbias are fp32 sums of products of bf16 or f16 values (8 or 11 significant bits), which
// are exact in fp32: both are held to the same bound as f32.
Tolerance parameter_grad_tolerance(int64_t K) { return {1e-6, sum_order_atol(K), 1e-5}; }

// Through the GELU epilogue: gelu' <= 1.13 scales the reduction's error, and cuBLASLt's GELU differs
// from the CPU's tanh-based one in the last bits (relative L2 2e-6 to 4e-6 seen on an H100 in f32).
Tolerance after_gelu(Tolerance t) { return {t.rel_l2 + 1e-5, 1.2 * t.atol + 1e-5, t.rtol}; }

void expect_matches(const Tensor& gpu, const Tensor& cpu, Tolerance t, const char* what) {
  testing::expect_matches_cpu(gpu, cpu, t.rel_l2, t.atol, t.rtol, what);
}

// "F32WithBias", "Bf16NoBias", "F16WithBias", ...
std::string dtype_and_bias_name(const ::testing::TestParamInfo<std::tuple<DType, bool>>& info) {
  std::string dtype(dtype_name(std::get<0>(info.param)));
  dtype[0] = char(std::toupper(static_cast<unsigned char>(dtype[0])));
  return dtype + (std::get<1>(info.param) ? "WithBias" : "NoBias");
}

class MatmulCuda : public testing::CudaTest, public ::testing::WithParamInterface<std::tuple<DType, bool>> {};

// Forward, then backward onto existing gradients, of x (2,T,100) through a (70,100) weight.
void check_linear_layer(DType dtype, bool with_bias, int64_t T) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  const int64_t B = 2, C = 100, OC = 70, N = B * T;
  const Tensor x = rounded_to(random_tensor({B, T, C}, seed), dtype);
  const Tensor dout = rounded_to(random_tensor({B, T, OC}, seed + 1), dtype);
  // weight: a view one element into a larger buffer, as parameters are views into one flat buffer
  const Tensor flat = rounded_to(random_tensor({OC * C + 1}, seed + 2), dtype);
  const Tensor weight = flat.view(1, {OC, C});
  const Tensor weight_gpu = to_gpu_as(flat, dtype).view(1, {OC, C});
  const Tensor bias = with_bias ? rounded_to(random_tensor({OC}, seed + 3), dtype) : Tensor();
  const Tensor bias_gpu = with_bias ? to_gpu_as(bias, dtype) : Tensor();
  const Tensor x_gpu = to_gpu_as(x, dtype), dout_gpu = to_gpu_as(dout, dtype);

  Tensor out = Tensor::zeros({B, T, OC});
  matmul_forward(out, x, weight, bias);
  Tensor out_gpu = testing::poisoned_gpu({B, T, OC}, dtype);
  matmul_forward(out_gpu, x_gpu, weight_gpu, bias_gpu);
  expect_matches(out_gpu, out, activation_tolerance(dtype, C, out), "matmul out");

  Tensor dx = Tensor::zeros({B, T, C}), dw = random_tensor({OC, C}, seed + 4);
  Tensor db = with_bias ? random_tensor({OC}, seed + 5) : Tensor();
  Tensor dx_gpu = testing::poisoned_gpu({B, T, C}, dtype), dw_gpu = to_gpu(dw);  // parameter grads: f32
  Tensor db_gpu = with_bias ? to_gpu(db) : Tensor();
  matmul_backward(dx, dw, db, dout, x, weight);
  matmul_backward(dx_gpu, dw_gpu, db_gpu, dout_gpu, x_gpu, weight_gpu);
  expect_matches(dx_gpu, dx, activation_tolerance(dtype, OC, dx), "matmul dx");
  expect_matches(dw_gpu, dw, parameter_grad_tolerance(N), "matmul dweight");
  if (with_bias) expect_matches(db_gpu, db, parameter_grad_tolerance(N), "matmul dbias");
}

// The fused GELU forward and DGELU backward of x (3,T,104) and a (72,104) weight against their CPU
// compositions.
void check_fused_gelu(DType dtype, bool with_bias, int64_t T) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  // C and OC multiples of 8 (the pre-GELU rows), N odd when T is; weight scaled so pre-GELU values are O(1)
  const int64_t B = 3, C = 104, OC = 72, N = B * T;
  const Tensor x = rounded_to(random_tensor({B, T, C}, seed), dtype);
  const Tensor weight = rounded_to(random_tensor({OC, C}, seed + 1, -0.3f, 0.3f), dtype);
  const Tensor bias = with_bias ? rounded_to(random_tensor({OC}, seed + 2), dtype) : Tensor();
  const Tensor x_gpu = to_gpu_as(x, dtype), weight_gpu = to_gpu_as(weight, dtype);
  const Tensor bias_gpu = with_bias ? to_gpu_as(bias, dtype) : Tensor();

  Tensor out = Tensor::zeros({B, T, OC}), pre = Tensor::zeros({B, T, OC});
  matmul_gelu_forward(out, pre, x, weight, bias);  // on the CPU: matmul_forward then gelu_forward
  Tensor out_gpu = testing::poisoned_gpu({B, T, OC}, dtype), pre_gpu = testing::poisoned_gpu({B, T, OC}, dtype);
  matmul_gelu_forward(out_gpu, pre_gpu, x_gpu, weight_gpu, bias_gpu);
  expect_matches(pre_gpu, pre, activation_tolerance(dtype, C, pre), "fused pre_gelu");
  expect_matches(out_gpu, out, after_gelu(activation_tolerance(dtype, C, pre)), "fused gelu out");

  // The layer after the GELU: its input x = gelu(x_pre_gelu); dx is the gradient of x_pre_gelu.
  const Tensor dout = rounded_to(random_tensor({B, T, OC}, seed + 3), dtype);
  const Tensor x_pre_gelu = rounded_to(random_tensor({B, T, C}, seed + 4, -3.0f, 3.0f), dtype);
  Tensor dx = Tensor::zeros({B, T, C}), dw = random_tensor({OC, C}, seed + 5);
  Tensor db = with_bias ? random_tensor({OC}, seed + 6) : Tensor();
  Tensor dx_gpu = testing::poisoned_gpu({B, T, C}, dtype), dw_gpu = to_gpu(dw);
  Tensor db_gpu = with_bias ? to_gpu(db) : Tensor();
  matmul_backward_dgelu(dx, dw, db, dout, x, weight, x_pre_gelu);  // matmul_backward then gelu_backward
  matmul_backward_dgelu(dx_gpu, dw_gpu, db_gpu, to_gpu_as(dout, dtype), x_gpu, weight_gpu,
                        to_gpu_as(x_pre_gelu, dtype));
  expect_matches(dx_gpu, dx, after_gelu(activation_tolerance(dtype, OC, dx)), "dgelu dx");
  expect_matches(dw_gpu, dw, parameter_grad_tolerance(N), "dgelu dweight");
  if (with_bias) expect_matches(db_gpu, db, parameter_grad_tolerance(N), "dgelu dbias");
}

TEST_P(MatmulCuda, ForwardAndBackwardMatchCpu) {
  const auto [dtype, with_bias] = GetParam();
  check_linear_layer(dtype, with_bias, 65);
}

TEST_P(MatmulCuda, FusedGeluOpsMatchTheirCpuCompositions) {
  const auto [dtype, with_bias] = GetParam();
  check_fused_gelu(dtype, with_bias, 41);
}

INSTANTIATE_TEST_SUITE_P(DTypeAndBias, MatmulCuda,
                         ::testing::Combine(::testing::Values(DType::f32, DType::bf16, DType::f16),
                                            ::testing::Bool()),
                         dtype_and_bias_name);

class MatmulCudaRules : public testing::CudaTest {};

// cuBLASLt's GELU epilogues need the pre-GELU matrix's leading dimension divisible by 8.
TEST_F(MatmulCudaRules, FusedGeluRefusesRowsNotAMultipleOf8) {
  for (const DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const int64_t N = 16, C = 100, OC = 70;
    const Tensor x = to_gpu_as(random_tensor({N, C}, 1), dtype), weight = to_gpu_as(random_tensor({OC, C}, 2), dtype);
    Tensor out = testing::poisoned_gpu({N, OC}, dtype), pre = testing::poisoned_gpu({N, OC}, dtype);
    const std::string forward = testing::error_of([&] { matmul_gelu_forward(out, pre, x, weight, Tensor()); });
    EXPECT_TRUE(testing::contains(forward, "OC = 70 to be a multiple of 8")) << forward;
    EXPECT_TRUE(testing::contains(forward, "x (16,100) times weight (70,100)")) << forward;

    Tensor dx = testing::poisoned_gpu({N, C}, dtype), dw = to_gpu(Tensor::zeros({OC, C})), db;
    const Tensor dout = to_gpu_as(random_tensor({N, OC}, 3), dtype), x_pre = to_gpu_as(random_tensor({N, C}, 4), dtype);
    const std::string backward =
        testing::error_of([&] { matmul_backward_dgelu(dx, dw, db, dout, x, weight, x_pre); });
    EXPECT_TRUE(testing::contains(backward, "C = 100 to be a multiple of 8")) << backward;
  }
}

// The bias gradient's column sums over many rows in uneven chunks (4099 rows) and 264 columns: a
// partial last column tile for the 16-byte loads (256 or 128 columns a tile) and, from a dout one
// element off 16 bytes, the scalar loads. Both match the CPU and give the same bits as each other.
TEST_F(MatmulCudaRules, BiasGradientMatchesCpuWithVectorAndScalarLoads) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  const int64_t N = 4099, C = 8, OC = 264;
  for (const DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor x = rounded_to(random_tensor({N, C}, seed), dtype);
    const Tensor dout = rounded_to(random_tensor({N, OC}, seed + 1), dtype);
    const Tensor weight = rounded_to(random_tensor({OC, C}, seed + 2), dtype);
    Tensor dx = Tensor::zeros({N, C}), dw = Tensor::zeros({OC, C}), db = random_tensor({OC}, seed + 3);
    const Tensor db_init = testing::copy_of(db);
    matmul_backward(dx, dw, db, dout, x, weight);
    Tensor db_by_kind[2];
    for (const bool aligned : {true, false}) {
      SCOPED_TRACE(aligned ? "aligned" : "misaligned");
      const Tensor dout_gpu = aligned ? to_gpu_as(dout, dtype) : testing::misaligned_gpu(dout, dtype);
      Tensor dx_gpu = testing::poisoned_gpu({N, C}, dtype), dw_gpu = to_gpu(Tensor::zeros({OC, C}));
      Tensor db_gpu = to_gpu(db_init);
      matmul_backward(dx_gpu, dw_gpu, db_gpu, dout_gpu, to_gpu_as(x, dtype), to_gpu_as(weight, dtype));
      expect_matches(db_gpu, db, parameter_grad_tolerance(N), "matmul dbias");
      db_by_kind[aligned ? 0 : 1] = testing::to_cpu(db_gpu);
    }
    for (int64_t c = 0; c < OC; c++)
      ASSERT_EQ(db_by_kind[0].f32()[c], db_by_kind[1].f32()[c]) << "dbias[" << c << "]: vector and scalar loads differ";
  }
}

// Tuned matmuls (ops/matmul_tuning.h) time cuBLASLt's candidates on the call's own operands: the
// results still match the CPU (the accumulated dweight too, which the timed runs added to and which
// is put back, and dbias), and each shape timed is recorded. Shapes no other test uses, so none is
// planned already.
TEST_F(MatmulCudaRules, TunedMatmulsMatchCpuAndAreRecorded) {
  struct TuningScope {
    TuningScope() { set_matmul_tuning(8); }
    ~TuningScope() { set_matmul_tuning(1); }
  } tuning;
  const size_t before = matmul_tuning_records().size();
  for (const DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dtype));
    check_linear_layer(dtype, /*with_bias=*/true, 67);
    check_linear_layer(dtype, /*with_bias=*/false, 69);  // a plain GEMM: surely more than one candidate
    check_fused_gelu(dtype, /*with_bias=*/true, 43);
  }
  const std::vector<MatmulTuningRecord> records = matmul_tuning_records();
  ASSERT_GT(records.size(), before) << "no shape offered cuBLASLt more than one candidate";
  bool accumulating = false;
  for (size_t i = before; i < records.size(); ++i) {
    const MatmulTuningRecord& r = records[i];
    SCOPED_TRACE(r.problem);
    EXPECT_GE(r.timed, 2);
    EXPECT_LE(r.timed, 8);
    EXPECT_GE(r.chosen, 0);
    EXPECT_LT(r.chosen, r.timed);
    EXPECT_TRUE(std::isfinite(r.best_us) && r.best_us > 0) << r.best_us;
    EXPECT_LE(r.best_us, r.first_us);
    accumulating |= r.problem.find("A/B f32") == std::string::npos && r.problem.find("D f32") != std::string::npos;
  }
  EXPECT_TRUE(accumulating) << "no weight-gradient GEMM (16-bit operands, f32 D accumulated) was timed";
  EXPECT_NE(matmul_tuning_summary(records).find(std::to_string(records.size()) + " problems timed"),
            std::string::npos);
}

#ifdef TESSERA_WITH_CUDA
// Both results back on the host in f32 (bf16 and f16 widen exactly), element for element identical.
void expect_bitwise_equal(const Tensor& a_gpu, const Tensor& b_gpu, const char* what) {
  testing::expect_identical(testing::to_f32(testing::to_cpu(a_gpu)), testing::to_f32(testing::to_cpu(b_gpu)), what);
}

// A repeated problem reuses its plan (no new heuristic call) and gives bitwise the same result; a
// differently aligned operand is another problem, so it gets its own plan.
TEST_F(MatmulCudaRules, PlanCacheHitsGiveBitwiseTheSameResult) {
  for (const DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const int64_t N = 57, C = 48, OC = 40;  // a shape no other test uses
    const Tensor x = to_gpu_as(random_tensor({N, C}, 5), dtype), bias = to_gpu_as(random_tensor({OC}, 6), dtype);
    const Tensor flat = to_gpu_as(random_tensor({OC * C + 1}, 7), dtype);
    const Tensor weight = flat.view(0, {OC, C}), weight_offset = flat.view(1, {OC, C});
    Tensor first = testing::poisoned_gpu({N, OC}, dtype), second = testing::poisoned_gpu({N, OC}, dtype);

    matmul_forward(first, x, weight, bias);
    const cuda::MatmulPlanCacheStats before = cuda::matmul_plan_cache_stats();
    matmul_forward(second, x, weight, bias);
    const cuda::MatmulPlanCacheStats after = cuda::matmul_plan_cache_stats();
    EXPECT_EQ(after.misses, before.misses);
    EXPECT_EQ(after.hits, before.hits + 1);
    expect_bitwise_equal(first, second, "forward, second call");

    Tensor third = testing::poisoned_gpu({N, OC}, dtype);
    matmul_forward(third, x, weight_offset, bias);
    EXPECT_EQ(cuda::matmul_plan_cache_stats().misses, after.misses + 1) << "a new alignment is a new plan";

    const Tensor dout = to_gpu_as(random_tensor({N, OC}, 8), dtype);
    Tensor dx1 = testing::poisoned_gpu({N, C}, dtype), dx2 = testing::poisoned_gpu({N, C}, dtype);
    Tensor dw1 = to_gpu(Tensor::zeros({OC, C})), dw2 = to_gpu(Tensor::zeros({OC, C})), db;
    matmul_backward(dx1, dw1, db, dout, x, weight);
    matmul_backward(dx2, dw2, db, dout, x, weight);
    expect_bitwise_equal(dx1, dx2, "dx, second call");
    expect_bitwise_equal(dw1, dw2, "dweight, second call");
  }
}
#endif

}  // namespace
}  // namespace tessera
