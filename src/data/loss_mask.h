// A token shard's loss mask, the file beside it (train_000000.bin -> train_000000.mask) that says
// which of its tokens are training targets: supervised fine-tuning data trains on the completions
// and not on the prompts. A header of 256 int32 (magic 20241124, version 1, token count, and the
// sequence length T its documents were packed for, 0 when they were not) as the shard's, then one
// bit per token, least significant bit first: bit i of byte i / 8 is 1 when token i is a target. A
// shard without one trains on every token.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <vector>

namespace tessera {

inline constexpr int32_t kLossMaskMagic = 20241124;

// The mask file of `shard`: its name with the extension .mask.
std::filesystem::path loss_mask_path(const std::filesystem::path& shard);

class LossMask {
 public:
  // Reads `path`; throws tessera::Error naming the file when it is not a valid mask.
  explicit LossMask(const std::filesystem::path& path);

  const std::filesystem::path& path() const { return path_; }
  int64_t num_tokens() const { return num_tokens_; }
  int64_t num_trained() const { return num_trained_; }  // of its tokens, the training targets
  int64_t packed_seq_len() const { return packed_seq_len_; }  // 0: not packed

  // Whether token i is a training target, 0 <= i < num_tokens().
  bool trained(int64_t i) const { return (bits_[size_t(i >> 3)] >> (i & 7)) & 1u; }

 private:
  std::filesystem::path path_;
  int64_t num_tokens_ = 0;
  int64_t num_trained_ = 0;
  int64_t packed_seq_len_ = 0;
  std::vector<uint8_t> bits_;
};

// Writes the mask of a shard whose token i is a target when trained[i] != 0, atomically;
// packed_seq_len as in the header.
void write_loss_mask(const std::filesystem::path& path, std::span<const uint8_t> trained, int64_t packed_seq_len = 0);

}  // namespace tessera
