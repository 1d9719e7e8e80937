// Under mpirun -np 4: ZeRO's memory arithmetic read from the allocator's counters. Stage 1 and 2
// shrink the optimizer state (two fp32 moments) to 1/dp; stage 2 also keeps only the reduced
// gradient's shard between steps. The sums of the sharded pieces over dp equal the unsharded sizes.
#include <gtest/gtest.h>

#include "core/allocator.h"
#include "core/rng.h"
#include "parallel/process_grid.h"
#include "parallel/runtime.h"
#include "runtime_test_main.h"
#include "train/data_parallel.h"

namespace tessera {
namespace {


struct Measured {
  int64_t optimizer_bytes;  // what the AdamW state allocated
  int64_t step_bytes;       // live after a backward and its reduction, beyond model + optimizer
};

Measured measure(int zero) {
  ParallelDims dims;
  dims.dp = testing::test_runtime().world_size();
  CommOptions options;
  options.timeout_s = 30;
  ProcessGrid grid = build_process_grid(testing::test_runtime(), dims, options);
  Decoder model(ModelConfig{2, 2, 64, 500, 32});
  model.init_weights(1);
  DataParallel dp(grid, model, DataParallelOptions{zero, 16 << 10, true});

  const int64_t before_optimizer = int64_t(host_allocator_stats().current_bytes);
  AdamW optimizer(dp.optimizer_segments(), AdamWConfig{});
  const int64_t after_optimizer = int64_t(host_allocator_stats().current_bytes);

  Tensor tokens = Tensor::zeros({2, 16}, DType::i32), targets = Tensor::zeros({2, 16}, DType::i32);
  for (int i = 0; i < 32; ++i) {
    tokens.data<int32_t>()[i] = int32_t(uniform_at(3, uint64_t(grid.world_rank), uint64_t(i)) * 500);
    targets.data<int32_t>()[i] = (tokens.data<int32_t>()[i] + 1) % 500;
  }
  model.zero_grad();
  model.forward(tokens, targets, 1.0f / 128);  // activations stay allocated: measured after, too
  const int64_t before_step = int64_t(host_allocator_stats().current_bytes);
  dp.reduce_during_next_backward();
  model.backward();
  dp.finish_reduction();
  const int64_t after_step = int64_t(host_allocator_stats().current_bytes);
  return {after_optimizer - before_optimizer, after_step - before_step};
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
  // Between steps stage 2 holds no full gradient (released after the reduce-scatter): the step
  // left less live memory than stage 1's by the gradient buffer, 4·n bytes.
  EXPECT_EQ(zero1.step_bytes - zero2.step_bytes, 4 * n);
  EXPECT_EQ(zero0.step_bytes, zero1.step_bytes);
}

}  // namespace
}  // namespace tessera
