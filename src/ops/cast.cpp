// Element-type conversion: checks, then dispatch by device and dtype pair.
#include "ops/cast.h"

#include "ops/cpu/cast_cpu.h"

#ifdef TESSERA_WITH_CUDA
#include "core/cuda/device.h"
#include "ops/cuda/bf16_tensor.h"
#include "ops/cuda/cast_cuda.h"
#endif

namespace tessera {

void cast_copy(Tensor& dst, const Tensor& src) {
  const char* op = "cast_copy";
  TS_CHECK(dst.defined() && src.defined(), op, ": dst and src must be defined");
  TS_CHECK(dst.device() == src.device(), op, ": dst and src live on different devices");
  TS_CHECK(dst.numel() == src.numel(), op, ": dst ", shape_string(dst.shape()), " and src ", shape_string(src.shape()),
           " hold different numbers of elements");
  auto is_float = [](DType t) { return t == DType::f32 || t == DType::bf16; };
  TS_CHECK(is_float(dst.dtype()) && is_float(src.dtype()), op, ": converts between f32 and bf16, got ",
           dtype_name(src.dtype()), " -> ", dtype_name(dst.dtype()));
  const int64_t n = src.numel();
  const bool to_bf16 = dst.dtype() == DType::bf16, from_bf16 = src.dtype() == DType::bf16;
  switch (src.device()) {
    case Device::cpu:
      if (to_bf16 && !from_bf16) return cpu::cast_f32_to_bf16(dst.data<bf16>(), src.f32(), n);
      if (from_bf16 && !to_bf16) return cpu::cast_bf16_to_f32(dst.f32(), src.data<bf16>(), n);
      return cpu::copy_bytes(dst.raw_data(), src.raw_data(), src.bytes());
    case Device::cuda:
#ifdef TESSERA_WITH_CUDA
      if (to_bf16 && !from_bf16) return cuda::cast_copy(cuda::bf16_data(dst), src.f32(), n, cuda_compute_stream());
      if (from_bf16 && !to_bf16) return cuda::cast_copy(dst.f32(), cuda::bf16_data(src), n, cuda_compute_stream());
      return copy_device_to_device(dst.raw_data(), src.raw_data(), src.bytes());
#else
      TS_FAIL(op, ": this build has no CUDA backend");
#endif
  }
}

}  // namespace tessera
