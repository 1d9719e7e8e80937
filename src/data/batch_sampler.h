// Which tokens form global batch k. The stream is cut into windows of T + 1 tokens starting every T
// (inputs = first T, targets = last T); an epoch holds E = W / B global batches of B windows each.
// Batch k depends on (seed, k) only (DESIGN.md invariant 2): a micro-batch or a data-parallel
// rank's share is a sub-range of its sequences. A run's loader position is the number of sequences
// it consumed (g = k·B + s), so that a resume under another --batch-size continues at the first
// unseen sequence (SequenceOrigin).
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

// Sequence g of a run (g counts every sequence its steps read) sits in the epoch and slot the run's
// sampler order gives it: with an unchanged --batch-size B, g = k·B + s is sequence s of batch k. An
// epoch holds L = E·B sequences (E = batches per epoch), so when a resume changes B (and so L), the
// run records where the new epochs start: sequence `sequence` is slot 0 of epoch `epoch` (it may lie
// before the resume point, when the resume continues an epoch part-way). Mixtures draw by g alone
// and always keep the zero origin.
struct SequenceOrigin {
  int64_t sequence = 0;
  int64_t epoch = 0;
  bool operator==(const SequenceOrigin&) const = default;
};

// Sequence g (>= origin.sequence) as global batch `batch`, sequence `sequence` of it, of a sampler
// of batch_size B and batches_per_epoch E (unused when origin.epoch is 0).
struct BatchSequence {
  int64_t batch = 0;
  int64_t sequence = 0;
};
BatchSequence locate_sequence(int64_t g, SequenceOrigin origin, int64_t batch_size, int64_t batches_per_epoch);

// The origin that continues a single source's order at its first unseen sequence `consumed` after
// the epoch length changes from old_epoch_sequences (L = E·B of the old --batch-size) to
// new_epoch_sequences: the old run was at slot c of epoch e; the new one reads slots c, c + 1, ... of
// that epoch's order, or starts epoch e + 1 when its shorter epochs end before slot c. Every window
// is then read at most once an epoch, in the order an uninterrupted run reads it.
SequenceOrigin continue_epoch(int64_t consumed, SequenceOrigin old_origin, int64_t old_epoch_sequences,
                              int64_t new_epoch_sequences);

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
