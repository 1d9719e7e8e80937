// ZeRO 2 and 3 as the decoder sees them. A part is what ParamSpec::block names: the embeddings
// (kEmbeddingBlock), a transformer block (0..L-1), or the final norm with the head (L).
// PartGradients (ZeRO 2 and 3): no rank holds the whole flat gradient; each backward writes a part's
// gradient into a buffer of its own, which is reduced over the group into this rank's shard as soon
// as the part is done, and given up. ShardedParameters (ZeRO-3 also): between uses no rank holds the
// whole flat parameter buffer either, and the decoder brings in one part of it at a time.
// parallel/dp implements both over the dp group (all-gather of the part's shards, reduce-scatter of
// its gradients); nn holds no collectives. The decoder's order (ZeRO-2 makes only the grads calls):
//   forward   gather(-1) embed release(-1); gather(l) block l release(l), l = 0..L-1; gather(L) final
//             norm and classifier (a tied classifier gathers -1 again); L stays for backward when training
//   backward  L's gradients final; per block l = L-1..0: gather(l) [recompute] backward release(l),
//             its gradients final; the embeddings' gradients final
// Without reshard-after-forward a training forward skips the blocks' release(l), and their backward
// finds them held (a gather of a held part returns it).
// Every rank of the group makes the same calls in the same order (each gather and each gradient
// reduction is a collective).
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace tessera {

inline constexpr int64_t kNoPart = -2;  // gather()'s `next` when nothing follows

class PartGradients {
 public:
  virtual ~PartGradients() = default;
  // The part's gradient for this backward: f32, its layout range, zero-filled when first asked
  // for, the same buffer until grads_final(part). Backward accumulates into it (+=).
  virtual Tensor grads(int64_t part) = 0;
  // The part's gradient of this micro-batch is complete: it is summed over the group into this
  // rank's shard (added to what earlier micro-batches left there) and the buffer is given up.
  virtual void grads_final(int64_t part) = 0;
  // The accumulated gradient shard starts from zero again (Decoder::zero_grad()).
  virtual void zero_grad() = 0;
};

class ShardedParameters {
 public:
  virtual ~ShardedParameters() = default;
  // The part's parameters, whole: an f32 tensor of its layout range (ParameterLayout::block_range),
  // valid until release(part); gathering a part already held returns it. Starts gathering `next`
  // (unless kNoPart) in the background, so that it arrives while this part computes.
  virtual Tensor gather(int64_t part, int64_t next) = 0;
  virtual void release(int64_t part) = 0;
  // Adds delta[i] to parameter element offset + i of the flat layout, wherever it is held (the
  // router biases' balancing step). Every rank passes the same values.
  virtual void add_to_params(int64_t offset, const std::vector<float>& delta) = 0;
};

}  // namespace tessera
