// RMSNorm (whole rows, or rows split over a group): shape, dtype and eps checks, then dispatch by
// device and, on the GPU, by the activation dtype (f32, bf16, f16).
#include "ops/rmsnorm.h"

#include <cmath>

#include "ops/cpu/residual_cpu.h"
#include "ops/cpu/rmsnorm_cpu.h"
#include "ops/op_checks.h"

#ifdef TESSERA_WITH_CUDA
#include "core/cuda/device.h"
#include "ops/cuda/rmsnorm_cuda.h"
#include "ops/cuda/storage_types.h"
#endif

namespace tessera {
namespace {

// x (named x_name) is (..., C) with C > 0; weight (C); rstd holds one value per row. Returns C.
int64_t rmsnorm_channels(const char* op, const char* x_name, const Tensor& x, const Tensor& weight,
                         const Tensor& rstd) {
  TS_CHECK(x.ndim() >= 2 && x.size(-1) > 0, op, ": ", x_name, " must be (N,C) or (B,T,C), got ",
           shape_string(x.shape()));
  const int64_t C = x.size(-1), N = x.numel() / C;
  detail::check_shape(op, "weight", weight, {C});
  TS_CHECK(rstd.numel() == N, op, ": rstd must hold one value per row of ", x_name, " (", N, "), got ",
           shape_string(rstd.shape()));
  return C;
}

void check_eps(const char* op, float eps) {
  TS_CHECK(std::isfinite(eps) && eps > 0.0f, op,
           ": eps must be a positive finite number (Llama uses 1e-5 or 1e-6), got ", eps);
}

}  // namespace

namespace {

// A grouped row's statistics (N) f32 on x's device, and its whole width: at least C.
void check_group(const char* op, const char* name, const Tensor& stats, int64_t N, int64_t C, int64_t width) {
  detail::check_shape(op, name, stats, {N});
  TS_CHECK(width >= C, op, ": a row's width over the group (", width, ") must be at least its ", C,
           " channels here");
}

// rmsnorm_forward, or with `sums` rmsnorm_grouped_forward.
void forward_rows(const char* op, Tensor& out, Tensor& rstd, const Tensor& x, const Tensor& weight,
                  const Tensor* sums, int64_t width, float eps) {
  detail::check_float_dtype(op, "x", x);
  const DType dtype = x.dtype();
  const Device device =
      detail::check_args(op, {{"out", out, dtype}, {"rstd", rstd}, {"x", x, dtype}, {"weight", weight, dtype},
                              {"sums", sums ? *sums : rstd}});
  const int64_t C = rmsnorm_channels(op, "x", x, weight, rstd);
  const int64_t N = x.numel() / C;
  detail::check_shape(op, "out", out, x.shape());
  check_eps(op, eps);
  if (sums) check_group(op, "sums", *sums, N, C, width);
  const float* row_sums = sums ? sums->f32() : nullptr;
  switch (device) {
    case Device::cpu:
      cpu::rmsnorm_forward(out.f32(), rstd.f32(), x.f32(), weight.f32(), N, C, eps, row_sums, width);
      return;
    case Device::cuda:
#ifdef TESSERA_WITH_CUDA
      cuda::with_storage_type(dtype, [&]<typename T>(T) {
        cuda::rmsnorm_forward(cuda::typed_data<T>(out), rstd.f32(), cuda::typed_data<T>(x),
                              cuda::typed_data<T>(weight), N, C, eps, cuda_compute_stream(), row_sums, width);
      });
      return;
#else
      detail::fail_no_cuda_kernel(op);
#endif
  }
}

// rmsnorm_backward, or with `dots` rmsnorm_grouped_backward.
void backward_rows(const char* op, Tensor& dx, Tensor& dweight, const Tensor& dout, const Tensor& x,
                   const Tensor& weight, const Tensor& rstd, const Tensor* dots, int64_t width, GradInto into) {
  const bool add = into == GradInto::add;
  detail::check_float_dtype(op, "x", x);
  const DType dtype = x.dtype();
  const Device device = detail::check_args(op, {{"dx", dx, dtype},
                                                {"dweight", dweight},
                                                {"dout", dout, dtype},
                                                {"x", x, dtype},
                                                {"weight", weight, dtype},
                                                {"rstd", rstd},
                                                {"dots", dots ? *dots : rstd}});
  const int64_t C = rmsnorm_channels(op, "x", x, weight, rstd);
  const int64_t N = x.numel() / C;
  detail::check_shape(op, "dx", dx, x.shape());
  detail::check_shape(op, "dout", dout, x.shape());
  detail::check_shape(op, "dweight", dweight, {C});
  if (dots) check_group(op, "dots", *dots, N, C, width);
  const float* row_dots = dots ? dots->f32() : nullptr;
  switch (device) {
    case Device::cpu:
      cpu::rmsnorm_backward(dx.f32(), dweight.f32(), dout.f32(), x.f32(), weight.f32(), rstd.f32(), N, C, add,
                            row_dots, width);
      return;
    case Device::cuda:
#ifdef TESSERA_WITH_CUDA
      cuda::with_storage_type(dtype, [&]<typename T>(T) {
        cuda::rmsnorm_backward(cuda::typed_data<T>(dx), dweight.f32(), cuda::typed_data<T>(dout),
                               cuda::typed_data<T>(x), cuda::typed_data<T>(weight), rstd.f32(), N, C, add,
                               cuda_compute_stream(), row_dots, width);
      });
      return;
#else
      detail::fail_no_cuda_kernel(op);
#endif
  }
}

}  // namespace

void rmsnorm_forward(Tensor& out, Tensor& rstd, const Tensor& x, const Tensor& weight, float eps) {
  forward_rows("rmsnorm_forward", out, rstd, x, weight, nullptr, 0, eps);
}

void rmsnorm_grouped_forward(Tensor& out, Tensor& rstd, const Tensor& x, const Tensor& weight, const Tensor& sums,
                             int64_t width, float eps) {
  forward_rows("rmsnorm_grouped_forward", out, rstd, x, weight, &sums, width, eps);
}

void residual_rmsnorm_forward(Tensor& residual_out, Tensor& out, Tensor& rstd, const Tensor& a, const Tensor& b,
                              const Tensor& weight, float eps) {
  const char* op = "residual_rmsnorm_forward";
  detail::check_float_dtype(op, "a", a);
  const DType dtype = a.dtype();
  const Device device = detail::check_args(op, {{"residual_out", residual_out, dtype},
                                                {"out", out, dtype},
                                                {"rstd", rstd},
                                                {"a", a, dtype},
                                                {"b", b, dtype},
                                                {"weight", weight, dtype}});
  const int64_t C = rmsnorm_channels(op, "a", a, weight, rstd);
  const int64_t N = a.numel() / C;
  detail::check_shape(op, "b", b, a.shape());
  detail::check_shape(op, "residual_out", residual_out, a.shape());
  detail::check_shape(op, "out", out, a.shape());
  check_eps(op, eps);
  switch (device) {
    case Device::cpu:
      cpu::residual_forward(residual_out.f32(), a.f32(), b.f32(), a.numel());
      cpu::rmsnorm_forward(out.f32(), rstd.f32(), residual_out.f32(), weight.f32(), N, C, eps);
      return;
    case Device::cuda:
#ifdef TESSERA_WITH_CUDA
      cuda::with_storage_type(dtype, [&]<typename T>(T) {
        cuda::residual_rmsnorm_forward(cuda::typed_data<T>(residual_out), cuda::typed_data<T>(out), rstd.f32(),
                                       cuda::typed_data<T>(a), cuda::typed_data<T>(b), cuda::typed_data<T>(weight),
                                       N, C, eps, cuda_compute_stream());
      });
      return;
#else
      detail::fail_no_cuda_kernel(op);
#endif
  }
}

void rmsnorm_backward(Tensor& dx, Tensor& dweight, const Tensor& dout, const Tensor& x, const Tensor& weight,
                      const Tensor& rstd, GradInto into) {
  backward_rows("rmsnorm_backward", dx, dweight, dout, x, weight, rstd, nullptr, 0, into);
}

void rmsnorm_grouped_backward(Tensor& dx, Tensor& dweight, const Tensor& dout, const Tensor& x, const Tensor& weight,
                              const Tensor& rstd, const Tensor& dots, int64_t width, GradInto into) {
  backward_rows("rmsnorm_grouped_backward", dx, dweight, dout, x, weight, rstd, &dots, width, into);
}

void rmsnorm_partial_sums(Tensor& sums, const Tensor& x) {
  const char* op = "rmsnorm_partial_sums";
  detail::check_float_dtype(op, "x", x);
  const Device device = detail::check_args(op, {{"sums", sums}, {"x", x, x.dtype()}});
  TS_CHECK(x.ndim() >= 2 && x.size(-1) > 0, op, ": x must be (N,C) or (B,T,C), got ", shape_string(x.shape()));
  const int64_t C = x.size(-1), N = x.numel() / C;
  detail::check_shape(op, "sums", sums, {N});
  switch (device) {
    case Device::cpu:
      cpu::rmsnorm_partial_sums(sums.f32(), x.f32(), N, C);
      return;
    case Device::cuda:
#ifdef TESSERA_WITH_CUDA
      cuda::with_storage_type(x.dtype(), [&]<typename T>(T) {
        cuda::rmsnorm_partial_sums(sums.f32(), cuda::typed_data<T>(x), N, C, cuda_compute_stream());
      });
      return;
#else
      detail::fail_no_cuda_kernel(op);
#endif
  }
}

void rmsnorm_partial_dots(Tensor& dots, const Tensor& dout, const Tensor& x, const Tensor& weight, const Tensor& rstd) {
  const char* op = "rmsnorm_partial_dots";
  detail::check_float_dtype(op, "x", x);
  const DType dtype = x.dtype();
  const Device device = detail::check_args(
      op, {{"dots", dots}, {"dout", dout, dtype}, {"x", x, dtype}, {"weight", weight, dtype}, {"rstd", rstd}});
  const int64_t C = rmsnorm_channels(op, "x", x, weight, rstd);
  const int64_t N = x.numel() / C;
  detail::check_shape(op, "dout", dout, x.shape());
  detail::check_shape(op, "dots", dots, {N});
  switch (device) {
    case Device::cpu:
      cpu::rmsnorm_partial_dots(dots.f32(), dout.f32(), x.f32(), weight.f32(), rstd.f32(), N, C);
      return;
    case Device::cuda:
#ifdef TESSERA_WITH_CUDA
      cuda::with_storage_type(dtype, [&]<typename T>(T) {
        cuda::rmsnorm_partial_dots(dots.f32(), cuda::typed_data<T>(dout), cuda::typed_data<T>(x),
                                   cuda::typed_data<T>(weight), rstd.f32(), N, C, cuda_compute_stream());
      });
      return;
#else
      detail::fail_no_cuda_kernel(op);
#endif
  }
}

}  // namespace tessera
