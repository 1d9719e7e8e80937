// RoPE: the inverse frequencies (with Llama 3.1's scaling), shape, dtype and position checks, then
// dispatch by device and, on the GPU, by storage type (f32, bf16, f16). Position values are checked
// on the CPU only: on the GPU that would take a synchronising copy per call.
#include "ops/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "ops/cpu/rope_cpu.h"
#include "ops/op_checks.h"

#ifdef TESSERA_WITH_CUDA
#include "core/cuda/device.h"
#include "ops/cuda/rope_cuda.h"
#include "ops/cuda/storage_types.h"
#endif

namespace tessera {
namespace {

struct RopeDims {
  int64_t B, T, NH, NKV, HS, R;  // R: the rotated channels, each head's last
};

// Checks every argument but the position values; returns the dimensions.
RopeDims rope_dims(const char* op, const char* qkv_name, const Tensor& qkv, const Tensor& positions,
                   int64_t num_heads, int64_t num_kv_heads, const Tensor& inv_freq) {
  detail::check_float_dtype(op, qkv_name, qkv);
  detail::check_args(op, {{qkv_name, qkv, qkv.dtype()}, {"positions", positions, DType::i32}, {"inv_freq", inv_freq}});
  TS_CHECK(num_heads > 0 && num_kv_heads > 0 && num_heads % num_kv_heads == 0, op, ": num_kv_heads = ", num_kv_heads,
           " must be positive and divide num_heads = ", num_heads);
  TS_CHECK(qkv.ndim() == 3, op, ": ", qkv_name, " must be (B, T, (num_heads + 2*num_kv_heads) * HS), got ",
           shape_string(qkv.shape()));
  const int64_t heads = num_heads + 2 * num_kv_heads, C = qkv.size(2);
  TS_CHECK(C > 0 && C % heads == 0, op, ": the last dim of ", qkv_name, " ", shape_string(qkv.shape()),
           " must be (num_heads + 2*num_kv_heads) * HS = ", heads, " * HS (q, k and v heads of HS channels)");
  const int64_t HS = C / heads;
  TS_CHECK(HS % 2 == 0, op, ": the head size HS = ", HS, " (last dim of ", qkv_name, " ", shape_string(qkv.shape()),
           " / ", heads, " heads) must be even: RoPE rotates channel pairs (i, i + HS/2)");
  detail::check_shape(op, "positions", positions, {qkv.size(1)});
  TS_CHECK(inv_freq.ndim() == 1 && inv_freq.size(0) >= 1 && inv_freq.size(0) <= HS / 2, op, ": inv_freq must be (R/2) ",
           "for R rotated channels of each head, at most HS = ", HS, ", got ", shape_string(inv_freq.shape()));
  return {qkv.size(0), qkv.size(1), num_heads, num_kv_heads, HS, 2 * inv_freq.size(0)};
}

// Positions are absolute token positions: a negative one is a caller's bug (a bad offset).
void check_positions(const char* op, const Tensor& positions) {
  const int32_t* p = positions.data<int32_t>();
  for (int64_t t = 0; t < positions.numel(); t++)
    TS_CHECK(p[t] >= 0, op, ": positions[", t, "] = ", p[t], " is negative; positions are absolute token positions");
}

// YaRN (Hugging Face's rope_type "yarn"): each frequency a blend of itself (extrapolation) and itself
// divided by factor (interpolation), by a ramp over the frequency index between the dimensions where
// a wavelength fits beta_fast and beta_slow turns in original_max_positions (floored and ceiled with
// `truncate`); low indices (fast rotations) keep their frequency, high ones are divided.
Tensor yarn_inv_freq(int64_t dim, const RopeConfig& config) {
  const double base = config.theta, factor = config.factor, original = double(config.original_max_positions);
  const auto correction_dim = [&](double rotations) {
    return double(dim) * std::log(original / (rotations * 2.0 * std::numbers::pi)) / (2.0 * std::log(base));
  };
  double low = correction_dim(config.beta_fast), high = correction_dim(config.beta_slow);
  if (config.truncate) low = std::floor(low), high = std::ceil(high);
  low = std::max(low, 0.0), high = std::min(high, double(dim - 1));
  if (low == high) high += 0.001;  // no zero-width ramp
  Tensor inv_freq = Tensor::zeros({dim / 2});
  for (int64_t i = 0; i < dim / 2; i++) {
    const double extrapolated = 1.0 / std::pow(base, double(2 * i) / double(dim));
    const double ramp = std::clamp((double(i) - low) / (high - low), 0.0, 1.0);
    inv_freq.f32()[i] = float(extrapolated / factor * ramp + extrapolated * (1.0 - ramp));
  }
  return inv_freq;
}

// LongRoPE (Hugging Face's rope type "longrope", `_compute_longrope_parameters` and its dynamic update):
// frequency i of the unscaled theta^(-2i/R) divided by its short factor, or by its long factor when the
// sequence's positions pass original_max_positions.
Tensor longrope_inv_freq(int64_t dim, const RopeConfig& config, int64_t positions) {
  const char* op = "rope_inv_freq";
  const bool long_sequence = positions > config.original_max_positions;
  const std::vector<float>& factors = long_sequence ? config.long_factor : config.short_factor;
  TS_CHECK(int64_t(factors.size()) == dim / 2, op, ": longrope's ", long_sequence ? "long" : "short", "_factor has ",
           factors.size(), " values, and ", dim, " rotated channels need ", dim / 2);
  Tensor inv_freq = Tensor::zeros({dim / 2});
  for (int64_t i = 0; i < dim / 2; i++) {
    const double factor = factors[size_t(i)];
    TS_CHECK(std::isfinite(factor) && factor > 0, op, ": longrope factors must be positive, got ", factor);
    inv_freq.f32()[i] = float(1.0 / (factor * std::pow(double(config.theta), double(2 * i) / double(dim))));
  }
  return inv_freq;
}

}  // namespace

// Follows Hugging Face transformers' `_compute_llama3_parameters` (src/transformers/modeling_rope_utils.py,
// commit 0044e3b3facff1a1ad60b235c69d5b45beae75a4) on top of `_compute_default_rope_parameters`
// (inv_freq = 1 / theta^(arange(0, HS, 2) / HS)), with its boundaries: a wavelength below
// original/high_freq_factor is kept, one above original/low_freq_factor is divided by factor, and one
// in [original/high, original/low] (both ends included) is smoothed; YaRN follows its
// `_compute_yarn_parameters` (yarn_inv_freq above), LongRoPE its `_compute_longrope_parameters`. HF
// computes in fp32; we compute in double and round once, so values may differ from HF's by an fp32 ulp.
Tensor rope_inv_freq(int64_t head_size, const RopeConfig& config, int64_t positions) {
  const char* op = "rope_inv_freq";
  TS_CHECK(head_size > 0 && head_size % 2 == 0, op, ": head_size = ", head_size,
           " must be positive and even: RoPE rotates channel pairs (i, i + HS/2)");
  TS_CHECK(std::isfinite(config.theta) && config.theta > 0, op, ": theta = ", config.theta, " must be positive");
  if (config.longrope) return longrope_inv_freq(head_size, config, positions);
  const bool scaled = config.factor != 0;
  if (scaled) {
    TS_CHECK(config.factor >= 1, op, ": factor = ", config.factor, " must be >= 1 (or 0 for no scaling)");
    TS_CHECK(config.original_max_positions > 0, op, ": original_max_positions = ", config.original_max_positions,
             " must be positive");
    TS_CHECK(config.yarn || config.linear ||
                 (config.low_freq_factor > 0 && config.high_freq_factor > config.low_freq_factor),
             op,
             ": need 0 < low_freq_factor < high_freq_factor, got low_freq_factor = ", config.low_freq_factor,
             " and high_freq_factor = ", config.high_freq_factor);
    TS_CHECK(!config.yarn || (config.beta_fast > 0 && config.beta_slow > 0), op,
             ": YaRN's beta_fast and beta_slow must be positive, got ", config.beta_fast, " and ", config.beta_slow);
  }
  if (scaled && config.yarn) return yarn_inv_freq(head_size, config);
  const double factor = config.factor, low = config.low_freq_factor, high = config.high_freq_factor;
  const double original = double(config.original_max_positions);
  const double low_freq_wavelen = original / low, high_freq_wavelen = original / high;
  Tensor inv_freq = Tensor::zeros({head_size / 2});
  for (int64_t i = 0; i < head_size / 2; i++) {
    double f = 1.0 / std::pow(double(config.theta), double(2 * i) / double(head_size));
    const double wavelen = 2.0 * std::numbers::pi / f;
    if (scaled && (config.linear || wavelen > low_freq_wavelen)) {  // linear: every frequency
      f = f / factor;
    } else if (scaled && !(wavelen < high_freq_wavelen)) {
      const double smooth = (original / wavelen - low) / (high - low);
      f = (1.0 - smooth) * f / factor + smooth * f;
    }
    inv_freq.f32()[i] = float(f);
  }
  return inv_freq;
}

double yarn_mscale(double scale, double m) { return scale <= 1.0 ? 1.0 : 0.1 * m * std::log(scale) + 1.0; }

float rope_rotated_scale(const RopeConfig& config) {
  if (config.longrope) {
    if (config.attention_factor > 0) return config.attention_factor;
    if (config.factor <= 1) return 1.0f;
    return float(std::sqrt(1.0 + std::log(double(config.factor)) / std::log(double(config.original_max_positions))));
  }
  if (!config.yarn || config.factor == 0) return 1.0f;
  if (config.attention_factor > 0) return config.attention_factor;
  if (config.mscale > 0 && config.mscale_all_dim > 0)
    return float(yarn_mscale(config.factor, config.mscale) / yarn_mscale(config.factor, config.mscale_all_dim));
  return float(yarn_mscale(config.factor));
}

void rope_forward(Tensor& qkv, const Tensor& positions, int64_t num_heads, int64_t num_kv_heads,
                  const Tensor& inv_freq, RopeScales scales) {
  const char* op = "rope_forward";
  const RopeDims d = rope_dims(op, "qkv", qkv, positions, num_heads, num_kv_heads, inv_freq);
  switch (qkv.device()) {
    case Device::cpu:
      check_positions(op, positions);
      cpu::rope_forward(qkv.f32(), positions.data<int32_t>(), inv_freq.f32(), d.B, d.T, d.NH, d.NKV, d.HS, d.R,
                        scales.rotated, scales.query);
      return;
    case Device::cuda:
#ifdef TESSERA_WITH_CUDA
      cuda::with_storage_type(qkv.dtype(), [&]<typename S>(S) {
        cuda::rope_forward(cuda::typed_data<S>(qkv), positions.data<int32_t>(), inv_freq.f32(), d.B, d.T, d.NH,
                           d.NKV, d.HS, d.R, scales.rotated, scales.query, cuda_compute_stream());
      });
      return;
#else
      detail::fail_no_cuda_kernel(op);
#endif
  }
}

void rope_backward(Tensor& dqkv, const Tensor& positions, int64_t num_heads, int64_t num_kv_heads,
                   const Tensor& inv_freq, RopeScales scales) {
  const char* op = "rope_backward";
  const RopeDims d = rope_dims(op, "dqkv", dqkv, positions, num_heads, num_kv_heads, inv_freq);
  switch (dqkv.device()) {
    case Device::cpu:
      check_positions(op, positions);
      cpu::rope_backward(dqkv.f32(), positions.data<int32_t>(), inv_freq.f32(), d.B, d.T, d.NH, d.NKV, d.HS, d.R,
                        scales.rotated, scales.query);
      return;
    case Device::cuda:
#ifdef TESSERA_WITH_CUDA
      cuda::with_storage_type(dqkv.dtype(), [&]<typename S>(S) {
        cuda::rope_backward(cuda::typed_data<S>(dqkv), positions.data<int32_t>(), inv_freq.f32(), d.B, d.T, d.NH,
                            d.NKV, d.HS, d.R, scales.rotated, scales.query, cuda_compute_stream());
      });
      return;
#else
      detail::fail_no_cuda_kernel(op);
#endif
  }
}

}  // namespace tessera
