// Temperature, top-k and top-p sampling.
#include "train/generate.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/cuda/device.h"
#include "ops/cast.h"

namespace tessera {

int32_t sample_token(const float* logits, int64_t vocab_size, const SamplingOptions& options, Rng& rng) {
  std::vector<int32_t> ids(static_cast<size_t>(vocab_size));
  std::iota(ids.begin(), ids.end(), 0);
  if (options.temperature <= 0.0f)
    return *std::max_element(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return logits[a] < logits[b]; });
  size_t k = options.top_k > 0 ? size_t(std::min<int64_t>(options.top_k, vocab_size)) : ids.size();
  std::partial_sort(ids.begin(), ids.begin() + long(k), ids.end(),
                    [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  std::vector<double> weights(k);
  const double top = logits[ids[0]];
  for (size_t i = 0; i < k; ++i) weights[i] = std::exp((logits[ids[i]] - top) / options.temperature);
  double total = std::accumulate(weights.begin(), weights.end(), 0.0);
  if (options.top_p < 1.0f) {  // the nucleus: most likely first, until their share reaches top_p
    double kept = 0;
    size_t n = 0;
    while (n < k && (n == 0 || kept < double(options.top_p) * total)) kept += weights[n++];
    k = n;
    total = kept;
  }
  double r = double(rng.uniform()) * total;
  for (size_t i = 0; i < k; ++i) {
    r -= weights[i];
    if (r < 0) return ids[i];
  }
  return ids[k - 1];
}

void SamplingOptions::validate() const {
  TS_CHECK(std::isfinite(temperature) && temperature >= 0.0f,
           "--temperature must be a finite number >= 0 (0 = greedy), got ", temperature);
  TS_CHECK(top_k >= 0, "--top-k must not be negative (0 = the whole vocabulary), got ", top_k);
  TS_CHECK(top_p > 0.0f && top_p <= 1.0f, "--top-p must be in (0, 1] (1 = off), got ", top_p);
  TS_CHECK(max_new_tokens >= 0, "--max-new-tokens must not be negative, got ", max_new_tokens);
}

bool SamplingOptions::stops_at(int32_t token) const {
  if (token < 0) return false;  // stop_token -1: none
  return token == stop_token || std::find(also_stop_at.begin(), also_stop_at.end(), token) != also_stop_at.end();
}

std::vector<int32_t> generate(Decoder& model, const std::vector<int32_t>& prompt, const SamplingOptions& options,
                              Rng& rng, const std::function<void(int32_t)>& on_token) {
  options.validate();
  const ModelConfig& config = model.config();
  std::vector<int32_t> context = prompt;
  if (context.empty()) context.push_back(int32_t(config.vocab_size - 1));
  std::vector<int32_t> produced;
  // The keys and values of the positions seen stay cached, so each new token runs alone; the cache
  // holds the prompt and the new tokens, or the context when they exceed it, and then restarts from
  // the last tokens it holds, the window a full re-run reads.
  KvCache cache = model.kv_cache(1, int64_t(context.size()) + options.max_new_tokens);
  size_t fed = 0;  // context tokens already in the cache
  for (int64_t n = 0; n < options.max_new_tokens; ++n) {
    if (cache.length + int64_t(context.size() - fed) > cache.capacity) {
      cache.reset();
      fed = context.size() - size_t(std::min<int64_t>(int64_t(context.size()), cache.capacity));
    }
    const int64_t T = int64_t(context.size() - fed);
    Tensor tokens = Tensor::zeros({1, T}, DType::i32);
    std::copy(context.end() - T, context.end(), tokens.data<int32_t>());
    const Tensor& logits = model.forward_cached(tokens, cache);
    fed = context.size();
    const int64_t Vp = config.padded_vocab_size();
    Tensor last = tensor_to(logits.view((T - 1) * Vp, {Vp}), Device::cpu);
    if (last.dtype() != DType::f32) {  // a 16-bit compute dtype on the GPU: sample from fp32 values
      Tensor wide = Tensor::zeros({Vp});
      cast_copy(wide, last);
      last = wide;
    }
    const int64_t V = options.vocab_limit > 0 ? std::min(options.vocab_limit, config.vocab_size) : config.vocab_size;
    int32_t next = sample_token(last.f32(), V, options, rng);
    context.push_back(next);
    produced.push_back(next);
    if (on_token) on_token(next);
    if (options.stops_at(next)) break;
  }
  return produced;
}

}  // namespace tessera
