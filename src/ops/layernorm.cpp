// LayerNorm: shape and dtype checks, then dispatch by device.
#include "ops/layernorm.h"

#include "ops/cpu/layernorm_cpu.h"
#include "ops/op_checks.h"

#ifdef TESSERA_WITH_CUDA
#include "core/cuda/device.h"
#include "ops/cuda/layernorm_cuda.h"
#endif

namespace tessera {
namespace {

// x is (..., C) with C > 0; weight (C); the statistics hold one value per row. Returns C.
int64_t layernorm_channels(const char* op, const Tensor& x, const Tensor& weight, const Tensor& mean,
                           const Tensor& rstd) {
  TS_CHECK(x.ndim() >= 2 && x.size(-1) > 0, op, ": x must be (N,C) or (B,T,C), got ", shape_string(x.shape()));
  const int64_t C = x.size(-1), N = x.numel() / C;
  detail::check_shape(op, "weight", weight, {C});
  TS_CHECK(mean.numel() == N && rstd.numel() == N, op, ": mean and rstd must hold one value per row of x (", N,
           "), got ", shape_string(mean.shape()), " and ", shape_string(rstd.shape()));
  return C;
}

}  // namespace

void layernorm_forward(Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& x, const Tensor& weight,
                       const Tensor& bias) {
  const char* op = "layernorm_forward";
  const Device device = detail::check_args(
      op, {{"out", out}, {"mean", mean}, {"rstd", rstd}, {"x", x}, {"weight", weight}, {"bias", bias}});
  const int64_t C = layernorm_channels(op, x, weight, mean, rstd);
  detail::check_shape(op, "bias", bias, {C});
  detail::check_shape(op, "out", out, x.shape());
  switch (device) {
    case Device::cpu:
      cpu::layernorm_forward(out.f32(), mean.f32(), rstd.f32(), x.f32(), weight.f32(), bias.f32(), x.numel() / C,
                             C);
      return;
    case Device::cuda:
#ifdef TESSERA_WITH_CUDA
      cuda::layernorm_forward(out.f32(), mean.f32(), rstd.f32(), x.f32(), weight.f32(), bias.f32(), x.numel() / C,
                              C, cuda_compute_stream());
      return;
#else
      detail::fail_no_cuda_kernel(op);
#endif
  }
}

void layernorm_backward(Tensor& dx, Tensor& dweight, Tensor& dbias, const Tensor& dout, const Tensor& x,
                        const Tensor& weight, const Tensor& mean, const Tensor& rstd) {
  const char* op = "layernorm_backward";
  const Device device = detail::check_args(op, {{"dx", dx},
                                                {"dweight", dweight},
                                                {"dbias", dbias},
                                                {"dout", dout},
                                                {"x", x},
                                                {"weight", weight},
                                                {"mean", mean},
                                                {"rstd", rstd}});
  const int64_t C = layernorm_channels(op, x, weight, mean, rstd);
  detail::check_shape(op, "dx", dx, x.shape());
  detail::check_shape(op, "dout", dout, x.shape());
  detail::check_shape(op, "dweight", dweight, {C});
  detail::check_shape(op, "dbias", dbias, {C});
  switch (device) {
    case Device::cpu:
      cpu::layernorm_backward(dx.f32(), dweight.f32(), dbias.f32(), dout.f32(), x.f32(), weight.f32(), mean.f32(),
                              rstd.f32(), x.numel() / C, C);
      return;
    case Device::cuda:
#ifdef TESSERA_WITH_CUDA
      cuda::layernorm_backward(dx.f32(), dweight.f32(), dbias.f32(), dout.f32(), x.f32(), weight.f32(), mean.f32(),
                               rstd.f32(), x.numel() / C, C, cuda_compute_stream());
      return;
#else
      detail::fail_no_cuda_kernel(op);
#endif
  }
}

}  // namespace tessera
