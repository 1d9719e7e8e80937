// Training checkpoints: <out_dir>/ckpt-<step>/ holding model.safetensors (every weight, whole, under
// the model's parameter names: what Hugging Face tooling and `tessera generate` read), one
// shard-<r>-of-<n>.safetensors per data-parallel rank (the slices of AdamW's moments that rank owns:
// its ZeRO shard, or under ZeRO 0 the r-th of n contiguous ranges; with sharded weights, no
// model.safetensors, and each shard holds the weights of those slices too, so that no rank gathers
// the whole model), state.json (the training state,
// the layout it was written with, the size and CRC-32 of every file, and the index of every tensor's
// slices, see checkpoint_index.h) and, when the run has one, tokenizer.json.
// Every rank writes its part into one temporary folder in parallel; after all have synced, one rank
// writes state.json, syncs the folder, renames it, and only then does <out_dir>/ckpt-latest point at
// it (DESIGN.md invariant 4); older checkpoints beyond the newest few are removed after that, so a
// crash at any moment leaves a loadable one. Checkpoints of the first format (whole tensors in
// model.safetensors and optimizer.safetensors) still load.
// Loading trusts nothing: state.json's fields and index are range-checked, its model shape is
// checked against the tensors before anything is allocated, every byte read is checked against its
// CRC-32, and a non-finite weight or moment is refused, all before a value reaches the model. A rank
// reads only the byte ranges of its own share of the moments, whatever layout wrote them.
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint/run_folder.h"
#include "data/batch_sampler.h"
#include "nn/decoder.h"
#include "nn/parameter_values.h"
#include "ops/adamw.h"

namespace tessera {

// AdamW's moments for `segments` of the parameters: state elements [state_offset, +length) of m and v
// belong to parameter elements [param_offset, +length). One rank's share, or all of them.
struct OptimizerState {
  std::vector<AdamWSegment> segments;
  Tensor m, v;  // fp32, on the host
};

// The parallel layout a checkpoint was written under (for the record: any layout loads it).
struct CheckpointLayout {
  int64_t world_size = 1, dp = 1, tp = 1, pp = 1, zero = 0;
};

struct CheckpointState {
  int64_t step = 0;        // optimizer steps taken
  int64_t next_batch = 0;  // the data loader's position: index of the next global batch
  uint64_t seed = 0;
  nlohmann::json run_config;  // the TrainConfig that produced it, for the record (state.json adds its hash)
  double loss_scale = 0;      // fp16's dynamic loss scale at the save (0: not scaling)
  int64_t optimizer_steps = 0;  // AdamW's step count (its bias correction)
  std::vector<float> fp8_amax_history;  // the fp8 scales' amax history (nn/fp8_scaling.h); empty without fp8
  CheckpointLayout layout;
  // The data position in sequences (Megatron's consumed_samples), which survives a change of
  // --batch-size; absent from checkpoints written before it was recorded (their position is
  // next_batch times their run's --batch-size).
  std::optional<int64_t> consumed_sequences;
  SequenceOrigin data_origin;  // where the data order's epochs start (batch_sampler.h); zero unless a
                               // resume changed --batch-size
  int64_t loss_scale_clean_steps = 0;  // steps since the loss scale last changed (its growth's count)
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

// PowerSGD's state (parallel/dp/powersgd.h) as one rank writes it: "powersgd_e.<name>", the sum over
// the ranks of each compressed parameter's error feedback, sliced as the moments (any layout shares
// it out again), and whole tensors of one tensor-parallel slice, written by the first rank of the
// group that holds them alike (powersgd_slice_name): each matrix's warm-start factor Qᵀ (r × cols),
// and the error sum of a pipeline's tied copy of the embedding, which the moments leave out.
struct PowerSgdPart {
  Tensor errors;                        // host, laid out as the moments
  std::vector<std::string> compressed;  // the parameters whose errors are written
  std::vector<std::pair<std::string, Tensor>> slices;  // entry name, whole tensor (host)
};
// "powersgd_<kind>.<parameter>.tp<t>of<T>", with ".copy" for the tied copy: kind "q" (Qᵀ) or "e".
std::string powersgd_slice_name(std::string_view kind, const std::string& parameter, int tp_rank, int tp, bool copy);

// What one rank writes of a checkpoint: rank 0 the weights (whole) and the tokenizer, every rank its
// share of the moments; with sharded weights no rank writes them whole, and every rank writes the
// weights of its moments' segments beside them (slices of the whole tensors, as the moments).
struct CheckpointPart {
  int rank = 0, ranks = 1;                       // data-parallel rank and degree
  const ParameterLayout* layout = nullptr;       // the parameters' names and offsets
  const ModelSnapshot* model = nullptr;          // rank 0 only, with whole weights
  const OptimizerState* optimizer = nullptr;     // null: a weights-only checkpoint
  std::filesystem::path tokenizer_json;          // rank 0, when the run has one
  const Tensor* weight_shard = nullptr;          // sharded weights: optimizer's segments' weights, laid out as m
  const PowerSgdPart* powersgd = nullptr;        // under --powersgd-rank
};

// Phase 1, on every rank at once: writes (and syncs) the rank's part of ckpt-<step> into its
// temporary folder under out_dir.
void write_checkpoint_part(const std::filesystem::path& out_dir, int64_t step, const CheckpointPart& part);
// Phase 2, on one rank once every rank's write_checkpoint_part has returned: builds the index from the
// files' headers, writes state.json, commits the folder, repoints ckpt-latest, then removes older
// checkpoints beyond `retention` (see prune_checkpoints). `shards`: the ranks that wrote moments (0
// for a weights-only checkpoint). Returns the checkpoint's path.
std::filesystem::path commit_checkpoint(const std::filesystem::path& out_dir, const ModelConfig& config,
                                        const CheckpointState& state, int shards, Retention retention);
// Both phases in one process, for a live model.
std::filesystem::path save_checkpoint(const std::filesystem::path& out_dir, const Decoder& model,
                                      const OptimizerState* optimizer, const CheckpointState& state,
                                      const std::filesystem::path& tokenizer_json, Retention retention);

// The checkpoint <out_dir>/ckpt-latest points at, if any; also accepts a checkpoint folder itself.
std::optional<std::filesystem::path> find_checkpoint(const std::filesystem::path& path);

// What a checkpoint is opened for: training (every file) or inference (generate, eval, convert
// --to-hf: state.json and the files that hold weights; the moments' shard files may be missing).
enum class CheckpointUse { training, inference };

// Throws (one line, naming the file) unless the checkpoint is complete for `use`: state.json valid and
// every file it records (for inference, every file holding weights) present with its recorded size,
// and with `checksums` its recorded CRC-32 too for the files of `share` (which reads them; without,
// the check is cheap).
void check_checkpoint_complete(const std::filesystem::path& checkpoint, bool checksums = false, FileShare share = {},
                               CheckpointUse use = CheckpointUse::training);

// The model shape in state.json, checked against model.safetensors' tensors (layers, width,
// vocabulary, context) before anything of that size is allocated. Needs only the files that hold
// weights (CheckpointUse::inference).
ModelConfig read_checkpoint_model_config(const std::filesystem::path& checkpoint);
// A checkpoint's training state and its weights as `layout` holds them (a tp or ep rank's slices, a
// pipeline stage's blocks), checked against `config` and the layout up front; `weights` reads any
// flat range on demand, only its bytes (a ZeRO-3 rank reads just its shard). Opening follows
// load_checkpoint's `checksums_verified`.
struct CheckpointModel {
  CheckpointState state;
  ParameterValues weights;
};
CheckpointModel open_checkpoint_model(const std::filesystem::path& checkpoint, const ModelConfig& config,
                                      const ParameterLayout& layout, bool checksums_verified = false);
// Loads the weights into a model still on the CPU (move it to its device afterwards); returns the
// state. Unless `checksums_verified` says the caller just did (choose_resume_checkpoint), which saves
// reading the files twice, a first-format checkpoint's files are checked against their CRC-32 first;
// the sharded format's block CRCs are checked as the bytes are read.
CheckpointState load_checkpoint(const std::filesystem::path& checkpoint, Decoder& model,
                                bool checksums_verified = false);
// AdamW's moments for `segments` (a rank's share: the ones its optimizer updates), read from whatever
// files hold them under the layout that wrote the checkpoint.
OptimizerState load_optimizer_state(const std::filesystem::path& checkpoint, const ParameterLayout& layout,
                                    std::vector<AdamWSegment> segments, bool checksums_verified = false);

// PowerSGD's state in a checkpoint, read for `layout` (a rank's parameters): the error sums of the
// parameters named in `compressed` over layout's flat buffer (zeros for a parameter it holds none
// of; no tensor at all when the checkpoint holds no PowerSGD state), and those of the whole slices
// named `slice_names` that it holds, by name.
struct StoredPowerSgd {
  std::optional<Tensor> error_sum;
  std::map<std::string, Tensor> slices;
};
StoredPowerSgd load_powersgd_state(const std::filesystem::path& checkpoint, const ParameterLayout& layout,
                                   const std::vector<std::string>& compressed,
                                   const std::vector<std::string>& slice_names);

}  // namespace tessera
