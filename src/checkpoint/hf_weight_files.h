// The weights of a Hugging Face model folder: one model.safetensors, or the shards listed by
// model.safetensors.index.json ({"metadata": {...}, "weight_map": {tensor: shard file}}). Reading
// opens every shard up front and checks that the index and the shards agree, and that fine-grained
// FP8 weights (hf_fp8_blocks.h) have their block scales; writing splits the tensors into shards of at
// most a given size and writes the index when there is more than one.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "checkpoint/hf_fp8_blocks.h"
#include "checkpoint/safetensors.h"

namespace tessera {

class HfWeightFiles {
 public:
  // Throws naming the folder (or the index, or a shard) when the weights are missing or damaged.
  explicit HfWeightFiles(const std::filesystem::path& dir);

  // Every tensor name, sorted; FP8 weights' scales are part of their weight, not listed.
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const;
  // The file holding `name`; throws naming the folder when absent.
  const SafetensorsFile& file_of(const std::string& name) const;
  // Throws naming the weights and the tensor unless `name` is present, of `shape`, in a type read_f32
  // converts.
  void check(const std::string& name, const Shape& shape) const;
  // Tensor `name` as fp32 (F32, BF16, F16, or FP8 times its block scales); a NaN or infinity (or a
  // scale that is not positive) is refused naming its file, tensor and element, so no damaged weight
  // reaches a model or a checkpoint.
  std::vector<float> read_f32(const std::string& name) const;
  // What errors call the weights: the single file or the index.
  std::string description() const { return description_; }

 private:
  void check_fp8_weights(const std::filesystem::path& dir);
  std::vector<float> dequantized(const std::string& name, Fp8Format format) const;

  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const SafetensorsFile*> by_name_;
  std::string description_;
  HfFp8Blocks fp8_blocks_;
  std::set<std::string> fp8_scales_;  // the scale tensors of FP8 weights
};

// One F32 tensor to write: its name and shape, and `fill`, which writes its values when its file is
// written (so only one file's tensors are ever in memory).
struct HfTensorOut {
  std::string name;
  Shape shape;
  std::function<void(float* out)> fill;
};

// How an export stores its weights: every tensor in `dtype` (F32, or BF16 or F16 rounded to nearest
// even), except, with `fp8` blocks given, the projections hf_fp8_quantized names, stored as E4M3 codes
// in those blocks beside their F32 scales (quantize_fp8_blocks).
struct HfWeightType {
  DType dtype = DType::f32;
  HfFp8Blocks fp8;
  HfWeightType(DType dtype = DType::f32, HfFp8Blocks fp8 = {}) : dtype(dtype), fp8(fp8) {}
};

// Writes `tensors` into dir as model.safetensors, or as model-0000k-of-0000n.safetensors shards of at
// most max_shard_bytes (a larger single tensor gets a shard of its own) with the index, one file at a
// time, stored as `type` says (a value beyond F16's range is refused, naming the tensor).
void write_hf_weights(const std::filesystem::path& dir, const std::vector<HfTensorOut>& tensors,
                      int64_t max_shard_bytes, HfWeightType type = {});

// config.json's torch_dtype for weights written in `dtype`: "float32", "bfloat16" or "float16".
const char* hf_torch_dtype(DType dtype);

}  // namespace tessera
