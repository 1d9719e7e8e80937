// Residual connection: shape and dtype checks, then dispatch by device.
#include "ops/residual.h"

#include "ops/cpu/residual_cpu.h"
#include "ops/op_checks.h"

#ifdef TESSERA_WITH_CUDA
#include "core/cuda/device.h"
#include "ops/cuda/residual_cuda.h"
#endif

namespace tessera {

void residual_forward(Tensor& out, const Tensor& a, const Tensor& b) {
  const char* op = "residual_forward";
  const Device device = detail::check_args(op, {{"out", out}, {"a", a}, {"b", b}});
  detail::check_shape(op, "b", b, a.shape());
  detail::check_shape(op, "out", out, a.shape());
  switch (device) {
    case Device::cpu:
      cpu::residual_forward(out.f32(), a.f32(), b.f32(), a.numel());
      return;
    case Device::cuda:
#ifdef TESSERA_WITH_CUDA
      cuda::residual_forward(out.f32(), a.f32(), b.f32(), a.numel(), cuda_compute_stream());
      return;
#else
      detail::fail_no_cuda_kernel(op);
#endif
  }
}

void add_inplace(Tensor& acc, const Tensor& x) {
  const char* op = "add_inplace";
  const Device device = detail::check_args(op, {{"acc", acc}, {"x", x}});
  detail::check_shape(op, "x", x, acc.shape());
  switch (device) {
    case Device::cpu:
      cpu::add_inplace(acc.f32(), x.f32(), acc.numel());
      return;
    case Device::cuda:
#ifdef TESSERA_WITH_CUDA
      cuda::add_inplace(acc.f32(), x.f32(), acc.numel(), cuda_compute_stream());
      return;
#else
      detail::fail_no_cuda_kernel(op);
#endif
  }
}

}  // namespace tessera
