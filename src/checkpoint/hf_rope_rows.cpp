// RoPE row orders between Hugging Face files and Tessera (see hf_rope_rows.h).
#include "checkpoint/hf_rope_rows.h"

#include <algorithm>
#include <utility>
#include <vector>

namespace tessera {
namespace {

// Row r of an R-row tail in Tessera's order holds interleaved row source(r): even channels, then odd.
int64_t interleaved_row(int64_t r, int64_t R) { return r < R / 2 ? 2 * r : 2 * (r - R / 2) + 1; }

}  // namespace

void reorder_rope_pairs(float* rows, int64_t R, int64_t cols, bool to_interleaved) {
  const std::vector<float> given(rows, rows + R * cols);
  for (int64_t r = 0; r < R; ++r) {
    const int64_t ours = r * cols, theirs = interleaved_row(r, R) * cols;
    std::copy_n(given.begin() + (to_interleaved ? ours : theirs), cols, rows + (to_interleaved ? theirs : ours));
  }
}

void move_rotary_rows(const ModelConfig& c, const std::string& name, float* values, bool to_hf) {
  if (c.rotary_dims == 0 || c.mla.enabled()) return;
  const int64_t NH = c.num_heads, NKV = c.kv_heads(), C = c.channels;
  const auto [heads, row] = [&]() -> std::pair<int64_t, int64_t> {
    if (name.ends_with(".self_attn.qkv_proj.weight")) return {NH + NKV, C};  // Phi-3's; v rows stay
    if (name.ends_with(".self_attn.q_proj.weight")) return {NH, C};
    if (name.ends_with(".self_attn.k_proj.weight")) return {NKV, C};
    if (name.ends_with(".self_attn.q_proj.bias")) return {NH, 1};
    if (name.ends_with(".self_attn.k_proj.bias")) return {NKV, 1};
    const bool head_norm = name.ends_with(".self_attn.q_norm.weight") || name.ends_with(".self_attn.k_norm.weight");
    if (head_norm && !c.qk_norm_all_heads) return {1, 1};
    return {0, 0};
  }();
  const int64_t HS = c.head_size(), R = c.rotary_dims;
  for (int64_t h = 0; h < heads; ++h) {
    float* head = values + h * HS * row;
    std::rotate(head, head + (to_hf ? HS - R : R) * row, head + HS * row);
  }
}

void reorder_interleaved_heads(const ModelConfig& c, const std::string& name, float* values, bool to_hf) {
  const int64_t heads = name.ends_with(".self_attn.q_proj.weight")   ? c.num_heads
                        : name.ends_with(".self_attn.k_proj.weight") ? c.kv_heads()
                                                                     : 0;
  const int64_t HS = c.head_size();
  for (int64_t h = 0; h < heads; ++h) reorder_rope_pairs(values + h * HS * c.channels, HS, c.channels, to_hf);
}

}  // namespace tessera
