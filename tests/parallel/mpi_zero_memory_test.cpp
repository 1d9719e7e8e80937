// Under mpirun -np 4: ZeRO's memory arithmetic read from the allocator's counters. Stage 1 and 2
// shrink the optimizer state (two fp32 moments) to 1/dp; stage 2 also never holds the whole
// gradient, only its shard and the part being reduced; stage 3 keeps only a shard of the parameters as well, and its
// step (parts gathered and freed around their use) updates the weights as the unsharded step does,
// also when the model is built without parameters and never held whole (as the trainer builds it).
// Without reshard-after-forward the blocks stay gathered through the step instead. The sums of the
// sharded pieces over dp equal the unsharded sizes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "core/allocator.h"
#include "core/rng.h"
#include "nn/parameter_values.h"
#include "parallel/process_grid.h"
#include "parallel/runtime.h"
#include "runtime_test_main.h"
#include "train/data_parallel.h"

namespace tessera {
namespace {


const ModelConfig kModel{2, 2, 64, 500, 32};

struct Measured {
  int64_t optimizer_bytes;  // what the AdamW state allocated
  int64_t step_bytes;       // live after a backward and its reduction, beyond model + optimizer
  int64_t model_bytes;      // what the model and DataParallel hold before the first step
  int64_t setup_peak_bytes;  // the most they held at once while being built
  double model_bytes_over_dp;  // model_bytes summed over the dp ranks
  int64_t held_by_step;     // live after forward, backward and the reduction, beyond what was before forward
  ParamMemory params;       // the parameter bytes kept, and the most held during the step
  std::vector<float> weights;  // rank 0: the whole flat parameters after one optimizer step
};

// `storage`: whether the model is built whole and then sharded, or (ZeRO-3) without parameters, its
// shards filled from the initial values range by range.
// `reshard_after_forward` false: ZeRO-3 keeps each block gathered from its forward to its backward.
Measured measure(int zero, ParamStorage storage = ParamStorage::whole, bool reshard_after_forward = true) {
  ParallelDims dims;
  dims.dp = testing::test_runtime().world_size();
  CommOptions options;
  options.timeout_s = 30;
  ProcessGrid grid = build_process_grid(testing::test_runtime(), dims, options);
  const int64_t before_model = int64_t(host_allocator_stats().current_bytes);
  host_allocator_reset_peak();
  Decoder model(kModel, whole_decoder(kModel.num_layers), {}, {}, storage);
  ParameterValues values;
  if (storage == ParamStorage::whole)
    model.init_weights(1);
  else
    values = initial_values(kModel, model.layout(), 1);
  DataParallelOptions dp_options{zero, 16 << 10, true};
  dp_options.reshard_after_forward = reshard_after_forward;
  DataParallel dp(grid, model, dp_options, Device::cpu, values);
  const int64_t model_bytes = int64_t(host_allocator_stats().current_bytes) - before_model;
  const int64_t setup_peak_bytes = int64_t(host_allocator_stats().peak_bytes) - before_model;

  const int64_t before_optimizer = int64_t(host_allocator_stats().current_bytes);
  AdamW optimizer(dp.optimizer_segments(), AdamWConfig{});
  const int64_t after_optimizer = int64_t(host_allocator_stats().current_bytes);

  Tensor tokens = Tensor::zeros({2, 16}, DType::i32), targets = Tensor::zeros({2, 16}, DType::i32);
  for (int i = 0; i < 32; ++i) {
    tokens.data<int32_t>()[i] = int32_t(uniform_at(3, uint64_t(grid.world_rank), uint64_t(i)) * 500);
    targets.data<int32_t>()[i] = (tokens.data<int32_t>()[i] + 1) % 500;
  }
  model.zero_grad();
  const int64_t before_forward = int64_t(host_allocator_stats().current_bytes);
  model.forward(tokens, targets, 1.0f / 128);  // activations stay allocated: measured after, too
  const int64_t before_step = int64_t(host_allocator_stats().current_bytes);
  dp.reduce_during_next_backward();
  model.backward();
  dp.finish_reduction();
  const int64_t after_step = int64_t(host_allocator_stats().current_bytes);
  const ParamMemory params = dp.param_memory();

  optimizer.step(dp.optimizer_params(), dp.optimizer_grads(), 1e-3f, 1.0f);
  dp.after_update();
  Tensor whole;
  if (grid.world_rank == 0) whole = Tensor::zeros({model.layout().total()});
  dp.gather_params(whole);
  std::vector<float> weights;
  if (grid.world_rank == 0) weights.assign(whole.f32(), whole.f32() + whole.numel());
  return {after_optimizer - before_optimizer,
          after_step - before_step,
          model_bytes,
          setup_peak_bytes,
          sum_over(*grid.dp, {double(model_bytes)})[0],
          after_step - before_forward,
          params,
          std::move(weights)};
}

TEST(ZeroMemory, StateShrinksByTheDataParallelDegree) {
  const int dp = testing::test_runtime().world_size();
  const int64_t n = ModelConfig{2, 2, 64, 500, 32}.num_parameters();
  Measured zero0 = measure(0), zero1 = measure(1), zero2 = measure(2);

  // Stage 0: both moments of every parameter.
  EXPECT_EQ(zero0.optimizer_bytes, 2 * 4 * n);
  // Stages 1 and 2: both moments of this rank's shard only; the shards over dp cover the model.
  for (const Measured& m : {zero1, zero2}) {
    EXPECT_LE(m.optimizer_bytes, 2 * 4 * (n / dp + 64));
    EXPECT_GE(m.optimizer_bytes, 2 * 4 * (n / dp - 64));
  }
  // Stage 2 never holds the whole gradient: each part's buffer lives from its backward to its
  // reduce-scatter. What the model and DataParallel hold is the parameters and a gradient shard
  // (stage 1: the parameters, the whole gradient and a shard), and the step leaves nothing of the
  // part buffers behind (only what the unsharded step leaves, the activations and scratch).
  const int64_t slack = 64;  // each part's chunk is padded to a multiple of dp
  EXPECT_LE(zero2.model_bytes, 4 * n + 4 * (n / dp + slack));
  EXPECT_GE(zero2.model_bytes, 4 * n + 4 * (n / dp - slack));
  EXPECT_GE(zero1.model_bytes - zero2.model_bytes, 4 * (n - slack));
  EXPECT_EQ(zero2.held_by_step, zero0.held_by_step);
  EXPECT_EQ(zero0.step_bytes, zero1.step_bytes);
}

// ZeRO-3: the model hands its flat parameters and gradients over to the shards, so what it holds
// between steps is one parameter shard and one gradient shard, each 1/dp of the model (its parts'
// chunks), which over dp add up to exactly the model. The step gathers each part around its use and
// leaves nothing of it behind: after it, only what the unsharded step leaves (the activations).
TEST(ZeroMemory, Zero3KeepsOneShardOfTheParameters) {
  const int dp = testing::test_runtime().world_size();
  const int64_t n = kModel.num_parameters();
  const int64_t slack = 64;  // each of the 4 parts' chunks is padded to a multiple of dp
  Measured zero0 = measure(0), zero3 = measure(3);

  EXPECT_EQ(zero0.model_bytes, 2 * 4 * n);  // flat parameters and gradients
  EXPECT_LE(zero3.model_bytes, 2 * 4 * (n / dp + slack));
  EXPECT_GE(zero3.model_bytes, 2 * 4 * (n / dp - slack));
  EXPECT_EQ(zero3.model_bytes_over_dp, double(2 * 4 * n));
  EXPECT_LE(zero3.optimizer_bytes, 2 * 4 * (n / dp + slack));
  EXPECT_GE(zero3.optimizer_bytes, 2 * 4 * (n / dp - slack));
  EXPECT_EQ(zero3.held_by_step, zero0.held_by_step);
  // During the step at most two parts were whole at once (the one computing and the next one
  // arriving): never the model, whose blocks here are its largest parts.
  std::vector<int64_t> parts;
  const ParameterLayout layout = decoder_layout(kModel);
  for (int64_t part = kEmbeddingBlock; part <= kModel.num_layers; ++part) {
    const OffsetRange r = layout.block_range(part, part);
    parts.push_back(4 * ((r.end - r.begin + dp - 1) / dp * dp + dp));  // padded, and a staged chunk
  }
  std::sort(parts.rbegin(), parts.rend());
  EXPECT_EQ(zero3.params.persistent_bytes, zero3.model_bytes / 2);
  EXPECT_GT(zero3.params.peak_bytes - zero3.params.persistent_bytes, parts[0]);
  EXPECT_LE(zero3.params.peak_bytes - zero3.params.persistent_bytes, parts[0] + parts[1]);
  EXPECT_LT(zero3.params.peak_bytes - zero3.params.persistent_bytes, 4 * n);

  // The update through the shards is the unsharded one (the sums may round in another order).
  if (zero0.weights.empty()) return;  // rank 0 compares
  ASSERT_EQ(zero3.weights.size(), zero0.weights.size());
  double diff = 0, norm = 0, moved = 0;
  for (size_t i = 0; i < zero0.weights.size(); ++i) {
    diff += std::pow(double(zero3.weights[i]) - zero0.weights[i], 2);
    norm += std::pow(double(zero0.weights[i]), 2);
  }
  Decoder fresh(kModel);
  fresh.init_weights(1);
  for (size_t i = 0; i < zero0.weights.size(); ++i)
    moved += std::pow(double(zero0.weights[i]) - fresh.params().f32()[i], 2);
  EXPECT_GT(std::sqrt(moved), 1e-4) << "the step changed nothing";
  EXPECT_LE(std::sqrt(diff), 1e-5 * std::sqrt(norm) + 1e-6 * std::sqrt(double(n)));
}


// ZeRO-3 without reshard-after-forward: every block stays gathered from its forward to its backward
// (so the peak holds them all, with the final part), nothing of them outlives the step, and the
// step is bit for bit the resharding one (the same gathers' values, the same sums).
TEST(ZeroMemory, Zero3KeepsBlocksGatheredFromForwardToBackward) {
  const int dp = testing::test_runtime().world_size();
  const Measured resharded = measure(3), kept = measure(3, ParamStorage::whole, false);
  const ParameterLayout layout = decoder_layout(kModel);
  int64_t blocks = 0;  // padded bytes of every block's part and the final part
  for (int64_t part = 0; part <= kModel.num_layers; ++part) {
    const OffsetRange r = layout.block_range(part, part);
    blocks += 4 * ((r.end - r.begin + dp - 1) / dp * dp);
  }
  EXPECT_EQ(kept.params.persistent_bytes, resharded.params.persistent_bytes);
  EXPECT_GE(kept.params.peak_bytes - kept.params.persistent_bytes, blocks);
  EXPECT_GT(kept.params.peak_bytes, resharded.params.peak_bytes);
  EXPECT_EQ(kept.held_by_step, resharded.held_by_step);
  if (resharded.weights.empty()) return;  // rank 0 compares
  ASSERT_EQ(kept.weights.size(), resharded.weights.size());
  for (size_t i = 0; i < kept.weights.size(); ++i) ASSERT_EQ(kept.weights[i], resharded.weights[i]) << "element " << i;
}

// ZeRO-3 with the model built without parameters (as the trainer builds it): no rank holds the
// whole model at any moment, start-up included, yet the shards hold what the whole model would
// have been initialised to, and the step is the same step.
TEST(ZeroMemory, Zero3StartsWithoutTheWholeModel) {
  const int dp = testing::test_runtime().world_size();
  const int64_t n = kModel.num_parameters();
  const int64_t slack = 64;
  const Measured built_whole = measure(3), sharded_from_start = measure(3, ParamStorage::sharded_later);

  EXPECT_GE(built_whole.setup_peak_bytes, 2 * 4 * n);  // whole parameters and gradients, then shards
  // The shards, plus one bucket's staging on the host (a bucket is a part here): far from one whole
  // copy of the parameters.
  const ParameterLayout layout = decoder_layout(kModel);
  int64_t largest_chunk = 0;
  for (int64_t part = kEmbeddingBlock; part <= kModel.num_layers; ++part) {
    const OffsetRange r = layout.block_range(part, part);
    largest_chunk = std::max(largest_chunk, 4 * ((r.end - r.begin + dp - 1) / dp));
  }
  EXPECT_LE(sharded_from_start.setup_peak_bytes, 2 * 4 * (n / dp + slack) + largest_chunk);
  EXPECT_LT(sharded_from_start.setup_peak_bytes, 4 * n);
  EXPECT_EQ(sharded_from_start.model_bytes, built_whole.model_bytes);
  EXPECT_EQ(sharded_from_start.held_by_step, built_whole.held_by_step);
  EXPECT_EQ(sharded_from_start.weights, built_whole.weights);  // bit for bit
  if (!built_whole.weights.empty()) {
    EXPECT_EQ(built_whole.weights.size(), size_t(n));
  }
}

}  // namespace
}  // namespace tessera
