// TokenDataset: glob expansion, shard opening with the flag name on every error, and reads of the
// concatenated stream that walk across shard boundaries.
#include "data/token_dataset.h"

#include <glob.h>

#include <algorithm>

#include "core/error.h"

namespace tessera {

namespace {

// The paths matching `pattern`, sorted bytewise so the stream order never depends on the locale.
std::vector<std::string> expand_glob(const std::string& pattern, const std::string& flag) {
  glob_t matches{};
  int rc = ::glob(pattern.c_str(), 0, nullptr, &matches);
  std::vector<std::string> paths;
  if (rc == 0) paths.assign(matches.gl_pathv, matches.gl_pathv + matches.gl_pathc);
  ::globfree(&matches);
  TS_CHECK(rc != GLOB_NOMATCH, flag, ": no file matches '", pattern, "'; check the path or tokenize the corpus first");
  TS_CHECK(rc == 0, flag, ": cannot expand '", pattern, "' (", rc == GLOB_NOSPACE ? "out of memory" : "read error",
           "); check the directory permissions");
  std::sort(paths.begin(), paths.end());
  return paths;
}

}  // namespace

TokenDataset TokenDataset::open(const std::string& glob_pattern, int64_t vocab_size, std::string_view flag_name) {
  const std::string flag(flag_name);
  TS_CHECK(!glob_pattern.empty(), flag, ": empty path; give a file or a glob pattern such as 'data/train_*.bin'");
  TS_CHECK(vocab_size > 0, flag, ": the model's vocabulary size must be positive, got ", vocab_size);
  TokenDataset dataset;
  dataset.vocab_size_ = vocab_size;
  dataset.flag_name_ = flag;
  for (const std::string& path : expand_glob(glob_pattern, flag)) {
    try {
      dataset.shards_.emplace_back(path);
    } catch (const Error& e) {
      throw Error(flag + ": " + e.what(), e.where());
    }
    dataset.offsets_.push_back(dataset.offsets_.back() + dataset.shards_.back().num_tokens());
  }
  return dataset;
}

void TokenDataset::read(int64_t start, int64_t count, int32_t* out) const {
  TS_CHECK(start >= 0 && count >= 0 && start <= num_tokens() - count, flag_name_, ": read of ", count,
           " tokens at position ", start, " is outside the ", num_tokens(), " tokens of the data");
  if (count == 0) return;
  // The last shard that starts at or before `start` (empty shards before it are skipped this way).
  size_t s = size_t(std::upper_bound(offsets_.begin(), offsets_.end(), start) - offsets_.begin()) - 1;
  while (count > 0) {
    const TokenShard& shard = shards_[s];
    const int64_t local = start - offsets_[s];
    const int64_t n = std::min(count, shard.num_tokens() - local);
    for (int64_t i = 0; i < n; ++i) {
      const uint32_t token = shard.token(local + i);
      TS_CHECK(int64_t(token) < vocab_size_, flag_name_, ": shard ", shard.path().string(), ": token id ", token,
               " at position ", local + i, " is >= the model's vocabulary size ", vocab_size_,
               "; the data was tokenized with a larger vocabulary than the model's",
               " (re-tokenize it or raise vocab_size)");
      out[i] = int32_t(token);
    }
    out += n;
    start += n;
    count -= n;
    ++s;
  }
}

}  // namespace tessera
