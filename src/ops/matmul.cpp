// Linear layer: shape and dtype checks, then dispatch by device and, on the GPU, by activation dtype.
// The fused GELU ops are, on the CPU, literally their two-op compositions.
#include "ops/matmul.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>

#include "ops/cpu/matmul_cpu.h"
#include "ops/gelu.h"
#include "ops/op_checks.h"

#ifdef TESSERA_WITH_CUDA
#include "core/cuda/device.h"
#include "ops/cuda/matmul_cuda.h"
#include "ops/cuda/storage_types.h"
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

// The activation dtype, x's: f32 anywhere, bf16 or f16 on the GPU. The other activations must match it.
DType activation_dtype(const char* op, const Tensor& x) {
  detail::check_float_dtype(op, "x", x);
  return x.dtype();
}

struct Checked {
  Device device;
  MatmulDims d;
};

// out (..., OC) = x (..., C) weight^T + bias: dtypes, devices and shapes.
Checked check_forward(const char* op, const Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias) {
  const DType t = activation_dtype(op, x);
  const Device device =
      detail::check_args(op, {{"out", out, t}, {"x", x, t}, {"weight", weight, t}, {"bias", bias, t, true}});
  const MatmulDims d = matmul_dims(op, x, weight);
  detail::check_shape(op, "out", out, rows_by(x, d.OC));
  if (bias.defined()) detail::check_shape(op, "bias", bias, {d.OC});
  return {device, d};
}

// dx (optional unless dx_required), dweight and dbias (optional) of out = x weight^T + bias.
Checked check_backward(const char* op, const Tensor& dx, bool dx_required, const Tensor& dweight, const Tensor& dbias,
                       const Tensor& dout, const Tensor& x, const Tensor& weight) {
  const DType t = activation_dtype(op, x);
  const Device device = detail::check_args(op, {{"dx", dx, t, /*optional=*/!dx_required},
                                                {"dweight", dweight, DType::f32, /*optional=*/true},
                                                {"dbias", dbias, DType::f32, /*optional=*/true},
                                                {"dout", dout, t},
                                                {"x", x, t},
                                                {"weight", weight, t}});
  const MatmulDims d = matmul_dims(op, x, weight);
  detail::check_shape(op, "dout", dout, rows_by(x, d.OC));
  if (dweight.defined()) detail::check_shape(op, "dweight", dweight, weight.shape());
  TS_CHECK(dweight.defined() || !dbias.defined(), op, ": dbias without dweight; the weight part computes both");
  if (dx.defined()) detail::check_shape(op, "dx", dx, x.shape());
  if (dbias.defined()) detail::check_shape(op, "dbias", dbias, {d.OC});
  return {device, d};
}

float* f32_or_null(Tensor& t) { return t.defined() ? t.f32() : nullptr; }

#ifdef TESSERA_WITH_CUDA
// A tensor's device pointer in the launchers' storage type T; null when undefined.
template <typename T>
const T* typed(const Tensor& t) {
  return t.defined() ? cuda::typed_data<T>(t) : nullptr;
}
template <typename T>
T* typed(Tensor& t) {
  return t.defined() ? cuda::typed_data<T>(t) : nullptr;
}
#endif

}  // namespace

void matmul_forward(Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias,
                    [[maybe_unused]] MatmulAlgoChoice choice) {
  const char* op = "matmul_forward";
  const Checked c = check_forward(op, out, x, weight, bias);
  const MatmulDims d = c.d;
  switch (c.device) {
    case Device::cpu:
      cpu::matmul_forward(out.f32(), x.f32(), weight.f32(), bias.defined() ? bias.f32() : nullptr, d.N, d.C, d.OC);
      return;
    case Device::cuda:
#ifdef TESSERA_WITH_CUDA
      cuda::with_storage_type(x.dtype(), [&]<typename T>(T) {
        cuda::matmul_forward<T>(typed<T>(out), typed<T>(x), typed<T>(weight), typed<T>(bias), d.N, d.C, d.OC,
                                cuda_compute_stream(), choice);
      });
      return;
#else
      detail::fail_no_cuda_kernel(op);
#endif
  }
}

void matmul_backward(Tensor& dx, Tensor& dweight, Tensor& dbias, const Tensor& dout, const Tensor& x,
                     const Tensor& weight, [[maybe_unused]] MatmulAlgoChoice choice) {
  const char* op = "matmul_backward";
  const Checked c = check_backward(op, dx, /*dx_required=*/false, dweight, dbias, dout, x, weight);
  const MatmulDims d = c.d;
  switch (c.device) {
    case Device::cpu:
      cpu::matmul_backward(f32_or_null(dx), f32_or_null(dweight), f32_or_null(dbias), dout.f32(),
                           x.f32(), weight.f32(), d.N, d.C, d.OC);
      return;
    case Device::cuda:
#ifdef TESSERA_WITH_CUDA
      cuda::with_storage_type(x.dtype(), [&]<typename T>(T) {
        cuda::matmul_backward<T>(typed<T>(dx), f32_or_null(dweight), f32_or_null(dbias), typed<T>(dout), typed<T>(x),
                                 typed<T>(weight), d.N, d.C, d.OC, cuda_compute_stream(), choice);
      });
      return;
#else
      detail::fail_no_cuda_kernel(op);
#endif
  }
}

void matmul_gelu_forward(Tensor& out, Tensor& pre_gelu, const Tensor& x, const Tensor& weight, const Tensor& bias) {
  const char* op = "matmul_gelu_forward";
  const Checked c = check_forward(op, out, x, weight, bias);
  detail::check_args(op, {{"x", x, x.dtype()}, {"pre_gelu", pre_gelu, x.dtype()}});
  detail::check_shape(op, "pre_gelu", pre_gelu, out.shape());
  switch (c.device) {
    case Device::cpu:
      matmul_forward(pre_gelu, x, weight, bias);
      gelu_forward(out, pre_gelu);
      return;
    case Device::cuda:
#ifdef TESSERA_WITH_CUDA
      cuda::with_storage_type(x.dtype(), [&]<typename T>(T) {
        cuda::matmul_gelu_forward<T>(typed<T>(out), typed<T>(pre_gelu), typed<T>(x), typed<T>(weight), typed<T>(bias),
                                     c.d.N, c.d.C, c.d.OC, cuda_compute_stream());
      });
      return;
#else
      detail::fail_no_cuda_kernel(op);
#endif
  }
}

void matmul_backward_dgelu(Tensor& dx, Tensor& dweight, Tensor& dbias, const Tensor& dout, const Tensor& x,
                           const Tensor& weight, const Tensor& x_pre_gelu) {
  const char* op = "matmul_backward_dgelu";
  const Checked c = check_backward(op, dx, /*dx_required=*/true, dweight, dbias, dout, x, weight);
  detail::check_args(op, {{"x", x, x.dtype()}, {"x_pre_gelu", x_pre_gelu, x.dtype()}});
  detail::check_shape(op, "x_pre_gelu", x_pre_gelu, x.shape());
  switch (c.device) {
    case Device::cpu:
      matmul_backward(dx, dweight, dbias, dout, x, weight);
      gelu_backward(dx, dx, x_pre_gelu);  // elementwise, so in place is safe
      return;
    case Device::cuda:
#ifdef TESSERA_WITH_CUDA
      cuda::with_storage_type(x.dtype(), [&]<typename T>(T) {
        cuda::matmul_backward_dgelu<T>(typed<T>(dx), f32_or_null(dweight), f32_or_null(dbias), typed<T>(dout), typed<T>(x),
                                       typed<T>(weight), typed<T>(x_pre_gelu), c.d.N, c.d.C, c.d.OC,
                                       cuda_compute_stream());
      });
      return;
#else
      detail::fail_no_cuda_kernel(op);
#endif
  }
}

int64_t matmul_row_bucket(int64_t rows) {
  TS_CHECK(rows > 0, "matmul_row_bucket: rows = ", rows, " must be positive");
  int64_t octave = 1;  // the largest power of two <= rows
  while (octave <= rows / 2) octave *= 2;
  const int64_t step = std::max<int64_t>(8, octave / 8);
  return (rows + step - 1) / step * step;
}

void check_matmul_tuning(int64_t candidates) {
  TS_CHECK(candidates >= 1 && candidates <= kMaxMatmulTuning, "--matmul-tuning ", candidates,
           ": time between 1 (cuBLASLt's first choice, untimed) and ", kMaxMatmulTuning, " candidates per matmul");
}

void set_matmul_tuning(int candidates) {
  check_matmul_tuning(candidates);
#ifdef TESSERA_WITH_CUDA
  cuda::set_matmul_tuning(candidates);
#endif
}

std::string matmul_tuning_summary(const std::vector<MatmulTuningRecord>& records) {
  int changed = 0;
  double saved_us = 0;
  for (const MatmulTuningRecord& r : records) {
    changed += r.chosen != 0;
    if (std::isfinite(r.first_us)) saved_us += double(r.first_us) - double(r.best_us);  // inf: refused at run time
  }
  char line[200];
  std::snprintf(line, sizeof line,
                "matmul tuning: %zu problems timed, %d faster with another algorithm than cuBLASLt's first choice "
                "(%.1f us less over one call of each)",
                records.size(), changed, saved_us);
  return line;
}

std::vector<MatmulTuningRecord> matmul_tuning_records() {
#ifdef TESSERA_WITH_CUDA
  return cuda::matmul_tuning_records();
#else
  return {};
#endif
}

}  // namespace tessera
