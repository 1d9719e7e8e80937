// fp8 delayed scaling: the recipe's formats, the amax histories and the scales they give.
#include "nn/fp8_scaling.h"

#include <algorithm>
#include <cmath>

#include "core/cuda/device.h"
#include "core/error.h"
#include "ops/fp8_quantize.h"

namespace tessera {

Fp8Recipe parse_fp8_recipe(const std::string& flag) {
  if (flag == "off") return Fp8Recipe::off;
  if (flag == "hybrid") return Fp8Recipe::hybrid;
  if (flag == "e4m3") return Fp8Recipe::e4m3;
  TS_FAIL("--fp8 must be off, hybrid (E4M3 inputs and weights, E5M2 gradients) or e4m3, got '", flag, "'");
}

std::string fp8_recipe_name(Fp8Recipe recipe) {
  switch (recipe) {
    case Fp8Recipe::off: return "off";
    case Fp8Recipe::hybrid: return "hybrid";
    case Fp8Recipe::e4m3: return "e4m3";
  }
  return "?";
}

void check_fp8_options(const Fp8Options& options) {
  TS_CHECK(options.history >= 1 && options.history <= kMaxFp8AmaxHistory, "--fp8-amax-history must be in [1, ",
           kMaxFp8AmaxHistory, "] steps, got ", options.history);
  TS_CHECK(options.margin >= 0 && options.margin <= kMaxFp8Margin, "--fp8-margin must be in [0, ", kMaxFp8Margin,
           "] powers of two, got ", options.margin);
}

Fp8Scaling::Fp8Scaling(const Fp8Options& options, int64_t layers, Device device)
    : options_(options), layers_(layers), scales_(size_t(slots()), 1.0f) {
  TS_CHECK(options.recipe != Fp8Recipe::off, "Fp8Scaling: the recipe is off");
  check_fp8_options(options);
  amax_ = Tensor::zeros({slots()}, DType::f32, device);
}

Fp8Format Fp8Scaling::format(Fp8Role role) const {
  return options_.recipe == Fp8Recipe::hybrid && role == Fp8Role::grad ? Fp8Format::e5m2 : Fp8Format::e4m3;
}

Tensor Fp8Scaling::quantize(const Tensor& t, int64_t slot) {
  Tensor out = Tensor::zeros(t.shape(), t.dtype(), t.device());
  fp8_quantize_dequantize(out, t, format(Fp8Role(slot % kFp8Roles)), scale(slot), amax_, slot);
  return out;
}

std::vector<float> Fp8Scaling::take_amaxes() {
  const Tensor host = tensor_to(amax_, Device::cpu);
  std::vector<float> amaxes(host.f32(), host.f32() + slots());
  clear_amaxes();
  return amaxes;
}

void Fp8Scaling::clear_amaxes() { zero_tensor(amax_); }

void Fp8Scaling::update(const std::vector<float>& amaxes) {
  TS_CHECK(int64_t(amaxes.size()) == slots(), "Fp8Scaling::update: ", amaxes.size(), " amaxes for ", slots(), " slots");
  for (float a : amaxes) history_.push_back(std::isfinite(a) ? a : 0.0f);
  const int64_t steps = int64_t(history_.size()) / slots();
  if (steps > options_.history) history_.erase(history_.begin(), history_.begin() + (steps - options_.history) * slots());
  recompute_scales();
}

void Fp8Scaling::restore_history(const std::vector<float>& history, const std::string& source) {
  TS_CHECK(!history.empty() && int64_t(history.size()) % slots() == 0, source, ": the fp8 amax history holds ",
           history.size(), " values, not a whole number of steps of ", slots(), " (", layers_,
           " layers); was it saved by another model?");
  for (float a : history)
    TS_CHECK(std::isfinite(a) && a >= 0.0f, source, ": the fp8 amax history holds ", a,
             ", not a finite non-negative amax; the file is damaged");
  const int64_t steps = int64_t(history.size()) / slots(), kept = std::min(steps, options_.history);
  history_.assign(history.end() - kept * slots(), history.end());
  recompute_scales();
}

void Fp8Scaling::recompute_scales() {
  const int64_t steps = int64_t(history_.size()) / slots();
  for (int64_t s = 0; s < slots(); ++s) {
    float amax = 0.0f;
    for (int64_t k = 0; k < steps; ++k) amax = std::max(amax, history_[size_t(k * slots() + s)]);
    if (amax == 0.0f) continue;  // nothing seen yet: the scale stays
    // The largest power of two s with amax · s <= fp8_max, less the margin; kept within the
    // exponents where s and 1/s are normal floats.
    const int exponent = int(std::floor(std::log2(fp8_max(format(Fp8Role(s % kFp8Roles))) / amax)));
    scales_[size_t(s)] = std::ldexp(1.0f, std::clamp(exponent - options_.margin, -100, 100));
  }
}

}  // namespace tessera
