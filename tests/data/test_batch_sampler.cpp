// BatchSampler: sequential batches are exact token slices across shards; any split of a batch
// (micro-batches, data-parallel ranks) gives the same tokens; shuffled order is a per-epoch
// permutation that depends on (seed, epoch) only; bad settings fail naming the flag.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "data/batch_sampler.h"
#include "support/test_support.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

using testing::contains;
using testing::error_of;

// A dataset whose token at stream position p is p + 1000, split over shards of the given sizes.
TokenDataset position_dataset(const std::vector<uint32_t>& shard_sizes) {
  fs::path dir = testing::scratch_dir();
  uint32_t next = 1000;
  for (size_t s = 0; s < shard_sizes.size(); ++s) {
    std::vector<uint32_t> tokens(shard_sizes[s]);
    std::iota(tokens.begin(), tokens.end(), next);
    next += shard_sizes[s];
    write_token_shard(dir / ("shard_" + std::to_string(s) + ".bin"), tokens, s % 2 ? 1 : 2);
  }
  return TokenDataset::open((dir / "shard_*.bin").string(), 1 << 20, "--train-data");
}

struct Batch {
  std::vector<int32_t> inputs, targets;
  bool operator==(const Batch&) const = default;
};

Batch fill_range(const BatchSampler& sampler, int64_t k, int64_t first, int64_t count) {
  const size_t n = size_t(count * sampler.seq_len());
  Batch b{std::vector<int32_t>(n), std::vector<int32_t>(n)};
  sampler.fill(k, first, count, b.inputs.data(), b.targets.data());
  return b;
}

Batch fill_batch(const BatchSampler& sampler, int64_t k) { return fill_range(sampler, k, 0, sampler.batch_size()); }

// The windows of every batch of one epoch, in batch order.
std::vector<int64_t> epoch_windows(const BatchSampler& sampler, int64_t epoch) {
  std::vector<int64_t> windows;
  for (int64_t k = epoch * sampler.batches_per_epoch(); k < (epoch + 1) * sampler.batches_per_epoch(); ++k)
    for (int64_t i = 0; i < sampler.batch_size(); ++i) windows.push_back(sampler.window_of(k, i));
  return windows;
}

TEST(BatchSampler, SequentialBatchIsTheExactTokenSlice) {
  TokenDataset data = position_dataset({7, 20, 3, 20});  // 50 tokens
  const int64_t B = 3, T = 4;
  BatchSampler sampler(data, B, T, DataOrder::sequential, 1);
  EXPECT_EQ(sampler.num_windows(), 12);  // (50 - 1) / 4
  EXPECT_EQ(sampler.batches_per_epoch(), 4);
  for (int64_t k = 0; k < 4; ++k) {
    std::vector<int32_t> slice(size_t(B * T + 1));
    data.read(k * B * T, B * T + 1, slice.data());
    Batch b = fill_batch(sampler, k);
    for (int64_t j = 0; j < B * T; ++j) {
      EXPECT_EQ(b.inputs[size_t(j)], slice[size_t(j)]) << k << " " << j;
      EXPECT_EQ(b.targets[size_t(j)], slice[size_t(j + 1)]) << k << " " << j;
      EXPECT_EQ(b.inputs[size_t(j)], 1000 + k * B * T + j);
    }
  }
  // Epochs wrap around: batch 4 + k is batch k again.
  for (int64_t k = 0; k < 4; ++k) EXPECT_EQ(fill_batch(sampler, 4 + k), fill_batch(sampler, k));
}

TEST(BatchSampler, AnySplitOfABatchGivesTheSameTokens) {
  TokenDataset data = position_dataset({33, 1, 60, 31});  // 125 tokens, 31 windows of 4
  for (DataOrder order : {DataOrder::sequential, DataOrder::shuffled}) {
    BatchSampler sampler(data, 6, 4, order, 1234);
    ASSERT_EQ(sampler.batches_per_epoch(), 5);
    for (int64_t k = 0; k < 12; ++k) {
      const Batch whole = fill_batch(sampler, k);
      for (int64_t dp : {1, 2, 3, 6}) {
        const int64_t share = 6 / dp;
        for (int64_t micro = 1; micro <= share; ++micro) {  // micro-batch size, the last one may be short
          Batch joined;
          for (int64_t rank = 0; rank < dp; ++rank) {
            for (int64_t first = rank * share; first < (rank + 1) * share; first += micro) {
              Batch part = fill_range(sampler, k, first, std::min(micro, (rank + 1) * share - first));
              joined.inputs.insert(joined.inputs.end(), part.inputs.begin(), part.inputs.end());
              joined.targets.insert(joined.targets.end(), part.targets.begin(), part.targets.end());
            }
          }
          EXPECT_EQ(joined, whole) << "batch " << k << " dp " << dp << " micro " << micro;
        }
      }
    }
  }
}

TEST(BatchSampler, FillReadsTheWindowItReports) {
  TokenDataset data = position_dataset({41, 40});
  BatchSampler sampler(data, 4, 5, DataOrder::shuffled, 7);
  for (int64_t k = 0; k < 8; ++k) {
    Batch b = fill_batch(sampler, k);
    for (int64_t i = 0; i < 4; ++i) {
      const int64_t w = sampler.window_of(k, i);
      for (int64_t t = 0; t < 5; ++t) {
        EXPECT_EQ(b.inputs[size_t(i * 5 + t)], 1000 + w * 5 + t);
        EXPECT_EQ(b.targets[size_t(i * 5 + t)], 1000 + w * 5 + t + 1);
      }
    }
  }
}

TEST(BatchSampler, ShuffledEpochIsAPermutationOfEveryWindow) {
  TokenDataset data = position_dataset({50, 31});  // 81 tokens: 20 windows of 4, 5 batches of 4
  BatchSampler sampler(data, 4, 4, DataOrder::shuffled, 42);
  ASSERT_EQ(sampler.num_windows(), 20);
  std::vector<int64_t> identity(20);
  std::iota(identity.begin(), identity.end(), 0);
  std::vector<std::vector<int64_t>> orders;
  for (int64_t epoch = 0; epoch < 4; ++epoch) {
    std::vector<int64_t> order = epoch_windows(sampler, epoch);
    EXPECT_NE(order, identity) << "epoch " << epoch << " is not shuffled";
    std::vector<int64_t> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, identity) << "epoch " << epoch << " does not hold every window exactly once";
    for (const auto& earlier : orders) EXPECT_NE(order, earlier) << "epoch " << epoch << " repeats an earlier one";
    orders.push_back(order);
  }
}

TEST(BatchSampler, LeftoverWindowsAreNeverRepeatedWithinAnEpoch) {
  TokenDataset data = position_dataset({23, 23});  // 46 tokens: 15 windows of 3, 3 batches of 4, 3 left over
  BatchSampler sampler(data, 4, 3, DataOrder::shuffled, 5);
  ASSERT_EQ(sampler.num_windows(), 15);
  ASSERT_EQ(sampler.batches_per_epoch(), 3);
  for (int64_t epoch = 0; epoch < 6; ++epoch) {
    std::vector<int64_t> order = epoch_windows(sampler, epoch);
    std::sort(order.begin(), order.end());
    EXPECT_EQ(std::adjacent_find(order.begin(), order.end()), order.end()) << "epoch " << epoch;
    EXPECT_GE(order.front(), 0);
    EXPECT_LT(order.back(), 15);
  }
}

TEST(BatchSampler, ShuffledOrderDependsOnSeedAndEpochOnly) {
  TokenDataset data = position_dataset({200, 201});  // 100 windows of 4
  BatchSampler a(data, 5, 4, DataOrder::shuffled, 99);
  BatchSampler b(data, 5, 4, DataOrder::shuffled, 99);
  BatchSampler other_seed(data, 5, 4, DataOrder::shuffled, 100);
  EXPECT_EQ(epoch_windows(a, 0), epoch_windows(b, 0));
  EXPECT_NE(epoch_windows(a, 0), epoch_windows(other_seed, 0));
  EXPECT_NE(epoch_windows(a, 0), epoch_windows(a, 1));
  // A resumed run (a fresh sampler asked from batch k on, in any order) sees the same batches.
  const int64_t E = a.batches_per_epoch();
  for (int64_t k : {3 * E + 2, 0L, E - 1, 7L, 2 * E, E + 5}) EXPECT_EQ(fill_batch(b, k), fill_batch(a, k)) << k;
  // The window order does not depend on the batch size it is later cut into.
  BatchSampler c(data, 10, 4, DataOrder::shuffled, 99);
  EXPECT_EQ(epoch_windows(c, 1), epoch_windows(a, 1));
}

TEST(BatchSampler, ConcurrentFillsMatchSerialFills) {
  TokenDataset data = position_dataset({300, 301});  // 150 windows of 4, 18 batches of 8
  BatchSampler reference(data, 8, 4, DataOrder::shuffled, 3);
  BatchSampler shared(data, 8, 4, DataOrder::shuffled, 3);
  const int64_t batches = 3 * reference.batches_per_epoch();  // spans three epochs
  std::vector<Batch> expected;
  for (int64_t k = 0; k < batches; ++k) expected.push_back(fill_batch(reference, k));
  std::vector<std::vector<Batch>> got(4);
  std::vector<std::thread> threads;
  for (int64_t rank = 0; rank < 4; ++rank)
    threads.emplace_back([&, rank] {
      for (int64_t k = 0; k < batches; ++k) got[size_t(rank)].push_back(fill_range(shared, k, rank * 2, 2));
    });
  for (std::thread& t : threads) t.join();
  for (int64_t k = 0; k < batches; ++k)
    for (int64_t rank = 0; rank < 4; ++rank) {
      const Batch& part = got[size_t(rank)][size_t(k)];
      EXPECT_TRUE(std::equal(part.inputs.begin(), part.inputs.end(), expected[size_t(k)].inputs.begin() + rank * 8))
          << k << " " << rank;
      EXPECT_TRUE(std::equal(part.targets.begin(), part.targets.end(), expected[size_t(k)].targets.begin() + rank * 8))
          << k << " " << rank;
    }
}

TEST(BatchSampler, ExactlyOneBatchOfTokensIsEnough) {
  TokenDataset data = position_dataset({13});
  BatchSampler sampler(data, 3, 4, DataOrder::shuffled, 0);
  EXPECT_EQ(sampler.batches_per_epoch(), 1);
  Batch b = fill_batch(sampler, 5);
  std::vector<int32_t> sorted = b.inputs;
  std::sort(sorted.begin(), sorted.end());
  for (int32_t j = 0; j < 12; ++j) EXPECT_EQ(sorted[size_t(j)], 1000 + j);
}

TEST(BatchSampler, RejectsTooFewTokensForOneBatch) {
  TokenDataset data = position_dataset({5, 7});  // 12 tokens; B = 3, T = 4 needs 13
  std::string message = error_of([&] { BatchSampler(data, 3, 4, DataOrder::sequential, 0); });
  EXPECT_TRUE(contains(message, "--train-data: 12 tokens are not enough")) << message;
  EXPECT_TRUE(contains(message, "needs 13")) << message;
}

TEST(BatchSampler, RejectsNonPositiveBatchOrSequenceLength) {
  TokenDataset data = position_dataset({100});
  for (int64_t bad : {0L, -1L}) {
    std::string message = error_of([&] { BatchSampler(data, bad, 4, DataOrder::shuffled, 0); });
    EXPECT_TRUE(contains(message, "--batch-size must be positive, got " + std::to_string(bad))) << message;
    message = error_of([&] { BatchSampler(data, 2, bad, DataOrder::shuffled, 0); });
    EXPECT_TRUE(contains(message, "--seq-len must be positive, got " + std::to_string(bad))) << message;
  }
  const int64_t huge = int64_t(1) << 40;
  std::string message = error_of([&] { BatchSampler(data, huge, huge, DataOrder::shuffled, 0); });
  EXPECT_TRUE(contains(message, "overflows")) << message;
}

TEST(BatchSampler, RejectsRangesOutsideTheBatch) {
  TokenDataset data = position_dataset({100});
  BatchSampler sampler(data, 4, 4, DataOrder::sequential, 0);
  std::vector<int32_t> in(32), tg(32);
  EXPECT_TRUE(contains(error_of([&] { sampler.fill(-1, 0, 1, in.data(), tg.data()); }), "batch index"));
  EXPECT_TRUE(contains(error_of([&] { sampler.fill(0, 3, 2, in.data(), tg.data()); }), "--batch-size"));
  EXPECT_TRUE(contains(error_of([&] { sampler.fill(0, -1, 1, in.data(), tg.data()); }), "--batch-size"));
  EXPECT_TRUE(contains(error_of([&] { sampler.window_of(0, 4); }), "--batch-size"));
  sampler.fill(0, 4, 0, in.data(), tg.data());  // an empty range is fine
}

// The windows of the run's sequences [from, to) under `sampler` (its --batch-size) and `origin`.
std::vector<int64_t> run_windows(const BatchSampler& sampler, SequenceOrigin origin, int64_t from, int64_t to) {
  std::vector<int64_t> windows;
  for (int64_t g = from; g < to; ++g) {
    const BatchSequence at = locate_sequence(g, origin, sampler.batch_size(), sampler.batches_per_epoch());
    windows.push_back(sampler.window_of(at.batch, at.sequence));
  }
  return windows;
}

// Without a change of --batch-size, sequence g of the run is sequence g % B of batch g / B.
TEST(SequenceOrigin, TheZeroOriginIsTheBatchIndex) {
  for (int64_t g : {0, 1, 7, 8, 95, 96, 1000}) {
    const BatchSequence at = locate_sequence(g, {}, 8, 12);
    EXPECT_EQ(at.batch, g / 8);
    EXPECT_EQ(at.sequence, g % 8);
  }
}

// 100 windows: epochs of 96 sequences under --batch-size 8 (4 left over), of 100 under 4. A run that
// changes the batch size part-way through an epoch reads the rest of that epoch's order, each window
// once, whichever way it changes and wherever it stands.
TEST(SequenceOrigin, AChangedBatchSizeContinuesTheEpochItStoodIn) {
  TokenDataset data = position_dataset({401});
  const BatchSampler by8(data, 8, 4, DataOrder::shuffled, 11), by4(data, 4, 4, DataOrder::shuffled, 11);
  ASSERT_EQ(by8.batches_per_epoch() * 8, 96);
  ASSERT_EQ(by4.batches_per_epoch() * 4, 100);
  const auto epoch_sequences = [](const BatchSampler& s) { return s.batches_per_epoch() * s.batch_size(); };

  // 13 steps at 8 (epoch 1, slot 8), then at 4: epoch 1 reads as a whole run at 4 reads it.
  SequenceOrigin origin = continue_epoch(104, {}, epoch_sequences(by8), epoch_sequences(by4));
  EXPECT_EQ(origin, (SequenceOrigin{96, 1}));
  std::vector<int64_t> epoch1 = run_windows(by8, {}, 96, 104);
  for (int64_t w : run_windows(by4, origin, 104, 196)) epoch1.push_back(w);
  EXPECT_EQ(epoch1, epoch_windows(by4, 1));
  EXPECT_EQ(run_windows(by4, origin, 196, 296), epoch_windows(by4, 2));  // then whole epochs

  // 26 steps at 4 (epoch 1, slot 4), then at 8: the rest of epoch 1 up to its 96 slots, then epoch 2.
  origin = continue_epoch(104, {}, epoch_sequences(by4), epoch_sequences(by8));
  EXPECT_EQ(origin, (SequenceOrigin{100, 1}));
  std::vector<int64_t> expected = epoch_windows(by4, 1);
  expected.resize(96);
  std::vector<int64_t> read = run_windows(by4, {}, 100, 104);
  for (int64_t w : run_windows(by8, origin, 104, 196)) read.push_back(w);
  EXPECT_EQ(read, expected);
  EXPECT_EQ(run_windows(by8, origin, 196, 292), epoch_windows(by8, 2));

  // 49 steps at 4 stand at slot 96 of epoch 1, past the end of an epoch of 96: the next is epoch 2.
  origin = continue_epoch(196, {}, epoch_sequences(by4), epoch_sequences(by8));
  EXPECT_EQ(origin, (SequenceOrigin{196, 2}));
  EXPECT_EQ(run_windows(by8, origin, 196, 292), epoch_windows(by8, 2));

  // A second change continues from the first's origin.
  const SequenceOrigin first = continue_epoch(104, {}, epoch_sequences(by8), epoch_sequences(by4));
  const SequenceOrigin second = continue_epoch(150, first, epoch_sequences(by4), epoch_sequences(by8));
  EXPECT_EQ(second, (SequenceOrigin{96, 1}));  // slot 54 of epoch 1 lies within the 96 of batch size 8
  EXPECT_EQ(run_windows(by8, second, 150, 192), std::vector<int64_t>(epoch1.begin() + 54, epoch1.begin() + 96));
}

TEST(DataOrder, ParsesNamesAndRejectsOthers) {
  EXPECT_EQ(parse_data_order("sequential"), DataOrder::sequential);
  EXPECT_EQ(parse_data_order("shuffled"), DataOrder::shuffled);
  for (DataOrder order : {DataOrder::sequential, DataOrder::shuffled})
    EXPECT_EQ(parse_data_order(data_order_name(order)), order);
  std::string message = error_of([] { parse_data_order("random"); });
  EXPECT_TRUE(contains(message, "--data-order: unknown value 'random'")) << message;
}

}  // namespace
}  // namespace tessera
