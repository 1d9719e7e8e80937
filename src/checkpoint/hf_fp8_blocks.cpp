// Fine-grained FP8 weights of Hugging Face folders (hf_fp8_blocks.h).
#include "checkpoint/hf_fp8_blocks.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "checkpoint/hf_config_reader.h"
#include "core/error.h"
#include "core/user_text.h"
#include "data/json_excerpt.h"

namespace tessera {

using nlohmann::json;

Shape HfFp8Blocks::scale_shape(const Shape& shape) const {
  TS_CHECK(enabled() && shape.size() == 2, "HfFp8Blocks::scale_shape: a two-dimensional weight in declared blocks");
  return {(shape[0] + rows - 1) / rows, (shape[1] + cols - 1) / cols};
}

HfFp8Blocks read_hf_fp8_blocks(const std::filesystem::path& dir) {
  const std::filesystem::path path = dir / "config.json";
  if (!std::filesystem::exists(path)) return {};
  const json config = read_hf_config_json(path);
  const HfConfigReader r(config, path);
  const json* quantization = r.find("quantization_config");
  if (!quantization) return {};
  TS_CHECK(quantization->is_object(), r.where(), ": field 'quantization_config' must be an object, got ",
           json_excerpt(*quantization));
  const json method = quantization->value("quant_method", json());
  TS_CHECK(method == "fp8", r.where(), ": quantization_config's quant_method is ", json_excerpt(method),
           "; Tessera reads unquantized weights (F32, BF16, F16) and fine-grained FP8 blocks (quant_method \"fp8\", ",
           "as DeepSeek-V3 ships), not other quantized forms: load the model's unquantized (BF16) release instead");
  const json blocks = quantization->value("weight_block_size", json::array({128, 128}));
  TS_CHECK(blocks.is_array() && blocks.size() == 2 && blocks[0].is_number_integer() &&
               blocks[1].is_number_integer() && blocks[0].get<int64_t>() > 0 && blocks[1].get<int64_t>() > 0,
           r.where(), ": quantization_config's weight_block_size is ", quoted_text(blocks.dump(), 60),
           ", expected [rows, columns] of positive integers (DeepSeek-V3's is [128, 128])");
  return {blocks[0].get<int64_t>(), blocks[1].get<int64_t>()};
}

json hf_quantization_config(HfFp8Blocks blocks) {
  return {{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"activation_scheme", "dynamic"},
          {"weight_block_size", {blocks.rows, blocks.cols}}};
}

std::string fp8_scale_name(const std::string& name) { return name + "_scale_inv"; }

bool hf_fp8_quantized(const std::string& name) {
  static constexpr std::string_view projections[] = {
      ".q_proj.weight",    ".q_a_proj.weight", ".q_b_proj.weight",    ".kv_a_proj_with_mqa.weight",
      ".kv_b_proj.weight", ".k_proj.weight",   ".v_proj.weight",      ".o_proj.weight",
      ".gate_proj.weight", ".up_proj.weight",  ".down_proj.weight",   ".w1.weight",
      ".w2.weight",        ".w3.weight",       ".qkv_proj.weight",    ".gate_up_proj.weight"};
  for (std::string_view suffix : projections)
    if (name.ends_with(suffix)) return true;
  return false;
}

Fp8BlockWeight quantize_fp8_blocks(const float* values, const Shape& shape, HfFp8Blocks blocks) {
  const Shape scale_shape = blocks.scale_shape(shape);
  const int64_t rows = shape[0], cols = shape[1];
  Fp8BlockWeight out{std::vector<uint8_t>(size_t(rows * cols)), std::vector<float>(size_t(shape_numel(scale_shape)))};
  for (int64_t br = 0; br < scale_shape[0]; ++br)
    for (int64_t bc = 0; bc < scale_shape[1]; ++bc) {
      const int64_t r0 = br * blocks.rows, r1 = std::min(rows, r0 + blocks.rows);
      const int64_t c0 = bc * blocks.cols, c1 = std::min(cols, c0 + blocks.cols);
      float amax = 0;
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(values[r * cols + c]));
      const float scale = amax > 0 ? amax / fp8_max(Fp8Format::e4m3) : 1.0f;
      out.scales[size_t(br * scale_shape[1] + bc)] = scale;
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c)
          out.codes[size_t(r * cols + c)] = fp8_encode(values[r * cols + c] / scale, Fp8Format::e4m3);
    }
  return out;
}

std::vector<float> dequantize_fp8_blocks(std::span<const std::byte> codes, Fp8Format format, const Shape& shape,
                                         std::span<const float> scales, HfFp8Blocks blocks) {
  const Shape scale_shape = blocks.scale_shape(shape);
  const int64_t rows = shape[0], cols = shape[1];
  TS_CHECK(int64_t(codes.size()) == rows * cols && int64_t(scales.size()) == shape_numel(scale_shape),
           "dequantize_fp8_blocks: ", codes.size(), " codes and ", scales.size(), " scales for a weight of ",
           shape_string(shape), " in blocks of ", blocks.rows, " x ", blocks.cols);
  float decoded[256];
  for (int code = 0; code < 256; ++code) decoded[code] = fp8_decode(uint8_t(code), format);
  std::vector<float> out(codes.size());
  for (int64_t r = 0; r < rows; ++r) {
    const float* row_scales = scales.data() + (r / blocks.rows) * scale_shape[1];
    for (int64_t c = 0; c < cols; ++c)
      out[size_t(r * cols + c)] = decoded[uint8_t(codes[size_t(r * cols + c)])] * row_scales[c / blocks.cols];
  }
  return out;
}

}  // namespace tessera
