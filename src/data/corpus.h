// Turning text files into llm.c token shards: each document is preceded by the tokenizer's BOS
// when its post-processor adds one (Llama 3: <|begin_of_text|>), else by <|endoftext|> (the GPT-2 /
// llm.c convention); every val_every-th document goes to the validation split.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace tessera {

class Tokenizer;

// The documents of a text file: the whole file, or the pieces between lines equal to `delimiter`
// (e.g. "%" in fortune files) when it is not empty. Empty documents are dropped.
std::vector<std::string> read_documents(const std::filesystem::path& file, const std::string& delimiter);

struct ShardOptions {
  std::string delimiter;             // document separator line; empty = one document per file
  int64_t val_every = 0;             // every n-th document to the validation split; 0 = none
  int64_t shard_tokens = 100000000;  // tokens per shard file
};

struct CorpusStats {
  int64_t documents = 0;
  int64_t train_tokens = 0;
  int64_t val_tokens = 0;
  std::vector<std::filesystem::path> shards;
};

// Writes <out_dir>/train_NNNNNN.bin (and val_NNNNNN.bin) shards, uint16 tokens when the
// vocabulary fits, uint32 otherwise.
CorpusStats tokenize_to_shards(const Tokenizer& tokenizer, const std::vector<std::filesystem::path>& files,
                               const std::filesystem::path& out_dir, const ShardOptions& options);

}  // namespace tessera
