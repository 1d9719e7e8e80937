// The decoder's generation path over a key/value cache: each block runs only the new tokens and
// attends over the cached keys and values of every earlier position.
#include "core/cuda/device.h"
#include "nn/decoder.h"
#include "ops/norm.h"
#include "ops/encoder.h"
#include "ops/matmul.h"

namespace tessera {

KvCache Decoder::kv_cache(int64_t batch, int64_t capacity) const {
  TS_CHECK(batch > 0, "kv_cache: batch must be positive, got ", batch);
  TS_CHECK(capacity >= 0, "kv_cache: capacity must be positive (0: the context), got ", capacity);
  KvCache cache;
  cache.batch = batch;
  cache.capacity = capacity > 0 ? std::min(capacity, config_.max_seq_len) : config_.max_seq_len;
  const int64_t width = config_.kv_heads() * config_.head_size();
  for (int64_t l = 0; l < config_.num_layers; ++l) {
    cache.keys.push_back(Tensor::zeros({batch, cache.capacity, width}, compute_dtype_, device_));
    cache.values.push_back(Tensor::zeros({batch, cache.capacity, width}, compute_dtype_, device_));
  }
  return cache;
}

bool Decoder::can_generate() const { return stage_.is_whole() && !tp_ && !ep_ && !cp_ && !sharded_; }

const Tensor& Decoder::forward_cached(const Tensor& tokens, KvCache& cache) {
  TS_CHECK(can_generate(), "forward_cached: generation needs the whole model, not a pipeline stage, a tensor-, "
           "expert- or context-parallel slice or a ZeRO-3 shard of it");
  TS_CHECK(tokens.ndim() == 2 && tokens.size(0) == cache.batch, "forward_cached: tokens must be (", cache.batch,
           ", T), got ", shape_string(tokens.shape()));
  TS_CHECK(!cache.keys.empty() && cache.keys[0].device() == device_ && cache.keys[0].dtype() == compute_dtype_,
           "forward_cached: the cache was made for another device or dtype; make a new one with kv_cache()");
  const int64_t B = tokens.size(0), Tq = tokens.size(1), past = cache.length, C = config_.channels;
  TS_CHECK(past + Tq <= cache.capacity, "forward_cached: positions ", past, "..", past + Tq - 1,
           " exceed the model's context of ", cache.capacity, "; reset() the cache and start again");
  // Full recomputation's allocation: every block's internals share one set, only outputs are kept.
  DecoderActivations& a = cache.acts;
  a.ensure(config_, B, Tq, BlockRange{0, config_.num_layers}, device_, compute_dtype_, RecomputePolicy{Recompute::full, 0});
  if (config_.positions == PositionKind::rope) a.seq.rope = rope_positions(past, Tq, device_);
  const Tensor device_tokens = tensor_to(tokens, device_);
  const Tensor positions = w_.positions.defined()
                               ? w_.positions.view(past * C, {config_.max_seq_len - past, C})
                               : Tensor();
  encoder_forward(a.embedded, device_tokens, w_.embed, positions);
  if (config_.scaled_embeddings) scale_inplace(a.embedded, config_.embedding_scale());
  const Tensor* x = &a.embedded;
  for (size_t l = 0; l < a.blocks.size(); ++l) {
    block_decode(config_, a.blocks[l], *x, w_.blocks[l], block_positions(a.seq, config_, int64_t(l)), cache.keys[l],
                 cache.values[l], past);
    x = &a.blocks[l].out;
  }
  norm_forward(config_, a.final_norm, *x, w_.final_norm);
  if (!a.logits.defined() || a.logits.size(0) != B * Tq)
    a.logits = Tensor::zeros({B * Tq, config_.padded_vocab_size()}, compute_dtype_, device_);
  classify(a.logits, a.final_norm.out.reshape({B * Tq, C}));
  cache.length += Tq;
  return a.logits;
}

}  // namespace tessera
