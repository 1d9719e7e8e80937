// A sigmoid gate a row (Qwen2-MoE's shared_expert_gate): each row of y scaled by the sigmoid of its gate
// logit z and added to out.
//   forward:  out[n, :] += sigmoid(z[n]) * y[n, :]
//   backward: dy[n, :] = sigmoid(z[n]) * dout[n, :] and dz[n] = sigmoid'(z[n]) * sum_c dout[n, c] * y[n, c],
//             both written. dz is linear in y: ranks holding partial sums of y (a row-parallel output
//             under tensor parallelism) get partial dz, which sum over the group to the whole one.
// y, out, dout, dy: (N, C); z, dz: (N, 1). f32 on the CPU; the GPU refuses it (no kernel yet).
#pragma once

#include "core/tensor.h"

namespace tessera {

void sigmoid_gate_add(Tensor& out, const Tensor& y, const Tensor& z);
void sigmoid_gate_backward(Tensor& dy, Tensor& dz, const Tensor& dout, const Tensor& y, const Tensor& z);

}  // namespace tessera
