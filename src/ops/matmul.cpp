// Linear layer: shape and dtype checks, then dispatch by device.
#include "ops/matmul.h"

#include <climits>

#include "ops/cpu/matmul_cpu.h"
#include "ops/op_checks.h"

#ifdef TESSERA_WITH_CUDA
#include "core/cuda/device.h"
#include "ops/cuda/matmul_cuda.h"
#endif

namespace tessera {
namespace {

struct MatmulDims {
  int64_t N, C, OC;
};

// x (..., C), weight (OC, C); N is the product of x's leading dimensions. BLAS takes int sizes.
MatmulDims matmul_dims(const char* op, const Tensor& x, const Tensor& weight) {
  TS_CHECK(x.ndim() >= 2, op, ": x must be (N,C) or (B,T,C), got ", shape_string(x.shape()));
  TS_CHECK(weight.ndim() == 2 && weight.size(1) == x.size(-1), op, ": weight must be (OC,", x.size(-1),
           ") to match x ", shape_string(x.shape()), ", got ", shape_string(weight.shape()));
  TS_CHECK(x.size(-1) > 0 && weight.size(0) > 0, op, ": x ", shape_string(x.shape()), " and weight ",
           shape_string(weight.shape()), " need at least one input and one output channel");
  const MatmulDims d{x.numel() / x.size(-1), x.size(-1), weight.size(0)};
  TS_CHECK(d.N <= INT_MAX && d.C <= INT_MAX && d.OC <= INT_MAX, op, ": x ", shape_string(x.shape()), " times weight ",
           shape_string(weight.shape()), " has a dimension too large for 32-bit BLAS; split the batch");
  return d;
}

// A (..., OC) tensor with x's leading dimensions.
Shape rows_by(const Tensor& x, int64_t OC) {
  Shape s = detail::leading_shape(x);
  s.push_back(OC);
  return s;
}

}  // namespace

void matmul_forward(Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias) {
  const char* op = "matmul_forward";
  const Device device = detail::check_args(
      op, {{"out", out}, {"x", x}, {"weight", weight}, {"bias", bias, DType::f32, /*optional=*/true}});
  const MatmulDims d = matmul_dims(op, x, weight);
  detail::check_shape(op, "out", out, rows_by(x, d.OC));
  if (bias.defined()) detail::check_shape(op, "bias", bias, {d.OC});
  switch (device) {
    case Device::cpu:
      cpu::matmul_forward(out.f32(), x.f32(), weight.f32(), bias.defined() ? bias.f32() : nullptr, d.N, d.C, d.OC);
      return;
    case Device::cuda:
#ifdef TESSERA_WITH_CUDA
      cuda::matmul_forward(out.f32(), x.f32(), weight.f32(), bias.defined() ? bias.f32() : nullptr, d.N, d.C, d.OC,
                           cuda_compute_stream());
      return;
#else
      detail::fail_no_cuda_kernel(op);
#endif
  }
}

void matmul_backward(Tensor& dx, Tensor& dweight, Tensor& dbias, const Tensor& dout, const Tensor& x,
                     const Tensor& weight) {
  const char* op = "matmul_backward";
  const Device device = detail::check_args(op, {{"dx", dx, DType::f32, /*optional=*/true},
                                                {"dweight", dweight},
                                                {"dbias", dbias, DType::f32, /*optional=*/true},
                                                {"dout", dout},
                                                {"x", x},
                                                {"weight", weight}});
  const MatmulDims d = matmul_dims(op, x, weight);
  detail::check_shape(op, "dout", dout, rows_by(x, d.OC));
  detail::check_shape(op, "dweight", dweight, weight.shape());
  if (dx.defined()) detail::check_shape(op, "dx", dx, x.shape());
  if (dbias.defined()) detail::check_shape(op, "dbias", dbias, {d.OC});
  switch (device) {
    case Device::cpu:
      cpu::matmul_backward(dx.defined() ? dx.f32() : nullptr, dweight.f32(), dbias.defined() ? dbias.f32() : nullptr,
                           dout.f32(), x.f32(), weight.f32(), d.N, d.C, d.OC);
      return;
    case Device::cuda:
#ifdef TESSERA_WITH_CUDA
      cuda::matmul_backward(dx.defined() ? dx.f32() : nullptr, dweight.f32(), dbias.defined() ? dbias.f32() : nullptr,
                            dout.f32(), x.f32(), weight.f32(), d.N, d.C, d.OC, cuda_compute_stream());
      return;
#else
      detail::fail_no_cuda_kernel(op);
#endif
  }
}

}  // namespace tessera
