// BPE training with incremental pair counts. Each distinct pre-tokenised word is stored once with
// its frequency, as a linked list of symbols; each pair knows the positions where it occurs, so a
// merge rewrites only those occurrences and adjusts the counts of the pairs beside them (cost per
// merge ~ occurrences changed, memory linear in the distinct words' bytes). The most frequent pair
// comes from a max-heap whose stale entries (count since changed) are skipped when popped.
#include "data/bpe_trainer.h"

#include <algorithm>
#include <queue>
#include <unordered_map>

#include "core/error.h"
#include "data/pretokenizer.h"

namespace tessera {
namespace {

struct Word {
  std::vector<int32_t> symbols;
  int64_t count = 0;
};

uint64_t pair_key(int32_t left, int32_t right) { return uint64_t(uint32_t(left)) << 32 | uint32_t(right); }
int32_t left_of(uint64_t key) { return int32_t(key >> 32); }
int32_t right_of(uint64_t key) { return int32_t(key & 0xFFFFFFFFu); }

// The distinct pre-tokenised words of the files with their counts, sorted by text so that the
// training order does not depend on hashing.
std::vector<Word> count_words(const std::vector<std::filesystem::path>& files, const DocumentOptions& documents) {
  Pretokenizer pretokenizer;
  std::unordered_map<std::string, int64_t> counts;  // most pieces fit std::string's inline buffer
  std::vector<std::string_view> pieces;
  std::string text;
  for (const std::filesystem::path& file : files) {
    DocumentReader reader(file, documents);
    while (reader.next(text)) {
      std::string_view rest = text;
      while (!rest.empty()) {
        size_t boundary = std::min(rest.find(kEndOfText), rest.size());
        pieces.clear();
        pretokenizer.split(rest.substr(0, boundary), pieces);
        for (std::string_view piece : pieces) ++counts[std::string(piece)];
        rest.remove_prefix(std::min(rest.size(), boundary + kEndOfText.size()));
      }
    }
  }
  std::vector<std::pair<std::string, int64_t>> sorted(counts.begin(), counts.end());
  std::sort(sorted.begin(), sorted.end());
  std::vector<Word> words(sorted.size());
  for (size_t w = 0; w < sorted.size(); ++w) {
    for (unsigned char byte : sorted[w].first) words[w].symbols.push_back(byte);  // byte b is token b
    words[w].count = sorted[w].second;
  }
  return words;
}

// Every distinct word's symbols in one array, each word a doubly linked list of positions, so a
// merge rewrites an occurrence in place. A pair occurrence is named by its left position; each pair
// keeps its count (occurrences weighted by word frequency) and the positions where it was seen, so
// a merge visits only its own occurrences and adjusts the pairs beside them: the cost of a merge is
// proportional to the occurrences it changes, whatever the length of the words that hold them.
class PairIndex {
 public:
  explicit PairIndex(const std::vector<Word>& words) {
    size_t total = 0;
    for (const Word& word : words) total += word.symbols.size();
    TS_CHECK(total < size_t(INT32_MAX), "BPE training corpus has ", total,
             " bytes in distinct pre-tokenised words; at most 2^31 - 1 are supported");
    symbol_.reserve(total);
    prev_.reserve(total);
    next_.reserve(total);
    weight_.reserve(total);
    for (const Word& word : words) {
      auto first = int32_t(symbol_.size());
      for (size_t i = 0; i < word.symbols.size(); ++i) {
        auto position = int32_t(symbol_.size());
        symbol_.push_back(word.symbols[i]);
        prev_.push_back(i == 0 ? -1 : position - 1);
        next_.push_back(i + 1 == word.symbols.size() ? -1 : position + 1);
        weight_.push_back(word.count);
      }
      for (auto position = first; position + 1 < int32_t(symbol_.size()); ++position) add(position);
    }
    rebuild_heap();
  }

  // The most frequent pair (smallest key among equals); false when no pair is left.
  bool best(uint64_t& pair) {
    while (!heap_.empty()) {
      Entry top = heap_.top();
      auto it = pairs_.find(top.pair);
      if (it != pairs_.end() && it->second.count == top.count) {
        pair = top.pair;
        return true;
      }
      heap_.pop();  // stale: the count changed after this entry was pushed
    }
    return false;
  }

  // Rewrites every occurrence of `pair` as `merged`, updating the counts of the pairs around it.
  void merge(uint64_t pair, int32_t merged) {
    const int32_t left = left_of(pair), right = right_of(pair);
    std::vector<int32_t> at = std::move(pairs_.at(pair).at);
    // Left to right, as a scan of each word would go (a word's positions ascend): in "aaa" (a, a)
    // merges at 0, and the occurrence at 1 is gone when its turn comes (its left symbol is dead).
    std::sort(at.begin(), at.end());
    for (int32_t i : at) {
      if (!holds(i, left, right)) continue;  // stale entry, or consumed by the merge just before
      const int32_t j = next_[size_t(i)], before = prev_[size_t(i)], after = next_[size_t(j)];
      if (before >= 0) changed_.push_back(remove(before));  // (x, left)
      changed_.push_back(remove(i));                        // (left, right)
      if (after >= 0) changed_.push_back(remove(j));        // (right, y)
      symbol_[size_t(i)] = merged;
      symbol_[size_t(j)] = kDead;
      next_[size_t(i)] = after;
      if (after >= 0) prev_[size_t(after)] = i;
      if (before >= 0) changed_.push_back(add(before));  // (x, merged)
      if (after >= 0) changed_.push_back(add(i));        // (merged, y)
    }
    publish_changes();
  }

 private:
  static constexpr int32_t kDead = -1;  // the symbol of a position merged into its left neighbour

  struct Pair {
    int64_t count = 0;        // occurrences weighted by the count of their word
    int64_t occurrences = 0;  // positions where the pair is now
    std::vector<int32_t> at;  // every position in `occurrences`, and stale ones (dropped when many)
  };
  struct Entry {
    int64_t count;
    uint64_t pair;
    bool operator<(const Entry& o) const { return count != o.count ? count < o.count : pair > o.pair; }
  };

  bool holds(int32_t i, int32_t left, int32_t right) const {
    return symbol_[size_t(i)] == left && next_[size_t(i)] >= 0 && symbol_[size_t(next_[size_t(i)])] == right;
  }
  uint64_t key_at(int32_t i) const { return pair_key(symbol_[size_t(i)], symbol_[size_t(next_[size_t(i)])]); }

  // Counts the pair whose left symbol is at position i (which has a right neighbour); returns it.
  uint64_t add(int32_t i) {
    uint64_t key = key_at(i);
    Pair& p = pairs_[key];
    p.count += weight_[size_t(i)];
    ++p.occurrences;
    p.at.push_back(i);
    return key;
  }

  // Uncounts it; its entry in `at` goes stale.
  uint64_t remove(int32_t i) {
    uint64_t key = key_at(i);
    Pair& p = pairs_.at(key);
    p.count -= weight_[size_t(i)];
    --p.occurrences;
    return key;
  }

  void rebuild_heap() {
    std::vector<Entry> live;
    live.reserve(pairs_.size());
    for (const auto& [key, p] : pairs_) live.push_back({p.count, key});
    heap_ = std::priority_queue<Entry>(std::less<Entry>(), std::move(live));
  }

  // Pushes the new count of every pair the merge touched; forgets pairs that reached 0,
  // and drops the stale positions of a pair once they outnumber the live ones.
  void publish_changes() {
    std::sort(changed_.begin(), changed_.end());
    changed_.erase(std::unique(changed_.begin(), changed_.end()), changed_.end());
    for (uint64_t key : changed_) {
      auto it = pairs_.find(key);
      Pair& p = it->second;
      if (p.occurrences == 0) {
        pairs_.erase(it);
        continue;
      }
      if (p.at.size() > 2 * size_t(p.occurrences) + 8) {
        std::erase_if(p.at, [&](int32_t i) { return !holds(i, left_of(key), right_of(key)); });
        p.at.shrink_to_fit();
      }
      heap_.push({p.count, key});
    }
    changed_.clear();
    if (heap_.size() > 2 * pairs_.size() + 4096) rebuild_heap();  // mostly stale entries
  }

  std::vector<int32_t> symbol_;  // (S) token at each position of every distinct word, or kDead
  std::vector<int32_t> prev_;    // (S) the live neighbours in the same word, -1 at its ends
  std::vector<int32_t> next_;    // (S)
  std::vector<int64_t> weight_;  // (S) the count of the word holding the position
  std::unordered_map<uint64_t, Pair> pairs_;  // the pairs now in the corpus, none with count 0
  std::priority_queue<Entry> heap_;           // (count, pair) as pushed; stale when the count differs
  std::vector<uint64_t> changed_;
};

}  // namespace

Tokenizer train_bpe(const std::vector<std::filesystem::path>& text_files, int64_t vocab_size,
                    const std::function<void(int64_t merges_done, int64_t merges_total)>& progress,
                    const DocumentOptions& documents) {
  TS_CHECK(vocab_size > 257, "BPE vocab_size ", vocab_size, " is too small: it must be > 257 (256 byte tokens, ",
           kEndOfText, ", at least one merge)");
  TS_CHECK(vocab_size < INT32_MAX, "BPE vocab_size ", vocab_size, " does not fit 32-bit token ids");
  TS_CHECK(!text_files.empty(), "BPE training needs at least one text file");
  std::vector<std::string> tokens(256);
  for (int b = 0; b < 256; ++b) tokens[size_t(b)] = std::string(1, char(b));
  std::vector<BpeMerge> merges;
  const int64_t merges_total = vocab_size - 257;
  PairIndex index(count_words(text_files, documents));
  uint64_t pair = 0;
  while (int64_t(merges.size()) < merges_total && index.best(pair)) {
    auto merged = int32_t(tokens.size());
    tokens.push_back(tokens[size_t(left_of(pair))] + tokens[size_t(right_of(pair))]);
    merges.push_back({left_of(pair), right_of(pair), merged});
    index.merge(pair, merged);
    if (progress) progress(int64_t(merges.size()), merges_total);
  }
  std::string source = "BPE trained on " +
                       (text_files.size() == 1 ? text_files[0].string() : std::to_string(text_files.size()) + " files");
  auto eot = int32_t(tokens.size());
  tokens.emplace_back(kEndOfText);
  return Tokenizer(std::move(tokens), std::move(merges), {{std::string(kEndOfText), eot}}, source);
}

}  // namespace tessera
