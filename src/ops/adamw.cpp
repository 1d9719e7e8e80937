// AdamW: size, dtype and hyper-parameter checks, bias corrections, then dispatch by device; the
// multi-tensor form checks every segment against the buffers once per call and sweeps coalesced runs.
#include "ops/adamw.h"

#include <cmath>
#include <type_traits>

#include "ops/cpu/adamw_cpu.h"
#include "ops/op_checks.h"

#ifdef TESSERA_WITH_CUDA
#include "core/cuda/device.h"
#include "ops/cuda/adamw_cuda.h"
#include "ops/cuda/storage_types.h"
#endif

namespace tessera {
namespace {

// The hyper-parameters checked, with the bias corrections of p.step, for a segment with or without decay.
AdamWElementParams element_params(const char* op, const AdamWParams& p, bool decayed) {
  TS_CHECK(p.step >= 1, op, ": step counts from 1, got ", p.step);
  TS_CHECK(p.beta1 >= 0.0f && p.beta1 < 1.0f && p.beta2 >= 0.0f && p.beta2 < 1.0f, op,
           ": beta1 and beta2 must be in [0, 1), got ", p.beta1, " and ", p.beta2);
  const float bias1 = float(1.0 - std::pow(double(p.beta1), double(p.step)));
  const float bias2 = float(1.0 - std::pow(double(p.beta2), double(p.step)));
  const float decay = decayed ? p.weight_decay : 0.0f;
  return {p.lr, p.beta1, p.beta2, p.eps, decay, p.grad_scale, bias1, bias2, p.round_seed, uint64_t(p.step)};
}

void cpu_update(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWElementParams& e) {
  cpu::adamw_update(param, grad, m, v, n, e.lr, e.beta1, e.beta2, e.eps, e.weight_decay, e.grad_scale, e.bias1,
                    e.bias2);
}

// The moments' dtype, f32 or bf16 alike for m and v; bf16 moments need every segment keyed.
DType check_moments(const char* op, const Tensor& m, const Tensor& v, const std::vector<AdamWSegment>& segments) {
  TS_CHECK((m.dtype() == DType::f32 || m.dtype() == DType::bf16) && v.dtype() == m.dtype(), op,
           ": the moments m and v are both f32 or both bf16, got ", dtype_name(m.dtype()), " and ",
           dtype_name(v.dtype()));
  if (m.dtype() == DType::bf16)
    for (const AdamWSegment& s : segments)
      TS_CHECK(s.rounding_key_valid(), op,
               ": bf16 moments round stochastically by each element's place in the whole model; the segment at param ",
               s.param_offset, " has no valid rounding key (optim's with_rounding_keys gives them)");
  return m.dtype();
}

}  // namespace

std::vector<AdamWSegment> coalesce_segments(const std::vector<AdamWSegment>& segments) {
  std::vector<AdamWSegment> runs;
  for (const AdamWSegment& s : segments) {
    if (!runs.empty()) {
      AdamWSegment& last = runs.back();
      const bool keys_join = (!last.keyed() && !s.keyed()) ||
                             (last.keyed() && s.keyed() && last.key_cols == 0 && s.key_cols == 0 &&
                              last.key_offset + last.length == s.key_offset);
      if (last.decayed == s.decayed && last.param_offset + last.length == s.param_offset &&
          last.state_offset + last.length == s.state_offset && keys_join) {
        last.length += s.length;
        continue;
      }
    }
    runs.push_back(s);
  }
  return runs;
}

void adamw_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWParams& p) {
  const char* op = "adamw_update";
  const Device device = detail::check_args(op, {{"param", param}, {"grad", grad}, {"m", m}, {"v", v}});
  const int64_t n = param.numel();
  TS_CHECK(grad.numel() == n && m.numel() == n && v.numel() == n, op, ": param ", shape_string(param.shape()),
           ", grad ", shape_string(grad.shape()), ", m ", shape_string(m.shape()), " and v ",
           shape_string(v.shape()), " must hold the same number of elements");
  const AdamWElementParams e = element_params(op, p, true);
  switch (device) {
    case Device::cpu:
      cpu_update(param.f32(), grad.f32(), m.f32(), v.f32(), n, e);
      return;
    case Device::cuda:
#ifdef TESSERA_WITH_CUDA
      cuda::adamw_update(param.f32(), grad.f32(), m.f32(), v.f32(), n, e, cuda_compute_stream());
      return;
#else
      detail::fail_no_cuda_kernel(op);
#endif
  }
}

void adamw_update_segments(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                           const std::vector<AdamWSegment>& segments, const AdamWParams& p, Tensor* mirror) {
  const char* op = "adamw_update_segments";
  const DType moments = check_moments(op, m, v, segments);
  const Device device =
      detail::check_args(op, {{"param", param}, {"grad", grad}, {"m", m, moments}, {"v", v, moments}});
  TS_CHECK(m.numel() == grad.numel() && v.numel() == grad.numel(), op, ": grad ", shape_string(grad.shape()), ", m ",
           shape_string(m.shape()), " and v ", shape_string(v.shape()), " must hold the same number of elements");
  for (const AdamWSegment& s : segments)
    TS_CHECK(s.length >= 0 && s.param_offset >= 0 && s.state_offset >= 0 &&
                 s.param_offset + s.length <= param.numel() && s.state_offset + s.length <= grad.numel(),
             op, ": segment (param ", s.param_offset, ", state ", s.state_offset, ", length ", s.length,
             ") lies outside param (", param.numel(), ") or the state (", grad.numel(), ")");
  if (mirror) {
    TS_CHECK(device == Device::cuda && (mirror->dtype() == DType::bf16 || mirror->dtype() == DType::f16), op,
             ": the mirror is the GPU's 16-bit compute copy: a bf16 or f16 tensor on the GPU, got ",
             dtype_name(mirror->dtype()), device == Device::cpu ? " with CPU tensors" : "");
    detail::check_args(op, {{"mirror", *mirror, mirror->dtype()}, {"param", param}});
    TS_CHECK(mirror->numel() == param.numel(), op, ": the mirror holds ", mirror->numel(), " elements, param ",
             param.numel());
  }
  const AdamWElementParams decayed = element_params(op, p, true), plain = element_params(op, p, false);
  const std::vector<AdamWSegment> runs = coalesce_segments(segments);
  switch (device) {
    case Device::cpu:
      for (const AdamWSegment& s : runs) {
        const AdamWElementParams& e = s.decayed ? decayed : plain;
        if (moments == DType::bf16)
          cpu::adamw_update_bf16_moments(param.f32() + s.param_offset, grad.f32() + s.state_offset,
                                         m.data<bf16>() + s.state_offset, v.data<bf16>() + s.state_offset, s, e);
        else
          cpu_update(param.f32() + s.param_offset, grad.f32() + s.state_offset, m.f32() + s.state_offset,
                     v.f32() + s.state_offset, s.length, e);
      }
      return;
    case Device::cuda:
#ifdef TESSERA_WITH_CUDA
      // T: the mirror's type (float: none); M: the moments'.
      cuda::with_storage_type(mirror ? mirror->dtype() : DType::f32, [&]<typename T>(T) {
        cuda::with_storage_type(moments, [&]<typename M>(M) {
          if constexpr (!std::is_same_v<M, __half>)  // (f16 moments are refused above)
            cuda::adamw_update_segments<T, M>(param.f32(), grad.f32(), cuda::typed_data<M>(m), cuda::typed_data<M>(v),
                                              mirror ? cuda::typed_data<T>(*mirror) : nullptr, runs.data(),
                                              int64_t(runs.size()), decayed, plain, cuda_compute_stream());
        });
      });
      return;
#else
      detail::fail_no_cuda_kernel(op);
#endif
  }
}

}  // namespace tessera
