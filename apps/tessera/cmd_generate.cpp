// tessera generate: sample text from a checkpoint (or a Hugging Face model folder), printing
// each token as it comes (print_token_text, also used by train for its final sample); with a chat template, the
// assistant's reply to the prompt as a user's message.
#include <cstdio>
#include <memory>
#include <optional>
#include <string_view>

#include "checkpoint/hf_model.h"
#include "checkpoint/train_checkpoint.h"
#include "commands.h"
#include "data/chat_template.h"
#include "data/corpus.h"
#include "data/tokenizer.h"
#include "train/device_choice.h"
#include "train/generate.h"
#include "train/utf8_stream.h"
#include "train/model_setup.h"

namespace tessera::cli {

namespace {

// Prints tokens' text as they come, as valid UTF-8: a character split across tokens appears once whole.
// Text that starts the output (no prompt printed before it) loses the space a SentencePiece vocabulary
// puts before a text, as its decoder strips it.
class TokenPrinter {
 public:
  TokenPrinter(const Tokenizer& tokenizer, bool starts_text)
      : tokenizer_(tokenizer), strip_space_(starts_text && tokenizer.rules().space_prefix !=
                                                                 EncodingRules::SpacePrefix::none) {}
  void print(int32_t token) {
    // a document boundary inside a sample shows as a blank line
    std::string text = token == tokenizer_.eot_token() ? std::string("\n\n") : tokenizer_.token_text(token);
    if (strip_space_ && text.starts_with(' ')) text.erase(0, 1);
    strip_space_ = strip_space_ && text.empty();
    write(utf8_.add(text));
  }
  // Ends the text: an unfinished character shows as U+FFFD.
  void finish() { write(utf8_.finish()); }

 private:
  static void write(const std::string& text) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
  }
  const Tokenizer& tokenizer_;
  bool strip_space_;  // until the first text is printed
  Utf8Stream utf8_;
};

// The conversation as tokenize writes it (the start token, then its pieces as one text), then the
// assistant's header.
std::vector<int32_t> chat_prompt(const ChatTemplate& chat, const Tokenizer& tokenizer, const std::string& system,
                                 const std::string& user, bool thinking) {
  std::vector<ChatMessage> messages;
  if (!system.empty()) messages.push_back({"system", system});
  messages.push_back({"user", user});
  std::vector<DocumentPiece> pieces = chat.render(messages);
  pieces.push_back({chat.generation_prompt(thinking), false});
  return encode_document(tokenizer, pieces, TextStart::after_special).tokens;
}

// Generation reads the last context() tokens, as a full forward pass would; a longer prompt loses its start.
void note_long_prompt(size_t tokens, int64_t context) {
  if (int64_t(tokens) <= context) return;
  std::fprintf(stderr, "note: the prompt is %zu tokens, longer than the model's context of %lld; only its last %lld "
               "are read\n", tokens, (long long)context, (long long)context);
}

}  // namespace

void add_generate_command(CLI::App& app) {
  struct Options {
    std::string checkpoint, init_from, tokenizer, prompt, chat_template, system;
    bool no_thinking = false;
    SamplingOptions sampling;
    uint64_t seed = 1337;
    std::string device = "auto";
  };
  auto o = std::make_shared<Options>();
  CLI::App* cmd = add_command(app, "generate", "Sample text from a trained model");
  cmd->add_option("--checkpoint", o->checkpoint, "Checkpoint folder or run folder (its ckpt-latest)");
  cmd->add_option("--init-from", o->init_from,
                  "Hugging Face folder (" TESSERA_HF_FAMILIES ") instead of a checkpoint");
  cmd->add_option("--tokenizer", o->tokenizer,
                  "Tokenizer, as train's --tokenizer (default: the one in the checkpoint's or --init-from's folder)");
  cmd->add_option("--prompt", o->prompt, "Text to continue (default: start of a document), or the user's message");
  cmd->add_option("--chat-template", o->chat_template,
                  "llama3, chatml, qwen2.5, qwen3, phi3, phi4 or olmo2: send --prompt as a user's message and print the assistant's reply, which ends "
                  "at the template's end of turn");
  cmd->add_option("--system", o->system, "With --chat-template: a system message before the user's");
  cmd->add_flag("--no-thinking", o->no_thinking, "With --chat-template qwen3: reply without reasoning (an empty think "
                "block opens the reply, as Qwen3's enable_thinking=False)");
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
    o->sampling.validate();  // before the model loads, as the chat flags
    TS_CHECK(o->system.empty() || !o->chat_template.empty(),
             "--system needs --chat-template (a system message is a turn of a conversation)");
    const std::optional<ChatTemplate> chat =
        o->chat_template.empty() ? std::nullopt : std::optional(ChatTemplate::named(o->chat_template));
    TS_CHECK(!o->no_thinking || (chat && chat->thinks()), "--no-thinking needs --chat-template qwen3 (",
             chat ? "the " + chat->name() + " template has no think blocks" : std::string("no --chat-template"), ")");
    LoadedModel loaded = load_model_for_inference(o->checkpoint, o->init_from, o->tokenizer);
    TS_CHECK(loaded.tokenizer, "generate: no tokenizer; pass --tokenizer (",
             loaded.tokenizer_note.empty() ? "the checkpoint holds no tokenizer.json" : loaded.tokenizer_note, ")");
    loaded.model->to(choose_device_noting(o->device, loaded.model->config()).device);
    Tokenizer& tokenizer = *loaded.tokenizer;
    o->sampling.vocab_limit = tokenizer.vocab_size();
    Rng rng(o->seed, stream_id("generate"));
    std::vector<int32_t> prompt;
    if (chat) {
      chat->require_tokens_of(tokenizer);
      prompt = chat_prompt(*chat, tokenizer, o->system, o->prompt, !o->no_thinking);
      o->sampling.stop_token = *tokenizer.special_token_id(chat->end_of_turn());
      for (std::string_view end : chat->reply_ends())
        if (std::optional<int32_t> id = tokenizer.special_token_id(end); id && *id != o->sampling.stop_token)
          o->sampling.also_stop_at.push_back(*id);
    } else {
      prompt = o->prompt.empty() ? std::vector<int32_t>{tokenizer.document_start_token()}
                                 : tokenizer.encode_with_special_tokens(o->prompt);
      o->sampling.stop_token = tokenizer.eot_token();
      std::printf("%s", o->prompt.c_str());
    }
    note_long_prompt(prompt.size(), loaded.model->config().max_seq_len);
    TokenPrinter printer(tokenizer, chat || o->prompt.empty());
    generate(*loaded.model, prompt, o->sampling, rng, [&](int32_t token) {
      if (!o->sampling.stops_at(token)) printer.print(token);
    });
    printer.finish();
    std::printf("\n");
  });
}

std::function<void(int32_t)> print_token_text(const Tokenizer& tokenizer) {
  auto printer = std::make_shared<TokenPrinter>(tokenizer, true);
  return [printer](int32_t token) { printer->print(token); };
}

}  // namespace tessera::cli
