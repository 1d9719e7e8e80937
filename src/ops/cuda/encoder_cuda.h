// CUDA launchers of the token + position embedding (contract in ops/encoder.h).
// Device pointers, activations and tables of storage S = float, __nv_bfloat16 or __half (arithmetic
// fp32), parameter gradients fp32, queued on `stream`; each checks its launch.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tessera::cuda {

// out (B,T,C), tokens (B,T) on the device, wte rows [first, first + rows) of the table (a token
// outside them adds nothing), wpe (>=T,C) or null.
template <typename S>
void encoder_forward(S* out, const int32_t* tokens, const S* wte, const S* wpe, int64_t B, int64_t T, int64_t C,
                     int64_t first, int64_t rows, cudaStream_t stream);
// dwte rows [first, first + rows) (rows,C) +=, dwpe (>=T,C) += (or null), from dout (B,T,C) and tokens
// (B,T) on the device (a token outside the rows adds nothing; nothing waits for the device).
// Deterministic: every element is summed by one thread in a fixed order.
template <typename S>
void encoder_backward(float* dwte, float* dwpe, const S* dout, const int32_t* tokens, int64_t B, int64_t T, int64_t C,
                      int64_t first, int64_t rows, cudaStream_t stream);

}  // namespace tessera::cuda
