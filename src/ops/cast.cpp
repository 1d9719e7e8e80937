// Element-type conversion: checks, then dispatch by device and dtype pair.
#include "ops/cast.h"

#include <type_traits>

#include "ops/cpu/cast_cpu.h"

#ifdef TESSERA_WITH_CUDA
#include "core/cuda/device.h"
#include "ops/cuda/cast_cuda.h"
#include "ops/cuda/storage_types.h"
#endif

namespace tessera {
namespace {

bool is_half(DType t) { return t == DType::bf16 || t == DType::f16; }

void cast_on_cpu(Tensor& dst, const Tensor& src) {
  const int64_t n = src.numel();
  if (dst.dtype() == src.dtype()) return cpu::copy_bytes(dst.raw_data(), src.raw_data(), src.bytes());
  if (dst.dtype() == DType::bf16) return cpu::cast_f32_to_half(dst.data<bf16>(), src.f32(), n);
  if (dst.dtype() == DType::f16) return cpu::cast_f32_to_half(dst.data<f16>(), src.f32(), n);
  if (src.dtype() == DType::bf16) return cpu::cast_half_to_f32(dst.f32(), src.data<bf16>(), n);
  cpu::cast_half_to_f32(dst.f32(), src.data<f16>(), n);
}

}  // namespace

void cast_copy(Tensor& dst, const Tensor& src) {
  const char* op = "cast_copy";
  TS_CHECK(dst.defined() && src.defined(), op, ": dst and src must be defined");
  TS_CHECK(dst.device() == src.device(), op, ": dst and src live on different devices");
  TS_CHECK(dst.numel() == src.numel(), op, ": dst ", shape_string(dst.shape()), " and src ", shape_string(src.shape()),
           " hold different numbers of elements");
  auto is_float = [](DType t) { return t == DType::f32 || is_half(t); };
  TS_CHECK(is_float(dst.dtype()) && is_float(src.dtype()) &&
               (dst.dtype() == src.dtype() || dst.dtype() == DType::f32 || src.dtype() == DType::f32),
           op, ": converts between f32 and bf16 or f16, got ", dtype_name(src.dtype()), " -> ",
           dtype_name(dst.dtype()));
  switch (src.device()) {
    case Device::cpu:
      return cast_on_cpu(dst, src);
    case Device::cuda:
#ifdef TESSERA_WITH_CUDA
      if (dst.dtype() == src.dtype()) return copy_device_to_device(dst.raw_data(), src.raw_data(), src.bytes());
      // One side is f32, the other H; the lambdas' f32 instantiations never run.
      if (is_half(dst.dtype()))
        return cuda::with_storage_type(dst.dtype(), [&]<typename H>(H) {
          if constexpr (!std::is_same_v<H, float>)
            cuda::cast_copy(cuda::typed_data<H>(dst), src.f32(), src.numel(), cuda_compute_stream());
        });
      return cuda::with_storage_type(src.dtype(), [&]<typename H>(H) {
        if constexpr (!std::is_same_v<H, float>)
          cuda::cast_copy(dst.f32(), cuda::typed_data<H>(src), src.numel(), cuda_compute_stream());
      });
#else
      TS_FAIL(op, ": this build has no CUDA backend");
#endif
  }
}

}  // namespace tessera
