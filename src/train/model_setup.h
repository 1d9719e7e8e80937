// Building models: the one a run starts from (a checkpoint being resumed, a Hugging Face folder
// given by --init-from, or a named preset whose vocabulary follows --tokenizer), and the one
// eval/generate/convert load for inference.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>

#include <nlohmann/json.hpp>

#include "checkpoint/run_folder.h"
#include "nn/decoder.h"
#include "nn/parameter_values.h"
#include "train/train_config.h"

namespace tessera {

// The most blocks of a model Tessera builds (--layers, and so pipeline chunks): far above any model
// trained today, low enough that a typo is refused at once rather than laid out.
inline constexpr int64_t kMaxLayers = 10000;

class Tokenizer;

// The checkpoint a run starts from. With --resume: the newest complete one in --out-dir (none, with
// a notice, when the folder holds no checkpoint at all). Without: none, and an --out-dir that holds
// checkpoints is refused, so a new run never overwrites or prunes an old run's checkpoints. The
// ranks of a job share the checksum reads (share, all_agree: see choose_resume_checkpoint).
ResumePoint run_start_point(const TrainConfig& config, FileShare share = {},
                            const std::function<bool(bool)>& all_agree = nullptr);

// The model's config without allocating it; with a checkpoint, its shape, which the shape flags
// given (--model, --layers, ...) must agree with.
ModelConfig resolve_model_config(const TrainConfig& config, const Tokenizer* tokenizer,
                                const std::optional<std::filesystem::path>& checkpoint);

// The run flags that must fit the model's shape: --seq-len within its context, --recompute-layers
// within its blocks, the MoE flags left at their defaults on a dense model (and --moe-bias-rate on a
// softmax router), where they would change nothing. Throws naming the flag and the fix.
void check_flags_against_model(const TrainConfig& config, const ModelConfig& model);

// resolve_model_config for a run before it starts: loads its tokenizer (if any) and finds the
// checkpoint it starts from (run_start_point).
ModelConfig model_config_for_run(const TrainConfig& config);

// The model of `model_config` (resolve_model_config's) with its initial weights (the checkpoint's
// weights are loaded by the caller with the optimizer state): the whole decoder, or a pipeline
// rank's `stage` of it, or a tensor-parallel rank's slices (`tp`) of either, holding an
// expert-parallel rank's experts (`ep`) only. ParamStorage::sharded_later builds it without
// parameters (ZeRO-3 fills its shards; there is nothing to initialise).
std::unique_ptr<Decoder> build_model(const TrainConfig& config, const ModelConfig& model_config,
                                     const std::optional<std::filesystem::path>& checkpoint,
                                     const std::optional<DecoderStage>& stage = std::nullopt, TpPlace tp = {},
                                     EpPlace ep = {}, ParamStorage storage = ParamStorage::whole);

// Where a new run's weights come from, as `model` holds them (its slices and stage): --init-from's
// Hugging Face folder or Tessera checkpoint (a run folder: its newest complete checkpoint; only the
// weights: the optimizer, step and data position start afresh), or the initialisation of --seed.
ParameterValues initial_weights(const TrainConfig& config, const Decoder& model);

// A model ready for inference, with its tokenizer when one is known.
struct LoadedModel {
  std::unique_ptr<Decoder> model;
  std::unique_ptr<Tokenizer> tokenizer;
  std::string tokenizer_note;  // why the tokenizer stored beside the weights was not loaded, if it was not
  int64_t trained_seq_len = 0;  // a checkpoint's run's --seq-len (0: not known, as for a Hugging Face folder)
  LoadedModel();
  LoadedModel(LoadedModel&&) noexcept;
  ~LoadedModel();
};

// From a checkpoint (or run folder: its newest checkpoint with weights, as find_checkpoint_to_read
// picks it, saying on stderr what it skipped) or an --init-from folder (Hugging Face, or a Tessera
// checkpoint read the same way) — exactly one of the two. The
// tokenizer is `tokenizer_path` when given, else the one stored beside the weights, if any and
// readable (when it is not, the model loads without it and a note on stderr says why).
LoadedModel load_model_for_inference(const std::string& checkpoint, const std::string& init_from,
                                     const std::string& tokenizer_path);

// The run's configuration as JSON, stored in checkpoints.
nlohmann::json run_config_json(const TrainConfig& config);

}  // namespace tessera
