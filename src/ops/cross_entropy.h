// Fused softmax + cross-entropy over a padded vocabulary, one pass over the logits per row.
// logits (N,Vp) hold Vp >= V columns; columns [V, Vp) are padding and are never predicted (they get
// probability 0 and gradient 0). targets (N) i32 in [0, V), or kIgnoredTarget (core/ignored_target.h)
// for a row without one: its loss is 0 and its gradient row (padding too) 0.
//   losses (N) = -log softmax(logits[n, :V])[targets[n]]
//   If dloss != 0: logits is overwritten in place with dL/dlogits for L = dloss * sum_n losses[n],
//   i.e. dloss * (softmax - onehot(target)), padding columns 0. With dloss == 0 logits are untouched.
// softcap > 0: logits hold logit_softcap's capped values y (ops/logit_softcap.h), the loss is theirs and
// the gradient written is the raw logits' (times 1 - (y / softcap)^2). CPU only.
// Dtypes: logits f32, or bf16 on the GPU (read and written in bf16, computed in fp32); losses f32.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace tessera {

void softmax_cross_entropy(Tensor& losses, Tensor& logits, const Tensor& targets, int64_t vocab_size, float dloss,
                           float softcap = 0.0f);

}  // namespace tessera
