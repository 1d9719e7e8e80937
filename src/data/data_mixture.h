// A training or validation set made of one or several weighted sources of token shards (as
// Megatron's blended datasets): `--train-data 'web/train_*.bin'` is one source;
// `--train-data '0.7:web/train_*.bin,0.3:code/train_*.bin'` draws 70% and 30% of every global batch's
// sequences from each. Which source and which of its windows sequence s of batch k reads depends on
// (seed, k, s) only (DESIGN.md invariant 2): the global sequence index g = k·B + s is shared out
// among the sources in closed form, so a resumed run needs no loader state, every prefix of the
// run's sequences holds each source's share to within (sources - 1) / 2 sequences, and no table of
// the run's draws is ever built.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "data/batch_sampler.h"
#include "data/token_dataset.h"

namespace tessera {

struct DataSource {
  std::string glob;
  double weight = 1;  // normalised: the sources' weights sum to 1
};

// "GLOB" or "W1:GLOB1,W2:GLOB2,..." (every source of a mixture weighted; weights are positive and
// normalised; a glob given twice is refused). Errors name `flag_name` and show the syntax.
std::vector<DataSource> parse_data_sources(std::string_view text, std::string_view flag_name);

// Whether two --train-data values read the same data: the same sources in the same order, with the
// same weights and globs matching the same files (a glob or another spelling of one file's path is
// the same data). False when either no longer parses or matches.
bool same_data_sources(std::string_view a, std::string_view b);

class DataMixture {
 public:
  // Opens every source's shards (each token checked against `vocab_size`). batch_size = B (the
  // global batch, in sequences), seq_len = T. One source reads exactly as BatchSampler does.
  DataMixture(const std::string& text, int64_t vocab_size, int64_t batch_size, int64_t seq_len, DataOrder order,
              uint64_t seed, std::string_view flag_name);
  DataMixture(const DataMixture&) = delete;
  DataMixture& operator=(const DataMixture&) = delete;

  const std::vector<DataSource>& sources() const { return sources_; }
  int64_t batch_size() const { return batch_size_; }
  int64_t seq_len() const { return seq_len_; }

  // One source's global batches per epoch (validation reads its sources one at a time).
  int64_t batches_per_epoch() const;

  struct Draw {
    int source;     // which source global sequence g reads
    int64_t index;  // the how-manyth of that source's sequences it is
  };
  Draw draw(int64_t global_sequence) const;
  // How many of the first `num_sequences` global sequences source `source` provides.
  int64_t drawn_from(int source, int64_t num_sequences) const;

  // As BatchSampler::fill: sequences [first_sequence, first_sequence + num_sequences) of global
  // batch `batch_index`, inputs and targets (num_sequences, T). Safe to call from several threads.
  void fill(int64_t batch_index, int64_t first_sequence, int64_t num_sequences, int32_t* inputs,
            int32_t* targets) const;
  // As BatchSampler::count_trained: how many of those sequences' targets train (loss masks).
  int64_t count_trained(int64_t batch_index, int64_t first_sequence, int64_t num_sequences) const;

  // Whether any source's shards carry loss masks (data/loss_mask.h).
  bool has_loss_masks() const;
  // Whether a source's shards hold fine-tuning records packed into windows (tokenize --pack-seq-len).
  bool has_packed_records() const;
  // One line per source: its share, tokens, windows and the epochs `batches` global batches take of
  // it, and the share of its tokens that are targets when it has loss masks.
  std::string summary(int64_t batches) const;

 private:
  // Throws naming both sources when two of them match one shard file.
  void require_distinct_shards(std::string_view flag_name) const;
  // Source d's sampler over "batches" of one sequence; errors name the source.
  std::unique_ptr<BatchSampler> source_sampler(size_t d, int64_t seq_len, DataOrder order, uint64_t seed,
                                               std::string_view flag_name) const;

  std::vector<DataSource> sources_;
  // split_[d] = w_d / (w_d + ... + w_last): the share of the sequences the sources before d left that
  // source d takes. The last source takes the rest.
  std::vector<double> split_;
  std::vector<std::unique_ptr<TokenDataset>> datasets_;
  // One source: its sampler over global batches of B. Several: one per source over "batches" of one
  // sequence, indexed by Draw::index.
  std::vector<std::unique_ptr<BatchSampler>> samplers_;
  int64_t batch_size_;
  int64_t seq_len_;
};

}  // namespace tessera
