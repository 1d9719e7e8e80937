// SwiGLU and GeGLU: shape and dtype checks, then dispatch by device and, on the GPU, by storage type
// (f32, bf16, f16).
#include "ops/swiglu.h"

#include "ops/cpu/swiglu_cpu.h"
#include "ops/op_checks.h"

#ifdef TESSERA_WITH_CUDA
#include "core/cuda/device.h"
#include "ops/cuda/storage_types.h"
#include "ops/cuda/swiglu_cuda.h"
#endif

namespace tessera {
namespace {

// h is (..., 2F) with F > 0; returns the shape (..., F) of out and dout.
Shape swiglu_out_shape(const char* op, const Tensor& h) {
  TS_CHECK(h.ndim() >= 1 && h.size(-1) > 0 && h.size(-1) % 2 == 0, op,
           ": h must be (..., 2F) holding [gate | up] with an even, non-zero last dimension, got ",
           shape_string(h.shape()));
  Shape shape = h.shape();
  shape.back() /= 2;
  return shape;
}

}  // namespace

void swiglu_forward(Tensor& out, const Tensor& h, GateActivation gate) {
  const char* op = "swiglu_forward";
  detail::check_float_dtype(op, "h", h);
  const DType dtype = h.dtype();
  const Device device = detail::check_args(op, {{"out", out, dtype}, {"h", h, dtype}});
  const Shape out_shape = swiglu_out_shape(op, h);
  detail::check_shape(op, "out", out, out_shape);
  const int64_t F = out_shape.back(), N = out.numel() / F;
  switch (device) {
    case Device::cpu:
      cpu::swiglu_forward(out.f32(), h.f32(), N, F, gate == GateActivation::gelu_tanh);
      return;
    case Device::cuda:
#ifdef TESSERA_WITH_CUDA
      cuda::with_storage_type(dtype, [&]<typename T>(T) {
        cuda::swiglu_forward(cuda::typed_data<T>(out), cuda::typed_data<T>(h), N, F,
                             gate == GateActivation::gelu_tanh, cuda_compute_stream());
      });
      return;
#else
      detail::fail_no_cuda_kernel(op);
#endif
  }
}

void swiglu_backward(Tensor& dh, const Tensor& dout, const Tensor& h, GateActivation gate) {
  const char* op = "swiglu_backward";
  detail::check_float_dtype(op, "h", h);
  const DType dtype = h.dtype();
  const Device device = detail::check_args(op, {{"dh", dh, dtype}, {"dout", dout, dtype}, {"h", h, dtype}});
  const Shape out_shape = swiglu_out_shape(op, h);
  detail::check_shape(op, "dh", dh, h.shape());
  detail::check_shape(op, "dout", dout, out_shape);
  const int64_t F = out_shape.back(), N = dout.numel() / F;
  switch (device) {
    case Device::cpu:
      cpu::swiglu_backward(dh.f32(), dout.f32(), h.f32(), N, F, gate == GateActivation::gelu_tanh);
      return;
    case Device::cuda:
#ifdef TESSERA_WITH_CUDA
      cuda::with_storage_type(dtype, [&]<typename T>(T) {
        cuda::swiglu_backward(cuda::typed_data<T>(dh), cuda::typed_data<T>(dout), cuda::typed_data<T>(h), N, F,
                              gate == GateActivation::gelu_tanh, cuda_compute_stream());
      });
      return;
#else
      detail::fail_no_cuda_kernel(op);
#endif
  }
}

}  // namespace tessera
