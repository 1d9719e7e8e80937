// The BPE merge step of encoding: a piece starts as one token per byte and adjacent pairs are
// merged, lowest merge rank first and leftmost first among equal ranks, until no pair in the piece
// has a merge. This equals GPT-2's "merge every occurrence of the best pair, then repeat".
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace tessera {

// One learned merge: tokens `left` and `right`, adjacent, become token `merged`.
struct BpeMerge {
  int32_t left = 0;
  int32_t right = 0;
  int32_t merged = 0;
  bool operator==(const BpeMerge&) const = default;
};

class BpeMerger {
 public:
  BpeMerger() = default;
  // merges[r] has rank ranks[r], or r when `ranks` is empty (lower merges first). Merges may share
  // a rank (tiktoken's, ranked by the token they make); the leftmost pair then goes first.
  explicit BpeMerger(std::span<const BpeMerge> merges, std::span<const int32_t> ranks = {});

  // Rewrites `tokens` (the ids of a piece's bytes) into its merged tokens.
  void merge(std::vector<int32_t>& tokens) const;

 private:
  struct Rule {
    int32_t rank;
    int32_t merged;
  };
  const Rule* find(int32_t left, int32_t right) const;

  std::unordered_map<uint64_t, Rule> rules_;  // key: left << 32 | right
};

}  // namespace tessera
