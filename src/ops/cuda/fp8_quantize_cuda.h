// CUDA launchers of the fp8 fake-quantize (contract in ops/fp8_quantize.h), raw device pointers,
// queued on `stream`; and two test-only launchers that run core/fp8.h's conversions beside CUDA's own
// (<cuda_fp8.h>) on the device, for tests/cuda/test_fp8_quantize_cuda.cpp. A plain C++ header.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/fp8.h"

namespace tessera::cuda {

// out (n) = x (n) through `format` at `scale` (out == x allowed); *amax (the slot) = max with every
// |x_i| by fp8_amax_key, one atomicMax per block. T: float, __nv_bfloat16 or __half.
template <typename T>
void fp8_quantize_dequantize(T* out, const T* x, int64_t n, Fp8Format format, float scale, float* amax,
                             cudaStream_t stream);

// Test only. cuda_codes[i] = __nv_cvt_float_to_fp8(x[i], __NV_SATFINITE, format) and our_codes[i] =
// fp8_encode(x[i], format), both computed on the device; x, cuda_codes, our_codes: n device elements.
void fp8_encode_beside_cuda(int32_t* cuda_codes, int32_t* our_codes, const float* x, int64_t n, Fp8Format format,
                            cudaStream_t stream);
// Test only. For every code c in [0, 256): cuda_values[c] = __nv_cvt_fp8_to_halfraw(c, format) widened
// to f32 (exact) and our_values[c] = fp8_decode(c, format), on the device; both 256 device elements.
void fp8_decode_beside_cuda(float* cuda_values, float* our_values, Fp8Format format, cudaStream_t stream);

}  // namespace tessera::cuda
