// BPE training with incremental pair counts. Each distinct pre-tokenised word is stored once with
// its frequency; `where_` maps a pair to the words that hold it, so a merge rewrites only those
// words and adjusts the counts of the pairs they gain and lose. The most frequent pair comes from a
// max-heap whose stale entries (count since changed) are skipped when popped.
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

class PairIndex {
 public:
  explicit PairIndex(std::vector<Word> words) : words_(std::move(words)) {
    for (size_t w = 0; w < words_.size(); ++w) {
      add_pairs(words_[w], +1);
      const std::vector<int32_t>& s = words_[w].symbols;
      for (size_t i = 0; i + 1 < s.size(); ++i) where_[pair_key(s[i], s[i + 1])].push_back(int32_t(w));
    }
    publish_changes();
  }

  // The most frequent pair (smallest key among equals); false when no pair is left.
  bool best(uint64_t& pair) {
    while (!heap_.empty()) {
      Entry top = heap_.top();
      auto it = counts_.find(top.pair);
      if (it != counts_.end() && it->second == top.count) {
        pair = top.pair;
        return true;
      }
      heap_.pop();  // stale: the count changed after this entry was pushed
    }
    return false;
  }

  // Rewrites every word holding `pair` with `merged` in its place, updating all counts.
  void merge(uint64_t pair, int32_t merged) {
    std::vector<int32_t> holders = std::move(where_[pair]);
    where_.erase(pair);
    std::sort(holders.begin(), holders.end());
    holders.erase(std::unique(holders.begin(), holders.end()), holders.end());
    for (int32_t w : holders) {
      Word& word = words_[size_t(w)];
      add_pairs(word, -1);
      merge_in_word(word.symbols, left_of(pair), right_of(pair), merged);
      add_pairs(word, +1);
      const std::vector<int32_t>& s = word.symbols;
      for (size_t i = 0; i + 1 < s.size(); ++i)  // only pairs with the new token are new to this word
        if (s[i] == merged || s[i + 1] == merged) where_[pair_key(s[i], s[i + 1])].push_back(w);
    }
    publish_changes();
  }

 private:
  struct Entry {
    int64_t count;
    uint64_t pair;
    bool operator<(const Entry& o) const { return count != o.count ? count < o.count : pair > o.pair; }
  };

  static void merge_in_word(std::vector<int32_t>& s, int32_t left, int32_t right, int32_t merged) {
    size_t out = 0;
    for (size_t i = 0; i < s.size(); ++i) {
      if (i + 1 < s.size() && s[i] == left && s[i + 1] == right) {
        s[out++] = merged;
        ++i;
      } else {
        s[out++] = s[i];
      }
    }
    s.resize(out);
  }

  void add_pairs(const Word& word, int sign) {
    const std::vector<int32_t>& s = word.symbols;
    for (size_t i = 0; i + 1 < s.size(); ++i) {
      uint64_t key = pair_key(s[i], s[i + 1]);
      counts_[key] += sign * word.count;
      changed_.push_back(key);
    }
  }

  // Pushes the new count of every pair touched since the last call; forgets pairs that reached 0.
  void publish_changes() {
    std::sort(changed_.begin(), changed_.end());
    changed_.erase(std::unique(changed_.begin(), changed_.end()), changed_.end());
    for (uint64_t key : changed_) {
      auto it = counts_.find(key);
      if (it->second > 0) {
        heap_.push({it->second, key});
      } else {
        counts_.erase(it);
      }
    }
    changed_.clear();
  }

  std::vector<Word> words_;
  std::unordered_map<uint64_t, int64_t> counts_;
  std::unordered_map<uint64_t, std::vector<int32_t>> where_;  // may list a word more than once
  std::priority_queue<Entry> heap_;
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
