// BatchSampler: window arithmetic and the per-epoch Fisher-Yates permutation, drawn from Philox
// keyed on the seed with the epoch as stream, so the order never depends on the process layout.
#include "data/batch_sampler.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <string>
#include <utility>

#include "core/error.h"
#include "core/ignored_target.h"
#include "core/rng.h"

namespace tessera {

DataOrder parse_data_order(std::string_view text) {
  if (text == "sequential") return DataOrder::sequential;
  if (text == "shuffled") return DataOrder::shuffled;
  TS_FAIL("--data-order: unknown value '", text, "'; use 'shuffled' or 'sequential'");
}

std::string_view data_order_name(DataOrder order) {
  return order == DataOrder::sequential ? "sequential" : "shuffled";
}

void check_batch_range(int64_t batch_index, int64_t first_sequence, int64_t num_sequences, int64_t batch_size) {
  TS_CHECK(batch_index >= 0, "data loader: batch index must be non-negative, got ", batch_index);
  TS_CHECK(first_sequence >= 0 && num_sequences >= 0 && first_sequence <= batch_size - num_sequences,
           "data loader: sequences [", first_sequence, ", ", first_sequence + num_sequences,
           ") are outside the global batch of ", batch_size, " (--batch-size)");
}

BatchSequence locate_sequence(int64_t g, SequenceOrigin origin, int64_t batch_size, int64_t batches_per_epoch) {
  TS_CHECK(g >= origin.sequence && origin.sequence >= 0 && origin.epoch >= 0, "data loader: sequence ", g,
           " lies before the data origin (sequence ", origin.sequence, ", epoch ", origin.epoch, ")");
  // Epoch origin.epoch + t / L, slot t % L with L = E·B: batch (epoch·E + slot / B), as t / B.
  const int64_t t = g - origin.sequence;
  return {origin.epoch * batches_per_epoch + t / batch_size, t % batch_size};
}

SequenceOrigin continue_epoch(int64_t consumed, SequenceOrigin old_origin, int64_t old_epoch_sequences,
                              int64_t new_epoch_sequences) {
  TS_CHECK(consumed >= old_origin.sequence && old_epoch_sequences > 0 && new_epoch_sequences > 0,
           "data loader: cannot continue at sequence ", consumed);
  const int64_t t = consumed - old_origin.sequence;
  const int64_t epoch = old_origin.epoch + t / old_epoch_sequences, slot = t % old_epoch_sequences;
  if (slot >= new_epoch_sequences) return {consumed, epoch + 1};  // the new epochs end before that slot
  return {consumed - slot, epoch};
}

BatchSampler::BatchSampler(const TokenDataset& dataset, int64_t batch_size, int64_t seq_len, DataOrder order,
                           uint64_t seed)
    : dataset_(&dataset), batch_size_(batch_size), seq_len_(seq_len), order_(order), seed_(seed) {
  TS_CHECK(batch_size > 0, "--batch-size must be positive, got ", batch_size);
  TS_CHECK(seq_len > 0, "--seq-len must be positive, got ", seq_len);
  TS_CHECK(batch_size <= (std::numeric_limits<int64_t>::max() - 1) / seq_len, "--batch-size ", batch_size,
           " times --seq-len ", seq_len, " overflows a 64-bit token count; lower them");
  const int64_t packed = dataset.packed_seq_len();
  TS_CHECK(packed == 0 || packed == seq_len, dataset.flag_name(), ": the shards were packed for sequences of ", packed,
           " tokens (tokenize --pack-seq-len ", packed, "), which --seq-len ", seq_len, " would cut across; train with ",
           "--seq-len ", packed, " or tokenize again with --pack-seq-len ", seq_len);
  const int64_t n = dataset.num_tokens();
  num_windows_ = n > 0 ? (n - 1) / seq_len : 0;
  batches_per_epoch_ = num_windows_ / batch_size;
  TS_CHECK(batches_per_epoch_ > 0, dataset.flag_name(), ": ", n, " tokens are not enough for one global batch of ",
           batch_size, " sequences of ", seq_len, " tokens, which needs ", batch_size * seq_len + 1,
           "; add data or lower --batch-size or --seq-len");
}

int64_t BatchSampler::window_of(int64_t batch_index, int64_t sequence) const {
  check_batch_range(batch_index, sequence, 1, batch_size_);
  return window_in(permutation_for(batch_index).get(), batch_index, sequence);
}

void BatchSampler::fill(int64_t batch_index, int64_t first_sequence, int64_t num_sequences, int32_t* inputs,
                        int32_t* targets) const {
  check_batch_range(batch_index, first_sequence, num_sequences, batch_size_);
  const std::shared_ptr<const Permutation> permutation = permutation_for(batch_index);
  const int64_t T = seq_len_;
  std::vector<int32_t> window(size_t(T + 1));  // (T + 1)
  std::vector<uint8_t> trained(dataset_->has_loss_mask() ? size_t(T) : 0);  // (T): the targets' mask bits
  for (int64_t i = 0; i < num_sequences; ++i) {
    const int64_t w = window_in(permutation.get(), batch_index, first_sequence + i);
    dataset_->read(w * T, T + 1, window.data());
    std::copy(window.begin(), window.end() - 1, inputs + i * T);
    std::copy(window.begin() + 1, window.end(), targets + i * T);
    if (trained.empty()) continue;
    dataset_->read_loss_mask(w * T + 1, T, trained.data());
    for (int64_t t = 0; t < T; ++t)
      if (!trained[size_t(t)]) targets[i * T + t] = kIgnoredTarget;
  }
}

int64_t BatchSampler::count_trained(int64_t batch_index, int64_t first_sequence, int64_t num_sequences) const {
  check_batch_range(batch_index, first_sequence, num_sequences, batch_size_);
  const int64_t T = seq_len_;
  if (!dataset_->has_loss_mask()) return num_sequences * T;
  const std::shared_ptr<const Permutation> permutation = permutation_for(batch_index);
  std::vector<uint8_t> trained(static_cast<size_t>(T));
  int64_t count = 0;
  for (int64_t i = 0; i < num_sequences; ++i) {
    const int64_t w = window_in(permutation.get(), batch_index, first_sequence + i);
    dataset_->read_loss_mask(w * T + 1, T, trained.data());
    count += std::count(trained.begin(), trained.end(), uint8_t(1));
  }
  return count;
}

std::shared_ptr<const BatchSampler::Permutation> BatchSampler::permutation_for(int64_t batch_index) const {
  if (order_ == DataOrder::sequential) return nullptr;
  const int64_t epoch = batch_index / batches_per_epoch_;
  std::lock_guard<std::mutex> lock(cache_mutex_);
  if (epoch != cached_epoch_) {
    // Fisher-Yates over all W windows; the epoch is the Philox stream, so every epoch differs.
    auto permutation = std::make_shared<Permutation>(size_t(num_windows_));
    std::iota(permutation->begin(), permutation->end(), int64_t(0));
    Rng rng(seed_, stream_id("data.order") ^ uint64_t(epoch));
    Permutation& p = *permutation;
    for (int64_t i = num_windows_ - 1; i > 0; --i) std::swap(p[size_t(i)], p[rng.below(uint64_t(i + 1))]);
    cached_permutation_ = std::move(permutation);
    cached_epoch_ = epoch;
  }
  return cached_permutation_;
}

int64_t BatchSampler::window_in(const Permutation* permutation, int64_t batch_index, int64_t sequence) const {
  const int64_t slot = (batch_index % batches_per_epoch_) * batch_size_ + sequence;
  return permutation ? (*permutation)[size_t(slot)] : slot;
}

}  // namespace tessera
