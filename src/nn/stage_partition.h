// Which transformer blocks each pipeline chunk holds (issue 8): P·V chunks, each a contiguous run of
// at least one block, chunk 0 also the embedding, the last chunk also the final norm and head; chunk
// c lives on pipeline rank c mod P (DecoderStage: what one rank holds).
// Balanced by cost: a block costs its training FLOPs per token (6 per active parameter, plus 6·C·T for
// attention, the llm.c convention), the head 6·Vp·C, the embedding lookup nothing; the boundaries
// minimise the most expensive chunk. Or given explicitly (--pipeline-boundaries).
#pragma once

#include <cstdint>
#include <vector>

#include "nn/model_config.h"

namespace tessera {

// first_block (chunks + 1 entries): chunk c holds blocks [first_block[c], first_block[c + 1]).
using StageBoundaries = std::vector<int64_t>;

// Per token training FLOPs of each block, and of the head (which the last chunk carries).
std::vector<double> block_costs(const ModelConfig& config, int64_t seq_len);
double head_cost(const ModelConfig& config);

// Each chunk's cost under `boundaries`.
std::vector<double> chunk_costs(const ModelConfig& config, int64_t seq_len, const StageBoundaries& boundaries);

// The boundaries whose most expensive chunk is cheapest (ties: earlier boundaries). Throws naming
// the numbers when there are more chunks than blocks.
StageBoundaries balanced_boundaries(const ModelConfig& config, int64_t seq_len, int chunks);

// From --pipeline-boundaries: the chunks - 1 interior boundaries, each the first block of a chunk,
// strictly increasing inside (0, num_layers). Throws naming what is wrong and what would be valid.
StageBoundaries explicit_boundaries(const std::vector<int64_t>& interior, int64_t num_layers, int chunks);

// Blocks [first, end).
struct BlockRange {
  int64_t first = 0, end = 0;
  bool contains(int64_t block) const { return block >= first && block < end; }
  bool operator==(const BlockRange&) const = default;
};

// The part of the decoder one pipeline rank holds: its chunks' blocks in model order, with the
// embedding when a chunk starts at block 0 and the final norm and head when one ends at the last
// block. A whole decoder is one chunk of every block.
struct DecoderStage {
  std::vector<BlockRange> chunks;
  int64_t num_layers = 0;
  bool has_embedding() const { return chunks.front().first == 0; }
  bool has_head() const { return chunks.back().end == num_layers; }
  bool is_whole() const { return chunks.size() == 1 && has_embedding() && has_head(); }
  bool holds_block(int64_t block) const;
  bool operator==(const DecoderStage&) const = default;
};

DecoderStage whole_decoder(int64_t num_layers);
// Pipeline rank `rank`'s chunks under `boundaries` (P·V chunks, chunk c on rank c mod P).
DecoderStage pipeline_stage(const StageBoundaries& boundaries, int stages, int rank);

}  // namespace tessera
