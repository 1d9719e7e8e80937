// Token + position embedding; without a position table (RoPE models: wpe and dwpe undefined) the
// token embedding alone.
//   forward:  out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:]
//   backward: dwte[tokens[b,t],:] += dout[b,t,:];  dwpe[t,:] += dout[b,t,:]   (parameter grads accumulate)
// Shapes: tokens (B,T) i32, wte (Vp,C), wpe (maxT,C) with T <= maxT, out/dout (B,T,C).
// Dtypes: out, wte and wpe share one (f32, or bf16 on the GPU), as does dout; dwte and dwpe are f32.
#pragma once

#include "core/tensor.h"

namespace tessera {

void encoder_forward(Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe);
void encoder_backward(Tensor& dwte, Tensor& dwpe, const Tensor& dout, const Tensor& tokens);

}  // namespace tessera
