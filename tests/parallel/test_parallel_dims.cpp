// ParallelDims: resolving against the world size (dp = 0 fills it) and every error message, which
// must name the flags and the numbers; the checks against the model and the global batch.
#include <gtest/gtest.h>

#include "parallel/parallel_dims.h"
#include "support/test_support.h"

namespace tessera {

using testing::contains;
using testing::error_of;

namespace {

ParallelDims dims(int dp, int tp, int pp, int cp, int ep = 1) {
  ParallelDims d;
  d.dp = dp, d.tp = tp, d.pp = pp, d.cp = cp, d.ep = ep;
  return d;
}

void expect_error(const ParallelDims& requested, int world, std::initializer_list<const char*> parts) {
  const std::string message = error_of([&] { ParallelDims::resolve(requested, world); });
  for (const char* part : parts) EXPECT_TRUE(contains(message, part)) << "missing '" << part << "' in: " << message;
}

}  // namespace

TEST(ParallelDims, ResolveKeepsAValidLayout) {
  const ParallelDims d = ParallelDims::resolve(dims(2, 2, 2, 1, 2), 8);
  EXPECT_EQ(d.dp, 2);
  EXPECT_EQ(d.tp, 2);
  EXPECT_EQ(d.pp, 2);
  EXPECT_EQ(d.cp, 1);
  EXPECT_EQ(d.ep, 2);
  EXPECT_EQ(d.world_size(), 8);
  EXPECT_EQ(ParallelDims::resolve(ParallelDims{}, 1).to_string(), "dp=1 tp=1 pp=1 cp=1 ep=1");
}

TEST(ParallelDims, DpZeroFillsTheWorld) {
  EXPECT_EQ(ParallelDims::resolve(dims(0, 1, 1, 1), 1).dp, 1);
  EXPECT_EQ(ParallelDims::resolve(dims(0, 1, 1, 1), 8).dp, 8);
  EXPECT_EQ(ParallelDims::resolve(dims(0, 2, 1, 1), 8).dp, 4);
  EXPECT_EQ(ParallelDims::resolve(dims(0, 2, 2, 1), 8).dp, 2);
  EXPECT_EQ(ParallelDims::resolve(dims(0, 2, 2, 2), 16).dp, 2);
  EXPECT_EQ(ParallelDims::resolve(dims(0, 2, 1, 2, 4), 16).to_string(), "dp=4 tp=2 pp=1 cp=2 ep=4");
}

TEST(ParallelDims, DpZeroThatDoesNotDivideNamesTheNumbers) {
  expect_error(dims(0, 3, 1, 1), 8, {"--dp 0", "--tp 3 × --pp 1 × --cp 1 = 3 does not divide the world size 8", "multiple of 3"});
  expect_error(dims(0, 2, 2, 2), 12, {"--tp 2 × --pp 2 × --cp 2 = 8 does not divide the world size 12"});
}

TEST(ParallelDims, ProductMustEqualTheWorld) {
  expect_error(dims(2, 2, 1, 1), 8,
               {"--dp 2 × --tp 2 × --pp 1 × --cp 1 = 4 ranks, but the launcher started 8", "product is 8", "--dp 0"});
  expect_error(dims(4, 2, 1, 1), 4, {"= 8 ranks, but the launcher started 4"});
  // Without a launcher the message says how to start one.
  expect_error(dims(2, 1, 1, 1), 1, {"--dp 2 × --tp 1 × --pp 1 × --cp 1 = 2 ranks, but this process runs alone (world size 1)", "mpirun -np 2", "srun -n 2"});
}

TEST(ParallelDims, EveryDegreeAtLeastOne) {
  expect_error(dims(-1, 1, 1, 1), 4, {"--dp", "got -1", "0 to fill the world"});
  expect_error(dims(4, 0, 1, 1), 4, {"--tp must be at least 1, got 0"});
  expect_error(dims(4, 1, 0, 1), 4, {"--pp must be at least 1, got 0"});
  expect_error(dims(4, 1, 1, -2), 4, {"--cp must be at least 1, got -2"});
  expect_error(dims(4, 1, 1, 1, 0), 4, {"--ep must be at least 1, got 0"});
}

TEST(ParallelDims, DegreesTooLargeForTheWorld) {
  expect_error(dims(1, 16, 1, 1), 8, {"--dp 1 × --tp 16 × --pp 1 × --cp 1 = 16 ranks, but the launcher started 8"});
  expect_error(dims(0, 16, 1, 1), 8, {"--dp 0 fills the world", "= 16 does not divide the world size 8"});
  expect_error(dims(0, 1, 1, 1, 16), 8, {"--ep 16 does not divide --dp 8"});
  // A product past int64 saturates instead of wrapping round to something that might match.
  expect_error(dims(1 << 30, 1 << 30, 1 << 30, 1 << 30), 8, {"but the launcher started 8"});
}

TEST(ParallelDims, EpDividesTheDataParallelRanks) {
  EXPECT_EQ(ParallelDims::resolve(dims(2, 2, 2, 1, 2), 8).ep, 2);
  EXPECT_EQ(ParallelDims::resolve(dims(4, 1, 1, 2, 4), 8).ep, 4);
  // Megatron's convention: experts are shared out over data-parallel ranks, not tp or cp ones.
  expect_error(dims(2, 2, 2, 1, 4), 8, {"--ep 4 does not divide --dp 2", "carved out of the data-parallel ranks",
                                        "divides 2"});
  expect_error(dims(3, 1, 1, 1, 2), 3, {"--ep 2 does not divide --dp 3"});
}

TEST(ParallelDims, CheckModelAcceptsDividingLayouts) {
  const ModelShape gpt2_124m{12, 12, 768, 3072};
  dims(2, 4, 2, 2).check_model(gpt2_124m, 1024, 64, 8);
  dims(1, 12, 12, 1).check_model(gpt2_124m, 1024, 8, 8);
  dims(8, 1, 1, 1).check_model(gpt2_124m, 1024, 8, 1);
  dims(1, 1, 1, 1).check_model(gpt2_124m, 15, 8, 1);  // an odd --seq-len: only context parallelism halves chunks
}

TEST(ParallelDims, CheckModelNamesTheFlagAndTheModelDimension) {
  const ModelShape model{12, 12, 768, 3072};
  auto message = [&](const ParallelDims& d, int64_t seq_len, int64_t batch, int64_t micro) {
    return error_of([&] { d.check_model(model, seq_len, batch, micro); });
  };
  EXPECT_TRUE(contains(message(dims(1, 8, 1, 1), 1024, 8, 8), "--tp 8 does not divide the model's 12 attention heads"));
  EXPECT_TRUE(contains(message(dims(1, 5, 1, 1), 1024, 8, 8), "--tp 5"));
  EXPECT_TRUE(contains(message(dims(1, 1, 13, 1), 1024, 8, 8), "--pp 13 is more than the model's 12 layers"));
  EXPECT_TRUE(contains(message(dims(1, 1, 1, 3), 1024, 8, 8), "--seq-len 1024 is not a multiple of 2 × --cp 3 = 6"));
  EXPECT_TRUE(contains(message(dims(1, 1, 1, 4), 1028, 8, 8), "--seq-len 1028 is not a multiple of 2 × --cp 4 = 8"));
  // Expert parallelism needs experts, as many as divide evenly.
  EXPECT_TRUE(contains(message(dims(2, 1, 1, 1, 2), 1024, 8, 4), "--ep 2 needs a MoE model"));
  const ModelShape moe{4, 4, 64, 256, 6};
  EXPECT_TRUE(contains(error_of([&] { dims(4, 1, 1, 1, 4).check_model(moe, 64, 8, 2); }),
                       "--ep 4 does not divide the model's 6 experts"));
  dims(4, 1, 1, 1, 2).check_model(moe, 64, 8, 2);
  EXPECT_TRUE(contains(message(dims(4, 1, 1, 1), 1024, 8, 4),
                       "--batch-size 8 is not a multiple of --dp 4 × --micro-batch-size 4 = 16"));
  EXPECT_TRUE(contains(message(dims(2, 1, 1, 1), 1024, 8, 0), "--micro-batch-size must be at least 1, got 0"));
  // Heads divide but channels or the MLP width do not.
  const ModelShape odd_channels{4, 4, 102, 408};
  EXPECT_TRUE(contains(error_of([&] { dims(1, 4, 1, 1).check_model(odd_channels, 64, 4, 4); }),
                       "--tp 4 does not divide the model's 102 channels"));
  const ModelShape odd_mlp{4, 4, 64, 250};
  EXPECT_TRUE(contains(error_of([&] { dims(1, 4, 1, 1).check_model(odd_mlp, 64, 4, 4); }),
                       "--tp 4 does not divide the model's MLP width 250"));
}

}  // namespace tessera
