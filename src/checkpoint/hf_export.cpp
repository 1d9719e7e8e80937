// write_hf_folder: a family's pieces into safetensors shards and its config.json.
#include "checkpoint/hf_export.h"

#include <system_error>

#include "checkpoint/hf_fp8_blocks.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "core/user_text.h"
#include "nn/decoder_layout.h"

namespace tessera {

void write_hf_folder(const std::filesystem::path& dir, const ModelConfig& config, const std::vector<HfPiece>& pieces,
                     const ParameterValues& values, const HfTensorEdit& edit, nlohmann::json config_json,
                     int64_t max_shard_bytes, const HfTokenIds& ids, HfWeightType type, const char* caller) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  TS_CHECK(!error, caller, ": cannot create folder ", quoted_text(dir.string()), ": ", error.message());
  // Each HF tensor is a contiguous range of one of ours: read when its shard is written.
  const ParameterLayout whole = decoder_layout(config);
  std::vector<HfTensorOut> tensors;
  for (const HfPiece& p : pieces) {
    TS_CHECK(!p.transpose, caller, ": piece ", p.hf, " is transposed; write_hf_folder copies ranges as they are");
    const int64_t begin = whole.find(p.ours).offset + p.offset, end = begin + shape_numel(p.hf_shape);
    tensors.push_back({p.hf, p.hf_shape, [&values, &edit, begin, end, name = p.hf](float* out) {
                         values({begin, end}, out);
                         edit(name, out, end - begin);
                       }});
  }
  write_hf_weights(dir, tensors, max_shard_bytes, type);
  config_json["torch_dtype"] = hf_torch_dtype(type.dtype);
  if (type.fp8.enabled()) config_json["quantization_config"] = hf_quantization_config(type.fp8);
  put_hf_token_ids(config_json, ids);
  write_file_atomic(dir / "config.json", config_json.dump(2) + "\n");
}

}  // namespace tessera
