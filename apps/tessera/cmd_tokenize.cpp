// tessera tokenize / tokenizer-train: text files -> llm.c token shards, and training a BPE.
#include <cstdio>

#include "commands.h"
#include "data/bpe_trainer.h"
#include "data/corpus.h"
#include "data/tokenizer.h"

namespace tessera::cli {

void add_tokenize_command(CLI::App& app) {
  struct Options {
    std::string tokenizer, out;
    std::vector<std::string> inputs;
    ShardOptions shards;
  };
  auto o = std::make_shared<Options>();
  CLI::App* cmd = add_command(app, "tokenize", "Encode text files into llm.c token shards");
  cmd->add_option("--tokenizer", o->tokenizer,
                  "tokenizer.json, a *.tiktoken rank file, or a folder with encoder.json + vocab.bpe")
      ->required();
  cmd->add_option("--in", o->inputs, "Text files")->required();
  cmd->add_option("--out", o->out, "Output folder for train_*.bin / val_*.bin")->required();
  cmd->add_option("--delimiter", o->shards.delimiter, "A line that separates documents (e.g. %); default: one per file");
  cmd->add_option("--val-every", o->shards.val_every, "Every n-th document goes to validation (0 = none)")
      ->capture_default_str();
  cmd->add_option("--shard-tokens", o->shards.shard_tokens, "Tokens per shard file")->capture_default_str();
  enable_toml_config(*cmd);
  cmd->callback([o, cmd] {
    apply_toml_config(*cmd);
    Tokenizer tokenizer = Tokenizer::load(o->tokenizer);
    std::vector<std::filesystem::path> files(o->inputs.begin(), o->inputs.end());
    CorpusStats stats = tokenize_to_shards(tokenizer, files, o->out, o->shards);
    std::printf("%lld documents -> %lld train + %lld val tokens in %zu shards under %s\n", (long long)stats.documents,
                (long long)stats.train_tokens, (long long)stats.val_tokens, stats.shards.size(), o->out.c_str());
  });
}

void add_tokenizer_train_command(CLI::App& app) {
  struct Options {
    std::vector<std::string> inputs;
    std::string out = "tokenizer.json";
    int64_t vocab_size = 4096;
  };
  auto o = std::make_shared<Options>();
  CLI::App* cmd = add_command(app, "tokenizer-train", "Train a byte-level BPE tokenizer on text files");
  cmd->add_option("--in", o->inputs, "Text files")->required();
  cmd->add_option("--vocab-size", o->vocab_size, "Tokens in the vocabulary, <|endoftext|> included")
      ->capture_default_str();
  cmd->add_option("--out", o->out, "Where to write tokenizer.json")->capture_default_str();
  enable_toml_config(*cmd);
  cmd->callback([o, cmd] {
    apply_toml_config(*cmd);
    std::vector<std::filesystem::path> files(o->inputs.begin(), o->inputs.end());
    Tokenizer tokenizer = train_bpe(files, o->vocab_size, [](int64_t done, int64_t total) {
      if (done == total || done % 256 == 0) std::printf("\rmerges %lld/%lld", (long long)done, (long long)total);
      std::fflush(stdout);
    });
    tokenizer.save_json(o->out);
    std::printf("\nwrote %s (%lld tokens)\n", o->out.c_str(), (long long)tokenizer.vocab_size());
  });
}

}  // namespace tessera::cli
