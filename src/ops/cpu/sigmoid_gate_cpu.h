// CPU kernels of the sigmoid row gate (contract in ops/sigmoid_gate.h).
#pragma once

#include <cstdint>

namespace tessera::cpu {

// out (N, C) += sigmoid(z (N)) * y (N, C), row by row.
void sigmoid_gate_add(float* out, const float* y, const float* z, int64_t N, int64_t C);
// dy (N, C) = sigmoid(z) * dout; dz (N) = sigmoid'(z) * rowsum(dout * y); both written.
void sigmoid_gate_backward(float* dy, float* dz, const float* dout, const float* y, const float* z, int64_t N,
                           int64_t C);

}  // namespace tessera::cpu
