// Preset shapes. Llama 2 7B, Llama 3.x, Mistral 7B, Mistral NeMo, Qwen2.5, Qwen3, Phi-3-mini, Phi-4, OLMo 2,
// OLMoE, SmolLM3, Gemma 3, StarCoder2, Pythia, GPT-NeoX-20B, Command-R, Aya Expanse, Command R7B, Command A, Phi-1.5,
// Phi-2, Mixtral, DeepSeek-V2-Lite and DeepSeek-V3 follow their published config.json files.
#include "nn/model_presets.h"

#include <functional>
#include <utility>

#include "core/error.h"

namespace tessera {
namespace {

ModelConfig gpt2(int64_t layers, int64_t heads, int64_t channels, int64_t vocab, int64_t context) {
  return ModelConfig{layers, heads, channels, vocab, context};
}

// Llama: RMSNorm, RoPE, grouped-query attention, SwiGLU, no biases.
ModelConfig llama(int64_t layers, int64_t heads, int64_t kv_heads, int64_t channels, int64_t hidden, int64_t vocab,
                  int64_t context, float theta, bool tied) {
  ModelConfig c{layers, heads, channels, vocab, context};
  c.naming = Naming::llama;
  c.num_kv_heads = kv_heads;
  c.mlp_hidden = hidden;
  c.norm = NormKind::rmsnorm;
  c.positions = PositionKind::rope;
  c.rope.theta = theta;
  c.mlp = MlpKind::swiglu;
  c.bias = false;
  c.tied_embeddings = tied;
  return c;
}

// Qwen2: Llama's architecture with biases on q, k and v.
ModelConfig qwen2(ModelConfig c) {
  c.qkv_bias = true;
  return c;
}

// Qwen3: Llama's architecture with RMSNorm over each query and key head, heads `head_dim` wide
// whatever the width (Qwen3 0.6B: 16 heads of 128 over 1024 channels), RMSNorm eps 1e-6.
ModelConfig qwen3(ModelConfig c, int64_t head_dim) {
  c.qk_norm = true;
  if (head_dim != c.channels / c.num_heads) c.head_dim = head_dim;  // as a Hugging Face import reads it
  c.norm_eps = 1e-6f;
  return c;
}

// Phi-3 and Phi-4: Llama's computation, stored in Hugging Face's Phi3ForCausalLM form.
ModelConfig phi3(ModelConfig c) {
  c.phi3 = true;
  return c;
}

// OLMo 2: Llama's architecture with each block's norms on its sublayers' outputs and RMSNorm over all of a
// token's query heads and over its key heads, RMSNorm eps 1e-6, untied.
ModelConfig olmo2(ModelConfig c) {
  c.norm_placement = NormPlacement::post;
  c.qk_norm = true;
  c.qk_norm_all_heads = true;
  c.norm_eps = 1e-6f;
  return c;
}

// OLMoE: Llama's pre-norm blocks with OLMo 2's query and key norms over all heads, and a MoE of
// `experts` SwiGLU experts in every layer, softmax top-k routing whose weights are not renormalised.
ModelConfig olmoe(ModelConfig c, int64_t experts, int64_t top_k, int64_t expert_hidden) {
  c.qk_norm = true;
  c.qk_norm_all_heads = true;
  c.moe.num_experts = experts;
  c.moe.top_k = top_k;
  c.moe.expert_hidden = expert_hidden;
  c.moe.renormalize = false;
  return c;
}

// SmolLM3: Llama's architecture with every `interval`-th block taking no RoPE (blocks interval - 1,
// 2·interval - 1, ...), RMSNorm eps 1e-6.
ModelConfig smollm3(ModelConfig c, int64_t interval) {
  for (int64_t l = interval - 1; l < c.num_layers; l += interval) c.nope_layers.push_back(l);
  c.norm_eps = 1e-6f;
  return c;
}

// Gemma (1): (1 + w) RMSNorms before each sublayer (their gains as Tessera's gains), embeddings times
// sqrt(C), GeGLU, heads `head_dim` wide; RMSNorm eps 1e-6, tied.
ModelConfig gemma1(ModelConfig c, int64_t head_dim) {
  c.mlp = MlpKind::geglu;
  c.scaled_embeddings = true;
  if (head_dim != c.channels / c.num_heads) c.head_dim = head_dim;
  c.norm_eps = 1e-6f;
  return c;
}

// Gemma 2 and 3: Gemma's pieces with norms on both sides of each sublayer; blocks slide over `window`
// positions but every `pattern`-th, global.
ModelConfig gemma(ModelConfig c, int64_t head_dim, int64_t window, int64_t pattern) {
  c = gemma1(c, head_dim);
  c.norm_placement = NormPlacement::sandwich;
  c.attention_window = window;
  for (int64_t l = pattern - 1; l < c.num_layers; l += pattern) c.global_layers.push_back(l);
  return c;
}

// Gemma 2: every other block (the first) slides over `window` positions, one RoPE base, scores scaled by
// `scalar`^-1/2 and capped at 50, logits capped at 30 (x -> cap tanh(x / cap)).
ModelConfig gemma2(ModelConfig c, int64_t head_dim, int64_t window, float scalar) {
  c = gemma(c, head_dim, window, 2);
  if (scalar != float(head_dim)) c.attention_scalar = scalar;
  c.attention_softcap = 50.0f;
  c.logit_softcap = 30.0f;
  return c;
}

// Gemma 3: per-head q/k norms; the sliding blocks turn by RoPE base 10,000, every `pattern`-th (global)
// by the model's theta.
ModelConfig gemma3(ModelConfig c, int64_t head_dim, int64_t window, int64_t pattern) {
  c = gemma(c, head_dim, window, pattern);
  c.qk_norm = true;
  c.local_rope_theta = 10000.0f;
  return c;
}

// StarCoder2: Llama's attention (RoPE, grouped-query heads) with LayerNorms, biases on every
// projection and norm, a GELU (tanh) MLP, and a sliding window of `window` positions.
ModelConfig starcoder2(ModelConfig c, int64_t window) {
  c.norm = NormKind::layernorm;
  c.bias = true;
  c.mlp = MlpKind::gelu;
  c.attention_window = window;
  return c;
}

// GPT-NeoX (Pythia, GPT-NeoX-20B): LayerNorms and biases everywhere, RoPE on the first quarter of each head's
// channels (Tessera's last; the import moves them), the exact GELU over 4C, attention and MLP side by side
// (parallel residual), untied; 2,048 positions.
ModelConfig gpt_neox(int64_t layers, int64_t heads, int64_t channels, int64_t vocab, int64_t context = 2048) {
  ModelConfig c = llama(layers, heads, heads, channels, 4 * channels, vocab, context, 10000.0f, false);
  c.norm = NormKind::layernorm;
  c.bias = true;
  c.mlp = MlpKind::gelu_exact;
  c.rotary_dims = channels / heads / 4;
  c.parallel_residual = true;
  return c;
}

// Cohere (Command-R, Aya): Llama's attention and SwiGLU side by side on one LayerNorm without biases (parallel
// residual, shared norm), RoPE over interleaved channel pairs (the import reorders them), the logits times
// `logit_scale`; tied.
ModelConfig cohere(ModelConfig c, float logit_scale) {
  c.norm = NormKind::layernorm;
  c.parallel_residual = true;
  c.shared_norm = true;
  c.logit_scale = logit_scale;
  return c;
}

// Cohere2 (Command R7B, Command A): Cohere's blocks sliding over `window` positions with RoPE, but every
// `pattern`-th, which attends to the whole sequence without positions (no RoPE).
ModelConfig cohere2(ModelConfig c, float logit_scale, int64_t window, int64_t pattern) {
  c = cohere(c, logit_scale);
  c.attention_window = window;
  for (int64_t l = pattern - 1; l < c.num_layers; l += pattern) c.global_layers.push_back(l);
  c.nope_layers = c.global_layers;
  return c;
}

// Phi-1.5 and Phi-2: attention and MLP side by side on one LayerNorm, biases everywhere, RoPE on the first
// `rotated` channels of each head (the import moves them last), GELU's tanh form, an untied head with a bias.
ModelConfig phi2(ModelConfig c, int64_t rotated) {
  c.norm = NormKind::layernorm;
  c.bias = true;
  c.mlp = MlpKind::gelu;
  c.parallel_residual = true;
  c.shared_norm = true;
  c.rotary_dims = rotated;
  c.head_bias = true;
  return c;
}

// Gemma 3 4B-27B's text models: Gemma 3 with 1,024-position windows, positions scaled 8-fold
// (linear) on the global blocks, 131,072 of them, and 262,208 embedding rows (the tokenizer's 262,144
// and the image token's, padded as Google's release pads them); `scalar` scales the scores.
ModelConfig gemma3_large(ModelConfig c, int64_t head_dim, float scalar) {
  c = gemma3(c, head_dim, 1024, 6);
  c.rope.linear = true;
  c.rope.factor = 8.0f;
  if (scalar != float(head_dim)) c.attention_scalar = scalar;
  return c;
}

// Llama 3.1's long-context frequency scaling (rope_scaling rope_type "llama3").
ModelConfig llama3_scaled(ModelConfig c, float factor) {
  c.rope.factor = factor;
  c.rope.low_freq_factor = 1.0f;
  c.rope.high_freq_factor = 4.0f;
  c.rope.original_max_positions = 8192;
  return c;
}

ModelConfig with_experts(ModelConfig c, int64_t experts, int64_t top_k, int64_t expert_hidden) {
  c.moe.num_experts = experts;
  c.moe.top_k = top_k;
  c.moe.expert_hidden = expert_hidden;
  return c;
}

// Qwen2-MoE: Qwen2's attention (q/k/v biases) over experts in every layer, softmax top-k routing whose
// weights are not renormalised, and `shared` experts' width of always-on SwiGLU times a sigmoid gate a token.
ModelConfig qwen2_moe(ModelConfig c, int64_t experts, int64_t top_k, int64_t expert_hidden, int64_t shared) {
  c = with_experts(qwen2(c), experts, top_k, expert_hidden);
  c.moe.num_shared_experts = shared;
  c.moe.shared_gate = true;
  c.moe.renormalize = false;
  c.norm_eps = 1e-6f;
  return c;
}

// DeepSeek-style: many small experts, shared experts, sigmoid router with bias balancing, dense first layer.
ModelConfig deepseek_style(ModelConfig c, int64_t shared, int64_t first_dense) {
  c.moe.num_shared_experts = shared;
  c.moe.router = RouterKind::sigmoid_bias;
  c.moe.first_dense_layers = first_dense;
  return c;
}

// GLM-4.5: Llama's attention with q/k/v biases, heads `head_dim` wide whose first half rotates (RoPE base
// 10^6), over DeepSeek-V3's routing (sigmoid scores and a selection bias, weights renormalised and scaled by
// `routed_scale`) of `experts` experts and one shared expert, `first_dense` dense blocks first; RMSNorm eps
// 1e-5, untied.
ModelConfig glm4_moe(ModelConfig c, int64_t head_dim, int64_t experts, int64_t expert_hidden, int64_t first_dense,
                     float routed_scale) {
  c = deepseek_style(with_experts(c, experts, 8, expert_hidden), 1, first_dense);
  c.qkv_bias = true;
  if (head_dim != c.channels / c.num_heads) c.head_dim = head_dim;
  c.rotary_dims = head_dim / 2;
  c.moe.routed_scale = routed_scale;
  c.norm_eps = 1e-5f;
  return c;
}

// YaRN as DeepSeek-V2 and V3 extend their 4,096 positions 40-fold, `mscale` both magnitude terms.
ModelConfig deepseek_yarn(ModelConfig c, float mscale) {
  c.rope.yarn = true;
  c.rope.factor = 40;
  c.rope.original_max_positions = 4096;
  c.rope.mscale = mscale;
  c.rope.mscale_all_dim = mscale;
  return c;
}

// DeepSeek-V2/V3's latent attention (every head its own key and value, from the latents), its MoE's
// routed output scaled by `routed_scale`, RMSNorm eps 1e-6.
ModelConfig latent_attention(ModelConfig c, LatentAttentionConfig mla, float routed_scale) {
  c.mla = mla;
  c.num_kv_heads = 0;
  c.moe.routed_scale = routed_scale;
  c.norm_eps = 1e-6f;
  return c;
}

const std::vector<std::pair<std::string, std::function<ModelConfig()>>>& presets() {
  static const std::vector<std::pair<std::string, std::function<ModelConfig()>>> table = {
      {"gpt2-tiny", [] { return gpt2(2, 2, 32, 256, 64); }},
      {"gpt2-mini", [] { return gpt2(4, 4, 192, 50257, 256); }},
      {"gpt2-124m", [] { return gpt2(12, 12, 768, 50257, 1024); }},
      {"gpt2-350m", [] { return gpt2(24, 16, 1024, 50257, 1024); }},
      {"gpt2-774m", [] { return gpt2(36, 20, 1280, 50257, 1024); }},
      {"gpt2-1558m", [] { return gpt2(48, 25, 1600, 50257, 1024); }},
      {"llama-tiny", [] { return llama(2, 4, 2, 32, 64, 256, 64, 10000.0f, false); }},
      {"mistral-tiny",  // Mistral 7B v0.1's form: each token attends to its 8 latest positions
       [] {
         ModelConfig c = llama(2, 4, 2, 32, 64, 256, 64, 10000.0f, false);
         c.attention_window = 8;
         return c;
       }},
      {"llama-mini", [] { return llama(4, 6, 2, 192, 512, 50257, 256, 10000.0f, true); }},
      {"llama2-7b", [] { return llama(32, 32, 32, 4096, 11008, 32000, 4096, 10000.0f, false); }},
      {"mistral-7b",  // v0.1: each token attends to its 4,096 latest positions
       [] {
         ModelConfig c = llama(32, 32, 8, 4096, 14336, 32000, 32768, 10000.0f, false);
         c.attention_window = 4096;
         return c;
       }},
      {"mistral-nemo-12b",  // heads of 128 channels over a width of 5,120; its 128K context
       [] {
         ModelConfig c = llama(40, 32, 8, 5120, 14336, 131072, 131072, 1e6f, false);
         c.head_dim = 128;
         return c;
       }},
      {"llama3.2-1b", [] { return llama3_scaled(llama(16, 32, 8, 2048, 8192, 128256, 131072, 5e5f, true), 32); }},
      {"llama3.2-3b", [] { return llama3_scaled(llama(28, 24, 8, 3072, 8192, 128256, 131072, 5e5f, true), 32); }},
      {"llama3.1-8b", [] { return llama3_scaled(llama(32, 32, 8, 4096, 14336, 128256, 131072, 5e5f, false), 8); }},
      {"llama3.1-70b", [] { return llama3_scaled(llama(80, 64, 8, 8192, 28672, 128256, 131072, 5e5f, false), 8); }},
      {"qwen2-tiny", [] { return qwen2(llama(2, 4, 2, 32, 64, 256, 64, 1e6f, true)); }},
      {"qwen2.5-0.5b", [] { return qwen2(llama(24, 14, 2, 896, 4864, 151936, 32768, 1e6f, true)); }},
      {"qwen3-tiny", [] { return qwen3(llama(2, 4, 2, 32, 64, 256, 64, 1e6f, true), 16); }},
      {"qwen3-0.6b", [] { return qwen3(llama(28, 16, 8, 1024, 3072, 151936, 40960, 1e6f, true), 128); }},
      {"qwen3-1.7b", [] { return qwen3(llama(28, 16, 8, 2048, 6144, 151936, 40960, 1e6f, true), 128); }},
      {"qwen3-8b", [] { return qwen3(llama(36, 32, 8, 4096, 12288, 151936, 40960, 1e6f, false), 128); }},
      {"qwen3-moe-tiny", [] { return with_experts(qwen3(llama(2, 4, 2, 32, 48, 256, 64, 1e6f, false), 16), 8, 2, 24); }},
      {"qwen3-30b-a3b",
       [] { return with_experts(qwen3(llama(48, 32, 4, 2048, 6144, 151936, 40960, 1e6f, false), 128), 128, 8, 768); }},
      {"phi3-tiny",  // Phi-4-mini's RoPE: 6 of a head's 8 channels turn, LongRoPE past 8 positions
       [] {
         ModelConfig c = phi3(llama(2, 4, 2, 32, 64, 256, 64, 10000.0f, false));
         c.rotary_dims = 6;
         c.rope.longrope = true;
         c.rope.original_max_positions = 8;
         c.rope.factor = 8;  // max_position_embeddings 64 / 8
         c.rope.short_factor = {1.0f, 1.25f, 1.5f};
         c.rope.long_factor = {1.0f, 2.5f, 6.0f};
         return c;
       }},
      {"phi3-mini",  // Phi-3-mini-4k: each token attends to its 2,047 latest positions
       [] {
         ModelConfig c = phi3(llama(32, 32, 32, 3072, 8192, 32064, 4096, 10000.0f, false));
         c.attention_window = 2047;
         return c;
       }},
      {"phi-4", [] { return phi3(llama(40, 40, 10, 5120, 17920, 100352, 16384, 250000.0f, false)); }},
      {"olmo2-tiny", [] { return olmo2(llama(2, 4, 2, 32, 64, 256, 64, 5e5f, false)); }},
      {"olmo2-1b", [] { return olmo2(llama(16, 16, 16, 2048, 8192, 100352, 4096, 5e5f, false)); }},
      {"olmo2-7b", [] { return olmo2(llama(32, 32, 32, 4096, 11008, 100352, 4096, 5e5f, false)); }},
      {"olmo2-13b", [] { return olmo2(llama(40, 40, 40, 5120, 13824, 100352, 4096, 5e5f, false)); }},
      {"olmo2-32b", [] { return olmo2(llama(64, 40, 8, 5120, 27648, 100352, 4096, 5e5f, false)); }},
      {"smollm3-tiny", [] { return smollm3(llama(2, 4, 2, 32, 64, 256, 64, 5e6f, true), 2); }},
      {"smollm3-3b", [] { return smollm3(llama(36, 16, 4, 2048, 11008, 128256, 65536, 5e6f, true), 4); }},
      {"gemma-tiny", [] { return gemma1(llama(2, 4, 1, 32, 48, 256, 64, 1e4f, true), 16); }},
      {"gemma-2b", [] { return gemma1(llama(18, 8, 1, 2048, 16384, 256000, 8192, 1e4f, true), 256); }},
      {"gemma-7b", [] { return gemma1(llama(28, 16, 16, 3072, 24576, 256000, 8192, 1e4f, true), 256); }},
      {"gemma2-tiny",  // caps of 50 and 30 bend nothing at this size (scores near 0.01, logits 0.1): these do
       [] {
         ModelConfig c = gemma2(llama(3, 4, 1, 32, 48, 256, 64, 1e4f, true), 16, 8, 24.0f);
         c.attention_softcap = 0.05f;
         c.logit_softcap = 1.0f;
         return c;
       }},
      {"gemma2-2b", [] { return gemma2(llama(26, 8, 4, 2304, 9216, 256000, 8192, 1e4f, true), 256, 4096, 256.0f); }},
      {"gemma2-9b", [] { return gemma2(llama(42, 16, 8, 3584, 14336, 256000, 8192, 1e4f, true), 256, 4096, 256.0f); }},
      {"gemma2-27b",
       [] { return gemma2(llama(46, 32, 16, 4608, 36864, 256000, 8192, 1e4f, true), 128, 4096, 144.0f); }},
      {"gemma3-tiny", [] { return gemma3(llama(3, 4, 1, 32, 48, 256, 64, 1e6f, true), 16, 8, 3); }},
      {"gemma3-1b", [] { return gemma3(llama(26, 4, 1, 1152, 6912, 262144, 32768, 1e6f, true), 256, 512, 6); }},
      {"gemma3-4b",
       [] { return gemma3_large(llama(34, 8, 4, 2560, 10240, 262208, 131072, 1e6f, true), 256, 256.0f); }},
      {"gemma3-12b",
       [] { return gemma3_large(llama(48, 16, 8, 3840, 15360, 262208, 131072, 1e6f, true), 256, 256.0f); }},
      {"gemma3-27b",
       [] { return gemma3_large(llama(62, 32, 16, 5376, 21504, 262208, 131072, 1e6f, true), 128, 168.0f); }},
      {"pythia-tiny", [] { return gpt_neox(2, 4, 64, 256, 64); }},
      {"pythia-70m", [] { return gpt_neox(6, 8, 512, 50304); }},
      {"pythia-160m", [] { return gpt_neox(12, 12, 768, 50304); }},
      {"pythia-410m", [] { return gpt_neox(24, 16, 1024, 50304); }},
      {"pythia-1b", [] { return gpt_neox(16, 8, 2048, 50304); }},
      {"pythia-1.4b", [] { return gpt_neox(24, 16, 2048, 50304); }},
      {"pythia-2.8b", [] { return gpt_neox(32, 32, 2560, 50304); }},
      {"pythia-6.9b", [] { return gpt_neox(32, 32, 4096, 50432); }},
      {"pythia-12b", [] { return gpt_neox(36, 40, 5120, 50688); }},
      {"gpt-neox-20b",  // its hidden_act is gelu_fast, GELU's tanh form
       [] {
         ModelConfig c = gpt_neox(44, 64, 6144, 50432);
         c.mlp = MlpKind::gelu;
         return c;
       }},
      {"cohere-tiny", [] { return cohere(llama(2, 4, 2, 32, 64, 256, 64, 10000.0f, true), 0.25f); }},
      {"command-r-35b", [] { return cohere(llama(40, 64, 64, 8192, 22528, 256000, 8192, 8e6f, true), 0.0625f); }},
      {"aya-expanse-8b", [] { return cohere(llama(32, 32, 8, 4096, 14336, 256000, 8192, 10000.0f, true), 0.125f); }},
      {"cohere2-tiny", [] { return cohere2(llama(3, 4, 2, 32, 64, 256, 64, 10000.0f, true), 0.25f, 8, 2); }},
      {"command-r7b",
       [] { return cohere2(llama(32, 32, 8, 4096, 14336, 256000, 131072, 50000.0f, true), 0.25f, 4096, 4); }},
      {"command-a-111b",
       [] { return cohere2(llama(64, 96, 8, 12288, 36864, 256000, 131072, 50000.0f, true), 0.25f, 4096, 4); }},
      {"phi2-tiny", [] { return phi2(llama(2, 2, 2, 32, 128, 256, 64, 10000.0f, false), 8); }},
      {"phi-1.5", [] { return phi2(llama(24, 32, 32, 2048, 8192, 51200, 2048, 10000.0f, false), 32); }},
      {"phi-2", [] { return phi2(llama(32, 32, 32, 2560, 10240, 51200, 2048, 10000.0f, false), 32); }},
      {"starcoder2-tiny", [] { return starcoder2(llama(2, 4, 2, 32, 64, 256, 64, 10000.0f, true), 8); }},
      {"starcoder2-3b",
       [] { return starcoder2(llama(30, 24, 2, 3072, 12288, 49152, 16384, 999999.4420358813f, true), 4096); }},
      {"starcoder2-7b", [] { return starcoder2(llama(32, 36, 4, 4608, 18432, 49152, 16384, 1e6f, true), 4096); }},
      {"starcoder2-15b", [] { return starcoder2(llama(40, 48, 4, 6144, 24576, 49152, 16384, 1e5f, false), 4096); }},
      {"qwen2-moe-tiny", [] { return qwen2_moe(llama(2, 4, 2, 32, 48, 256, 64, 1e6f, false), 8, 2, 16, 2); }},
      {"qwen1.5-moe-a2.7b",  // a shared width of 5,632: four experts' 1,408
       [] { return qwen2_moe(llama(24, 16, 16, 2048, 5632, 151936, 8192, 1e6f, false), 60, 4, 1408, 4); }},
      {"qwen2-57b-a14b",  // a shared width of 20,480: eight experts' 2,560
       [] { return qwen2_moe(llama(28, 28, 4, 3584, 18944, 151936, 32768, 1e6f, false), 64, 8, 2560, 8); }},
      {"mixtral-tiny", [] { return with_experts(llama(2, 4, 2, 32, 48, 256, 64, 10000.0f, false), 4, 2, 48); }},
      {"mixtral-mini", [] { return with_experts(llama(4, 6, 2, 192, 256, 50257, 256, 10000.0f, true), 8, 2, 256); }},
      {"mixtral-8x7b", [] { return with_experts(llama(32, 32, 8, 4096, 14336, 32000, 32768, 1e6f, false), 8, 2, 14336); }},
      {"olmoe-tiny", [] { return olmoe(llama(2, 4, 2, 32, 24, 256, 64, 10000.0f, false), 8, 2, 24); }},
      {"olmoe-1b-7b",  // OLMoE-1B-7B: 6.92B parameters, 1.28B active
       [] { return olmoe(llama(16, 16, 16, 2048, 1024, 50304, 4096, 10000.0f, false), 64, 8, 1024); }},
      {"glm4.5-tiny",  // two of 8 experts, GLM-4.5's per-head q/k norms
       [] {
         ModelConfig c = glm4_moe(llama(3, 4, 2, 32, 48, 256, 64, 1e6f, false), 16, 8, 16, 1, 2.5f);
         c.moe.top_k = 2;
         c.qk_norm = true;
         return c;
       }},
      {"glm4.5-air",
       [] { return glm4_moe(llama(46, 96, 8, 4096, 10944, 151552, 131072, 1e6f, false), 128, 128, 1408, 1, 1.0f); }},
      {"glm4.5",
       [] {
         ModelConfig c = glm4_moe(llama(92, 96, 8, 5120, 12288, 151552, 131072, 1e6f, false), 128, 160, 1536, 3, 2.5f);
         c.qk_norm = true;
         return c;
       }},
      {"deepseek-moe-tiny",
       [] { return deepseek_style(with_experts(llama(2, 4, 4, 32, 64, 256, 64, 10000.0f, false), 8, 2, 16), 1, 1); }},
      {"deepseek-v2-tiny",
       [] {
         ModelConfig c = latent_attention(
             deepseek_style(with_experts(llama(3, 4, 4, 32, 64, 256, 64, 10000.0f, false), 8, 2, 16), 1, 1),
             {.q_rank = 0, .kv_rank = 16, .nope_dim = 8, .rope_dim = 4, .v_dim = 8}, 1.5f);
         c.moe.router = RouterKind::softmax_topk;  // DeepSeek-V2: softmax, the chosen weights not renormalised
         c.moe.renormalize = false;
         return c;
       }},
      {"deepseek-v2-lite",  // DeepSeek-V2-Lite: 15.7B parameters, 2.4B active (embeddings aside)
       [] {
         ModelConfig c = latent_attention(
             deepseek_style(with_experts(llama(27, 16, 16, 2048, 10944, 102400, 163840, 10000.0f, false), 64, 6, 1408),
                            2, 1),
             {.q_rank = 0, .kv_rank = 512, .nope_dim = 128, .rope_dim = 64, .v_dim = 128}, 1.0f);
         c.moe.router = RouterKind::softmax_topk;
         c.moe.renormalize = false;
         return deepseek_yarn(c, 0.707f);
       }},
      {"deepseek-v3",  // DeepSeek-V3 (and R1): 671B parameters, 37B active; no multi-token prediction
       [] {
         ModelConfig c = latent_attention(
             deepseek_style(
                 with_experts(llama(61, 128, 128, 7168, 18432, 129280, 163840, 10000.0f, false), 256, 8, 2048), 1, 3),
             {.q_rank = 1536, .kv_rank = 512, .nope_dim = 128, .rope_dim = 64, .v_dim = 128}, 2.5f);
         c.moe.groups = 8, c.moe.kept_groups = 4;
         return deepseek_yarn(c, 1.0f);
       }},
      {"deepseek-v3-tiny",
       [] {
         ModelConfig c = latent_attention(
             deepseek_style(with_experts(llama(3, 4, 4, 32, 64, 256, 64, 10000.0f, false), 8, 2, 16), 1, 1),
             {.q_rank = 12, .kv_rank = 16, .nope_dim = 8, .rope_dim = 4, .v_dim = 6}, 2.5f);
         c.moe.groups = 4, c.moe.kept_groups = 2;  // DeepSeek-V3's group limit (its own: 8 groups, 4 kept)
         return c;
       }},
  };
  return table;
}

}  // namespace

ModelConfig model_preset(const std::string& name) {
  for (const auto& [preset, make] : presets())
    if (preset == name) return make();
  std::string known;
  for (const std::string& n : model_preset_names()) known += (known.empty() ? "" : ", ") + n;
  TS_FAIL("--model: unknown model '", name, "'; known models: ", known);
}

std::vector<std::string> model_preset_names() {
  std::vector<std::string> names;
  for (const auto& entry : presets()) names.push_back(entry.first);
  return names;
}

}  // namespace tessera
