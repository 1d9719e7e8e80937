// Gradient-clipping reductions and the in-place scale: dtype checks, then dispatch by device.
#include "ops/norm.h"

#include "ops/cpu/norm_cpu.h"
#include "ops/op_checks.h"

#ifdef TESSERA_WITH_CUDA
#include "core/cuda/device.h"
#include "ops/cuda/norm_cuda.h"
#include "ops/cuda/storage_types.h"
#endif

namespace tessera {

double squared_norm(const Tensor& x) {
  const char* op = "squared_norm";
  switch (detail::check_args(op, {{"x", x}})) {
    case Device::cpu:
      return cpu::squared_norm(x.f32(), x.numel());
    case Device::cuda:
#ifdef TESSERA_WITH_CUDA
      return cuda::squared_norm(x.f32(), x.numel(), cuda_compute_stream());
#else
      detail::fail_no_cuda_kernel(op);
#endif
  }
  return 0.0;  // unreachable: every device is handled above
}

void scale_inplace(Tensor& x, float factor) {
  const char* op = "scale_inplace";
  detail::check_float_dtype(op, "x", x);
  switch (detail::check_args(op, {{"x", x, x.dtype()}})) {
    case Device::cpu:
      cpu::scale_inplace(x.f32(), x.numel(), factor);
      return;
    case Device::cuda:
#ifdef TESSERA_WITH_CUDA
      cuda::with_storage_type(x.dtype(), [&]<typename T>(T) {
        cuda::scale_inplace(cuda::typed_data<T>(x), x.numel(), factor, cuda_compute_stream());
      });
      return;
#else
      detail::fail_no_cuda_kernel(op);
#endif
  }
}

}  // namespace tessera
