// Residual connection: shape and dtype checks, then dispatch by device and, on the GPU, by storage
// type (f32, bf16).
#include "ops/residual.h"

#include "ops/cpu/residual_cpu.h"
#include "ops/op_checks.h"

#ifdef TESSERA_WITH_CUDA
#include "core/cuda/device.h"
#include "ops/cuda/bf16_tensor.h"
#include "ops/cuda/residual_cuda.h"
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
      if (dtype == DType::bf16)
        cuda::residual_forward(cuda::bf16_data(out), cuda::bf16_data(a), cuda::bf16_data(b), a.numel(),
                               cuda_compute_stream());
      else
        cuda::residual_forward(out.f32(), a.f32(), b.f32(), a.numel(), cuda_compute_stream());
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
      if (dtype == DType::bf16)
        cuda::add_inplace(cuda::bf16_data(acc), cuda::bf16_data(x), acc.numel(), cuda_compute_stream());
      else
        cuda::add_inplace(acc.f32(), x.f32(), acc.numel(), cuda_compute_stream());
      return;
#else
      detail::fail_no_cuda_kernel(op);
#endif
  }
}

}  // namespace tessera
