// Single-file and sharded Hugging Face weights.
#include "checkpoint/hf_weight_files.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/file_checks.h"
#include "core/user_text.h"
#include "data/json_excerpt.h"
#include "data/whole_file.h"

namespace tessera {
namespace fs = std::filesystem;
namespace {

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

// The FP8 format of an F8_E4M3 or F8_E5M2 tensor; nothing for other types.
std::optional<Fp8Format> fp8_format(const SafetensorsInfo& info) {
  if (info.dtype == "F8_E4M3") return Fp8Format::e4m3;
  if (info.dtype == "F8_E5M2") return Fp8Format::e5m2;
  return std::nullopt;
}

// Whether read_f32 converts the tensor as it is: F32, BF16 or F16.
bool float_type(const SafetensorsInfo& info) {
  return info.type == DType::f32 || info.type == DType::bf16 || info.type == DType::f16;
}

// When dir holds PyTorch pickles instead (older uploads), how to turn them into safetensors.
std::string pickle_hint(const fs::path& dir) {
  if (!fs::exists(dir / "pytorch_model.bin") && !fs::exists(dir / "pytorch_model.bin.index.json")) return "";
  return "; its pytorch_model.bin weights are PyTorch pickles, which Tessera does not read: save them as safetensors "
         "first (transformers: model.save_pretrained(folder, safe_serialization=True))";
}

}  // namespace

HfWeightFiles::HfWeightFiles(const fs::path& dir) {
  const fs::path index_path = dir / kIndexFile;
  if (!fs::exists(index_path)) {
    TS_CHECK(fs::exists(dir / kSingleFile), "Hugging Face folder ", quoted_text(dir.string()), " has neither ",
             kSingleFile, " nor ", kIndexFile, pickle_hint(dir));
    description_ = quoted_text((dir / kSingleFile).string());
    files_.push_back(std::make_unique<SafetensorsFile>(dir / kSingleFile));
    for (const SafetensorsInfo& t : files_.back()->tensors()) by_name_[t.name] = files_.back().get();
    check_fp8_weights(dir);
    return;
  }
  description_ = quoted_text(index_path.string());
  const nlohmann::json index =
      nlohmann::json::parse(read_whole_file(index_path, "safetensors index", kMaxConfigFileBytes), nullptr, false);
  TS_CHECK(!index.is_discarded() && index.is_object() && index.contains("weight_map") &&
               index["weight_map"].is_object(),
           "safetensors index ", description_, ": expected a JSON object with a 'weight_map' object");
  std::map<std::string, const SafetensorsFile*> shards;
  for (const auto& [tensor, shard] : index["weight_map"].items()) {
    TS_CHECK(shard.is_string() && !shard.get<std::string>().empty() &&
                 shard.get<std::string>().find('/') == std::string::npos,
             "safetensors index ", description_, ": 'weight_map' entry ", quoted_text(tensor, 80),
             " must name a shard file in the same folder, got ", json_excerpt(shard));
    const std::string name = shard.get<std::string>();
    if (!shards.count(name)) {
      TS_CHECK(fs::exists(dir / name), "safetensors index ", description_, " names shard ", quoted_text(name),
               ", which is missing from the folder");
      files_.push_back(std::make_unique<SafetensorsFile>(dir / name));
      shards[name] = files_.back().get();
    }
    const SafetensorsFile* file = shards[name];
    TS_CHECK(file->contains(tensor), "safetensors index ", description_, " places ", quoted_text(tensor, 80), " in ",
             quoted_text(name), ", which does not hold it");
    by_name_[tensor] = file;
  }
  for (const auto& [name, file] : shards)
    for (const SafetensorsInfo& t : file->tensors())
      TS_CHECK(by_name_.count(t.name) && by_name_[t.name] == file, "safetensors shard ", quoted_text(name),
               " holds ", quoted_text(t.name, 80), ", which the index ", description_, " does not place there");
  check_fp8_weights(dir);
}

void HfWeightFiles::check_fp8_weights(const fs::path& dir) {
  fp8_blocks_ = read_hf_fp8_blocks(dir);
  for (const auto& [name, file] : by_name_) {
    const SafetensorsInfo& info = file->info(name);
    if (!fp8_format(info)) continue;
    const std::string scale = fp8_scale_name(name);
    TS_CHECK(fp8_blocks_.enabled(), "Hugging Face weights ", description_, ": tensor ", quoted_text(name, 80), " is ",
             info.dtype, ", but ", quoted_text((dir / "config.json").string()), " declares no quantization_config ",
             "{\"quant_method\": \"fp8\", \"weight_block_size\": [rows, columns]} to say how it is scaled");
    TS_CHECK(info.shape.size() == 2, "Hugging Face weights ", description_, ": tensor ", quoted_text(name, 80),
             " is ", info.dtype, " of shape ", shape_string(info.shape), "; FP8 blocks scale matrices only");
    TS_CHECK(by_name_.count(scale), "Hugging Face weights ", description_, ": tensor ", quoted_text(name, 80), " is ",
             info.dtype, " without its block scales ", quoted_text(scale, 80), " (an incomplete download?)");
    const SafetensorsInfo& scales = file_of(scale).info(scale);
    TS_CHECK(float_type(scales) && scales.shape == fp8_blocks_.scale_shape(info.shape), "Hugging Face weights ",
             description_, ": ", quoted_text(scale, 80), " is ", scales.dtype, " of shape ", shape_string(scales.shape),
             "; blocks of ", fp8_blocks_.rows, " x ", fp8_blocks_.cols, " over ", shape_string(info.shape),
             " need F32, BF16 or F16 of shape ", shape_string(fp8_blocks_.scale_shape(info.shape)),
             " (weight_block_size in config.json's quantization_config)");
    fp8_scales_.insert(scale);
  }
  for (const auto& [name, file] : by_name_) {
    const size_t suffix = fp8_scale_name("").size();  // a scale's name is its weight's and "_scale_inv"
    const std::string weight = name.ends_with(fp8_scale_name("")) ? name.substr(0, name.size() - suffix) : "";
    TS_CHECK(weight.empty() || !by_name_.count(weight) || fp8_scales_.count(name), "Hugging Face weights ",
             description_, ": ", quoted_text(name, 80), " scales ", quoted_text(weight, 80), ", which is ",
             file_of(weight).info(weight).dtype, ", not FP8 (a partly dequantized folder? drop the scales)");
  }
}

std::vector<std::string> HfWeightFiles::names() const {
  std::vector<std::string> out;
  for (const auto& [name, file] : by_name_)
    if (!fp8_scales_.count(name)) out.push_back(name);
  return out;
}

bool HfWeightFiles::contains(const std::string& name) const { return by_name_.count(name) > 0; }

const SafetensorsFile& HfWeightFiles::file_of(const std::string& name) const {
  auto it = by_name_.find(name);
  TS_CHECK(it != by_name_.end(), "Hugging Face weights ", description_, " lack tensor ", quoted_text(name, 80));
  return *it->second;
}

void HfWeightFiles::check(const std::string& name, const Shape& shape) const {
  TS_CHECK(contains(name), "Hugging Face weights ", description_, ": tensor ", quoted_text(name, 80),
           " is missing (expected shape ", shape_string(shape), ")");
  const SafetensorsInfo& info = file_of(name).info(name);
  TS_CHECK(info.shape == shape, "Hugging Face weights ", description_, ": tensor ", quoted_text(name, 80),
           " has shape ", shape_string(info.shape), ", expected ", shape_string(shape));
  TS_CHECK(float_type(info) || fp8_format(info), "Hugging Face weights ", description_, ": tensor ",
           quoted_text(name, 80), " is ", info.dtype, "; expected F32, BF16, F16 or FP8 blocks");
}

std::vector<float> HfWeightFiles::dequantized(const std::string& name, Fp8Format format) const {
  const std::string scale = fp8_scale_name(name);
  const SafetensorsFile& scale_file = file_of(scale);
  const std::vector<float> scales = scale_file.read_f32(scale);
  const auto bad = std::find_if(scales.begin(), scales.end(), [](float s) { return !(s > 0 && std::isfinite(s)); });
  TS_CHECK(bad == scales.end(), "Hugging Face weights ", quoted_text(scale_file.path().string()), ": block scale ",
           quoted_text(scale, 80), " holds ", *bad, " at element ", bad - scales.begin(),
           ", not a positive finite scale; the file is damaged (download it again)");
  const SafetensorsFile& file = file_of(name);
  return dequantize_fp8_blocks(file.bytes(name), format, file.info(name).shape, scales, fp8_blocks_);
}

std::vector<float> HfWeightFiles::read_f32(const std::string& name) const {
  const SafetensorsFile& file = file_of(name);
  const std::optional<Fp8Format> format = fp8_format(file.info(name));
  std::vector<float> values = format ? dequantized(name, *format) : file.read_f32(name);
  const auto bad = std::find_if(values.begin(), values.end(), [](float v) { return !std::isfinite(v); });
  TS_CHECK(bad == values.end(), "Hugging Face weights ", quoted_text(file.path().string()), ": tensor ",
           quoted_text(name, 80), " holds ", *bad, " at element ", bad - values.begin(),
           "; the file is damaged or was saved from a diverged model (download or export it again)");
  return values;
}

namespace {

// `values` of tensor `name` rounded to `dtype` (BF16 or F16) in place, two bytes each from the start
// of the buffer.
void round_in_place(std::vector<float>& values, DType dtype, const std::string& name) {
  uint16_t* out = reinterpret_cast<uint16_t*>(values.data());
  for (size_t i = 0; i < values.size(); ++i) {
    const float v = values[i];
    if (dtype == DType::bf16) {
      out[i] = to_bf16(v).bits;
      continue;
    }
    TS_CHECK(std::fabs(v) <= 65504.0f, "--dtype fp16: tensor ", quoted_text(name, 80), " holds ", v, " at element ", i,
             ", beyond fp16's range (65504); export in bf16 or fp32");
    out[i] = to_f16(v).bits;
  }
}

// Whether `type` stores tensor `t` in FP8 blocks.
bool stored_fp8(const HfTensorOut& t, HfWeightType type) {
  return type.fp8.enabled() && t.shape.size() == 2 && hf_fp8_quantized(t.name);
}

// The bytes `t` takes in the file as `type` stores it.
int64_t stored_bytes(const HfTensorOut& t, HfWeightType type) {
  if (!stored_fp8(t, type)) return shape_numel(t.shape) * int64_t(dtype_size(type.dtype));
  return shape_numel(t.shape) + shape_numel(type.fp8.scale_shape(t.shape)) * int64_t(sizeof(float));
}

// Fills `tensors` and writes them as one safetensors file, stored as `type` says.
void write_filled(const fs::path& path, const std::vector<const HfTensorOut*>& tensors, HfWeightType type) {
  std::vector<std::vector<float>> values;
  std::vector<Fp8BlockWeight> quantized;
  values.reserve(tensors.size());
  quantized.reserve(tensors.size());
  std::vector<SafetensorsEntry> entries;
  for (const HfTensorOut* t : tensors) {
    values.emplace_back(size_t(shape_numel(t->shape)));
    t->fill(values.back().data());
    if (stored_fp8(*t, type)) {
      quantized.push_back(quantize_fp8_blocks(values.back().data(), t->shape, type.fp8));
      entries.push_back({t->name, DType::f32, t->shape, quantized.back().codes.data(), "F8_E4M3"});
      entries.push_back({fp8_scale_name(t->name), DType::f32, type.fp8.scale_shape(t->shape),
                         quantized.back().scales.data()});
      continue;
    }
    if (type.dtype != DType::f32) round_in_place(values.back(), type.dtype, t->name);
    entries.push_back({t->name, type.dtype, t->shape, values.back().data()});
  }
  write_safetensors(path, entries, {{"format", "pt"}});
}

}  // namespace

void write_hf_weights(const fs::path& dir, const std::vector<HfTensorOut>& tensors, int64_t max_shard_bytes,
                      HfWeightType type) {
  TS_CHECK(type.dtype == DType::f32 || type.dtype == DType::bf16 || type.dtype == DType::f16,
           "Hugging Face weights are written in fp32, bf16 or fp16, not ", dtype_name(type.dtype));
  std::vector<std::vector<const HfTensorOut*>> shards(1);
  int64_t shard_bytes = 0, total_bytes = 0;
  for (const HfTensorOut& t : tensors) {
    const int64_t bytes = stored_bytes(t, type);
    if (!shards.back().empty() && shard_bytes + bytes > max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(&t);
    shard_bytes += bytes;
    total_bytes += bytes;
  }
  if (shards.size() == 1) {
    write_filled(dir / kSingleFile, shards[0], type);
    fs::remove(dir / kIndexFile);  // a stale index would shadow the new single file
    return;
  }
  nlohmann::json weight_map = nlohmann::json::object();
  for (size_t k = 0; k < shards.size(); ++k) {
    char name[64];
    std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", k + 1, shards.size());
    write_filled(dir / name, shards[k], type);
    for (const HfTensorOut* t : shards[k]) {
      weight_map[t->name] = name;
      if (stored_fp8(*t, type)) weight_map[fp8_scale_name(t->name)] = name;
    }
  }
  const nlohmann::json index = {{"metadata", {{"total_size", total_bytes}}}, {"weight_map", weight_map}};
  write_file_atomic(dir / kIndexFile, index.dump(2) + "\n");
  fs::remove(dir / kSingleFile);  // a stale single file would be read instead of the shards by some tools
}

const char* hf_torch_dtype(DType dtype) {
  return dtype == DType::bf16 ? "bfloat16" : dtype == DType::f16 ? "float16" : "float32";
}

}  // namespace tessera
