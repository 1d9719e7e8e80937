// Text files -> documents -> token shards.
#include "data/corpus.h"

#include <cstdio>
#include <sstream>

#include "core/error.h"
#include "data/token_shard.h"
#include "data/tokenizer.h"
#include "data/whole_file.h"

namespace tessera {
namespace {

// Accumulates tokens of one split and flushes them into numbered shard files.
class ShardWriter {
 public:
  ShardWriter(std::filesystem::path dir, std::string split, int64_t shard_tokens, int version, CorpusStats& stats)
      : dir_(std::move(dir)), split_(std::move(split)), shard_tokens_(shard_tokens), version_(version), stats_(stats) {}

  void add(const std::vector<int32_t>& tokens) {
    for (int32_t t : tokens) {
      buffer_.push_back(uint32_t(t));
      if (int64_t(buffer_.size()) == shard_tokens_) flush();
    }
  }

  int64_t total() const { return total_; }

  void flush() {
    if (buffer_.empty()) return;
    char name[64];
    std::snprintf(name, sizeof name, "%s_%06d.bin", split_.c_str(), index_++);
    std::filesystem::path path = dir_ / name;
    write_token_shard(path, buffer_, version_);
    stats_.shards.push_back(path);
    total_ += int64_t(buffer_.size());
    buffer_.clear();
  }

 private:
  std::filesystem::path dir_;
  std::string split_;
  int64_t shard_tokens_;
  int version_;
  CorpusStats& stats_;
  std::vector<uint32_t> buffer_;
  int index_ = 0;
  int64_t total_ = 0;
};

}  // namespace

std::vector<std::string> read_documents(const std::filesystem::path& file, const std::string& delimiter) {
  std::string text = read_whole_file(file, "text file", kMaxTextFileBytes);
  std::vector<std::string> documents;
  if (delimiter.empty()) {
    if (!text.empty()) documents.push_back(std::move(text));
    return documents;
  }
  std::string current;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line == delimiter) {
      if (!current.empty()) documents.push_back(std::move(current));
      current.clear();
    } else {
      current += line;
      current += '\n';
    }
  }
  if (!current.empty()) documents.push_back(std::move(current));
  return documents;
}

CorpusStats tokenize_to_shards(const Tokenizer& tokenizer, const std::vector<std::filesystem::path>& files,
                               const std::filesystem::path& out_dir, const ShardOptions& options) {
  TS_CHECK(!files.empty(), "tokenize: no input files");
  TS_CHECK(options.shard_tokens > 0, "--shard-tokens must be positive, got ", options.shard_tokens);
  TS_CHECK(options.val_every >= 0, "--val-every must not be negative, got ", options.val_every);
  std::filesystem::create_directories(out_dir);
  const int version = tokenizer.vocab_size() <= 65536 ? 1 : 2;
  const int32_t first = tokenizer.document_start_token();
  CorpusStats stats;
  ShardWriter train(out_dir, "train", options.shard_tokens, version, stats);
  ShardWriter val(out_dir, "val", options.shard_tokens, version, stats);
  for (const std::filesystem::path& file : files) {
    for (const std::string& document : read_documents(file, options.delimiter)) {
      std::vector<int32_t> tokens{first};
      std::vector<int32_t> body = tokenizer.encode(document);
      tokens.insert(tokens.end(), body.begin(), body.end());
      ++stats.documents;
      bool to_val = options.val_every > 0 && stats.documents % options.val_every == 0;
      (to_val ? val : train).add(tokens);
    }
  }
  train.flush();
  val.flush();
  stats.train_tokens = train.total();
  stats.val_tokens = val.total();
  return stats;
}

}  // namespace tessera
