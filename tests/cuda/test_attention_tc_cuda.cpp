// The tensor-core attention launchers, in bf16 and in f16, against the fp32 CPU op on the same rounded
// inputs: out, lse and dqkv written over NaN poison, for HS = 32, 64, 128, on T not a multiple of the
// 64-row tile, T = 1, GPT-2 small's T = 1024, NH = 12, and grouped-query heads (a kv head shared by 2 to
// 8 query heads), without and with document masks (packed sequences); dqkv bit for bit from run to run;
// head sizes and pointers the kernels do not cover reported as unsupported, and refused by the launchers
// before anything is written.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "cuda/cuda_testing.h"
#include "ops/attention.h"

#ifdef TESSERA_WITH_CUDA
#include "cuda/attention_testing.h"
#include "ops/cuda/attention_tc_cuda.h"
#include "ops/cuda/storage_types.h"
#endif

namespace tessera {
namespace {

#ifdef TESSERA_WITH_CUDA

using cuda::typed_data;
using testing::random_tensor;
using testing::to_gpu_as;
using testing::with_element_type;

using testing::AttentionCase;
using testing::DocumentCase;

class AttentionTcCuda : public testing::CudaTest, public ::testing::WithParamInterface<AttentionCase> {};

TEST_P(AttentionTcCuda, ForwardAndBackwardMatchCpu) {
  const AttentionCase c = GetParam();
  const auto [B, T, NH, HS, NKV] = c;
  const int64_t C = NH * HS, KV = c.kv_heads();
  testing::expect_kernel_matches_cpu(
      c, "attention_tc",
      [&]<typename E>(E, Tensor& out, Tensor& lse, const Tensor& qkv) {
        ASSERT_TRUE(cuda::attention_tc_supported(HS, {out.raw_data(), lse.raw_data(), qkv.raw_data()}));
        cuda::attention_tc_forward(typed_data<E>(out), lse.f32(), typed_data<E>(qkv), B, T, C, NH, KV, nullptr,
                                   cuda_compute_stream());
      },
      [&]<typename E>(E, Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse) {
        cuda::attention_tc_backward(typed_data<E>(dqkv), typed_data<E>(dout), typed_data<E>(qkv), typed_data<E>(out),
                                    lse.f32(), B, T, C, NH, KV, nullptr, cuda_compute_stream());
      });
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionTcCuda, ::testing::ValuesIn(testing::kAttention16BitCases),
                         testing::attention_case_name);

class AttentionTcDocumentsCuda : public testing::CudaTest, public ::testing::WithParamInterface<DocumentCase> {};

// Packed sequences: the launchers given doc_starts against the document-masked CPU op.
TEST_P(AttentionTcDocumentsCuda, ForwardAndBackwardMatchCpu) {
  const DocumentCase& c = GetParam();
  const auto [B, T, NH, HS, NKV] = c.shape;
  const int64_t C = NH * HS, KV = c.shape.kv_heads();
  const Tensor doc_starts = testing::doc_starts_of_lengths(T, c.lengths), docs_gpu = testing::to_gpu(doc_starts);
  const int32_t* docs = docs_gpu.data<int32_t>();
  testing::expect_kernel_matches_cpu(
      c.shape, "attention_tc",
      [&]<typename E>(E, Tensor& out, Tensor& lse, const Tensor& qkv) {
        cuda::attention_tc_forward(typed_data<E>(out), lse.f32(), typed_data<E>(qkv), B, T, C, NH, KV, docs,
                                   cuda_compute_stream());
      },
      [&]<typename E>(E, Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse) {
        cuda::attention_tc_backward(typed_data<E>(dqkv), typed_data<E>(dout), typed_data<E>(qkv), typed_data<E>(out),
                                    lse.f32(), B, T, C, NH, KV, docs, cuda_compute_stream());
      },
      1, doc_starts);
}

std::vector<DocumentCase> tc_document_cases() {
  std::vector<DocumentCase> all;
  for (const auto& cases : {testing::document_cases(2, 32), testing::document_cases(4, 64, 2),
                            testing::document_cases(2, 128, 1)})
    all.insert(all.end(), cases.begin(), cases.end());
  return all;
}
INSTANTIATE_TEST_SUITE_P(Packed, AttentionTcDocumentsCuda, ::testing::ValuesIn(tc_document_cases()),
                         testing::document_case_name);

using AttentionTcCudaRuns = testing::CudaTest;

TEST_F(AttentionTcCudaRuns, BackwardIsBitwiseDeterministic) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  const int64_t B = 2, T = 200, NH = 2, HS = 64, C = NH * HS;
  for (const DType dtype : testing::kLowPrecisionDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    with_element_type(dtype, [&]<typename E>(E) {
      const auto [qkv, dout] = testing::random_attention_inputs({B, T, NH, HS}, dtype, seed);
      Tensor out = testing::poisoned_gpu({B, T, C}, dtype), lse = testing::poisoned_gpu({B, NH, T});
      cuda::attention_tc_forward(typed_data<E>(out), lse.f32(), typed_data<E>(qkv), B, T, C, NH, NH, nullptr,
                                 cuda_compute_stream());
      Tensor dqkv[2] = {testing::poisoned_gpu({B, T, 3 * C}, dtype), testing::poisoned_gpu({B, T, 3 * C}, dtype)};
      for (Tensor& d : dqkv)
        cuda::attention_tc_backward(typed_data<E>(d), typed_data<E>(dout), typed_data<E>(qkv), typed_data<E>(out),
                                    lse.f32(), B, T, C, NH, NH, nullptr, cuda_compute_stream());
      testing::expect_bitwise_equal(dqkv[0], dqkv[1], "dqkv of two runs");
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
        cuda::attention_tc_forward(typed_data<E>(out), lse.f32(), typed_data<E>(qkv), B, T, C, NH, NH, nullptr,
                                   cuda_compute_stream());
      });
      EXPECT_TRUE(testing::contains(message, "attention_tc_supported")) << message;
      EXPECT_THROW(cuda::attention_tc_backward(typed_data<E>(dqkv), typed_data<E>(dout), typed_data<E>(qkv),
                                               typed_data<E>(out), lse.f32(), B, T, C, NH, NH, nullptr,
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
