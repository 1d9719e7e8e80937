// The initial weights, range by range (see parameter_values.h).
#include "nn/parameter_values.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/cuda/device.h"
#include "core/rng.h"

namespace tessera {

ParameterValues initial_values(const ModelConfig& config, const ParameterLayout& layout, uint64_t seed) {
  const float residual_std = 0.02f / std::sqrt(2.0f * float(config.num_layers));
  const int64_t vocab_rows = config.vocab_size;
  return [layout, seed, residual_std, vocab_rows](OffsetRange range, float* out) {
    layout.for_each_overlap(range, [&](const ParamSpec& spec, int64_t begin, int64_t end) {
      float* held = out + (spec.offset - range.begin);  // element i of the parameter as held is held[i]
      if (spec.init == ParamInit::zeros || spec.init == ParamInit::ones) {
        std::fill(held + begin, held + end, spec.init == ParamInit::ones ? 1.0f : 0.0f);
        return;
      }
      // normal(0, std) on the whole parameter's first `normal_elements` elements, 0 after them.
      const float std = spec.init == ParamInit::residual ? residual_std : 0.02f;
      const int64_t cols = spec.whole_shape().size() < 2 ? 1 : spec.whole_shape().back();
      const int64_t normal_elements =
          spec.init == ParamInit::vocab_rows ? vocab_rows * cols : std::numeric_limits<int64_t>::max();
      spec.for_each_whole_run(begin, end, [&](int64_t at, int64_t whole, int64_t count) {
        const int64_t normal = std::clamp(normal_elements - whole, int64_t{0}, count);
        fill_normal(held + at, normal, seed, spec.name, 0.0f, std, whole);
        std::fill(held + at + normal, held + at + count, 0.0f);
      });
    });
  };
}

ParameterValues values_from_whole(const ParameterLayout& layout, WholeTensorReader read) {
  return [layout, read = std::move(read)](OffsetRange range, float* out) {
    layout.for_each_overlap(range, [&](const ParamSpec& spec, int64_t begin, int64_t end) {
      float* held = out + (spec.offset - range.begin);
      spec.for_each_whole_run(begin, end, [&](int64_t at, int64_t whole, int64_t count) {
        read(spec.name, whole, whole + count, held + at);
      });
    });
  };
}

ParameterValues values_of(const Tensor& flat) {
  return [&flat](OffsetRange range, float* out) {
    const Tensor held = tensor_to(flat.view(range.begin, {range.end - range.begin}), Device::cpu);
    std::copy_n(held.f32(), held.numel(), out);
  };
}

}  // namespace tessera
