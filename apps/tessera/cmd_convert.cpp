// tessera convert: checkpoint -> Hugging Face folder (the families of TESSERA_HF_FAMILIES; --to-hf), or Hugging Face folder ->
// checkpoint (--from-hf). Neither overwrites anything: --to-hf writes only into a new or empty
// folder, --from-hf only into a run folder that holds no checkpoint.
#include <cstdio>
#include <optional>

#include "checkpoint/hf_model.h"
#include "checkpoint/hf_token_ids.h"
#include "checkpoint/run_folder.h"
#include "checkpoint/train_checkpoint.h"
#include "commands.h"
#include "core/atomic_file.h"
#include "core/file_checks.h"
#include "core/user_text.h"
#include "data/chat_template.h"
#include "data/tokenizer.h"
#include "nn/decoder_layout.h"
#include "train/model_setup.h"

namespace tessera::cli {
namespace {
namespace fs = std::filesystem;

struct Options {
  std::string checkpoint, from_hf, to_hf, out, dtype = "fp32", chat_template;
};

// --dtype of an export: how its safetensors store the weights. fp8 is DeepSeek-V3's release form:
// projections in E4M3 blocks of 128 x 128, everything else bf16.
HfWeightType export_type(const std::string& flag) {
  TS_CHECK(flag == "fp32" || flag == "bf16" || flag == "fp16" || flag == "fp8", "--dtype must be fp32 (exact), bf16 ",
           "or fp16 (half the bytes, rounded to nearest), or fp8 (fine-grained FP8 blocks), got ", quoted_text(flag));
  if (flag == "fp8") return {DType::bf16, kDeepseekFp8Blocks};
  return flag == "bf16" ? DType::bf16 : flag == "fp16" ? DType::f16 : DType::f32;
}

// --to-hf must name a folder that does not exist yet or is empty: an existing model (a checkpoint,
// another export) is never overwritten.
void require_new_or_empty_folder(const fs::path& folder) {
  std::error_code ec;
  if (!fs::exists(folder, ec)) return;
  TS_CHECK(fs::is_directory(folder, ec), "--to-hf ", quoted_text(folder.string()),
           " exists and is not a folder; give a new or empty folder");
  TS_CHECK(fs::is_empty(folder, ec), "--to-hf ", quoted_text(folder.string()),
           " is not empty; give a new or empty folder (convert never overwrites a model or checkpoint)");
}

// The checkpoint's weights (read as each file is written: the export never holds the whole model),
// config.json naming the run tokenizer's special tokens, and that tokenizer (tokenizer.json and
// tokenizer_config.json), into `folder`.
void write_export(const std::string& checkpoint_arg, const fs::path& folder, HfWeightType type,
                  const std::string& chat_template) {
  const fs::path checkpoint = checkpoint_noting(checkpoint_arg);
  const ModelConfig config = read_checkpoint_model_config(checkpoint);
  std::optional<Tokenizer> tokenizer;
  if (const fs::path file = fs::path(checkpoint_arg) / "tokenizer.json"; fs::exists(file))
    tokenizer = Tokenizer::load(file);
  TS_CHECK(chat_template.empty() || tokenizer, "--chat-template: ", quoted_text(checkpoint_arg),
           " has no tokenizer.json, so the export has no tokenizer to give the template to");
  nlohmann::json tokenizer_config = tokenizer ? hf_tokenizer_config(*tokenizer, config.max_seq_len) : nlohmann::json();
  if (!chat_template.empty()) {  // checked before any file is written
    const ChatTemplate chat = ChatTemplate::named(chat_template);
    chat.require_tokens_of(*tokenizer);
    tokenizer_config["chat_template"] = chat.jinja(tokenizer->token_text(tokenizer->document_start_token()));
  }
  save_hf_model(folder, config, open_checkpoint_model(checkpoint, config, decoder_layout(config)).weights,
                tokenizer ? hf_token_ids(*tokenizer) : HfTokenIds{}, type);
  if (!tokenizer) return;
  tokenizer->save_json(folder / "tokenizer.json");
  write_file_atomic(folder / "tokenizer_config.json", tokenizer_config.dump(2) + "\n");
}

// A failed export (a damaged checkpoint file found half way) removes what it wrote, so --to-hf is new
// or empty again, holds no shards of a model that is not there, and the same command can run again.
void export_to_hf(const Options& o) {
  TS_CHECK(!o.checkpoint.empty() && o.from_hf.empty(), "convert --to-hf needs --checkpoint");
  const HfWeightType type = export_type(o.dtype);
  const fs::path folder = o.to_hf;
  require_new_or_empty_folder(folder);
  std::error_code ec;
  const bool existed = fs::exists(folder, ec);
  try {
    write_export(o.checkpoint, folder, type, o.chat_template);
  } catch (...) {
    if (!existed) fs::remove_all(folder, ec);
    for (const auto& entry : fs::directory_iterator(folder, ec)) fs::remove_all(entry.path(), ec);
    throw;
  }
  std::printf("wrote %s (config.json and safetensors weights)\n", o.to_hf.c_str());
}

}  // namespace

void add_convert_command(CLI::App& app) {
  auto o = std::make_shared<Options>();
  CLI::App* cmd = add_command(app, "convert", "Convert between Tessera checkpoints and Hugging Face folders");
  cmd->add_option("--checkpoint", o->checkpoint, "Checkpoint or run folder to export (with --to-hf)");
  cmd->add_option("--to-hf", o->to_hf, "Write a Hugging Face folder here, in the model family's form (GPT2LMHeadModel, "
                  "LlamaForCausalLM, Qwen2/Qwen3/Qwen3Moe, Mixtral, Phi3, Olmo2, Olmoe, SmolLM3, Gemma3 or "
                  "DeepseekV2/V3ForCausalLM)");
  cmd->add_option("--from-hf", o->from_hf,
                  "Hugging Face " TESSERA_HF_FAMILIES " folder to import (with --out); F32, BF16, F16 or fine-grained "
                  "FP8 weights");
  cmd->add_option("--out", o->out, "Run folder to write the imported checkpoint into");
  cmd->add_option("--dtype", o->dtype,
                  "Element type of an export's weights: fp32 (exact), bf16 or fp16 (half the bytes, as models are "
                  "published), or fp8 (the attention and MLP projections in E4M3 blocks of 128 x 128 with fp32 scales, "
                  "the rest bf16: DeepSeek-V3's release form, which vLLM and SGLang serve)")
      ->capture_default_str();
  cmd->add_option("--chat-template", o->chat_template,
                  "With --to-hf: write this chat template (" + std::string(kChatTemplateNames) + ") into "
                  "tokenizer_config.json as Jinja, so transformers' apply_chat_template renders "
                  "conversations as the run was fine-tuned on them");
  enable_toml_config(*cmd);
  cmd->callback([o, cmd] {
    apply_toml_config(*cmd);
    TS_CHECK((o->checkpoint.empty() && o->to_hf.empty()) || (o->from_hf.empty() && o->out.empty()),
             "convert: give either --checkpoint and --to-hf (export) or --from-hf and --out (import), not both");
    if (!o->to_hf.empty()) return export_to_hf(*o);
    TS_CHECK(cmd->count("--dtype") == 0, "--dtype sets an export's weights (with --to-hf); an import keeps fp32 ",
             "master weights whatever the folder holds: drop --dtype");
    TS_CHECK(o->chat_template.empty(), "--chat-template sets an export's template (with --to-hf); give it to ",
             "tokenize and generate when you use the imported run");
    TS_CHECK(!o->from_hf.empty() && !o->out.empty(), "convert: give --checkpoint and --to-hf, or --from-hf and --out");
    TS_CHECK(!holds_checkpoints(o->out) && !std::filesystem::exists(std::filesystem::path(o->out) / "state.json"),
             "--out ", quoted_text(o->out), " already holds a checkpoint; give a new run folder (convert never replaces one)");
    LoadedModel loaded = load_model_for_inference("", o->from_hf, "");
    std::filesystem::path tokenizer_json;
    if (loaded.tokenizer) {
      create_folder(o->out, "--out");
      tokenizer_json = std::filesystem::path(o->out) / "tokenizer.json";
      loaded.tokenizer->save_json(tokenizer_json);
    }
    std::filesystem::path written = save_checkpoint(o->out, *loaded.model, nullptr, CheckpointState{}, tokenizer_json,
                                                    Retention{0, 0});
    std::printf("wrote %s\n", written.string().c_str());
  });
}

}  // namespace tessera::cli
