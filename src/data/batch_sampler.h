// Which tokens form global batch k. The stream is cut into windows of T + 1 tokens starting every T
// (inputs = first T, targets = last T); an epoch holds E = W / B global batches of B windows each.
// Batch k depends on (seed, k) only (DESIGN.md invariant 2): a micro-batch or a data-parallel
// rank's share is a sub-range of its sequences, and the resumable loader position is just k.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string_view>
#include <vector>

#include "data/token_dataset.h"

namespace tessera {

enum class DataOrder {
  sequential,  // batch k = tokens [k·B·T, k·B·T + B·T + 1) within an epoch
  shuffled,    // windows in a permutation that depends on (seed, epoch) only
};

// "sequential" or "shuffled"; anything else throws an error naming --data-order.
DataOrder parse_data_order(std::string_view text);
std::string_view data_order_name(DataOrder order);

// Throws unless batch_index >= 0 and sequences [first_sequence, first_sequence + num_sequences) lie
// within a global batch of batch_size (--batch-size).
void check_batch_range(int64_t batch_index, int64_t first_sequence, int64_t num_sequences, int64_t batch_size);

class BatchSampler {
 public:
  // `dataset` must outlive the sampler. batch_size = B (global batch, in sequences), seq_len = T,
  // which must be the length the dataset's documents were packed for, if they were.
  BatchSampler(const TokenDataset& dataset, int64_t batch_size, int64_t seq_len, DataOrder order, uint64_t seed);
  BatchSampler(TokenDataset&& dataset, int64_t, int64_t, DataOrder, uint64_t) = delete;  // would dangle
  BatchSampler(const BatchSampler&) = delete;
  BatchSampler& operator=(const BatchSampler&) = delete;

  int64_t batch_size() const { return batch_size_; }
  int64_t seq_len() const { return seq_len_; }
  int64_t num_windows() const { return num_windows_; }
  int64_t batches_per_epoch() const { return batches_per_epoch_; }

  // The window (it starts at stream position window · T) that sequence `sequence` of batch k reads.
  int64_t window_of(int64_t batch_index, int64_t sequence) const;

  // Fills sequences [first_sequence, first_sequence + num_sequences) of global batch `batch_index`:
  // inputs and targets are (num_sequences, T), targets shifted one token ahead of inputs; a target
  // its shard's loss mask excludes is kIgnoredTarget. Safe to call from several threads at once.
  void fill(int64_t batch_index, int64_t first_sequence, int64_t num_sequences, int32_t* inputs,
            int32_t* targets) const;
  // How many of those sequences' targets are training targets (num_sequences · T without masks).
  int64_t count_trained(int64_t batch_index, int64_t first_sequence, int64_t num_sequences) const;

 private:
  using Permutation = std::vector<int64_t>;

  // The window order of the epoch holding batch k; null for sequential order.
  std::shared_ptr<const Permutation> permutation_for(int64_t batch_index) const;
  int64_t window_in(const Permutation* permutation, int64_t batch_index, int64_t sequence) const;

  const TokenDataset* dataset_;
  int64_t batch_size_;
  int64_t seq_len_;
  DataOrder order_;
  uint64_t seed_;
  int64_t num_windows_ = 0;
  int64_t batches_per_epoch_ = 0;

  mutable std::mutex cache_mutex_;  // guards the two members below
  mutable int64_t cached_epoch_ = -1;
  mutable std::shared_ptr<const Permutation> cached_permutation_;
};

}  // namespace tessera
