// Causal attention on the GPU against the CPU: out, lse and dqkv written over NaN poison, for every
// head size with a kernel, on shapes spanning several 64-row tiles with T not a multiple of 64 (and
// GPT-2 small's T = 1024, NH = 12; grouped-query heads too), in fp32 and in bf16 and f16 storage (against
// the fp32 CPU op on the same rounded inputs), without and with document masks (packed sequences); dqkv
// bit for bit from run to run in all three; a head size without a kernel or a misaligned tensor throws
// before anything is written; bf16 and f16 on the CPU are refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "cuda/attention_cases.h"
#include "cuda/cuda_testing.h"
#include "ops/attention.h"

namespace tessera {
namespace {

using testing::random_tensor;
using testing::to_gpu;

using testing::AttentionCase;
using testing::DocumentCase;

// Per element (atol and rtol alike): fp32 rounding over the reductions behind it, HS terms for a
// score and up to T for a softmax sum or a sum over keys or queries, with a margin of 4.
double tolerance_for(int64_t T, int64_t HS) { return 4.0 * double(T + HS) * std::ldexp(1.0, -24); }

// An output in `dtype` (bf16 or f16) of the GPU against the f32 CPU op on the same inputs: the GPU's
// fp32 result is within the fp32 tolerance `tol` of the CPU's (relative to the largest element, whose
// size the terms of a sum near zero share), then rounded once to the dtype.
void expect_rounded_matches_cpu(const Tensor& gpu, const Tensor& cpu, DType dtype, double tol, const char* what) {
  testing::expect_matches_cpu(gpu, cpu, testing::scaled_from_bf16(1e-2, dtype), tol * testing::max_abs(cpu),
                              testing::rounding_of(dtype) + tol, what);
}

// Head sizes the op sends to the tensor-core kernels (attention_tc.cu) in bf16 and f16: there P and dS
// also enter their products in the 16-bit dtype, so outputs carry one more rounding, relative to the
// magnitude of the terms (tests/cuda/test_attention_tc_cuda.cpp holds those kernels to the same bound).
bool on_tensor_cores(int64_t HS) { return HS == 32 || HS == 64 || HS == 128; }

void expect_tensor_core_matches_cpu(const Tensor& gpu, const Tensor& cpu, DType dtype, const char* what) {
  const double rounding = testing::rounding_of(dtype);
  testing::expect_matches_cpu(gpu, cpu, testing::scaled_from_bf16(1e-2, dtype), rounding * testing::max_abs(cpu),
                              2 * rounding, what);
}

// fp32 on the GPU against the CPU op on a case, with document masks when the host doc_starts (B,T) is
// defined (the GPU gets a copy).
void expect_f32_matches_cpu(const AttentionCase& c, const Tensor& doc_starts) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  const auto [B, T, NH, HS, NKV] = c;
  const int64_t C = NH * HS, W = c.qkv_width();
  const Tensor docs_gpu = doc_starts.defined() ? to_gpu(doc_starts) : Tensor{};
  const Tensor qkv = random_tensor({B, T, W}, seed, -2.0f, 2.0f), dout = random_tensor({B, T, C}, seed + 1);
  Tensor out = Tensor::zeros({B, T, C}), lse = Tensor::zeros({B, NH, T});
  attention_forward(out, lse, qkv, int(NH), int(NKV), doc_starts);
  Tensor out_gpu = testing::poisoned_gpu({B, T, C}), lse_gpu = testing::poisoned_gpu({B, NH, T});
  const Tensor qkv_gpu = to_gpu(qkv);
  attention_forward(out_gpu, lse_gpu, qkv_gpu, int(NH), int(NKV), docs_gpu);
  const double tol = tolerance_for(T, HS);
  testing::expect_matches_cpu(out_gpu, out, 1e-5, tol, tol, "attention out");
  testing::expect_matches_cpu(lse_gpu, lse, 1e-5, tol, tol, "attention lse");

  // Both backward passes start from the CPU's out and lse, so they compute the same function.
  Tensor dqkv = Tensor::zeros({B, T, W}), dqkv_gpu = testing::poisoned_gpu({B, T, W});
  attention_backward(dqkv, dout, qkv, out, lse, int(NH), int(NKV), doc_starts);
  attention_backward(dqkv_gpu, to_gpu(dout), qkv_gpu, to_gpu(out), to_gpu(lse), int(NH), int(NKV), docs_gpu);
  testing::expect_matches_cpu(dqkv_gpu, dqkv, 1e-5, tol, tol, "attention dqkv");
}

// bf16 or f16 storage, fp32 arithmetic: the same function of the rounded inputs as the fp32 CPU op,
// with each output rounded once; lse stays fp32 and keeps the fp32 tolerance. doc_starts as above.
void expect_low_precision_matches_cpu(const AttentionCase& c, const Tensor& doc_starts) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  const auto [B, T, NH, HS, NKV] = c;
  const Tensor docs_gpu = doc_starts.defined() ? to_gpu(doc_starts) : Tensor{};
  const int64_t C = NH * HS, W = c.qkv_width();
  const double tol = tolerance_for(T, HS);
  for (const DType dtype : testing::kLowPrecisionDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor qkv = testing::rounded_to(random_tensor({B, T, W}, seed, -2.0f, 2.0f), dtype);
    const Tensor dout = testing::rounded_to(random_tensor({B, T, C}, seed + 1), dtype);
    Tensor out = Tensor::zeros({B, T, C}), lse = Tensor::zeros({B, NH, T});
    attention_forward(out, lse, qkv, int(NH), int(NKV), doc_starts);
    Tensor out_gpu = testing::poisoned_gpu({B, T, C}, dtype), lse_gpu = testing::poisoned_gpu({B, NH, T});
    const Tensor qkv_gpu = testing::to_gpu_as(qkv, dtype);
    attention_forward(out_gpu, lse_gpu, qkv_gpu, int(NH), int(NKV), docs_gpu);
    auto expect_rounded = [&](const Tensor& gpu, const Tensor& cpu, const char* what) {
      if (on_tensor_cores(HS)) return expect_tensor_core_matches_cpu(gpu, cpu, dtype, what);
      expect_rounded_matches_cpu(gpu, cpu, dtype, tol, what);
    };
    expect_rounded(out_gpu, out, "attention out");
    const double lse_tol = on_tensor_cores(HS) ? 1e-4 : tol;  // tensor-core fp32 accumulation order
    testing::expect_matches_cpu(lse_gpu, lse, 1e-5, lse_tol, lse_tol, "attention lse");

    // Both backward passes start from the CPU's out, rounded to the dtype as the forward stores it, and lse.
    const Tensor out_rounded = testing::rounded_to(out, dtype);
    Tensor dqkv = Tensor::zeros({B, T, W}), dqkv_gpu = testing::poisoned_gpu({B, T, W}, dtype);
    attention_backward(dqkv, dout, qkv, out_rounded, lse, int(NH), int(NKV), doc_starts);
    attention_backward(dqkv_gpu, testing::to_gpu_as(dout, dtype), qkv_gpu, testing::to_gpu_as(out_rounded, dtype),
                       to_gpu(lse), int(NH), int(NKV), docs_gpu);
    expect_rounded(dqkv_gpu, dqkv, "attention dqkv");
  }
}

// Tessera's own kernels, whatever the process-wide choice (cuDNN's have their own tests).
class TesseraAttentionTest : public testing::CudaTest {
  const testing::AttentionKernelScope tessera_{AttentionKernel::tessera};
};

class AttentionCuda : public TesseraAttentionTest, public ::testing::WithParamInterface<AttentionCase> {};

TEST_P(AttentionCuda, ForwardAndBackwardMatchCpu) { expect_f32_matches_cpu(GetParam(), {}); }
TEST_P(AttentionCuda, LowPrecisionMatchesCpuOnRoundedInputs) { expect_low_precision_matches_cpu(GetParam(), {}); }

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionCuda,
                         ::testing::Values(AttentionCase{2, 131, 3, 16}, AttentionCase{1, 70, 2, 32},
                                           AttentionCase{1, 257, 4, 48}, AttentionCase{2, 200, 2, 64},
                                           AttentionCase{1, 65, 1, 80}, AttentionCase{1, 130, 1, 96},
                                           AttentionCase{1, 64, 1, 128}, AttentionCase{1, 1, 2, 64},
                                           AttentionCase{1, 1024, 12, 64}, AttentionCase{2, 131, 6, 16, 2},
                                           AttentionCase{1, 200, 4, 48, 1}, AttentionCase{1, 130, 4, 64, 2}),
                         testing::attention_case_name);

// Packed sequences: the same checks with document masks, on the CUDA-core kernels (f32; bf16 and f16 at
// HS = 16, 48) and the tensor-core ones (bf16 and f16 at HS = 64, 128).
class AttentionDocumentsCuda : public TesseraAttentionTest, public ::testing::WithParamInterface<DocumentCase> {};

TEST_P(AttentionDocumentsCuda, ForwardAndBackwardMatchCpu) {
  const DocumentCase& c = GetParam();
  expect_f32_matches_cpu(c.shape, testing::doc_starts_of_lengths(c.shape.T, c.lengths));
}
TEST_P(AttentionDocumentsCuda, LowPrecisionMatchesCpuOnRoundedInputs) {
  const DocumentCase& c = GetParam();
  expect_low_precision_matches_cpu(c.shape, testing::doc_starts_of_lengths(c.shape.T, c.lengths));
}

std::vector<DocumentCase> op_document_cases() {
  std::vector<DocumentCase> all;
  for (const auto& cases : {testing::document_cases(3, 16), testing::document_cases(4, 48, 2),
                            testing::document_cases(2, 64), testing::document_cases(4, 128, 1)})
    all.insert(all.end(), cases.begin(), cases.end());
  return all;
}
INSTANTIATE_TEST_SUITE_P(Packed, AttentionDocumentsCuda, ::testing::ValuesIn(op_document_cases()),
                         testing::document_case_name);

using AttentionCudaRuns = TesseraAttentionTest;

TEST_F(AttentionCudaRuns, BackwardIsBitwiseDeterministic) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  const int64_t B = 2, T = 200, NH = 2, C = 128;
  for (const DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor qkv = testing::to_gpu_as(random_tensor({B, T, 3 * C}, seed, -2.0f, 2.0f), dtype);
    const Tensor dout = testing::to_gpu_as(random_tensor({B, T, C}, seed + 1), dtype);
    Tensor out = testing::poisoned_gpu({B, T, C}, dtype), lse = testing::poisoned_gpu({B, NH, T});
    attention_forward(out, lse, qkv, int(NH));
    Tensor dqkv[2] = {testing::poisoned_gpu({B, T, 3 * C}, dtype), testing::poisoned_gpu({B, T, 3 * C}, dtype)};
    for (Tensor& d : dqkv) attention_backward(d, dout, qkv, out, lse, int(NH));
    // bf16 or f16 -> f32 is exact and one to one, so equal floats mean equal bits (and NaN poison fails)
    const Tensor first = testing::to_f32(testing::to_cpu(dqkv[0]));
    const Tensor second = testing::to_f32(testing::to_cpu(dqkv[1]));
    for (int64_t i = 0; i < first.numel(); i++) ASSERT_EQ(first.f32()[i], second.f32()[i]) << i;
  }
}

TEST_F(AttentionCudaRuns, HeadSizeWithoutKernelThrowsBeforeWriting) {
  for (const int64_t HS : {int64_t(8), int64_t(20)}) {
    SCOPED_TRACE(HS);
    const int64_t B = 1, T = 10, NH = 2, C = NH * HS;
    const Tensor qkv = to_gpu(random_tensor({B, T, 3 * C}, 81)), dout = to_gpu(random_tensor({B, T, C}, 82));
    Tensor out = testing::poisoned_gpu({B, T, C}), lse = testing::poisoned_gpu({B, NH, T});
    const std::string message = testing::error_of([&] { attention_forward(out, lse, qkv, int(NH)); });
    EXPECT_TRUE(testing::contains(message, "head size HS = C/NH = " + std::to_string(HS))) << message;
    EXPECT_TRUE(testing::contains(message, "16, 32, 48, 64, 80, 96, 128")) << message;
    Tensor dqkv = testing::poisoned_gpu({B, T, 3 * C});
    EXPECT_THROW(attention_backward(dqkv, dout, qkv, out, lse, int(NH)), Error);
    for (const Tensor* t : {&out, &lse, &dqkv}) {
      const Tensor host = testing::to_cpu(*t);
      for (int64_t i = 0; i < host.numel(); i++) ASSERT_TRUE(std::isnan(host.f32()[i])) << i;
    }
  }
}

// A tensor starting 1 element into its storage is refused, naming the tensor and the fix.
TEST_F(AttentionCudaRuns, MisalignedTensorThrowsNamingTheFix) {
  const int64_t B = 1, T = 10, NH = 2, C = 128;
  for (const DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor qkv = Tensor::zeros({B * T * 3 * C + 1}, dtype, Device::cuda).view(1, {B, T, 3 * C});
    copy_tensor(qkv, testing::to_gpu_as(random_tensor({B, T, 3 * C}, 83), dtype));
    Tensor out = testing::poisoned_gpu({B, T, C}, dtype), lse = testing::poisoned_gpu({B, NH, T});
    const std::string message = testing::error_of([&] { attention_forward(out, lse, qkv, int(NH)); });
    EXPECT_TRUE(testing::contains(message, "16-byte aligned")) << message;
    EXPECT_TRUE(testing::contains(message, "qkv starts")) << message;
    EXPECT_TRUE(testing::contains(message, "copy into a fresh tensor")) << message;
  }
}

// CPU kernels are the fp32 reference: bf16 or f16 activations on the CPU are an error naming the dtype.
TEST(AttentionDtype, LowPrecisionOnTheCpuIsRefused) {
  const int64_t B = 1, T = 4, NH = 2, C = 32;
  for (const DType dtype : testing::kLowPrecisionDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor qkv = testing::to_storage(random_tensor({B, T, 3 * C}, 84), dtype);
    const Tensor dout = testing::to_storage(random_tensor({B, T, C}, 85), dtype);
    Tensor out = Tensor::zeros({B, T, C}, dtype), lse = Tensor::zeros({B, NH, T});
    Tensor dqkv = Tensor::zeros({B, T, 3 * C}, dtype);
    std::string message = testing::error_of([&] { attention_forward(out, lse, qkv, int(NH)); });
    EXPECT_TRUE(testing::names_dtype_on_cpu(message, dtype)) << message;
    message = testing::error_of([&] { attention_backward(dqkv, dout, qkv, out, lse, int(NH)); });
    EXPECT_TRUE(testing::names_dtype_on_cpu(message, dtype)) << message;
  }
}

}  // namespace
}  // namespace tessera
