// Token + position embedding; without a position table (RoPE models: wpe and dwpe undefined) the
// token embedding alone.
//   forward:  out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:]
//   backward: dwte[tokens[b,t],:] += dout[b,t,:];  dwpe[t,:] += dout[b,t,:]   (parameter grads accumulate)
// Shapes: tokens (B,T) i32, wte (Vp,C), wpe (maxT,C) with T <= maxT, out/dout (B,T,C).
// Dtypes: out, wte and wpe share one (f32, or bf16 on the GPU), as does dout; dwte and dwpe are f32.
// Vocabulary-parallel (a tensor-parallel rank's slice): wte (and dwte) are rows [first_row,
// first_row + rows) of a table of vocab_rows rows; a token outside the slice contributes nothing
// (its row is wpe[t] alone, or zero). Tokens are checked against [0, vocab_rows) (0: wte's rows),
// by the backward on the CPU only: on the GPU the forward's check of the same tokens serves (one
// synchronising copy), and the backward skips an id outside the table without waiting for the device.
#pragma once

#include "core/tensor.h"

namespace tessera {

void encoder_forward(Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe, int64_t first_row = 0,
                     int64_t vocab_rows = 0);
void encoder_backward(Tensor& dwte, Tensor& dwpe, const Tensor& dout, const Tensor& tokens, int64_t first_row = 0,
                      int64_t vocab_rows = 0);

}  // namespace tessera
