// CUDA launchers of the token + position embedding (contract in ops/encoder.h).
// Raw device pointers, fp32, queued on `stream`; each checks its launch.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tessera::cuda {

// out (B,T,C), tokens (B,T) each in [0,Vp), wte (Vp,C), wpe (>=T,C).
void encoder_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int64_t B, int64_t T,
                     int64_t C, cudaStream_t stream);
// dwte (Vp,C) +=, dwpe (>=T,C) +=, from dout (B,T,C). dwpe is summed in a fixed order; dwte rows
// shared by several tokens are added with atomics (order not fixed).
void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int64_t B, int64_t T,
                      int64_t C, cudaStream_t stream);

}  // namespace tessera::cuda
