// Rotary position embeddings (RoPE), Hugging Face Llama's non-interleaved "rotate_half" convention,
// applied in place to the q and k heads of a packed qkv tensor with grouped-query attention's layout.
//   qkv (B, T, (NH + 2*NKV) * HS) packs per token [q (NH heads) | k (NKV heads) | v (NKV heads)],
//   each head HS contiguous channels, HS even, NKV dividing NH (NKV == NH: multi-head attention).
//   For head channel i in [0, HS/2) and a token at absolute position p, with a = p * inv_freq[i]:
//     x'[i] = x[i] cos a - x[i + HS/2] sin a,   x'[i + HS/2] = x[i + HS/2] cos a + x[i] sin a.
// So q_m . k_n after RoPE depends on the positions only through m - n. v is never touched.
// DeepSeek's latent attention rotates only a tail of each head: with inv_freq of R/2 < HS/2 entries,
// the rule above applies to each q and k head's last R channels (x[i] read as x[HS - R + i], HS/2 as
// R/2) and the first HS - R channels are left as they are. (Phi-3's partial rotary rotates a head's
// first R channels; its import moves them to the tail.)
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace tessera {

struct RopeConfig {
  float theta = 10000;  // Llama 2: 10000; Llama 3: 500000
  // Frequency scaling, factor 0 = none: Llama 3.1's (HF rope_type "llama3"; Llama 3.1: 8, 1, 4, 8192),
  // or with `yarn` YaRN's (HF rope_type "yarn": factor, original_max_positions, beta_fast, beta_slow,
  // truncate; mscale, mscale_all_dim and attention_factor as given, 0 when absent).
  float factor = 0, low_freq_factor = 1, high_freq_factor = 4;
  int64_t original_max_positions = 8192;
  bool yarn = false;
  float beta_fast = 32, beta_slow = 1, mscale = 0, mscale_all_dim = 0, attention_factor = 0;
  bool truncate = true;
  // Or with `longrope` Phi-3's LongRoPE (HF rope type "longrope"): frequency i divided by
  // short_factor[i], or by long_factor[i] for a sequence longer than original_max_positions; factor
  // is max_position_embeddings / original_max_positions, attention_factor as given (0 when absent).
  bool longrope = false;
  std::vector<float> short_factor = {}, long_factor = {};
  // Or with `linear` every frequency divided by factor (HF rope_type "linear", Gemma 3's global layers).
  bool linear = false;
  bool operator==(const RopeConfig&) const = default;
};

// inv_freq (R/2) f32 on the CPU for R rotated channels: inv_freq[i] = theta^(-2i/R), then the llama3,
// YaRN, LongRoPE or linear scaling. `positions`: the sequence's length (its largest position + 1), which
// chooses LongRoPE's factors as transformers does. Computed in double and rounded once to f32.
Tensor rope_inv_freq(int64_t head_size, const RopeConfig& config, int64_t positions = 0);

// YaRN's magnitude, 0.1·m·ln(scale) + 1 (1 for scale <= 1).
double yarn_mscale(double scale, double m = 1.0);
// The factor on the rotated channels (YaRN's attention_factor, Hugging Face's cos/sin scaling): the
// given attention_factor, else mscale(factor, mscale) / mscale(factor, mscale_all_dim) when both are
// given, else mscale(factor); LongRoPE's: the given attention_factor, else sqrt(1 + ln(factor) /
// ln(original_max_positions)) (1 for factor <= 1); 1 without either.
float rope_rotated_scale(const RopeConfig& config);

// Factors a rotation multiplies by (1 and 1: a pure rotation): `rotated` on the rotated channels of
// the q and k heads, `query` on every channel of the q heads (a factor on every attention score).
struct RopeScales {
  float rotated = 1.0f, query = 1.0f;
};

// Rotates the q and k heads of qkv (B, T, (NH+2NKV)*HS) in place by the angles of positions (T) i32
// (each token's absolute position, >= 0, shared by every sequence of the batch; a context-parallel
// rank passes its true offsets) and inv_freq (R/2) f32 from rope_inv_freq(R), R = HS or a tail of it
// (above). v is left untouched.
// qkv: f32, or bf16 or f16 on the GPU (16-bit storage, fp32 arithmetic); positions and inv_freq on
// qkv's device. Negative positions are refused on the CPU; the GPU does not read them back to check.
void rope_forward(Tensor& qkv, const Tensor& positions, int64_t num_heads, int64_t num_kv_heads,
                  const Tensor& inv_freq, RopeScales scales = {});

// Gradient contract: forward is the linear map y = S R x with R orthogonal (block rotations) and S
// the diagonal of `scales`, so dx = R^T S dy: each (dq, dk) pair is scaled as forward scales it and
// rotated by -a, in place, turning dqkv = d loss / d (rotated qkv) into d loss / d (qkv before RoPE).
// dv passes through untouched (v is not rotated). Written in place, never accumulated; same shapes
// and arguments as rope_forward.
void rope_backward(Tensor& dqkv, const Tensor& positions, int64_t num_heads, int64_t num_kv_heads,
                   const Tensor& inv_freq, RopeScales scales = {});

}  // namespace tessera
