// The parallel layout of a run: degrees of data (dp), tensor (tp), pipeline (pp), context (cp) and
// expert (ep) parallelism, validated once against the world size and the model. Rank order puts tp
// innermost, then cp, then dp, with pp outermost (DESIGN.md): rank = ((pp_i*dp + dp_i)*cp + cp_i)*tp + tp_i.
// ep groups are carved out of dp (ep divides dp; Megatron's convention).
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace tessera {

// The model sizes a layout must divide, as plain numbers so that parallel/ stays beneath nn/:
// train/ fills it from the model config (GPT-2: ffn_channels = 4·C).
struct ModelShape {
  int64_t num_layers = 1;    // L
  int64_t num_heads = 1;     // NH
  int64_t channels = 1;      // C
  int64_t ffn_channels = 4;  // the MLP's hidden width
  int64_t num_experts = 0;   // per MoE layer; 0 for a dense model
};

enum class Axis { tp, cp, dp, pp };  // innermost first; ep is derived

struct ParallelDims {
  int dp = 1, tp = 1, pp = 1, cp = 1, ep = 1;

  int world_size() const { return dp * tp * pp * cp; }
  // Fills dp when it is 0 (= whatever the world leaves) and checks every rule, naming the flags
  // and the numbers: each degree ≥ 1, dp·tp·pp·cp == world, ep divides dp.
  static ParallelDims resolve(ParallelDims requested, int world_size);
  // Checks the degrees against the model and the batch: tp divides the heads, the channels and the
  // MLP width, pp ≤ the layers, 2·cp divides seq_len, ep divides
  // the experts (and is 1 for a dense model), and dp·micro_batch divides the global batch
  // (batch_size sequences; micro_batch = sequences per forward pass on one rank). Throws naming
  // the flag and the model dimension.
  void check_model(const ModelShape& model, int64_t seq_len, int64_t batch_size, int64_t micro_batch) const;
  std::string to_string() const;  // "dp=2 tp=1 pp=1 cp=1 ep=1"
};

// A rank's coordinates in the grid.
struct GridCoord {
  int tp = 0, cp = 0, dp = 0, pp = 0;
};

GridCoord grid_coord(const ParallelDims& dims, int rank);
int grid_rank(const ParallelDims& dims, const GridCoord& coord);

}  // namespace tessera
