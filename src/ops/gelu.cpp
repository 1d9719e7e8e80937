// GELU: shape and dtype checks, then dispatch by device and, on the GPU, by storage type (f32, bf16).
#include "ops/gelu.h"

#include "ops/cpu/gelu_cpu.h"
#include "ops/op_checks.h"

#ifdef TESSERA_WITH_CUDA
#include "core/cuda/device.h"
#include "ops/cuda/bf16_tensor.h"
#include "ops/cuda/gelu_cuda.h"
#endif

namespace tessera {

void gelu_forward(Tensor& out, const Tensor& x) {
  const char* op = "gelu_forward";
  detail::check_float_dtype(op, "x", x);
  const DType dtype = x.dtype();
  const Device device = detail::check_args(op, {{"out", out, dtype}, {"x", x, dtype}});
  detail::check_shape(op, "out", out, x.shape());
  switch (device) {
    case Device::cpu:
      cpu::gelu_forward(out.f32(), x.f32(), x.numel());
      return;
    case Device::cuda:
#ifdef TESSERA_WITH_CUDA
      if (dtype == DType::bf16)
        cuda::gelu_forward(cuda::bf16_data(out), cuda::bf16_data(x), x.numel(), cuda_compute_stream());
      else
        cuda::gelu_forward(out.f32(), x.f32(), x.numel(), cuda_compute_stream());
      return;
#else
      detail::fail_no_cuda_kernel(op);
#endif
  }
}

void gelu_backward(Tensor& dx, const Tensor& dout, const Tensor& x) {
  const char* op = "gelu_backward";
  detail::check_float_dtype(op, "x", x);
  const DType dtype = x.dtype();
  const Device device = detail::check_args(op, {{"dx", dx, dtype}, {"dout", dout, dtype}, {"x", x, dtype}});
  detail::check_shape(op, "dx", dx, x.shape());
  detail::check_shape(op, "dout", dout, x.shape());
  switch (device) {
    case Device::cpu:
      cpu::gelu_backward(dx.f32(), dout.f32(), x.f32(), x.numel());
      return;
    case Device::cuda:
#ifdef TESSERA_WITH_CUDA
      if (dtype == DType::bf16)
        cuda::gelu_backward(cuda::bf16_data(dx), cuda::bf16_data(dout), cuda::bf16_data(x), x.numel(),
                            cuda_compute_stream());
      else
        cuda::gelu_backward(dx.f32(), dout.f32(), x.f32(), x.numel(), cuda_compute_stream());
      return;
#else
      detail::fail_no_cuda_kernel(op);
#endif
  }
}

}  // namespace tessera
