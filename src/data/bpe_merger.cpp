// BPE merging inside one piece in O(n log n): the symbols form a linked list over their original
// positions and candidate pairs wait in a min-heap ordered by (rank, position). A popped candidate
// is stale when either side has since been merged away; it is then dropped.
#include "data/bpe_merger.h"

#include <queue>

namespace tessera {
namespace {

uint64_t pair_key(int32_t left, int32_t right) { return uint64_t(uint32_t(left)) << 32 | uint32_t(right); }

struct Candidate {
  int32_t rank;
  int32_t position;  // of the left symbol
  int32_t left;
  int32_t right;
  bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : position > o.position; }
};

}  // namespace

BpeMerger::BpeMerger(std::span<const BpeMerge> merges, std::span<const int32_t> ranks) {
  rules_.reserve(merges.size());
  for (size_t r = 0; r < merges.size(); ++r) {
    int32_t rank = ranks.empty() ? int32_t(r) : ranks[r];
    auto [it, added] = rules_.try_emplace(pair_key(merges[r].left, merges[r].right), Rule{rank, merges[r].merged});
    if (!added && rank < it->second.rank) it->second = Rule{rank, merges[r].merged};
  }
}

const BpeMerger::Rule* BpeMerger::find(int32_t left, int32_t right) const {
  auto it = rules_.find(pair_key(left, right));
  return it == rules_.end() ? nullptr : &it->second;
}

void BpeMerger::merge(std::vector<int32_t>& tokens) const {
  const auto n = int32_t(tokens.size());
  if (n < 2) return;
  // next[i] / prev[i]: neighbours of the live symbol at position i (-1 at the ends); a symbol
  // merged into its left neighbour is marked dead with tokens[i] = -1.
  std::vector<int32_t> next(tokens.size()), prev(tokens.size());
  for (int32_t i = 0; i < n; ++i) {
    next[size_t(i)] = i + 1 < n ? i + 1 : -1;
    prev[size_t(i)] = i - 1;
  }
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto offer = [&](int32_t position) {
    int32_t right = next[size_t(position)];
    if (right < 0) return;
    int32_t a = tokens[size_t(position)], b = tokens[size_t(right)];
    if (const Rule* rule = find(a, b)) heap.push({rule->rank, position, a, b});
  };
  for (int32_t i = 0; i + 1 < n; ++i) offer(i);

  while (!heap.empty()) {
    Candidate c = heap.top();
    heap.pop();
    int32_t right = next[size_t(c.position)];
    if (tokens[size_t(c.position)] != c.left || right < 0 || tokens[size_t(right)] != c.right) continue;
    tokens[size_t(c.position)] = find(c.left, c.right)->merged;
    tokens[size_t(right)] = -1;
    int32_t after = next[size_t(right)];
    next[size_t(c.position)] = after;
    if (after >= 0) prev[size_t(after)] = c.position;
    if (prev[size_t(c.position)] >= 0) offer(prev[size_t(c.position)]);
    offer(c.position);
  }
  size_t kept = 0;
  for (int32_t t : tokens)
    if (t >= 0) tokens[kept++] = t;
  tokens.resize(kept);
}

}  // namespace tessera
