// Attention over a key/value cache: argument checks, then the CPU kernel or, on the GPU, the kernel
// of qkv's storage type (f32, bf16 or f16; the caches and out in the same type).
#include "ops/attention_kv.h"

#include "ops/cpu/attention_kv_cpu.h"
#include "ops/op_checks.h"

#ifdef TESSERA_WITH_CUDA
#include "core/cuda/device.h"
#include "ops/cuda/attention_kv_cuda.h"
#include "ops/cuda/storage_types.h"
#endif

namespace tessera {

void attention_kv_forward(Tensor& out, Tensor& k_cache, Tensor& v_cache, const Tensor& qkv, int64_t past,
                          int num_heads, int num_kv_heads, int64_t window, float softcap) {
  const char* op = "attention_kv_forward";
  detail::check_float_dtype(op, "qkv", qkv);
  const DType dtype = qkv.dtype();
  const Device device = detail::check_args(
      op, {{"out", out, dtype}, {"k_cache", k_cache, dtype}, {"v_cache", v_cache, dtype}, {"qkv", qkv, dtype}});
  TS_CHECK(num_heads > 0 && num_kv_heads > 0 && num_heads % num_kv_heads == 0, op, ": num_kv_heads = ",
           num_kv_heads, " must divide num_heads = ", num_heads);
  TS_CHECK(qkv.ndim() == 3 && k_cache.ndim() == 3, op, ": qkv must be (B,Tq,W) and the caches (B,capacity,NKV*HS)");
  const int64_t B = qkv.size(0), Tq = qkv.size(1), NH = num_heads, NKV = num_kv_heads;
  const int64_t HS = qkv.size(2) / (NH + 2 * NKV), capacity = k_cache.size(1);
  TS_CHECK(HS * (NH + 2 * NKV) == qkv.size(2), op, ": qkv width ", qkv.size(2), " is not (NH + 2*NKV) * HS");
  detail::check_shape(op, "k_cache", k_cache, {B, capacity, NKV * HS});
  detail::check_shape(op, "v_cache", v_cache, {B, capacity, NKV * HS});
  detail::check_shape(op, "out", out, {B, Tq, NH * HS});
  TS_CHECK(past >= 0 && past + Tq <= capacity, op, ": tokens at positions ", past, "..", past + Tq - 1,
           " do not fit a cache of ", capacity, " positions");
  TS_CHECK(window >= 0, op, ": window must be 0 (none) or positive, got ", window);
  detail::check_softcap(op, softcap, device);
  switch (device) {
    case Device::cpu:
      cpu::attention_kv_forward(out.f32(), k_cache.f32(), v_cache.f32(), qkv.f32(), B, Tq, past, capacity, NH, NKV,
                                HS, window, softcap);
      return;
    case Device::cuda:
#ifdef TESSERA_WITH_CUDA
      cuda::with_storage_type(dtype, [&]<typename T>(T) {
        cuda::attention_kv_forward(cuda::typed_data<T>(out), cuda::typed_data<T>(k_cache), cuda::typed_data<T>(v_cache),
                                   cuda::typed_data<T>(qkv), B, Tq, past, capacity, NH, NKV, HS, window,
                                   cuda_compute_stream());
      });
      return;
#else
      detail::fail_no_cuda_kernel(op);
#endif
  }
}

}  // namespace tessera
