// fp8 fake quantization, the forward half of fp8 training with delayed scaling (Transformer Engine's
// recipe): a tensor is scaled, rounded to an fp8 format (core/fp8.h) and scaled back, so what follows
// sees the values an fp8 GEMM would, and its largest |x| goes into an amax history from which a later
// step's scale is chosen. No backward here: fp8 training passes gradients straight through.
#pragma once

#include <cstdint>

#include "core/fp8.h"
#include "core/tensor.h"

namespace tessera {

// out = fp8_decode(fp8_encode(x * scale, format)) / scale element by element (fp32 arithmetic, the
// result rounded to out's dtype), and amax[slot] = max(amax[slot], max_i |x_i|).
// x, out: same shape, dtype (f32 anywhere; bf16 or f16 on the GPU) and device; out may be x itself
// (in place), and otherwise does not overlap it. amax: f32 on x's device, at least slot + 1 elements.
// The max compares fp32 bits as int32 (fp8_amax_key), so a NaN in x makes amax[slot] NaN and a NaN
// already there stays; an empty x leaves amax as it is. scale: finite and > 0 (a power of two makes
// the division exact). On the GPU, queued on cuda_compute_stream().
void fp8_quantize_dequantize(Tensor& out, const Tensor& x, Fp8Format format, float scale, Tensor& amax,
                             int64_t slot);

}  // namespace tessera
