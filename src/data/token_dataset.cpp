// TokenDataset: glob expansion, shard opening with the flag name on every error, and reads of the
// concatenated stream that walk across shard boundaries.
#include "data/token_dataset.h"

#include <glob.h>

#include <algorithm>

#include "core/error.h"

namespace tessera {

// Sorted bytewise so the stream order never depends on the locale.
std::vector<std::string> expand_glob(const std::string& pattern, const std::string& flag) {
  glob_t matches{};
  int rc = ::glob(pattern.c_str(), GLOB_BRACE, nullptr, &matches);
  std::vector<std::string> paths;
  if (rc == 0) paths.assign(matches.gl_pathv, matches.gl_pathv + matches.gl_pathc);
  ::globfree(&matches);
  TS_CHECK(rc != GLOB_NOMATCH, flag, ": no file matches '", pattern, "'; check the path or tokenize the corpus first");
  TS_CHECK(rc == 0, flag, ": cannot expand '", pattern, "' (", rc == GLOB_NOSPACE ? "out of memory" : "read error",
           "); check the directory permissions");
  std::sort(paths.begin(), paths.end());
  const auto twice = std::adjacent_find(paths.begin(), paths.end());
  TS_CHECK(twice == paths.end(), flag, ": '", pattern, "' matches ", *twice, " twice (through two of its {a,b} ",
           "alternatives); name each file once");
  return paths;
}

TokenDataset TokenDataset::open(const std::string& glob_pattern, int64_t vocab_size, std::string_view flag_name) {
  const std::string flag(flag_name);
  TS_CHECK(!glob_pattern.empty(), flag, ": empty path; give a file or a glob pattern such as 'data/train_*.bin'");
  TS_CHECK(vocab_size > 0, flag, ": the model's vocabulary size must be positive, got ", vocab_size);
  TokenDataset dataset;
  dataset.vocab_size_ = vocab_size;
  dataset.flag_name_ = flag;
  std::vector<std::string> without_mask;  // shards, when others have a mask
  for (const std::string& path : expand_glob(glob_pattern, flag)) {
    if (std::filesystem::path(path).extension() == ".mask") continue;  // a shard's companion
    try {
      const TokenShard& shard = dataset.shards_.emplace_back(path);
      dataset.offsets_.push_back(dataset.offsets_.back() + shard.num_tokens());
      const std::filesystem::path mask_path = loss_mask_path(path);
      if (!std::filesystem::exists(mask_path)) {
        without_mask.push_back(path);
        continue;
      }
      const LossMask& mask = dataset.masks_.emplace_back(mask_path);
      TS_CHECK(mask.num_tokens() == shard.num_tokens(), "loss mask ", mask_path.string(), " covers ",
               mask.num_tokens(), " tokens but its shard holds ", shard.num_tokens(),
               "; re-create both with tessera tokenize");
      TS_CHECK(mask.packed_seq_len() == dataset.masks_.front().packed_seq_len(), "loss mask ", mask_path.string(),
               " was packed for sequences of ", mask.packed_seq_len(), " tokens but ",
               dataset.masks_.front().path().string(), " for ", dataset.masks_.front().packed_seq_len(),
               "; give shards of one tokenize run");
    } catch (const Error& e) {
      throw Error(flag + ": " + e.what(), e.where());
    }
  }
  TS_CHECK(!dataset.shards_.empty(), flag, ": '", glob_pattern, "' matches loss masks (*.mask) only; give the ",
           "token shards (e.g. 'data/train_*.bin')");
  TS_CHECK(dataset.masks_.empty() || without_mask.empty(), flag, ": ", dataset.masks_.size(), " of the ",
           dataset.shards_.size(), " shards have a loss mask but ", without_mask.front(), " has none (",
           loss_mask_path(without_mask.front()).string(), "); copy the missing masks or train on the two kinds ",
           "as separate sources of a mixture");
  TS_CHECK(dataset.masks_.empty() || dataset.num_trained() > 0, flag, ": the loss masks of '", glob_pattern,
           "' mark none of its ", dataset.num_tokens(), " tokens as a target: nothing in it to train or evaluate ",
           "on, and its loss would read 0; re-create the shards and masks with tessera tokenize (completions and assistant ",
           "turns are the targets)");
  return dataset;
}

template <typename Piece>
void TokenDataset::for_each_piece(int64_t start, int64_t count, Piece&& piece) const {
  TS_CHECK(start >= 0 && count >= 0 && start <= num_tokens() - count, flag_name_, ": read of ", count,
           " tokens at position ", start, " is outside the ", num_tokens(), " tokens of the data");
  if (count == 0) return;
  // The last shard that starts at or before `start` (empty shards before it are skipped this way).
  size_t s = size_t(std::upper_bound(offsets_.begin(), offsets_.end(), start) - offsets_.begin()) - 1;
  for (int64_t done = 0; done < count; ++s) {
    const int64_t local = start + done - offsets_[s];
    const int64_t n = std::min(count - done, shards_[s].num_tokens() - local);
    piece(s, local, n, done);
    done += n;
  }
}

void TokenDataset::read(int64_t start, int64_t count, int32_t* out) const {
  for_each_piece(start, count, [&](size_t s, int64_t local, int64_t n, int64_t done) {
    const TokenShard& shard = shards_[s];
    for (int64_t i = 0; i < n; ++i) {
      const uint32_t token = shard.token(local + i);
      TS_CHECK(int64_t(token) < vocab_size_, flag_name_, ": shard ", shard.path().string(), ": token id ", token,
               " at position ", local + i, " is >= the model's vocabulary size ", vocab_size_,
               "; the data was tokenized with a larger vocabulary than the model's",
               " (re-tokenize it or raise vocab_size)");
      out[done + i] = int32_t(token);
    }
  });
}

int64_t TokenDataset::num_trained() const {
  if (masks_.empty()) return num_tokens();
  int64_t trained = 0;
  for (const LossMask& mask : masks_) trained += mask.num_trained();
  return trained;
}

void TokenDataset::read_loss_mask(int64_t start, int64_t count, uint8_t* out) const {
  for_each_piece(start, count, [&](size_t s, int64_t local, int64_t n, int64_t done) {
    for (int64_t i = 0; i < n; ++i) out[done + i] = masks_.empty() || masks_[s].trained(local + i) ? 1 : 0;
  });
}

}  // namespace tessera
