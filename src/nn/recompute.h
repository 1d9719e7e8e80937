// The activation recomputation policy of a decoder.
#pragma once

#include <cstdint>
#include <string>

namespace tessera {

// Activation recomputation (--recompute, --recompute-layers): which blocks keep less and re-run
// part of their forward in backward.
//   full:      a block keeps only its output (the next block's input); backward re-runs its forward.
//   selective: a block drops the attention core's output and log-sum-exp and its MLP activation's
//              output; backward re-runs attention and the activation function (Megatron's selective).
// The dropped tensors of every recomputed block share one set of buffers.
enum class Recompute { none, selective, full };

struct RecomputePolicy {
  Recompute mode = Recompute::none;
  int64_t layers = 0;  // the first `layers` blocks; 0 = all
  bool covers(int64_t layer) const { return mode != Recompute::none && (layers == 0 || layer < layers); }
  bool operator==(const RecomputePolicy&) const = default;
};

// Parses "none", "selective" or "full" (the --recompute flag); throws naming the flag otherwise.
Recompute parse_recompute(const std::string& text);

}  // namespace tessera
