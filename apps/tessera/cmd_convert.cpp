// tessera convert: checkpoint -> Hugging Face GPT-2 folder (--to-hf), or Hugging Face folder ->
// checkpoint (--from-hf).
#include <cstdio>

#include "checkpoint/hf_gpt2.h"
#include "checkpoint/train_checkpoint.h"
#include "commands.h"
#include "data/tokenizer.h"
#include "train/model_setup.h"

namespace tessera::cli {

void add_convert_command(CLI::App& app) {
  struct Options {
    std::string checkpoint, from_hf, to_hf, out;
  };
  auto o = std::make_shared<Options>();
  CLI::App* cmd = add_command(app, "convert", "Convert between Tessera checkpoints and Hugging Face folders");
  cmd->add_option("--checkpoint", o->checkpoint, "Checkpoint or run folder to export (with --to-hf)");
  cmd->add_option("--to-hf", o->to_hf, "Write a Hugging Face GPT-2 folder here");
  cmd->add_option("--from-hf", o->from_hf, "Hugging Face GPT-2 folder to import (with --out)");
  cmd->add_option("--out", o->out, "Run folder to write the imported checkpoint into");
  enable_toml_config(*cmd);
  cmd->callback([o, cmd] {
    apply_toml_config(*cmd);
    if (!o->to_hf.empty()) {
      TS_CHECK(!o->checkpoint.empty() && o->from_hf.empty(), "convert --to-hf needs --checkpoint");
      LoadedModel loaded = load_model_for_inference(o->checkpoint, "", "");
      save_hf_gpt2(o->to_hf, loaded.model->config(), loaded.model->named_params());
      std::filesystem::path tokenizer = std::filesystem::path(o->checkpoint) / "tokenizer.json";
      if (std::filesystem::exists(tokenizer)) Tokenizer::load(tokenizer).save_json(std::filesystem::path(o->to_hf) / "tokenizer.json");
      std::printf("wrote %s/config.json and model.safetensors\n", o->to_hf.c_str());
      return;
    }
    TS_CHECK(!o->from_hf.empty() && !o->out.empty(), "convert: give --checkpoint and --to-hf, or --from-hf and --out");
    LoadedModel loaded = load_model_for_inference("", o->from_hf, "");
    std::filesystem::path tokenizer_json;
    if (loaded.tokenizer) {
      std::filesystem::create_directories(o->out);
      tokenizer_json = std::filesystem::path(o->out) / "tokenizer.json";
      loaded.tokenizer->save_json(tokenizer_json);
    }
    std::filesystem::path written = save_checkpoint(o->out, *loaded.model, nullptr, CheckpointState{}, tokenizer_json);
    std::printf("wrote %s\n", written.string().c_str());
  });
}

}  // namespace tessera::cli
