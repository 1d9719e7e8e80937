// CPU fp8 fake-quantize: one pass parallel over elements, the format a template argument so the
// encoder's constants fold; the |x| keys reduced by an OpenMP max, which any split of the loop gives alike.
#include "ops/cpu/fp8_quantize_cpu.h"

#include <algorithm>
#include <bit>

#include "ops/cpu/kernel_util.h"
#include "ops/fp8_quantize_element.h"

namespace tessera::cpu {
namespace {

template <Fp8Format F>
int32_t quantize_dequantize(float* out, const float* x, int64_t n, float scale) {
  int32_t key = 0;
#pragma omp parallel for reduction(max : key) if (n >= kMinParallelElements)
  for (int64_t i = 0; i < n; i++) {
    const float xi = x[i];
    key = std::max(key, fp8_amax_key(xi));
    out[i] = fp8_quantize_dequantize_element(xi, F, scale);
  }
  return key;
}

}  // namespace

void fp8_quantize_dequantize(float* out, const float* x, int64_t n, Fp8Format format, float scale, float* amax) {
  if (n == 0) return;
  const int32_t key = format == Fp8Format::e4m3 ? quantize_dequantize<Fp8Format::e4m3>(out, x, n, scale)
                                                : quantize_dequantize<Fp8Format::e5m2>(out, x, n, scale);
  // As the GPU's atomicMax: amax's own bits as int32 against the key (a negative amax loses to any key).
  *amax = std::bit_cast<float>(std::max(std::bit_cast<int32_t>(*amax), key));
}

}  // namespace tessera::cpu
