// The cuDNN fused-attention launchers, in bf16 and in f16, against the fp32 CPU op on the same rounded
// inputs: out, lse and dqkv written over NaN poison on the tensor-core kernels' shapes (attention_cases.h),
// the backward's dq written directly and summed in an fp32 accumulator; dqkv bit for bit from run to run
// (the deterministic backward asks for deterministic engines); attention_forward and
// attention_backward with the cudnn or auto kernel chosen give the launchers' results bit for bit, and with
// document masks the tensor-core kernels', and above the workspace limit (deterministic) too; head sizes and
// pointers cuDNN does not cover reported as unsupported. Skipped without a GPU; absent without cuDNN.
#include <gtest/gtest.h>

#include <cstdint>

#include "cuda/cuda_testing.h"
#include "ops/attention.h"
#include "ops/deterministic_kernels.h"

#ifdef TESSERA_WITH_CUDNN
#include "cuda/attention_testing.h"
#include "ops/cuda/attention_cudnn_cuda.h"
#include "ops/cuda/attention_tc_cuda.h"
#include "ops/cuda/storage_types.h"
#endif

namespace tessera {
namespace {

#ifdef TESSERA_WITH_CUDNN

using cuda::typed_data;
using testing::AttentionCase;
using testing::AttentionKernelScope;
using testing::expect_bitwise_equal;
using testing::poisoned_gpu;
using testing::with_element_type;

class AttentionCudnnCuda : public testing::CudaTest, public ::testing::WithParamInterface<AttentionCase> {};

// The launchers against the CPU, with the backward's dq written directly (deterministic) or summed in the
// fp32 accumulator.
void expect_cudnn_matches_cpu(const AttentionCase& c, bool deterministic) {
  const auto [B, T, NH, HS, NKV] = c;
  const int64_t C = NH * HS, KV = c.kv_heads();
  testing::expect_kernel_matches_cpu(
      c, deterministic ? "attention_cudnn" : "attention_cudnn (dq accumulated)",
      [&]<typename E>(E, Tensor& out, Tensor& lse, const Tensor& qkv) {
        ASSERT_TRUE(cuda::attention_cudnn_supported(HS, {out.raw_data(), lse.raw_data(), qkv.raw_data()}));
        cuda::attention_cudnn_forward(typed_data<E>(out), lse.f32(), typed_data<E>(qkv), B, T, C, NH, KV,
                                      cuda_compute_stream());
      },
      [&]<typename E>(E, Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse) {
        cuda::attention_cudnn_backward(typed_data<E>(dqkv), typed_data<E>(dout), typed_data<E>(qkv),
                                       typed_data<E>(out), lse.f32(), B, T, C, NH, KV, deterministic,
                                       cuda_compute_stream());
      },
      // cuDNN rounds each query head's dk and dv to the dtype before summing a kv head's group.
      double(NH / KV));
}

TEST_P(AttentionCudnnCuda, ForwardAndBackwardMatchCpu) { expect_cudnn_matches_cpu(GetParam(), true); }

TEST_P(AttentionCudnnCuda, BackwardWithDqAccumulatedMatchesCpu) { expect_cudnn_matches_cpu(GetParam(), false); }

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionCudnnCuda, ::testing::ValuesIn(testing::kAttention16BitCases),
                         testing::attention_case_name);

using AttentionCudnnCudaRuns = testing::CudaTest;

// Grouped-query heads, T not a multiple of 128: the backward's padding-mask path on older cuDNN.
constexpr AttentionCase kRunCase{2, 200, 4, 64, 2};

TEST_F(AttentionCudnnCudaRuns, BackwardIsBitwiseDeterministic) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  const auto [B, T, NH, HS, NKV] = kRunCase;
  const int64_t C = NH * HS, W = kRunCase.qkv_width();
  for (const DType dtype : testing::kLowPrecisionDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    with_element_type(dtype, [&]<typename E>(E) {
      const testing::AttentionInputs in = testing::random_attention_inputs(kRunCase, dtype, seed);
      Tensor out = poisoned_gpu({B, T, C}, dtype), lse = poisoned_gpu({B, NH, T});
      cuda::attention_cudnn_forward(typed_data<E>(out), lse.f32(), typed_data<E>(in.qkv), B, T, C, NH, NKV,
                                    cuda_compute_stream());
      Tensor dqkv[2] = {poisoned_gpu({B, T, W}, dtype), poisoned_gpu({B, T, W}, dtype)};
      for (Tensor& d : dqkv)
        cuda::attention_cudnn_backward(typed_data<E>(d), typed_data<E>(in.dout), typed_data<E>(in.qkv),
                                       typed_data<E>(out), lse.f32(), B, T, C, NH, NKV, /*deterministic=*/true,
                                       cuda_compute_stream());
      expect_bitwise_equal(dqkv[0], dqkv[1], "dqkv of two runs");
    });
  }
}

// The op on cudnn, and on auto where this cuDNN release is usable, runs cuDNN's launchers bit for bit.
TEST_F(AttentionCudnnCudaRuns, ChosenKernelRunsTheLaunchers) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  const auto [B, T, NH, HS, NKV] = kRunCase;
  const int64_t C = NH * HS, W = kRunCase.qkv_width();
  ASSERT_TRUE(cuda::attention_cudnn_release_usable()) << "the GPU machine's cuDNN has known fused-attention bugs";
  for (const AttentionKernel kernel : {AttentionKernel::cudnn, AttentionKernel::automatic}) {
    SCOPED_TRACE(attention_kernel_name(kernel));
    const AttentionKernelScope chosen(kernel);
    for (const DType dtype : testing::kLowPrecisionDTypes) {
      SCOPED_TRACE(dtype_name(dtype));
      with_element_type(dtype, [&]<typename E>(E) {
        const testing::AttentionInputs in = testing::random_attention_inputs(kRunCase, dtype, seed);
        Tensor out_op = poisoned_gpu({B, T, C}, dtype), lse_op = poisoned_gpu({B, NH, T});
        Tensor out = poisoned_gpu({B, T, C}, dtype), lse = poisoned_gpu({B, NH, T});
        attention_forward(out_op, lse_op, in.qkv, int(NH), int(NKV));
        cuda::attention_cudnn_forward(typed_data<E>(out), lse.f32(), typed_data<E>(in.qkv), B, T, C, NH, NKV,
                                      cuda_compute_stream());
        expect_bitwise_equal(out_op, out, "out");
        expect_bitwise_equal(lse_op, lse, "lse");

        Tensor dqkv_op = poisoned_gpu({B, T, W}, dtype), dqkv = poisoned_gpu({B, T, W}, dtype);
        attention_backward(dqkv_op, in.dout, in.qkv, out, lse, int(NH), int(NKV));
        cuda::attention_cudnn_backward(typed_data<E>(dqkv), typed_data<E>(in.dout), typed_data<E>(in.qkv),
                                       typed_data<E>(out), lse.f32(), B, T, C, NH, NKV, /*deterministic=*/true,
                                       cuda_compute_stream());
        expect_bitwise_equal(dqkv_op, dqkv, "dqkv");
      });
    }
  }
}

// Document masks are not cuDNN's: under auto (and cudnn) a masked call runs Tessera's tensor-core kernels.
TEST_F(AttentionCudnnCudaRuns, DocumentMaskedCallsRunTheTensorCoreKernels) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  const auto [B, T, NH, HS, NKV] = kRunCase;
  const int64_t C = NH * HS;
  const Tensor starts = testing::to_gpu(testing::doc_starts_of_lengths(T, {{70, 130}, {200}}));
  const int32_t* docs = starts.data<int32_t>();
  for (const AttentionKernel kernel : {AttentionKernel::cudnn, AttentionKernel::automatic}) {
    SCOPED_TRACE(attention_kernel_name(kernel));
    const AttentionKernelScope chosen(kernel);
    const DType dtype = DType::bf16;
    const testing::AttentionInputs in = testing::random_attention_inputs(kRunCase, dtype, seed);
    Tensor out_op = poisoned_gpu({B, T, C}, dtype), lse_op = poisoned_gpu({B, NH, T});
    Tensor out = poisoned_gpu({B, T, C}, dtype), lse = poisoned_gpu({B, NH, T});
    attention_forward(out_op, lse_op, in.qkv, int(NH), int(NKV), starts);
    cuda::attention_tc_forward(typed_data<__nv_bfloat16>(out), lse.f32(), typed_data<__nv_bfloat16>(in.qkv), B, T,
                               C, NH, NKV, docs, cuda_compute_stream());
    expect_bitwise_equal(out_op, out, "out");
    expect_bitwise_equal(lse_op, lse, "lse");
  }
}

// auto leaves cuDNN where its deterministic backward's workspace (dS of every head) would pass 2 GiB:
// one 8,192-token sequence of 32 heads (4 GiB) runs on the tensor-core kernels, bit for bit; with
// --nondeterministic (no dS kept) it goes back to cuDNN.
TEST_F(AttentionCudnnCudaRuns, AutoLeavesCudnnAboveTheWorkspaceLimit) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  const AttentionCase big{1, 8192, 32, 64};
  const auto [B, T, NH, HS, NKV] = big;
  const int64_t C = NH * HS;
  ASSERT_GT(cudnn_attention_workspace_bytes(B, NH, T, HS, true), kCudnnAttentionWorkspaceLimit);
  const AttentionKernelScope chosen(AttentionKernel::automatic);
  const DType dtype = DType::bf16;
  using E = __nv_bfloat16;
  const testing::AttentionInputs in = testing::random_attention_inputs(big, dtype, seed);
  Tensor out_op = poisoned_gpu({B, T, C}, dtype), lse_op = poisoned_gpu({B, NH, T});
  Tensor out = poisoned_gpu({B, T, C}, dtype), lse = poisoned_gpu({B, NH, T});
  EXPECT_EQ(attention_kernel_for(B, NH, T, HS, false), AttentionKernel::tessera);
  EXPECT_EQ(attention_kernel_for(B, NH, 1024, HS, false), AttentionKernel::cudnn) << "64 MiB at T=1024";
  attention_forward(out_op, lse_op, in.qkv, int(NH));
  cuda::attention_tc_forward(typed_data<E>(out), lse.f32(), typed_data<E>(in.qkv), B, T, C, NH, NH, nullptr,
                             cuda_compute_stream());
  expect_bitwise_equal(out_op, out, "out, auto against the tensor-core kernels");
  expect_bitwise_equal(lse_op, lse, "lse, auto against the tensor-core kernels");

  {
    struct Nondeterministic {
      Nondeterministic() { set_deterministic_kernels(false); }
      ~Nondeterministic() { set_deterministic_kernels(true); }
    } scope;
    EXPECT_EQ(attention_kernel_for(B, NH, T, HS, false), AttentionKernel::cudnn);
    attention_forward(out_op, lse_op, in.qkv, int(NH));
  }
  cuda::attention_cudnn_forward(typed_data<E>(out), lse.f32(), typed_data<E>(in.qkv), B, T, C, NH, NH,
                                cuda_compute_stream());
  expect_bitwise_equal(out_op, out, "out, auto --nondeterministic against cuDNN");
  expect_bitwise_equal(lse_op, lse, "lse, auto --nondeterministic against cuDNN");
}

TEST_F(AttentionCudnnCudaRuns, UncoveredHeadSizesAndPointersAreUnsupported) {
  const Tensor t = poisoned_gpu({64});
  const char* p = static_cast<const char*>(t.raw_data());
  for (const int64_t HS : {8, 16, 32, 48, 64, 80, 96, 128}) EXPECT_TRUE(cuda::attention_cudnn_supported(HS, {p})) << HS;
  for (const int64_t HS : {0, 4, 12, 136, 256}) EXPECT_FALSE(cuda::attention_cudnn_supported(HS, {p})) << HS;
  EXPECT_FALSE(cuda::attention_cudnn_supported(64, {p, p + 2})) << "a pointer 2 bytes past a 16-byte boundary";
}

#endif  // TESSERA_WITH_CUDNN

}  // namespace
}  // namespace tessera
