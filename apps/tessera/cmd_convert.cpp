// tessera convert: checkpoint -> Hugging Face folder (GPT-2, Llama or Mixtral; --to-hf), or Hugging Face folder ->
// checkpoint (--from-hf). Neither overwrites anything: --to-hf writes only into a new or empty
// folder, --from-hf only into a run folder that holds no checkpoint.
#include <cstdio>
#include <optional>

#include "checkpoint/hf_model.h"
#include "checkpoint/run_folder.h"
#include "checkpoint/train_checkpoint.h"
#include "commands.h"
#include "core/file_checks.h"
#include "core/user_text.h"
#include "data/tokenizer.h"
#include "nn/decoder_layout.h"
#include "train/model_setup.h"

namespace tessera::cli {
namespace {

// --to-hf must name a folder that does not exist yet or is empty: an existing model (a checkpoint,
// another export) is never overwritten.
void require_new_or_empty_folder(const std::filesystem::path& folder) {
  std::error_code ec;
  if (!std::filesystem::exists(folder, ec)) return;
  TS_CHECK(std::filesystem::is_directory(folder, ec), "--to-hf ", quoted_text(folder.string()),
           " exists and is not a folder; give a new or empty folder");
  TS_CHECK(std::filesystem::is_empty(folder, ec), "--to-hf ", quoted_text(folder.string()),
           " is not empty; give a new or empty folder (convert never overwrites a model or checkpoint)");
}

}  // namespace

void add_convert_command(CLI::App& app) {
  struct Options {
    std::string checkpoint, from_hf, to_hf, out;
  };
  auto o = std::make_shared<Options>();
  CLI::App* cmd = add_command(app, "convert", "Convert between Tessera checkpoints and Hugging Face folders");
  cmd->add_option("--checkpoint", o->checkpoint, "Checkpoint or run folder to export (with --to-hf)");
  cmd->add_option("--to-hf", o->to_hf, "Write a Hugging Face folder (GPT2LMHeadModel, LlamaForCausalLM or MixtralForCausalLM) here");
  cmd->add_option("--from-hf", o->from_hf, "Hugging Face GPT-2, Llama or Mixtral folder to import (with --out)");
  cmd->add_option("--out", o->out, "Run folder to write the imported checkpoint into");
  enable_toml_config(*cmd);
  cmd->callback([o, cmd] {
    apply_toml_config(*cmd);
    TS_CHECK((o->checkpoint.empty() && o->to_hf.empty()) || (o->from_hf.empty() && o->out.empty()),
             "convert: give either --checkpoint and --to-hf (export) or --from-hf and --out (import), not both");
    if (!o->to_hf.empty()) {
      TS_CHECK(!o->checkpoint.empty() && o->from_hf.empty(), "convert --to-hf needs --checkpoint");
      require_new_or_empty_folder(o->to_hf);
      // Read as the files are written: the export never holds the whole model.
      const std::filesystem::path checkpoint = checkpoint_noting(o->checkpoint);
      const ModelConfig config = read_checkpoint_model_config(checkpoint);
      // The run's tokenizer goes beside the weights, and config.json names its special tokens.
      std::optional<Tokenizer> tokenizer;
      if (const auto file = std::filesystem::path(o->checkpoint) / "tokenizer.json"; std::filesystem::exists(file))
        tokenizer = Tokenizer::load(file);
      save_hf_model(o->to_hf, config, open_checkpoint_model(checkpoint, config, decoder_layout(config)).weights,
                    tokenizer ? hf_token_ids(*tokenizer) : HfTokenIds{});
      if (tokenizer) tokenizer->save_json(std::filesystem::path(o->to_hf) / "tokenizer.json");
      std::printf("wrote %s (config.json and safetensors weights)\n", o->to_hf.c_str());
      return;
    }
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
