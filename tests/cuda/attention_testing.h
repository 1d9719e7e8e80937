// Helpers shared by the tests of the 16-bit GPU attention kernels (tensor-core and cuDNN): the element type
// of a dtype, the fp32 CPU op on the same rounded inputs, the rounding-aware comparison with it and a
// launcher pair's whole check against it, random device inputs, bitwise comparison. For tests built with
// TESSERA_WITH_CUDA.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "cuda/attention_cases.h"
#include "cuda/cuda_testing.h"
#include "ops/attention.h"

namespace tessera::testing {

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
// held to two half-ulps of itself plus `terms` of the tensor's largest magnitude (sums over up to T keys
// may cancel; a kernel that rounds each of g partial sums before adding them takes terms = g), the whole
// to 1e-2 for bf16 (for f16 scaled by its rounding).
inline void expect_attention_close(const Tensor& gpu, const Tensor& cpu, DType dtype, const char* what,
                                   double terms = 1) {
  const double rounding = rounding_of(dtype);
  expect_matches_cpu(gpu, cpu, scaled_from_bf16(1e-2, dtype), terms * rounding * max_abs(cpu), 2 * rounding, what);
}

// The fp32 CPU op on inputs rounded to `dtype`: what a GPU kernel in `dtype` is held to. With document
// masks when the host doc_starts (B,T) is defined.
struct AttentionReference {
  Tensor qkv, dout;  // (B,T,W) in [-2, 2) and (B,T,C) in [-1, 1), rounded to the dtype
  Tensor out, lse;   // the forward
  Tensor out_rounded;  // out rounded to the dtype, as the GPU stores it: the backward's input with lse
  Tensor dqkv;         // the backward
};

inline AttentionReference attention_reference(const AttentionCase& c, DType dtype, uint64_t seed,
                                              const Tensor& doc_starts = {}) {
  const auto [B, T, NH, HS, NKV] = c;
  AttentionReference r;
  r.qkv = rounded_to(random_tensor({B, T, c.qkv_width()}, seed, -2.0f, 2.0f), dtype);
  r.dout = rounded_to(random_tensor({B, T, NH * HS}, seed + 1), dtype);
  r.out = Tensor::zeros({B, T, NH * HS});
  r.lse = Tensor::zeros({B, NH, T});
  attention_forward(r.out, r.lse, r.qkv, int(NH), int(NKV), doc_starts);
  r.out_rounded = rounded_to(r.out, dtype);
  r.dqkv = Tensor::zeros({B, T, c.qkv_width()});
  attention_backward(r.dqkv, r.dout, r.qkv, r.out_rounded, r.lse, int(NH), int(NKV), doc_starts);
  return r;
}

// The lse a 16-bit kernel writes: scores are fp32 sums of exact products of 16-bit values and the softmax
// sum is over fp32 exponentials (P is rounded only where it meets v), so lse stays near fp32: a margin for
// tensor-core fp32 accumulation.
inline void expect_lse_close(const Tensor& gpu, const Tensor& cpu, const char* what) {
  expect_matches_cpu(gpu, cpu, 1e-5, 1e-4, 1e-4, what);
}

// A 16-bit kernel's launchers against the CPU op, for both dtypes and a fresh seed: forward(E{}, out, lse,
// qkv) writes over NaN poison and is held to the reference's out and lse; backward(E{}, dqkv, dout, qkv,
// out, lse) starts from the reference's rounded out and lse and is held to its dqkv (`dqkv_terms` as in
// expect_attention_close). The tensors are device tensors of the case's shapes. With a defined host
// doc_starts (B,T) the reference is document-masked; the launcher calls pass their own device copy.
template <typename Forward, typename Backward>
void expect_kernel_matches_cpu(const AttentionCase& c, const std::string& kernel, Forward&& forward,
                               Backward&& backward, double dqkv_terms = 1, const Tensor& doc_starts = {}) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  const auto [B, T, NH, HS, NKV] = c;
  for (const DType dtype : kLowPrecisionDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    with_element_type(dtype, [&]<typename E>(E e) {
      const AttentionReference ref = attention_reference(c, dtype, seed, doc_starts);
      const Tensor qkv = to_gpu_as(ref.qkv, dtype);
      Tensor out = poisoned_gpu({B, T, NH * HS}, dtype), lse = poisoned_gpu({B, NH, T});
      forward(e, out, lse, qkv);
      expect_attention_close(out, ref.out, dtype, (kernel + " out").c_str());
      expect_lse_close(lse, ref.lse, (kernel + " lse").c_str());

      const Tensor dout = to_gpu_as(ref.dout, dtype), out_ref = to_gpu_as(ref.out_rounded, dtype);
      const Tensor lse_ref = to_gpu(ref.lse);
      Tensor dqkv = poisoned_gpu({B, T, c.qkv_width()}, dtype);
      backward(e, dqkv, dout, qkv, out_ref, lse_ref);
      expect_attention_close(dqkv, ref.dqkv, dtype, (kernel + " dqkv").c_str(), dqkv_terms);
    });
  }
}

// Random device inputs of a case in `dtype`: qkv in [-2, 2) and dout in [-1, 1).
struct AttentionInputs {
  Tensor qkv, dout;
};
inline AttentionInputs random_attention_inputs(const AttentionCase& c, DType dtype, uint64_t seed) {
  return {to_gpu_as(random_tensor({c.B, c.T, c.qkv_width()}, seed, -2.0f, 2.0f), dtype),
          to_gpu_as(random_tensor({c.B, c.T, c.NH * c.HS}, seed + 1), dtype)};
}

// Bitwise equality of two device tensors of the same shape and dtype.
inline void expect_bitwise_equal(const Tensor& a, const Tensor& b, const char* what) {
  const Tensor x = to_cpu(a), y = to_cpu(b);
  ASSERT_EQ(x.numel(), y.numel()) << what;
  EXPECT_EQ(std::memcmp(x.raw_data(), y.raw_data(), size_t(x.numel()) * dtype_size(x.dtype())), 0) << what;
}

}  // namespace tessera::testing
