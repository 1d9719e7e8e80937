// AdamW: size, dtype and hyper-parameter checks, bias corrections, then dispatch by device.
#include "ops/adamw.h"

#include <cmath>

#include "ops/cpu/adamw_cpu.h"
#include "ops/op_checks.h"

#ifdef TESSERA_WITH_CUDA
#include "core/cuda/device.h"
#include "ops/cuda/adamw_cuda.h"
#endif

namespace tessera {

void adamw_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWParams& p) {
  const char* op = "adamw_update";
  const Device device = detail::check_args(op, {{"param", param}, {"grad", grad}, {"m", m}, {"v", v}});
  const int64_t n = param.numel();
  TS_CHECK(grad.numel() == n && m.numel() == n && v.numel() == n, op, ": param ", shape_string(param.shape()),
           ", grad ", shape_string(grad.shape()), ", m ", shape_string(m.shape()), " and v ",
           shape_string(v.shape()), " must hold the same number of elements");
  TS_CHECK(p.step >= 1, op, ": step counts from 1, got ", p.step);
  TS_CHECK(p.beta1 >= 0.0f && p.beta1 < 1.0f && p.beta2 >= 0.0f && p.beta2 < 1.0f, op,
           ": beta1 and beta2 must be in [0, 1), got ", p.beta1, " and ", p.beta2);
  const float bias1 = float(1.0 - std::pow(double(p.beta1), double(p.step)));
  const float bias2 = float(1.0 - std::pow(double(p.beta2), double(p.step)));
  switch (device) {
    case Device::cpu:
      cpu::adamw_update(param.f32(), grad.f32(), m.f32(), v.f32(), n, p.lr, p.beta1, p.beta2, p.eps, p.weight_decay,
                        p.grad_scale, bias1, bias2);
      return;
    case Device::cuda:
#ifdef TESSERA_WITH_CUDA
      cuda::adamw_update(param.f32(), grad.f32(), m.f32(), v.f32(), n, p.lr, p.beta1, p.beta2, p.eps, p.weight_decay,
                         p.grad_scale, bias1, bias2, cuda_compute_stream());
      return;
#else
      detail::fail_no_cuda_kernel(op);
#endif
  }
}

}  // namespace tessera
