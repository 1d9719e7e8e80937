// The index of a training checkpoint (state.json's "tensors"): for every logical tensor — the weights
// under the model's parameter names, AdamW's moments as "m.<name>" and "v.<name>" — its global shape
// (F32 always) and the slices that hold it: a flat element range, the file, the byte range there and
// the CRC-32 of each 4 MiB block of those bytes. A checkpoint of the first format (whole tensors in
// model.safetensors and optimizer.safetensors, no "tensors" key) gets the same index from its files'
// headers, with no block CRCs: its files' CRCs cover it. Every slice is checked on reading the index:
// slices cover their tensor in order without gap or overlap and lie inside recorded files.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint/file_checksum.h"
#include "core/tensor.h"

namespace tessera {

struct TensorSlice {
  std::string file;
  int64_t begin = 0, end = 0;  // elements [begin, end) of the flattened tensor
  uint64_t offset = 0;         // where its first byte lies in the file
  std::vector<uint32_t> crcs;  // per kCrcBlockBytes block of its bytes; empty: only the file's CRC covers it

  uint64_t bytes() const { return uint64_t(end - begin) * sizeof(float); }
};

struct IndexedTensor {
  Shape shape;
  std::vector<TensorSlice> slices;  // ascending, covering [0, numel)
};

using CheckpointIndex = std::map<std::string, IndexedTensor>;

// Whether an index name is optimizer state rather than a weight: AdamW's moments ("m.<name>",
// "v.<name>") or PowerSGD's error sums and factors ("powersgd_e.<name>", "powersgd_q.<name>...").
bool is_optimizer_state_name(std::string_view name);
// The parameter whose shape a sliced state tensor has: "<name>" of "m.<name>", "v.<name>" and
// "powersgd_e.<name>"; a weight's name is its own.
std::string_view state_parameter_name(std::string_view name);

// "shard-00001-of-00004.safetensors": the moments (and with sharded weights, the weights) rank 1 of
// 4 wrote.
std::string shard_file_name(int rank, int ranks);
bool is_shard_file_name(std::string_view name);

// The name under which a file stores elements [begin, end) of `tensor`: "m.wte.weight[0:4096]";
// parse_slice_name reverses it (false for a name without a slice suffix).
std::string slice_name(const std::string& tensor, int64_t begin, int64_t end);
bool parse_slice_name(const std::string& name, std::string& tensor, int64_t& begin, int64_t& end);

// state.json's index, checked against its 'files' table; for a first-format checkpoint, the index
// its files' headers give. Errors name state.json (or the file) and the key.
CheckpointIndex read_checkpoint_index(const std::filesystem::path& checkpoint, const nlohmann::json& state,
                                      const std::map<std::string, FileDigest>& files);

// The index as state.json stores it under "tensors".
nlohmann::json index_json(const CheckpointIndex& index);

// Throws `context`: ... unless every tensor's slices cover it in order and lie inside their files.
void check_index(const CheckpointIndex& index, const std::map<std::string, FileDigest>& files,
                 const std::string& context);

}  // namespace tessera
