// Residual connection: shape and dtype checks, then dispatch by device and, on the GPU, by storage
// type (f32, bf16, f16).
#include "ops/residual.h"

#include "ops/cpu/residual_cpu.h"
#include "ops/op_checks.h"

#ifdef TESSERA_WITH_CUDA
#include "core/cuda/device.h"
#include "ops/cuda/residual_cuda.h"
#include "ops/cuda/storage_types.h"
#endif

namespace tessera {

void residual_forward(Tensor& out, const Tensor& a, const Tensor& b) {
  const char* op = "residual_forward";
  detail::check_float_dtype(op, "a", a);
  const DType dtype = a.dtype();
  const Device device = detail::check_args(op, {{"out", out, dtype}, {"a", a, dtype}, {"b", b, dtype}});
  detail::check_shape(op, "b", b, a.shape());
  detail::check_shape(op, "out", out, a.shape());
  switch (device) {
    case Device::cpu:
      cpu::residual_forward(out.f32(), a.f32(), b.f32(), a.numel());
      return;
    case Device::cuda:
#ifdef TESSERA_WITH_CUDA
      cuda::with_storage_type(dtype, [&]<typename T>(T) {
        cuda::residual_forward(cuda::typed_data<T>(out), cuda::typed_data<T>(a), cuda::typed_data<T>(b), a.numel(),
                               cuda_compute_stream());
      });
      return;
#else
      detail::fail_no_cuda_kernel(op);
#endif
  }
}

void add_inplace(Tensor& acc, const Tensor& x) {
  const char* op = "add_inplace";
  detail::check_float_dtype(op, "acc", acc);
  const DType dtype = acc.dtype();
  const Device device = detail::check_args(op, {{"acc", acc, dtype}, {"x", x, dtype}});
  detail::check_shape(op, "x", x, acc.shape());
  switch (device) {
    case Device::cpu:
      cpu::add_inplace(acc.f32(), x.f32(), acc.numel());
      return;
    case Device::cuda:
#ifdef TESSERA_WITH_CUDA
      cuda::with_storage_type(dtype, [&]<typename T>(T) {
        cuda::add_inplace(cuda::typed_data<T>(acc), cuda::typed_data<T>(x), acc.numel(), cuda_compute_stream());
      });
      return;
#else
      detail::fail_no_cuda_kernel(op);
#endif
  }
}

}  // namespace tessera
