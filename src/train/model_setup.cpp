// Model construction for a training run.
#include "train/model_setup.h"

#include <cstdio>
#include <tuple>

#include "checkpoint/hf_model.h"
#include "checkpoint/run_folder.h"
#include "checkpoint/train_checkpoint.h"
#include "core/user_text.h"
#include "nn/model_presets.h"
#include "data/tokenizer.h"

namespace tessera {

namespace {

// The shape the flags describe on top of `base`: the vocabulary follows the tokenizer, then each
// override given (non-zero) replaces the base's value.
ModelConfig shape_from_flags(const TrainConfig& config, const Tokenizer* tokenizer, ModelConfig base) {
  if (tokenizer) base.vocab_size = tokenizer->vocab_size();
  if (config.layers > 0) base.num_layers = config.layers;
  if (config.heads > 0) base.num_heads = config.heads;
  if (config.channels > 0) base.channels = config.channels;
  if (config.vocab_size > 0) base.vocab_size = config.vocab_size;
  if (config.context > 0) base.max_seq_len = config.context;
  return base;
}

// Where a run's shape comes from when the flags do not set it: a checkpoint (--resume) or a Hugging
// Face config.json (--init-from). --model and the shape overrides, when given, must describe the same
// model (the vocabulary only when --vocab-size is given: a preset's follows the tokenizer).
struct ShapeSource {
  const char* flag;    // --resume or --init-from
  const char* holder;  // "the checkpoint", "the import"
  std::string place;   // its path
  const char* keep;    // how to take its shape: "continue with the checkpoint's"
  const char* other;   // how to train the flags' model instead
};

// RoPE's settings in a message: "theta 500000" and, with Llama 3.1's or YaRN's scaling, its numbers.
std::string rope_text(const RopeConfig& rope) {
  std::string text = "theta " + number_text(rope.theta);
  if (rope.factor > 0 && rope.yarn)
    text += " yarn-scaled by " + number_text(rope.factor) + " (betas " + number_text(rope.beta_fast) + ", " +
            number_text(rope.beta_slow) + ", mscale " + number_text(rope.mscale) + ", " +
            number_text(rope.mscale_all_dim) + ", attention factor " + number_text(rope.attention_factor) +
            (rope.truncate ? "" : ", not truncated") + ", from " + std::to_string(rope.original_max_positions) + ")";
  else if (rope.longrope)
    text += " longrope-scaled by " + number_text(rope.factor) + " (from " +
            std::to_string(rope.original_max_positions) + ", its own " + std::to_string(rope.short_factor.size()) +
            " short and long factors)";
  else if (rope.factor > 0)
    text += " scaled by " + number_text(rope.factor) + " (low " + number_text(rope.low_freq_factor) + ", high " +
            number_text(rope.high_freq_factor) + ", from " + std::to_string(rope.original_max_positions) + ")";
  return text;
}

void check_shape_flags(const TrainConfig& config, const ModelConfig& stored, const ShapeSource& source) {
  const ModelConfig flags = shape_from_flags(config, nullptr, config.model.empty() ? stored : model_preset(config.model));
  TS_CHECK(model_family(flags) == model_family(stored), source.flag, ": --model ", config.model, " is a ",
           model_family(flags), " model but ", source.holder, " holds a ", model_family(stored), " model (",
           source.place, "); drop --model to ", source.keep, ", or ", source.other);
  std::string differences;
  auto compare = [&](const char* field, const char* flag, int64_t override_value, int64_t wanted, int64_t held) {
    if (wanted == held) return;
    const std::string from = override_value > 0 ? std::string(flag) : "--model " + config.model;
    differences += (differences.empty() ? "" : ", ") + from + " gives " + field + " " + std::to_string(wanted) + ", " +
                   source.holder + " has " + std::to_string(held);
  };
  compare("layers", "--layers", config.layers, flags.num_layers, stored.num_layers);
  compare("heads", "--heads", config.heads, flags.num_heads, stored.num_heads);
  compare("channels", "--channels", config.channels, flags.channels, stored.channels);
  compare("context", "--context", config.context, flags.max_seq_len, stored.max_seq_len);
  if (config.vocab_size > 0) compare("vocab_size", "--vocab-size", config.vocab_size, flags.vocab_size, stored.vocab_size);
  // What only the preset sets (no flag overrides it): its structure must be the stored model's too
  // (llama-tiny against a Qwen2 or Mixtral of the same family and widths is another model).
  compare("kv heads", "", 0, flags.kv_heads(), stored.kv_heads());
  compare("MLP width", "", 0, flags.hidden(), stored.hidden());
  compare("experts", "", 0, flags.moe.num_experts, stored.moe.num_experts);
  if (flags.moe.enabled() && stored.moe.enabled()) {
    compare("experts a token", "", 0, flags.moe.top_k, stored.moe.top_k);
    compare("expert width", "", 0, flags.moe.expert_hidden, stored.moe.expert_hidden);
    compare("shared experts", "", 0, flags.moe.num_shared_experts, stored.moe.num_shared_experts);
    compare("dense first layers", "", 0, flags.moe.first_dense_layers, stored.moe.first_dense_layers);
    compare("renormalised expert weights (1 = on)", "", 0, flags.moe.renormalize, stored.moe.renormalize);
    compare("expert groups", "", 0, flags.moe.groups, stored.moe.groups);
    compare("kept expert groups", "", 0, flags.moe.kept_groups, stored.moe.kept_groups);
  }
  if (flags.mla.enabled() && stored.mla.enabled()) {
    compare("latent attention's q rank", "", 0, flags.mla.q_rank, stored.mla.q_rank);
    compare("latent attention's kv rank", "", 0, flags.mla.kv_rank, stored.mla.kv_rank);
    compare("latent attention's nope dim", "", 0, flags.mla.nope_dim, stored.mla.nope_dim);
    compare("latent attention's rope dim", "", 0, flags.mla.rope_dim, stored.mla.rope_dim);
    compare("latent attention's v dim", "", 0, flags.mla.v_dim, stored.mla.v_dim);
  }
  compare("biases (1 = on)", "", 0, flags.bias, stored.bias);
  compare("q, k, v biases (1 = on)", "", 0, flags.qkv_bias, stored.qkv_bias);
  compare("q, k norms (1 = on)", "", 0, flags.qk_norm, stored.qk_norm);
  compare("the Phi-3 form (1 = on)", "", 0, flags.phi3, stored.phi3);
  compare("norm placement (0 pre, 1 post, 2 sandwich)", "", 0, int64_t(flags.norm_placement),
          int64_t(stored.norm_placement));
  compare("q, k norms over all heads (1 = on)", "", 0, flags.qk_norm_all_heads, stored.qk_norm_all_heads);
  compare("head size", "", 0, flags.head_size(), stored.head_size());
  compare("rotary channels", "", 0, flags.rotary_dim(), stored.rotary_dim());
  compare("attention window", "", 0, flags.attention_window, stored.attention_window);
  compare("tied embeddings (1 = on)", "", 0, flags.tied_embeddings, stored.tied_embeddings);
  auto compare_text = [&](const char* field, const std::string& wanted, const std::string& held) {
    if (wanted != held)
      differences += (differences.empty() ? "" : ", ") + ("--model " + config.model) + " gives " + field + " " + wanted +
                     ", " + source.holder + " has " + held;
  };
  compare_text("norm eps", number_text(flags.norm_eps), number_text(stored.norm_eps));
  auto blocks_text = [](const std::vector<int64_t>& blocks) {
    std::string text = "[";
    for (size_t i = 0; i < blocks.size(); ++i) text.append(i > 0 ? "," : "").append(std::to_string(blocks[i]));
    return text.append("]");
  };
  compare_text("blocks without RoPE", blocks_text(flags.nope_layers), blocks_text(stored.nope_layers));
  if (flags.moe.enabled() && stored.moe.enabled())
    compare_text("routed scale", number_text(flags.moe.routed_scale), number_text(stored.moe.routed_scale));
  if (flags.positions == PositionKind::rope && stored.positions == PositionKind::rope)
    compare_text("rope", rope_text(flags.rope), rope_text(stored.rope));
  TS_CHECK(differences.empty(), source.flag, ": the shape flags disagree with ", source.place, " (", differences,
           "); drop them to ", source.keep, " shape, or ", source.other);
}

// Far above any model trained today (Llama 3 405B: 126 layers, 16384 wide, 128256 tokens, 131072
// context) and low enough that the parameter count cannot overflow: a typo such as --layers
// 1000000000 is refused at once instead of building a layout for a billion layers. (kMaxLayers:
// model_setup.h.)
constexpr int64_t kMaxChannels = int64_t(1) << 17, kMaxVocab = INT32_MAX, kMaxContext = int64_t(1) << 24;

// `origin` names where the shape came from ("" for the flags, which are then named one by one).
void check_model_limits(const ModelConfig& mc, const std::string& origin) {
  for (auto [field, flag, value, limit] : {std::tuple{"num_layers", "--layers", mc.num_layers, kMaxLayers},
                                           {"num_heads", "--heads", mc.num_heads, kMaxChannels},
                                           {"channels", "--channels", mc.channels, kMaxChannels},
                                           {"vocab_size", "--vocab-size", mc.vocab_size, kMaxVocab},
                                           {"max_seq_len", "--context", mc.max_seq_len, kMaxContext}})
    TS_CHECK(value <= limit, origin.empty() ? std::string(flag) : origin + ": " + field, " ", value, " is above ",
             limit, ", the largest Tessera builds");
}

// --init-from's checkpoint when it names a Tessera checkpoint or run folder (state.json, or
// ckpt-<step> folders; no config.json), as find_checkpoint_to_read picks it; nullopt for a Hugging
// Face folder (whose reader names what is missing when it is neither).
std::optional<std::filesystem::path> init_checkpoint(const std::string& init_from) {
  const std::filesystem::path dir = init_from;
  std::error_code ec;
  if (std::filesystem::exists(dir / "config.json", ec)) return std::nullopt;
  if (!std::filesystem::exists(dir / "state.json", ec) && !holds_checkpoints(dir)) return std::nullopt;
  return find_checkpoint_to_read(dir).checkpoint;
}

}  // namespace

ResumePoint run_start_point(const TrainConfig& config, FileShare share, const std::function<bool(bool)>& all_agree) {
  if (config.resume) return choose_resume_checkpoint(config.out_dir, share, all_agree);
  std::vector<CheckpointFolder> existing = list_checkpoints(config.out_dir);
  TS_CHECK(!holds_checkpoints(config.out_dir), "--out-dir ", config.out_dir, " already holds checkpoints",
           existing.empty() ? std::string() : " (newest " + existing.front().path.filename().string() + ")",
           "; pass --resume to continue that run, or choose another --out-dir (nothing was changed)");
  return {};
}

ModelConfig resolve_model_config(const TrainConfig& config, const Tokenizer* tokenizer,
                                const std::optional<std::filesystem::path>& checkpoint) {
  ModelConfig mc;
  if (checkpoint) {
    mc = read_checkpoint_model_config(*checkpoint);
    check_shape_flags(config, mc, {"--resume", "the checkpoint", checkpoint->string(), "continue with the checkpoint's",
                                   "train the new model in another --out-dir"});
    check_model_limits(mc, "checkpoint " + checkpoint->string());
  } else if (!config.init_from.empty()) {
    const std::optional<std::filesystem::path> tessera = init_checkpoint(config.init_from);
    mc = tessera ? read_checkpoint_model_config(*tessera) : read_hf_config(config.init_from);
    check_shape_flags(config, mc, {"--init-from", tessera ? "the checkpoint" : "the import",
                                   tessera ? tessera->string() : config.init_from,
                                   tessera ? "keep the checkpoint's" : "keep the imported model's",
                                   "train a new model without --init-from"});
    check_model_limits(mc, "--init-from " + config.init_from);
  } else {
    mc = shape_from_flags(config, tokenizer, model_preset(config.model.empty() ? TrainConfig{}.model : config.model));
    check_model_limits(mc, "");
  }
  if (tokenizer)
    TS_CHECK(tokenizer->vocab_size() <= mc.vocab_size, "--tokenizer: ", config.tokenizer, " has ",
             tokenizer->vocab_size(), " tokens but the model's vocabulary holds only ", mc.vocab_size);
  mc.validate();
  return mc;
}

void check_flags_against_model(const TrainConfig& config, const ModelConfig& model) {
  TS_CHECK(config.recompute_layers <= model.num_layers, "--recompute-layers ", config.recompute_layers,
           " is more than the model's ", model.num_layers, " blocks; give at most that (0 = every block)");
  TS_CHECK(config.seq_len <= model.max_seq_len, "--seq-len ", config.seq_len, " exceeds the model's context of ",
           model.max_seq_len, " tokens; lower --seq-len or use a model with a longer context");
  // The MoE flags away from their defaults change nothing where there is nothing to route (or, the
  // bias rate, under a softmax router): refused rather than silently ignored.
  const TrainConfig defaults;
  const std::string model_name = config.model.empty() ? std::string("the model") : config.model;
  for (auto [flag, value, fallback] : {std::tuple{"--moe-aux-coef", config.moe_aux_coef, defaults.moe_aux_coef},
                                       {"--moe-z-coef", config.moe_z_coef, defaults.moe_z_coef},
                                       {"--moe-capacity-factor", config.moe_capacity_factor, defaults.moe_capacity_factor},
                                       {"--moe-bias-rate", config.moe_bias_rate, defaults.moe_bias_rate}})
    TS_CHECK(model.moe.enabled() || value == fallback, flag, " ", value, " applies to mixture-of-experts models, and ",
             model_name, " (", model_family(model), ") has no experts; drop it, or train an MoE model (--model ",
             "mixtral-mini, for one)");
  TS_CHECK(!model.moe.enabled() || model.moe.router == RouterKind::sigmoid_bias ||
               config.moe_bias_rate == defaults.moe_bias_rate,
           "--moe-bias-rate ", config.moe_bias_rate, " steps the balancing bias of sigmoid routers (DeepSeek-V3), and ",
           model_name, " routes by softmax (which balances by --moe-aux-coef); drop it");
  TS_CHECK(config.fp8 == "off" || !model.mla.enabled(), "--fp8 ", config.fp8, " casts the blocks' qkv, output and MLP ",
           "projections, and ", model_name, " (", model_family(model), ") projects through latent attention, which ",
           "fp8 does not cover yet; drop --fp8 (bf16 trains it)");
}

ModelConfig model_config_for_run(const TrainConfig& config) {
  std::unique_ptr<Tokenizer> tokenizer;
  if (!config.tokenizer.empty()) tokenizer = std::make_unique<Tokenizer>(Tokenizer::load(config.tokenizer));
  return resolve_model_config(config, tokenizer.get(), run_start_point(config).checkpoint);
}

std::unique_ptr<Decoder> build_model(const TrainConfig& config, const ModelConfig& mc,
                                     const std::optional<std::filesystem::path>& checkpoint,
                                     const std::optional<DecoderStage>& stage, TpPlace tp, EpPlace ep,
                                     ParamStorage storage) {
  auto model = std::make_unique<Decoder>(mc, stage ? *stage : whole_decoder(mc.num_layers), tp, ep, storage);
  if (checkpoint || storage == ParamStorage::sharded_later) return model;
  initial_weights(config, *model)({0, model->layout().total()}, model->params().f32());
  return model;
}

ParameterValues initial_weights(const TrainConfig& config, const Decoder& model) {
  if (config.init_from.empty()) return initial_values(model.config(), model.layout(), config.seed);
  if (const std::optional<std::filesystem::path> tessera = init_checkpoint(config.init_from))
    return open_checkpoint_model(*tessera, model.config(), model.layout()).weights;
  return hf_model_values(config.init_from, model.config(), model.layout());
}

LoadedModel::LoadedModel() = default;
LoadedModel::LoadedModel(LoadedModel&&) noexcept = default;
LoadedModel::~LoadedModel() = default;

LoadedModel load_model_for_inference(const std::string& checkpoint, const std::string& init_from,
                                     const std::string& tokenizer_path) {
  TS_CHECK(checkpoint.empty() != init_from.empty(), "give exactly one of --checkpoint and --init-from");
  LoadedModel loaded;
  std::filesystem::path source_dir;
  // --init-from may name a Tessera checkpoint too, read as --checkpoint reads it.
  const std::string stored = !checkpoint.empty() || !init_checkpoint(init_from) ? checkpoint : init_from;
  if (!stored.empty()) {
    const std::filesystem::path found = checkpoint_noting(stored);
    loaded.model = std::make_unique<Decoder>(read_checkpoint_model_config(found));
    // An imported checkpoint (convert --from-hf) records no run.
    const nlohmann::json run = load_checkpoint(found, *loaded.model).run_config;
    if (run.is_object()) loaded.trained_seq_len = run.value("seq-len", int64_t(0));
    source_dir = found;
  } else {
    loaded.model = std::make_unique<Decoder>(read_hf_config(init_from));
    load_hf_model(init_from, loaded.model->config(), loaded.model->named_params());
    source_dir = init_from;
  }
  std::filesystem::path tokenizer = tokenizer_path;
  if (tokenizer.empty() && std::filesystem::exists(source_dir / "tokenizer.json")) tokenizer = source_dir / "tokenizer.json";
  if (tokenizer.empty() && std::filesystem::exists(source_dir / "vocab.bpe")) tokenizer = source_dir;
  if (!tokenizer_path.empty()) {
    loaded.tokenizer = std::make_unique<Tokenizer>(Tokenizer::load(tokenizer));
  } else if (!tokenizer.empty()) {
    // The one stored beside the weights is optional (eval and convert need none): one Tessera cannot
    // read (a Unigram tokenizer.json) is named, and the model loads without it.
    try {
      loaded.tokenizer = std::make_unique<Tokenizer>(Tokenizer::load(tokenizer));
    } catch (const Error& e) {
      loaded.tokenizer_note = "the tokenizer beside the weights was not loaded (" + std::string(e.what()) +
                              "); give --tokenizer to use another";
      std::fprintf(stderr, "note: %s\n", loaded.tokenizer_note.c_str());
    }
  }
  const int64_t vocab = loaded.model->config().vocab_size;
  TS_CHECK(!loaded.tokenizer || loaded.tokenizer->vocab_size() <= vocab, "tokenizer ", quoted_text(tokenizer.string()),
           " has ", loaded.tokenizer ? loaded.tokenizer->vocab_size() : 0, " tokens but the model's vocabulary holds only ",
           vocab, "; use the tokenizer the model was trained with (the checkpoint's tokenizer.json)");
  return loaded;
}

nlohmann::json run_config_json(const TrainConfig& c) {
  return {{"model", c.model},
          {"layers", c.layers},
          {"heads", c.heads},
          {"channels", c.channels},
          {"vocab-size", c.vocab_size},
          {"context", c.context},
          {"init-from", c.init_from},
          {"train-data", c.train_data},
          {"val-data", c.val_data},
          {"choices", c.choices},
          {"tokenizer", c.tokenizer},
          {"data-order", c.data_order},
          {"attention-mask", c.attention_mask},
          {"batch-size", c.batch_size},
          {"micro-batch-size", c.micro_batch_size},
          {"seq-len", c.seq_len},
          {"steps", c.steps},
          {"lr", c.lr},
          {"min-lr", c.min_lr},
          {"lr-schedule", c.lr_schedule},
          {"warmup", c.warmup},
          {"decay-fraction", c.decay_fraction},
          {"weight-decay", c.weight_decay},
          {"beta1", c.beta1},
          {"beta2", c.beta2},
          {"eps", c.eps},
          {"optimizer-moments", c.optimizer_moments},
          {"grad-clip", c.grad_clip},
          {"seed", c.seed},
          {"keep-every", c.keep_every},
          {"async-checkpoint", c.async_checkpoint},
          {"checkpoint-weights", c.checkpoint_weights},
          {"tensorboard-dir", c.tensorboard_dir},
          {"max-bad-steps", c.max_bad_steps},
          {"spike-zscore", c.spike_zscore},
          {"recompute", c.recompute},
          {"recompute-layers", c.recompute_layers},
          {"moe-aux-coef", c.moe_aux_coef},
          {"moe-z-coef", c.moe_z_coef},
          {"moe-capacity-factor", c.moe_capacity_factor},
          {"moe-bias-rate", c.moe_bias_rate},
          {"dp", c.dp},
          {"tp", c.tp},
          {"sequence-parallel", c.sequence_parallel},
          {"cp-comm", c.cp_comm},
          {"pp", c.pp},
          {"virtual-stages", c.virtual_stages},
          {"pipeline-schedule", c.pipeline_schedule},
          {"pipeline-boundaries", c.pipeline_boundaries},
          {"zero", c.zero},
          {"grad-reduce-dtype", c.grad_reduce_dtype},
          {"powersgd-rank", c.powersgd_rank},
          {"device", c.device},
          {"dtype", c.dtype},
          {"fp8", c.fp8},
          {"fp8-amax-history", c.fp8_amax_history},
          {"fp8-margin", c.fp8_margin}};
}

}  // namespace tessera
