// One element of the fp8 fake-quantize, shared by the CPU loop and the CUDA kernel so both do the
// same fp32 arithmetic (see ops/fp8_quantize.h), and the integer key amax is kept under: |x|'s fp32
// bits as an int32. Non-negative floats order like their bits and every NaN's bits exceed +inf's, so
// the largest key is max |x|'s, a NaN winning: the CPU's max and the GPU's atomicMax agree exactly.
#pragma once

#include <stdint.h>

#include "core/fp8.h"
#include "core/host_device.h"

namespace tessera {

// x * scale rounded to the format (saturating), scaled back; exact division when scale is a power of two.
TS_HOST_DEVICE inline float fp8_quantize_dequantize_element(float x, Fp8Format format, float scale) {
  return fp8_decode(fp8_encode(x * scale, format), format) / scale;
}

TS_HOST_DEVICE inline int32_t fp8_amax_key(float x) { return int32_t(fp8_detail::bits_of(x) & 0x7fffffffu); }

}  // namespace tessera
