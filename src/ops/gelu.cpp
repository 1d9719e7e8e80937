// GELU: shape and dtype checks, then dispatch by device and, on the GPU, by storage type (f32, bf16, f16).
#include "ops/gelu.h"

#include "ops/cpu/gelu_cpu.h"
#include "ops/op_checks.h"

#ifdef TESSERA_WITH_CUDA
#include "core/cuda/device.h"
#include "ops/cuda/gelu_cuda.h"
#include "ops/cuda/storage_types.h"
#endif

namespace tessera {

void gelu_forward(Tensor& out, const Tensor& x, GeluForm form) {
  const char* op = "gelu_forward";
  detail::check_float_dtype(op, "x", x);
  const DType dtype = x.dtype();
  const Device device = detail::check_args(op, {{"out", out, dtype}, {"x", x, dtype}});
  detail::check_shape(op, "out", out, x.shape());
  switch (device) {
    case Device::cpu:
      cpu::gelu_forward(out.f32(), x.f32(), x.numel(), form == GeluForm::exact);
      return;
    case Device::cuda:
      if (form == GeluForm::exact) detail::fail_no_cuda_kernel("gelu_forward (exact form)");
#ifdef TESSERA_WITH_CUDA
      cuda::with_storage_type(dtype, [&]<typename T>(T) {
        cuda::gelu_forward(cuda::typed_data<T>(out), cuda::typed_data<T>(x), x.numel(), cuda_compute_stream());
      });
      return;
#else
      detail::fail_no_cuda_kernel(op);
#endif
  }
}

void gelu_backward(Tensor& dx, const Tensor& dout, const Tensor& x, GeluForm form) {
  const char* op = "gelu_backward";
  detail::check_float_dtype(op, "x", x);
  const DType dtype = x.dtype();
  const Device device = detail::check_args(op, {{"dx", dx, dtype}, {"dout", dout, dtype}, {"x", x, dtype}});
  detail::check_shape(op, "dx", dx, x.shape());
  detail::check_shape(op, "dout", dout, x.shape());
  switch (device) {
    case Device::cpu:
      cpu::gelu_backward(dx.f32(), dout.f32(), x.f32(), x.numel(), form == GeluForm::exact);
      return;
    case Device::cuda:
      if (form == GeluForm::exact) detail::fail_no_cuda_kernel("gelu_backward (exact form)");
#ifdef TESSERA_WITH_CUDA
      cuda::with_storage_type(dtype, [&]<typename T>(T) {
        cuda::gelu_backward(cuda::typed_data<T>(dx), cuda::typed_data<T>(dout), cuda::typed_data<T>(x), x.numel(),
                            cuda_compute_stream());
      });
      return;
#else
      detail::fail_no_cuda_kernel(op);
#endif
  }
}

}  // namespace tessera
