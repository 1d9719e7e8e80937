// The optimizer's segments over a real model's parameters: one per parameter tensor, swept by the
// multi-tensor AdamW in coalesced runs (a GPU launch each), as many with bf16 moments' rounding keys.
#include <gtest/gtest.h>

#include "nn/decoder_layout.h"
#include "nn/model_presets.h"
#include "ops/adamw.h"
#include "optim/adamw_optimizer.h"
#include "optim/rounding_keys.h"

namespace tessera {
namespace {

// GPT-2 124M: wte and wpe, 12 tensors a block, ln_f. A block's LayerNorm parameters and the biases
// beside them join into runs, so a block takes 8 sweeps, not 12.
TEST(OptimizerSegments, Gpt2BlocksSweepInEightRuns) {
  const ParameterLayout layout = decoder_layout(model_preset("gpt2-124m"));
  const std::vector<OptimSegment> segments = full_segments(layout);
  EXPECT_EQ(segments.size(), 2u + 12u * 12u + 2u);
  const std::vector<AdamWSegment> runs = coalesce_segments(segments);
  EXPECT_EQ(runs.size(), 1u + 9u + 11u * 8u);  // wte+wpe; block 0; blocks 1-11 (ln_1 joins the bias before)
  int64_t covered = 0;
  for (const AdamWSegment& r : runs) covered += r.length;
  EXPECT_EQ(covered, layout.total());
  // Keyed for bf16 moments, one process's keys run on with the offsets: the same runs.
  EXPECT_EQ(coalesce_segments(with_rounding_keys(segments, layout, layout)).size(), runs.size());
}

}  // namespace
}  // namespace tessera
