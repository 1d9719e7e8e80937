// Where Hugging Face files keep RoPE's channels and where Tessera's RoPE turns them: rows of q/k projections
// moved between the two orders on import and export (Tessera rotates pairs i and i + R/2 of a head's last R
// channels). Shared by the Llama-form, DeepSeek, Phi and Cohere adapters.
#pragma once

#include <cstdint>
#include <string>

#include "nn/model_config.h"

namespace tessera {

// R rows of `cols` values at `rows` between the interleaved RoPE pair order (channels 2i and 2i + 1 turn
// together: DeepSeek-V3's tails, Cohere's heads) and Tessera's (i and i + R/2), in place.
void reorder_rope_pairs(float* rows, int64_t R, int64_t cols, bool to_interleaved);

// Phi-3's, Phi-2's and GLM-4.5's partial rotary turns a head's first R channels, Tessera's RoPE its last R: the
// import moves each q and k head's first R rows after its others (`to_hf` moves them back), in Phi-3's fused
// qkv_proj, or in q_proj and k_proj, their biases and the heads' q/k norm gains (HF tensor `name`'s values, in
// place; other tensors are left alone), which changes no dot product of a query and a key.
void move_rotary_rows(const ModelConfig& config, const std::string& name, float* values, bool to_hf);

// Cohere's RoPE turns channels 2i and 2i + 1 of each whole head together: each q_proj and k_proj head's rows
// between that order and Tessera's (reorder_rope_pairs over the head), in place; other tensors are left alone.
void reorder_interleaved_heads(const ModelConfig& config, const std::string& name, float* values, bool to_hf);

}  // namespace tessera
