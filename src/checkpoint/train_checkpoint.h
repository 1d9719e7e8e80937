// Single-process training checkpoints: <out_dir>/ckpt-<step>/ holding model.safetensors (the
// parameters), optimizer.safetensors (Adam moments), state.json (step, data position, seed, model
// config, and the size and CRC-32 of every other file) and, when the run has one, tokenizer.json.
// A checkpoint is written under a temporary name, synced, renamed, and only then does
// <out_dir>/ckpt-latest point at it (DESIGN.md invariant 4); older checkpoints beyond the newest
// few are removed after that, so a crash at any moment leaves a loadable one.
// Loading trusts nothing: state.json's fields are range-checked, its model shape is checked against
// the tensors before anything is allocated, every file's checksum is verified, and a non-finite
// weight or moment is refused, all before a value reaches the model.
#pragma once

#include <filesystem>
#include <optional>

#include <nlohmann/json.hpp>

#include "checkpoint/run_folder.h"
#include "nn/decoder.h"

namespace tessera {

// AdamW's moments in the parameters' layout (full size, even when training shards them).
struct OptimizerState {
  Tensor m, v;
  int64_t steps = 0;
};

struct CheckpointState {
  int64_t step = 0;        // optimizer steps taken
  int64_t next_batch = 0;  // the data loader's position: index of the next global batch
  uint64_t seed = 0;
  nlohmann::json run_config;  // the TrainConfig that produced it, for the record
  double loss_scale = 0;      // fp16's dynamic loss scale at the save (0: not scaling)
};

// The model part of a checkpoint apart from a live model: what an asynchronous save writes while
// training goes on. params is a host tensor in layout's order.
struct ModelSnapshot {
  ModelConfig config;
  ParameterLayout layout;
  Tensor params;
};

// The model's parameters copied into fresh host memory (a copy the training cannot change).
ModelSnapshot snapshot_of(const Decoder& model);

// Writes ckpt-<step> under out_dir; optimizer may be null (weights only). Then removes older
// checkpoints beyond `retention` (see prune_checkpoints). Returns its path.
std::filesystem::path save_checkpoint(const std::filesystem::path& out_dir, const ModelSnapshot& model,
                                      const OptimizerState* optimizer, const CheckpointState& state,
                                      const std::filesystem::path& tokenizer_json, Retention retention);
// The same for a live model, read while it is written (no copy on the CPU).
std::filesystem::path save_checkpoint(const std::filesystem::path& out_dir, const Decoder& model,
                                      const OptimizerState* optimizer, const CheckpointState& state,
                                      const std::filesystem::path& tokenizer_json, Retention retention);

// The checkpoint <out_dir>/ckpt-latest points at, if any; also accepts a checkpoint folder itself.
std::optional<std::filesystem::path> find_checkpoint(const std::filesystem::path& path);

// Throws (one line, naming the file) unless the checkpoint is complete: state.json valid and every
// file it records present with its recorded size, and with `checksums` its recorded CRC-32 too
// (which reads every file; without, the check is cheap).
void check_checkpoint_complete(const std::filesystem::path& checkpoint, bool checksums = false);

// The model shape in state.json, checked against model.safetensors' tensors (layers, width,
// vocabulary, context) before anything of that size is allocated.
ModelConfig read_checkpoint_model_config(const std::filesystem::path& checkpoint);
// Loads weights (and, when optimizer is non-null, its moments — into full-size m and v, which are
// allocated here — and step count) into a model still on the CPU (move it to its device afterwards);
// returns the state. The files' sizes and CRC-32 are verified first unless `checksums_verified`
// says the caller just did (choose_resume_checkpoint), which saves reading the files twice.
CheckpointState load_checkpoint(const std::filesystem::path& checkpoint, Decoder& model, OptimizerState* optimizer,
                                bool checksums_verified = false);

}  // namespace tessera
