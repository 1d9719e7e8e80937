// A training or validation set: the token shards matched by a glob pattern, in sorted path order,
// presented as one concatenated token stream. Every token read is checked against the model's
// vocabulary size, so data tokenized for a larger vocabulary fails with the shard and position.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "data/token_shard.h"

namespace tessera {

class TokenDataset {
 public:
  // Opens every file matching `glob_pattern` (glob(3)); `flag_name` (e.g. "--train-data") prefixes
  // every error so the user knows which setting to fix.
  static TokenDataset open(const std::string& glob_pattern, int64_t vocab_size, std::string_view flag_name);

  int64_t num_tokens() const { return offsets_.back(); }
  int64_t vocab_size() const { return vocab_size_; }
  const std::string& flag_name() const { return flag_name_; }
  const std::vector<TokenShard>& shards() const { return shards_; }

  // out[i] = token start + i of the concatenated stream, 0 <= i < count; crosses shard boundaries.
  void read(int64_t start, int64_t count, int32_t* out) const;

 private:
  TokenDataset() = default;

  std::vector<TokenShard> shards_;
  std::vector<int64_t> offsets_ = {0};  // offsets_[s] = first stream position of shard s; back() = total
  int64_t vocab_size_ = 0;
  std::string flag_name_;
};

}  // namespace tessera
