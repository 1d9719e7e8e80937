// GELU: shape and dtype checks, then dispatch by device.
#include "ops/gelu.h"

#include "ops/cpu/gelu_cpu.h"
#include "ops/op_checks.h"

#ifdef TESSERA_WITH_CUDA
#include "core/cuda/device.h"
#include "ops/cuda/gelu_cuda.h"
#endif

namespace tessera {

void gelu_forward(Tensor& out, const Tensor& x) {
  const char* op = "gelu_forward";
  const Device device = detail::check_args(op, {{"out", out}, {"x", x}});
  detail::check_shape(op, "out", out, x.shape());
  switch (device) {
    case Device::cpu:
      cpu::gelu_forward(out.f32(), x.f32(), x.numel());
      return;
    case Device::cuda:
#ifdef TESSERA_WITH_CUDA
      cuda::gelu_forward(out.f32(), x.f32(), x.numel(), cuda_compute_stream());
      return;
#else
      detail::fail_no_cuda_kernel(op);
#endif
  }
}

void gelu_backward(Tensor& dx, const Tensor& dout, const Tensor& x) {
  const char* op = "gelu_backward";
  const Device device = detail::check_args(op, {{"dx", dx}, {"dout", dout}, {"x", x}});
  detail::check_shape(op, "dx", dx, x.shape());
  detail::check_shape(op, "dout", dout, x.shape());
  switch (device) {
    case Device::cpu:
      cpu::gelu_backward(dx.f32(), dout.f32(), x.f32(), x.numel());
      return;
    case Device::cuda:
#ifdef TESSERA_WITH_CUDA
      cuda::gelu_backward(dx.f32(), dout.f32(), x.f32(), x.numel(), cuda_compute_stream());
      return;
#else
      detail::fail_no_cuda_kernel(op);
#endif
  }
}

}  // namespace tessera
