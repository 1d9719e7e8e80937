// Hugging Face's fine-grained FP8 storage, the form DeepSeek-V3/R1, Kimi-K2 and the Qwen3 *-FP8
// releases ship: config.json's quantization_config {"quant_method": "fp8", "weight_block_size": [R, C]}
// and, for each quantized linear weight W (out × in), F8_E4M3 codes beside `W_scale_inv`, one fp32
// scale per R × C block (ceil(out/R) × ceil(in/C) of them, the last row and column of blocks partial).
// The weight is decode(code) · scale, one fp32 multiplication, as transformers and DeepSeek's own
// fp8_cast_bf16 dequantize it. Tessera trains from those values in its own precision, and exports in
// that form on request: each block's scale its largest magnitude over 448, its codes the nearest E4M3 of
// the weights over the scale, as DeepSeek's and transformers' quantizers choose them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/fp8.h"
#include "core/tensor.h"

namespace tessera {

// The block shape of a folder's FP8 weights; 0 × 0 when the folder declares none.
struct HfFp8Blocks {
  int64_t rows = 0;
  int64_t cols = 0;
  bool enabled() const { return rows > 0; }
  // The scales' shape for a weight of `shape` (two dimensions).
  Shape scale_shape(const Shape& shape) const;
};

// dir/config.json's quantization_config: none when the file or the field is absent; fp8 blocks
// (weight_block_size defaulting to 128 × 128, as transformers does); any other quant_method (gptq, awq,
// bitsandbytes, compressed-tensors, ...) is refused naming it and where unquantized weights come from.
HfFp8Blocks read_hf_fp8_blocks(const std::filesystem::path& dir);
// The quantization_config an export in `blocks` declares, as DeepSeek-V3's: fp8, e4m3, dynamic activations.
nlohmann::json hf_quantization_config(HfFp8Blocks blocks);

// The block shape vLLM's and SGLang's kernels and DeepSeek's releases use.
inline constexpr HfFp8Blocks kDeepseekFp8Blocks{128, 128};

// The scales of weight `name`: "x.weight" → "x.weight_scale_inv".
std::string fp8_scale_name(const std::string& name);

// Whether an export stores Hugging Face tensor `name` in FP8 blocks: the weights of the attention and
// MLP projections (dense, routed and shared experts, Mixtral's w1/w2/w3, Phi-3's fused qkv_proj and
// gate_up_proj), not embeddings, heads, norms,
// routers or biases, as DeepSeek-V3's release does.
bool hf_fp8_quantized(const std::string& name);

struct Fp8BlockWeight {
  std::vector<uint8_t> codes;  // E4M3, the weight's shape
  std::vector<float> scales;   // blocks.scale_shape(shape)
};

// `values` (rows × cols, row-major) in `blocks`: per block, scale = max |v| / 448 (1 when every v is 0)
// and code = the E4M3 nearest v / scale (a quotient that rounds above 448 saturates).
Fp8BlockWeight quantize_fp8_blocks(const float* values, const Shape& shape, HfFp8Blocks blocks);

// The fp8 `codes` of a weight of `shape` (rows × cols, row-major) in fp32, each multiplied by its
// block's scale from `scales` (blocks.scale_shape(shape), row-major).
std::vector<float> dequantize_fp8_blocks(std::span<const std::byte> codes, Fp8Format format, const Shape& shape,
                                         std::span<const float> scales, HfFp8Blocks blocks);

}  // namespace tessera
