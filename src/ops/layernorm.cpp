// LayerNorm: shape and dtype checks, then dispatch by device and, on the GPU, by the activation
// dtype (f32, bf16, f16).
#include "ops/layernorm.h"

#include "ops/cpu/layernorm_cpu.h"
#include "ops/cpu/residual_cpu.h"
#include "ops/op_checks.h"

#ifdef TESSERA_WITH_CUDA
#include "core/cuda/device.h"
#include "ops/cuda/layernorm_cuda.h"
#include "ops/cuda/storage_types.h"
#endif

namespace tessera {
namespace {

// A bias's values, or null when the norm has none.
const float* optional_f32(const Tensor& t) { return t.defined() ? t.f32() : nullptr; }
float* optional_f32(Tensor& t) { return t.defined() ? t.f32() : nullptr; }

// x (named x_name) is (..., C) with C > 0; weight (C); the statistics hold one value per row.
// Returns C.
int64_t layernorm_channels(const char* op, const char* x_name, const Tensor& x, const Tensor& weight,
                           const Tensor& mean, const Tensor& rstd) {
  TS_CHECK(x.ndim() >= 2 && x.size(-1) > 0, op, ": ", x_name, " must be (N,C) or (B,T,C), got ",
           shape_string(x.shape()));
  const int64_t C = x.size(-1), N = x.numel() / C;
  detail::check_shape(op, "weight", weight, {C});
  TS_CHECK(mean.numel() == N && rstd.numel() == N, op, ": mean and rstd must hold one value per row of ", x_name,
           " (", N, "), got ", shape_string(mean.shape()), " and ", shape_string(rstd.shape()));
  return C;
}

}  // namespace

void layernorm_forward(Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& x, const Tensor& weight,
                       const Tensor& bias) {
  const char* op = "layernorm_forward";
  detail::check_float_dtype(op, "x", x);
  const DType dtype = x.dtype();
  const Device device = detail::check_args(op, {{"out", out, dtype},
                                                {"mean", mean},
                                                {"rstd", rstd},
                                                {"x", x, dtype},
                                                {"weight", weight, dtype},
                                                {"bias", bias, dtype, true}});
  const int64_t C = layernorm_channels(op, "x", x, weight, mean, rstd);
  const int64_t N = x.numel() / C;
  if (bias.defined()) detail::check_shape(op, "bias", bias, {C});
  detail::check_shape(op, "out", out, x.shape());
  switch (device) {
    case Device::cpu:
      cpu::layernorm_forward(out.f32(), mean.f32(), rstd.f32(), x.f32(), weight.f32(), optional_f32(bias), N, C);
      return;
    case Device::cuda:
      if (!bias.defined()) detail::fail_no_cuda_kernel("layernorm_forward without a bias");
#ifdef TESSERA_WITH_CUDA
      cuda::with_storage_type(dtype, [&]<typename T>(T) {
        cuda::layernorm_forward(cuda::typed_data<T>(out), mean.f32(), rstd.f32(), cuda::typed_data<T>(x),
                                cuda::typed_data<T>(weight), cuda::typed_data<T>(bias), N, C, cuda_compute_stream());
      });
      return;
#else
      detail::fail_no_cuda_kernel(op);
#endif
  }
}

void residual_layernorm_forward(Tensor& residual_out, Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& a,
                                const Tensor& b, const Tensor& weight, const Tensor& bias) {
  const char* op = "residual_layernorm_forward";
  detail::check_float_dtype(op, "a", a);
  const DType dtype = a.dtype();
  const Device device = detail::check_args(op, {{"residual_out", residual_out, dtype},
                                                {"out", out, dtype},
                                                {"mean", mean},
                                                {"rstd", rstd},
                                                {"a", a, dtype},
                                                {"b", b, dtype},
                                                {"weight", weight, dtype},
                                                {"bias", bias, dtype, true}});
  const int64_t C = layernorm_channels(op, "a", a, weight, mean, rstd);
  const int64_t N = a.numel() / C;
  detail::check_shape(op, "b", b, a.shape());
  if (bias.defined()) detail::check_shape(op, "bias", bias, {C});
  detail::check_shape(op, "residual_out", residual_out, a.shape());
  detail::check_shape(op, "out", out, a.shape());
  switch (device) {
    case Device::cpu:
      cpu::residual_forward(residual_out.f32(), a.f32(), b.f32(), a.numel());
      cpu::layernorm_forward(out.f32(), mean.f32(), rstd.f32(), residual_out.f32(), weight.f32(), optional_f32(bias), N,
                             C);
      return;
    case Device::cuda:
      if (!bias.defined()) detail::fail_no_cuda_kernel("residual_layernorm_forward without a bias");
#ifdef TESSERA_WITH_CUDA
      cuda::with_storage_type(dtype, [&]<typename T>(T) {
        cuda::residual_layernorm_forward(cuda::typed_data<T>(residual_out), cuda::typed_data<T>(out), mean.f32(),
                                         rstd.f32(), cuda::typed_data<T>(a), cuda::typed_data<T>(b),
                                         cuda::typed_data<T>(weight), cuda::typed_data<T>(bias), N, C,
                                         cuda_compute_stream());
      });
      return;
#else
      detail::fail_no_cuda_kernel(op);
#endif
  }
}

void layernorm_backward(Tensor& dx, Tensor& dweight, Tensor& dbias, const Tensor& dout, const Tensor& x,
                        const Tensor& weight, const Tensor& mean, const Tensor& rstd, GradInto into) {
  const char* op = "layernorm_backward";
  const bool add = into == GradInto::add;
  detail::check_float_dtype(op, "x", x);
  const DType dtype = x.dtype();
  const Device device = detail::check_args(op, {{"dx", dx, dtype},
                                                {"dweight", dweight},
                                                {"dbias", dbias, DType::f32, true},
                                                {"dout", dout, dtype},
                                                {"x", x, dtype},
                                                {"weight", weight, dtype},
                                                {"mean", mean},
                                                {"rstd", rstd}});
  const int64_t C = layernorm_channels(op, "x", x, weight, mean, rstd);
  const int64_t N = x.numel() / C;
  detail::check_shape(op, "dx", dx, x.shape());
  detail::check_shape(op, "dout", dout, x.shape());
  detail::check_shape(op, "dweight", dweight, {C});
  if (dbias.defined()) detail::check_shape(op, "dbias", dbias, {C});
  switch (device) {
    case Device::cpu:
      cpu::layernorm_backward(dx.f32(), dweight.f32(), optional_f32(dbias), dout.f32(), x.f32(), weight.f32(),
                              mean.f32(), rstd.f32(), N, C, add);
      return;
    case Device::cuda:
      if (!dbias.defined()) detail::fail_no_cuda_kernel("layernorm_backward without a bias");
#ifdef TESSERA_WITH_CUDA
      cuda::with_storage_type(dtype, [&]<typename T>(T) {
        cuda::layernorm_backward(cuda::typed_data<T>(dx), dweight.f32(), dbias.f32(), cuda::typed_data<T>(dout),
                                 cuda::typed_data<T>(x), cuda::typed_data<T>(weight), mean.f32(), rstd.f32(), N, C,
                                 add, cuda_compute_stream());
      });
      return;
#else
      detail::fail_no_cuda_kernel(op);
#endif
  }
}

}  // namespace tessera
