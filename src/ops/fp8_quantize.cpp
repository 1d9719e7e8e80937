// fp8 fake-quantize: argument checks, then dispatch by device and, on the GPU, by storage type.
#include "ops/fp8_quantize.h"

#include <cmath>

#include "ops/cpu/fp8_quantize_cpu.h"
#include "ops/op_checks.h"

#ifdef TESSERA_WITH_CUDA
#include "core/cuda/device.h"
#include "ops/cuda/fp8_quantize_cuda.h"
#include "ops/cuda/storage_types.h"
#endif

namespace tessera {

void fp8_quantize_dequantize(Tensor& out, const Tensor& x, Fp8Format format, float scale, Tensor& amax,
                             int64_t slot) {
  const char* op = "fp8_quantize_dequantize";
  detail::check_float_dtype(op, "x", x);
  const DType dtype = x.dtype();
  const Device device = detail::check_args(op, {{"out", out, dtype}, {"x", x, dtype}, {"amax", amax, DType::f32}});
  detail::check_shape(op, "out", out, x.shape());
  TS_CHECK(std::isfinite(scale) && scale > 0.0f, op, ": scale = ", scale, " must be finite and > 0");
  TS_CHECK(slot >= 0 && slot < amax.numel(), op, ": slot ", slot, " is outside amax, which holds ", amax.numel(),
           " elements");
  switch (device) {
    case Device::cpu:
      cpu::fp8_quantize_dequantize(out.f32(), x.f32(), x.numel(), format, scale, amax.f32() + slot);
      return;
    case Device::cuda:
#ifdef TESSERA_WITH_CUDA
      cuda::with_storage_type(dtype, [&]<typename T>(T) {
        cuda::fp8_quantize_dequantize(cuda::typed_data<T>(out), cuda::typed_data<T>(x), x.numel(), format, scale,
                                      amax.f32() + slot, cuda_compute_stream());
      });
      return;
#else
      detail::fail_no_cuda_kernel(op);
#endif
  }
}

}  // namespace tessera
