// The tensor-core attention launchers, in bf16 and in f16, against the fp32 CPU op on the same rounded
// inputs: out, lse and dqkv written over NaN poison, for HS = 32, 64, 128, on T not a multiple of the
// 64-row tile, T = 1, GPT-2 small's T = 1024, NH = 12, and grouped-query heads (a kv head shared by 2 to
// 8 query heads); dqkv bit for bit from run to run; head sizes and pointers the kernels do not cover
// reported as unsupported, and refused by the launchers before anything is written.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "cuda/attention_cases.h"
#include "cuda/cuda_testing.h"
#include "ops/attention.h"

#ifdef TESSERA_WITH_CUDA
#include "ops/cuda/attention_tc_cuda.h"
#include "ops/cuda/storage_types.h"
#endif

namespace tessera {
namespace {

#ifdef TESSERA_WITH_CUDA

using cuda::typed_data;
using testing::random_tensor;
using testing::rounded_to;
using testing::to_gpu_as;

using testing::AttentionCase;

// fn(E{}) with E the launchers' element type for a 16-bit dtype: __nv_bfloat16 or __half (the launchers
// have no float instance, so cuda::with_storage_type, which also dispatches f32, does not fit here).
template <typename Fn>
void with_element_type(DType dtype, Fn&& fn) {
  if (dtype == DType::bf16)
    fn(__nv_bfloat16{});
  else
    fn(__half{});
}

// An output in `dtype` against its fp32 reference: P (forward) and dS (backward) enter their products
// rounded to the dtype (up to half an ulp each) and the result is rounded once more, so an element is
// held to two half-ulps of itself plus one of the tensor's largest magnitude (sums over up to T keys may
// cancel), the whole to 1e-2 for bf16 (for f16 scaled by its rounding).
void expect_close(const Tensor& gpu, const Tensor& cpu, DType dtype, const char* what) {
  const double rounding = testing::rounding_of(dtype);
  testing::expect_matches_cpu(gpu, cpu, testing::scaled_from_bf16(1e-2, dtype), rounding * testing::max_abs(cpu),
                              2 * rounding, what);
}

class AttentionTcCuda : public testing::CudaTest, public ::testing::WithParamInterface<AttentionCase> {};

TEST_P(AttentionTcCuda, ForwardAndBackwardMatchCpu) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  const AttentionCase c = GetParam();
  const auto [B, T, NH, HS, NKV] = c;
  const int64_t C = NH * HS, W = c.qkv_width(), KV = c.kv_heads();
  for (const DType dtype : testing::kLowPrecisionDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    with_element_type(dtype, [&]<typename E>(E) {
      const Tensor qkv = rounded_to(random_tensor({B, T, W}, seed, -2.0f, 2.0f), dtype);
      const Tensor dout = rounded_to(random_tensor({B, T, C}, seed + 1), dtype);
      Tensor out = Tensor::zeros({B, T, C}), lse = Tensor::zeros({B, NH, T});
      attention_forward(out, lse, qkv, int(NH), int(NKV));

      const Tensor qkv_gpu = to_gpu_as(qkv, dtype);
      Tensor out_gpu = testing::poisoned_gpu({B, T, C}, dtype), lse_gpu = testing::poisoned_gpu({B, NH, T});
      ASSERT_TRUE(cuda::attention_tc_supported(HS, {out_gpu.raw_data(), lse_gpu.raw_data(), qkv_gpu.raw_data()}));
      cuda::attention_tc_forward(typed_data<E>(out_gpu), lse_gpu.f32(), typed_data<E>(qkv_gpu), B, T, C, NH, KV,
                                 cuda_compute_stream());
      expect_close(out_gpu, out, dtype, "attention_tc out");
      // Scores are fp32 sums of exact products of 16-bit values and the softmax sum is over fp32
      // exponentials (P is rounded only where it meets v), so lse stays near fp32: a margin for
      // tensor-core fp32 accumulation.
      testing::expect_matches_cpu(lse_gpu, lse, 1e-5, 1e-4, 1e-4, "attention_tc lse");

      // Both backward passes start from the CPU's out (rounded to the dtype, as the GPU stores it) and lse.
      const Tensor out_rounded = rounded_to(out, dtype);
      Tensor dqkv = Tensor::zeros({B, T, W});
      attention_backward(dqkv, dout, qkv, out_rounded, lse, int(NH), int(NKV));
      const Tensor dout_gpu = to_gpu_as(dout, dtype), out_ref_gpu = to_gpu_as(out_rounded, dtype);
      const Tensor lse_ref_gpu = testing::to_gpu(lse);
      Tensor dqkv_gpu = testing::poisoned_gpu({B, T, W}, dtype);
      cuda::attention_tc_backward(typed_data<E>(dqkv_gpu), typed_data<E>(dout_gpu), typed_data<E>(qkv_gpu),
                                  typed_data<E>(out_ref_gpu), lse_ref_gpu.f32(), B, T, C, NH, KV,
                                  cuda_compute_stream());
      expect_close(dqkv_gpu, dqkv, dtype, "attention_tc dqkv");
    });
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionTcCuda,
                         ::testing::Values(AttentionCase{2, 131, 3, 64}, AttentionCase{1, 1024, 12, 64},
                                           AttentionCase{1, 1, 2, 64}, AttentionCase{2, 200, 2, 128},
                                           AttentionCase{1, 70, 2, 32}, AttentionCase{1, 64, 1, 64},
                                           AttentionCase{2, 131, 4, 64, 2}, AttentionCase{1, 200, 8, 128, 1},
                                           AttentionCase{1, 70, 6, 32, 2}),
                         testing::attention_case_name);

using AttentionTcCudaRuns = testing::CudaTest;

TEST_F(AttentionTcCudaRuns, BackwardIsBitwiseDeterministic) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  const int64_t B = 2, T = 200, NH = 2, HS = 64, C = NH * HS;
  for (const DType dtype : testing::kLowPrecisionDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    with_element_type(dtype, [&]<typename E>(E) {
      const Tensor qkv = to_gpu_as(random_tensor({B, T, 3 * C}, seed, -2.0f, 2.0f), dtype);
      const Tensor dout = to_gpu_as(random_tensor({B, T, C}, seed + 1), dtype);
      Tensor out = testing::poisoned_gpu({B, T, C}, dtype), lse = testing::poisoned_gpu({B, NH, T});
      cuda::attention_tc_forward(typed_data<E>(out), lse.f32(), typed_data<E>(qkv), B, T, C, NH, NH,
                                 cuda_compute_stream());
      Tensor dqkv[2] = {testing::poisoned_gpu({B, T, 3 * C}, dtype), testing::poisoned_gpu({B, T, 3 * C}, dtype)};
      for (Tensor& d : dqkv)
        cuda::attention_tc_backward(typed_data<E>(d), typed_data<E>(dout), typed_data<E>(qkv), typed_data<E>(out),
                                    lse.f32(), B, T, C, NH, NH, cuda_compute_stream());
      const Tensor first = testing::to_cpu(dqkv[0]), second = testing::to_cpu(dqkv[1]);
      ASSERT_EQ(std::memcmp(first.raw_data(), second.raw_data(), size_t(first.numel()) * dtype_size(dtype)), 0);
    });
  }
}

TEST_F(AttentionTcCudaRuns, UncoveredHeadSizesAndPointersAreUnsupported) {
  const Tensor t = testing::poisoned_gpu({64});
  const char* p = static_cast<const char*>(t.raw_data());
  for (const int64_t HS : {32, 64, 128}) EXPECT_TRUE(cuda::attention_tc_supported(HS, {p})) << HS;
  for (const int64_t HS : {8, 16, 48, 80, 96, 256}) EXPECT_FALSE(cuda::attention_tc_supported(HS, {p})) << HS;
  EXPECT_FALSE(cuda::attention_tc_supported(64, {p, p + 2})) << "a pointer 2 bytes past a 16-byte boundary";
}

TEST_F(AttentionTcCudaRuns, LaunchersRefuseUncoveredHeadSizesBeforeWriting) {
  const int64_t B = 1, T = 10, NH = 2, HS = 16, C = NH * HS;
  for (const DType dtype : testing::kLowPrecisionDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    with_element_type(dtype, [&]<typename E>(E) {
      const Tensor qkv = to_gpu_as(random_tensor({B, T, 3 * C}, 81), dtype);
      const Tensor dout = to_gpu_as(random_tensor({B, T, C}, 82), dtype);
      Tensor out = testing::poisoned_gpu({B, T, C}, dtype), lse = testing::poisoned_gpu({B, NH, T});
      Tensor dqkv = testing::poisoned_gpu({B, T, 3 * C}, dtype);
      const std::string message = testing::error_of([&] {
        cuda::attention_tc_forward(typed_data<E>(out), lse.f32(), typed_data<E>(qkv), B, T, C, NH, NH,
                                   cuda_compute_stream());
      });
      EXPECT_TRUE(testing::contains(message, "attention_tc_supported")) << message;
      EXPECT_THROW(cuda::attention_tc_backward(typed_data<E>(dqkv), typed_data<E>(dout), typed_data<E>(qkv),
                                               typed_data<E>(out), lse.f32(), B, T, C, NH, NH,
                                               cuda_compute_stream()),
                   Error);
      for (const Tensor* t : {&out, &lse, &dqkv}) {
        const Tensor host = testing::to_f32(testing::to_cpu(*t));
        for (int64_t i = 0; i < host.numel(); i++) ASSERT_TRUE(std::isnan(host.f32()[i])) << i;
      }
    });
  }
}

#endif  // TESSERA_WITH_CUDA

}  // namespace
}  // namespace tessera
