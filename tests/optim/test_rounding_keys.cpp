// Rounding keys of optimizer segments: every element a rank holds (a tp slice, an ep rank's experts,
// a pipeline stage with its tied embedding copy, a ZeRO cut) is keyed by its offset in the whole
// model's single-process layout, and the ranks of a layout together key every element of the model.
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "nn/decoder_layout.h"
#include "nn/model_presets.h"
#include "nn/stage_partition.h"
#include "optim/rounding_keys.h"

namespace tessera {
namespace {

// key_of[flat offset in layout] = the element's offset in `whole`.
std::vector<int64_t> expected_keys(const ParameterLayout& layout, const ParameterLayout& whole) {
  std::vector<int64_t> key_of(size_t(layout.total()), -1);
  for (const ParamSpec& spec : layout.specs()) {
    const int64_t home = whole.find(spec.name).offset;
    spec.for_each_whole_run(0, spec.numel(), [&](int64_t held, int64_t at, int64_t count) {
      for (int64_t k = 0; k < count; ++k) key_of[size_t(spec.offset + held + k)] = home + at + k;
    });
  }
  return key_of;
}

// Checks every segment's keys against expected_keys and returns the keys seen.
std::set<int64_t> check_keys(const std::vector<OptimSegment>& segments, const ParameterLayout& layout,
                             const ParameterLayout& whole, const char* what) {
  const std::vector<int64_t> key_of = expected_keys(layout, whole);
  std::set<int64_t> seen;
  for (const OptimSegment& s : with_rounding_keys(segments, layout, whole)) {
    EXPECT_TRUE(s.keyed()) << what;
    for (int64_t i = 0; i < s.length; ++i) {
      const int64_t key = int64_t(adamw_rounding_key(s, i));
      EXPECT_EQ(key, key_of[size_t(s.param_offset + i)]) << what << ": element " << s.param_offset + i;
      seen.insert(key);
    }
  }
  return seen;
}

TEST(RoundingKeys, TensorAndExpertSlicesKeyTheWholeModelOnce) {
  const ModelConfig config = model_preset("mixtral-tiny");
  const ParameterLayout whole = decoder_layout(config);
  std::set<int64_t> all;
  int64_t held = 0;
  for (int t = 0; t < 2; ++t)
    for (int e = 0; e < 2; ++e) {
      const ParameterLayout layout =
          decoder_layout(config, whole_decoder(config.num_layers), TpPlace{t, 2}, EpPlace{e, 2});
      const std::set<int64_t> seen = check_keys(full_segments(layout), layout, whole, "tp/ep rank");
      all.insert(seen.begin(), seen.end());
      held += layout.total();
    }
  EXPECT_EQ(int64_t(all.size()), whole.total()) << "every element of the model keyed by some rank";
  EXPECT_EQ(*all.rbegin(), whole.total() - 1);
  EXPECT_GT(held, whole.total()) << "norms and routers are held by every tp rank, with the same keys";
}

TEST(RoundingKeys, PipelineStagesAndTheirTiedCopyUseTheWholeModelsKeys) {
  const ModelConfig config = model_preset("gpt2-tiny");  // tied embeddings
  const ParameterLayout whole = decoder_layout(config);
  const StageBoundaries boundaries = balanced_boundaries(config, 64, 2);
  const ParameterLayout last = decoder_layout(config, pipeline_stage(boundaries, 2, 1));
  ASSERT_TRUE(holds_tied_embedding_copy(config, pipeline_stage(boundaries, 2, 1)));
  const std::set<int64_t> seen = check_keys(full_segments(last), last, whole, "last stage");
  EXPECT_TRUE(seen.count(0)) << "the tied copy of wte keys as wte does";
}

TEST(RoundingKeys, ZeroShardsCutAnywhereKeepTheirElementsKeys) {
  const ModelConfig config = model_preset("llama-tiny");
  const ParameterLayout whole = decoder_layout(config);
  const ParameterLayout layout = decoder_layout(config, whole_decoder(config.num_layers), TpPlace{1, 2});
  // Four shards with cuts inside row blocks and inside rows of column slices.
  const int64_t n = layout.total();
  std::set<int64_t> all;
  for (int r = 0; r < 4; ++r) {
    std::vector<OptimSegment> shard;
    append_segments(layout, n * r / 4 + 3, n * (r + 1) / 4 + 3 * (r < 3), 0, shard);
    if (r == 0) append_segments(layout, 0, 3, 0, shard);
    const std::set<int64_t> seen = check_keys(shard, layout, whole, "ZeRO shard");
    all.insert(seen.begin(), seen.end());
  }
  EXPECT_EQ(all, check_keys(full_segments(layout), layout, whole, "whole rank"));
}

TEST(RoundingKeys, ASegmentAcrossParametersIsRefused) {
  const ParameterLayout layout = decoder_layout(model_preset("gpt2-tiny"));
  const std::vector<OptimSegment> across = {OptimSegment{0, 0, layout.specs()[0].numel() + 1, true}};
  EXPECT_THROW(with_rounding_keys(across, layout, layout), Error);
}

}  // namespace
}  // namespace tessera
