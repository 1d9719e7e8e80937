// A training or validation set: the token shards matched by a glob pattern, in sorted path order,
// presented as one concatenated token stream. Every token read is checked against the model's
// vocabulary size, so data tokenized for a larger vocabulary fails with the shard and position.
// Shards may carry loss masks (data/loss_mask.h): all of them or none.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "data/loss_mask.h"
#include "data/token_shard.h"

namespace tessera {

// The paths matching `pattern` (shell wildcards and {a,b} alternatives), sorted bytewise (the stream's
// shard order); a file matched twice is refused. Errors name `flag`.
std::vector<std::string> expand_glob(const std::string& pattern, const std::string& flag);

class TokenDataset {
 public:
  // Opens every file matching `glob_pattern` (glob(3)) but loss masks (*.mask), and their masks;
  // `flag_name` (e.g. "--train-data") prefixes every error so the user knows which setting to fix.
  static TokenDataset open(const std::string& glob_pattern, int64_t vocab_size, std::string_view flag_name);

  int64_t num_tokens() const { return offsets_.back(); }
  int64_t vocab_size() const { return vocab_size_; }
  const std::string& flag_name() const { return flag_name_; }
  const std::vector<TokenShard>& shards() const { return shards_; }

  // out[i] = token start + i of the concatenated stream, 0 <= i < count; crosses shard boundaries.
  void read(int64_t start, int64_t count, int32_t* out) const;

  // Whether the shards carry loss masks; without, every token is a training target.
  bool has_loss_mask() const { return !masks_.empty(); }
  // Tokens that are training targets: every token without masks.
  int64_t num_trained() const;
  // The sequence length the shards' documents were packed for (tokenize --pack-seq-len); 0: none.
  int64_t packed_seq_len() const { return masks_.empty() ? 0 : masks_.front().packed_seq_len(); }
  // out[i] = 1 when token start + i is a training target, else 0, 0 <= i < count.
  void read_loss_mask(int64_t start, int64_t count, uint8_t* out) const;

 private:
  TokenDataset() = default;

  // Calls piece(s, local, n, done) for each run of n tokens of shard s, from its token `local`, that
  // stream positions [start, start + count) cover, `done` of them before it; checks the range.
  template <typename Piece>
  void for_each_piece(int64_t start, int64_t count, Piece&& piece) const;

  std::vector<TokenShard> shards_;
  std::vector<LossMask> masks_;  // masks_[s] is shard s's; empty when the shards have none
  std::vector<int64_t> offsets_ = {0};  // offsets_[s] = first stream position of shard s; back() = total
  int64_t vocab_size_ = 0;
  std::string flag_name_;
};

}  // namespace tessera
