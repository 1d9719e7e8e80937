// tessera generate: sample text from a checkpoint (or a Hugging Face GPT-2, Llama or Mixtral folder), printing each
// token as it comes (print_token_text, also used by train for its final sample).
#include <cstdio>

#include "checkpoint/hf_model.h"
#include "checkpoint/train_checkpoint.h"
#include "commands.h"
#include "data/tokenizer.h"
#include "train/device_choice.h"
#include "train/generate.h"
#include "train/model_setup.h"

namespace tessera::cli {

void add_generate_command(CLI::App& app) {
  struct Options {
    std::string checkpoint, init_from, tokenizer, prompt;
    SamplingOptions sampling;
    uint64_t seed = 1337;
    std::string device = "auto";
  };
  auto o = std::make_shared<Options>();
  CLI::App* cmd = add_command(app, "generate", "Sample text from a trained model");
  cmd->add_option("--checkpoint", o->checkpoint, "Checkpoint folder or run folder (its ckpt-latest)");
  cmd->add_option("--init-from", o->init_from, "Hugging Face folder (GPT-2, Llama, Mixtral) instead of a checkpoint");
  cmd->add_option("--tokenizer", o->tokenizer, "Tokenizer (default: the checkpoint's tokenizer.json)");
  cmd->add_option("--prompt", o->prompt, "Text to continue (default: start of a document)");
  cmd->add_option("--max-new-tokens", o->sampling.max_new_tokens, "Tokens to generate")->capture_default_str();
  cmd->add_option("--temperature", o->sampling.temperature, "Sampling temperature (0 = greedy)")->capture_default_str();
  cmd->add_option("--top-k", o->sampling.top_k, "Sample among the k most likely tokens (0 = all)")->capture_default_str();
  cmd->add_option("--top-p", o->sampling.top_p,
                  "Nucleus sampling: among those, the fewest most likely whose probability reaches p (1 = off)")
      ->capture_default_str();
  cmd->add_option("--seed", o->seed, "Sampling seed")->capture_default_str();
  cmd->add_option("--device", o->device, "auto (the GPU when one is usable, else the CPU), cuda or cpu")
      ->capture_default_str();
  enable_toml_config(*cmd);
  cmd->callback([o, cmd] {
    apply_toml_config(*cmd);
    o->sampling.validate();  // before the model loads
    LoadedModel loaded = load_model_for_inference(o->checkpoint, o->init_from, o->tokenizer);
    TS_CHECK(loaded.tokenizer, "generate: no tokenizer; pass --tokenizer (the checkpoint holds no tokenizer.json)");
    loaded.model->to(choose_device_noting(o->device));
    Tokenizer& tokenizer = *loaded.tokenizer;
    std::vector<int32_t> prompt = o->prompt.empty() ? std::vector<int32_t>{tokenizer.document_start_token()}
                                                    : tokenizer.encode_with_special_tokens(o->prompt);
    o->sampling.stop_token = tokenizer.eot_token();
    o->sampling.vocab_limit = tokenizer.vocab_size();
    Rng rng(o->seed, stream_id("generate"));
    std::printf("%s", o->prompt.c_str());
    generate(*loaded.model, prompt, o->sampling, rng, print_token_text(tokenizer));
    std::printf("\n");
  });
}

std::function<void(int32_t)> print_token_text(const Tokenizer& tokenizer) {
  return [&tokenizer](int32_t token) {
    // a document boundary inside a sample shows as a blank line
    std::string text = token == tokenizer.eot_token() ? std::string("\n\n") : tokenizer.token_text(token);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
  };
}

}  // namespace tessera::cli
