// Fine-grained FP8 weights of Hugging Face folders (hf_fp8_blocks.h).
#include "checkpoint/hf_fp8_blocks.h"

#include <nlohmann/json.hpp>

#include "checkpoint/hf_config_reader.h"
#include "core/error.h"
#include "core/user_text.h"
#include "data/json_excerpt.h"
#include "data/whole_file.h"

namespace tessera {

using nlohmann::json;

Shape HfFp8Blocks::scale_shape(const Shape& shape) const {
  TS_CHECK(enabled() && shape.size() == 2, "HfFp8Blocks::scale_shape: a two-dimensional weight in declared blocks");
  return {(shape[0] + rows - 1) / rows, (shape[1] + cols - 1) / cols};
}

HfFp8Blocks read_hf_fp8_blocks(const std::filesystem::path& dir) {
  const std::filesystem::path path = dir / "config.json";
  if (!std::filesystem::exists(path)) return {};
  json config;
  try {
    config = json::parse(read_whole_file(path, "Hugging Face config", kMaxConfigFileBytes));
  } catch (const json::exception& e) {
    TS_FAIL("Hugging Face config ", quoted_text(path.string()), ": not valid JSON (", json_error_text(e), ")");
  }
  const HfConfigReader r(config, path);
  const json* quantization = config.is_object() ? r.find("quantization_config") : nullptr;
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

std::string fp8_scale_name(const std::string& name) { return name + "_scale_inv"; }

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
