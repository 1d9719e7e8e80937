// DataMixture: the weighted-sources syntax and its errors; every prefix of the global sequence
// order gives each of D sources its share to within (D - 1) / 2 sequences, each source's sequences in its own
// order without gaps; any split of a batch reads the same tokens; one source reads exactly as
// BatchSampler; the run's summary of each source.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/data_mixture.h"
#include "data/token_shard.h"
#include "support/test_support.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

using testing::contains;
using testing::error_of;

// A folder holding one shard whose token at position p is first_token + p; returns its glob.
std::string position_source(const fs::path& dir, const std::string& name, uint32_t first_token, uint32_t tokens) {
  fs::create_directories(dir / name);
  std::vector<uint32_t> values(tokens);
  std::iota(values.begin(), values.end(), first_token);
  write_token_shard(dir / name / "shard_0.bin", values, 2);
  return (dir / name / "*.bin").string();
}

constexpr int64_t kVocab = 1 << 20;
constexpr int64_t kT = 4;

TEST(DataMixture, ParsesOneGlobOrWeightedGlobs) {
  std::vector<DataSource> one = parse_data_sources("data/train_*.bin", "--train-data");
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].glob, "data/train_*.bin");
  EXPECT_EQ(one[0].weight, 1.0);

  std::vector<DataSource> mix = parse_data_sources("3:web/*.bin, 1 : code/*.bin", "--train-data");
  ASSERT_EQ(mix.size(), 2u);
  EXPECT_EQ(mix[0].glob, "web/*.bin");
  EXPECT_EQ(mix[1].glob, "code/*.bin");
  EXPECT_DOUBLE_EQ(mix[0].weight, 0.75);
  EXPECT_DOUBLE_EQ(mix[1].weight, 0.25);

  // A comma inside a glob's {a,b} alternatives does not end its source.
  mix = parse_data_sources("0.6:{web,news}/train_*.bin,0.4:code/{a,b}*.bin", "--train-data");
  ASSERT_EQ(mix.size(), 2u);
  EXPECT_EQ(mix[0].glob, "{web,news}/train_*.bin");
  EXPECT_EQ(mix[1].glob, "code/{a,b}*.bin");
  EXPECT_EQ(parse_data_sources("data/{a,b}/train_*.bin", "--train-data").size(), 1u);

  // A colon after something that is not a number is part of the glob.
  EXPECT_EQ(parse_data_sources("runs/2026:11/*.bin", "--train-data")[0].glob, "runs/2026:11/*.bin");
  EXPECT_EQ(parse_data_sources("0.5:a:b/*.bin", "--train-data")[0].glob, "a:b/*.bin");
}

TEST(DataMixture, BadSourcesNameTheFlagAndTheSyntax) {
  auto error = [](const std::string& text) { return error_of([&] { parse_data_sources(text, "--val-data"); }); };
  std::string message = error("web/*.bin,code/*.bin");
  EXPECT_TRUE(contains(message, "--val-data: 'web/*.bin' has no weight")) << message;
  EXPECT_TRUE(contains(message, "0.7:web/train_*.bin,0.3:code/train_*.bin")) << message;
  message = error("0.5:web/*.bin,code/*.bin");
  EXPECT_TRUE(contains(message, "'code/*.bin' has no weight")) << message;
  message = error("0:web/*.bin,1:code/*.bin");
  EXPECT_TRUE(contains(message, "the weight of 'web/*.bin' must be a positive number, got 0")) << message;
  message = error("-1:web/*.bin,1:code/*.bin");
  EXPECT_TRUE(contains(message, "must be a positive number")) << message;
  message = error("inf:web/*.bin,1:code/*.bin");
  EXPECT_TRUE(contains(message, "must be a positive number")) << message;
  message = error("0.5:web/*.bin,0.5:");
  EXPECT_TRUE(contains(message, "--val-data: source 2 of '0.5:web/*.bin,0.5:' has no glob")) << message;
  message = error("web/*.bin,");
  EXPECT_TRUE(contains(message, "source 2")) << message;
}

TEST(DataMixture, EveryPrefixGivesEachSourceItsShareAndItsSequencesInOrder) {
  const fs::path dir = testing::scratch_dir();
  const std::vector<double> weights = {0.5, 0.3, 0.15, 0.05};
  std::string text;
  for (size_t d = 0; d < weights.size(); ++d) {
    if (d > 0) text += ',';
    text.append(std::to_string(weights[d])).append(":");
    text.append(position_source(dir, std::string("s").append(std::to_string(d)), 1000 * uint32_t(d + 1), 100));
  }
  const DataMixture mixture(text, kVocab, 8, kT, DataOrder::sequential, 5, "--train-data");
  std::vector<int64_t> counts(weights.size(), 0);
  for (int64_t g = 0; g < 5000; ++g) {
    const DataMixture::Draw draw = mixture.draw(g);
    ASSERT_GE(draw.source, 0);
    ASSERT_LT(draw.source, int(weights.size()));
    ASSERT_EQ(draw.index, counts[size_t(draw.source)]) << "sequence " << g << " skips or repeats an index";
    ++counts[size_t(draw.source)];
    for (size_t d = 0; d < weights.size(); ++d) {
      ASSERT_LE(std::fabs(double(counts[d]) - weights[d] * double(g + 1)), 1.5 + 1e-9)
          << "source " << d << " after " << g + 1 << " sequences";
      ASSERT_EQ(mixture.drawn_from(int(d), g + 1), counts[d]);
    }
  }
}

TEST(DataMixture, BatchesMixTheSourcesAndAnySplitReadsTheSameTokens) {
  const fs::path dir = testing::scratch_dir();
  const std::string web = position_source(dir, "web", 10000, 400), code = position_source(dir, "code", 50000, 400);
  const int64_t B = 8;
  for (DataOrder order : {DataOrder::sequential, DataOrder::shuffled}) {
    const DataMixture mixture("0.75:" + web + ",0.25:" + code, kVocab, B, kT, order, 9, "--train-data");
    for (int64_t k = 0; k < 6; ++k) {
      std::vector<int32_t> inputs(size_t(B * kT)), targets(size_t(B * kT));
      mixture.fill(k, 0, B, inputs.data(), targets.data());
      int64_t from_code = 0;
      for (int64_t s = 0; s < B; ++s) {
        const DataMixture::Draw draw = mixture.draw(k * B + s);
        const int32_t first = inputs[size_t(s * kT)];
        EXPECT_EQ(first >= 50000, draw.source == 1) << "batch " << k << " sequence " << s;
        from_code += draw.source;
        // A window of its own source, targets one token ahead.
        EXPECT_EQ((first % 10000) % kT, 0);
        EXPECT_EQ(targets[size_t(s * kT)], first + 1);
        if (order == DataOrder::sequential) {
          EXPECT_EQ(first, (draw.source ? 50000 : 10000) + int32_t(draw.index * kT));
        }
      }
      EXPECT_EQ(from_code, 2) << "a quarter of every batch of 8";
      // Micro-batches or data-parallel shares of the batch read the same tokens.
      for (int64_t part : {1, 2, 4}) {
        std::vector<int32_t> split(size_t(B * kT)), split_targets(size_t(B * kT));
        for (int64_t first = 0; first < B; first += part)
          mixture.fill(k, first, part, split.data() + first * kT, split_targets.data() + first * kT);
        EXPECT_EQ(split, inputs);
        EXPECT_EQ(split_targets, targets);
      }
    }
  }
  const DataMixture mixture("0.75:" + web + ",0.25:" + code, kVocab, B, kT, DataOrder::sequential, 9, "--train-data");
  std::vector<int32_t> out(8), targets(8);
  std::string message = error_of([&] { mixture.fill(0, 7, 2, out.data(), targets.data()); });
  EXPECT_TRUE(contains(message, "outside the global batch of 8 (--batch-size)")) << message;
}

TEST(DataMixture, ShuffledSourcesReadEveryWindowOncePerEpochInTheirOwnOrder) {
  const fs::path dir = testing::scratch_dir();
  const std::string a = position_source(dir, "a", 10000, 101), b = position_source(dir, "b", 50000, 101);
  const DataMixture mixture("0.5:" + a + ",0.5:" + b, kVocab, 4, kT, DataOrder::shuffled, 3, "--train-data");
  // 25 windows each; the first 50 sequences read each source's windows once.
  std::vector<std::vector<int32_t>> firsts(2);
  for (int64_t k = 0; k < 50 / 4 + 1; ++k) {
    std::vector<int32_t> inputs(16), targets(16);
    mixture.fill(k, 0, 4, inputs.data(), targets.data());
    for (int64_t s = 0; s < 4 && k * 4 + s < 50; ++s) firsts[inputs[size_t(s * kT)] >= 50000].push_back(inputs[size_t(s * kT)]);
  }
  for (int source = 0; source < 2; ++source) {
    std::vector<int32_t> sorted = firsts[size_t(source)];
    std::sort(sorted.begin(), sorted.end());
    ASSERT_EQ(sorted.size(), 25u);
    for (int32_t w = 0; w < 25; ++w) EXPECT_EQ(sorted[size_t(w)], (source ? 50000 : 10000) + w * int32_t(kT));
    EXPECT_NE(sorted, firsts[size_t(source)]) << "shuffled order";
  }
  // The two sources, of equal size, are not shuffled alike.
  for (int32_t& t : firsts[1]) t -= 40000;
  EXPECT_NE(firsts[0], firsts[1]);
}

TEST(DataMixture, OneSourceReadsAsTheBatchSampler) {
  const fs::path dir = testing::scratch_dir();
  const std::string glob = position_source(dir, "only", 10000, 203);
  const TokenDataset dataset = TokenDataset::open(glob, kVocab, "--train-data");
  const BatchSampler sampler(dataset, 4, kT, DataOrder::shuffled, 11);
  const DataMixture mixture(glob, kVocab, 4, kT, DataOrder::shuffled, 11, "--train-data");
  EXPECT_EQ(mixture.batches_per_epoch(), sampler.batches_per_epoch());
  for (int64_t k = 0; k < 30; ++k) {
    std::vector<int32_t> a(16), at(16), b(16), bt(16);
    sampler.fill(k, 0, 4, a.data(), at.data());
    mixture.fill(k, 0, 4, b.data(), bt.data());
    ASSERT_EQ(a, b) << "batch " << k;
    ASSERT_EQ(at, bt);
  }
}

TEST(DataMixture, SummarySaysWhatARunTakesOfEachSource) {
  const fs::path dir = testing::scratch_dir();
  // Half of each batch of 4 from a source of 10 windows, half from one of 30.
  const std::string small = position_source(dir, "small", 10000, 41), large = position_source(dir, "large", 50000, 121);
  const DataMixture mixture("1:" + small + ",1:" + large, kVocab, 4, kT, DataOrder::sequential, 0, "--train-data");
  EXPECT_EQ(mixture.drawn_from(0, 5 * 4), 10);
  const std::string summary = mixture.summary(10);
  EXPECT_TRUE(contains(summary, " 50.0% of the sequences, 41 tokens (10 sequences), 2.00 epochs in 10 batches: " + small))
      << summary;
  EXPECT_TRUE(contains(summary, "121 tokens (30 sequences), 0.67 epochs in 10 batches: " + large)) << summary;
  // Epochs are a single source's (validation reads the sources one at a time).
  EXPECT_THROW(mixture.batches_per_epoch(), Error);
}

TEST(DataMixture, AMissingSourceIsNamed) {
  const fs::path dir = testing::scratch_dir();
  const std::string web = position_source(dir, "web", 10000, 400);
  const std::string missing = (dir / "nothing" / "*.bin").string();
  const std::string message = error_of(
      [&] { DataMixture("0.5:" + web + ",0.5:" + missing, kVocab, 4, kT, DataOrder::sequential, 0, "--train-data"); });
  EXPECT_TRUE(contains(message, "--train-data: no file matches '" + missing + "'")) << message;
}

// A source too small for one sequence is named, and the message says why a --batch-size of 2 asks
// it for one sequence only (a mixture draws its sources a sequence at a time).
TEST(DataMixture, ASourceTooSmallForOneSequenceIsNamed) {
  const fs::path dir = testing::scratch_dir();
  const std::string web = position_source(dir, "web", 10000, 400), tiny = position_source(dir, "tiny", 20000, 4);
  const std::string message = error_of(
      [&] { DataMixture("0.9:" + web + ",0.1:" + tiny, kVocab, 2, kT, DataOrder::sequential, 0, "--train-data"); });
  EXPECT_TRUE(contains(message, "--train-data: source 2 ('" + tiny + "') holds 4 tokens, too few for one sequence of "
                                "--seq-len 4, which needs 5 (a mixture draws each source a sequence at a time)"))
      << message;
  EXPECT_FALSE(contains(message, "global batch of 1")) << message;
}

// The same source twice would silently collapse into one: refused, whether the globs are spelt alike
// or only match the same shards.
TEST(DataMixture, DuplicateSourcesAreRefused) {
  const fs::path dir = testing::scratch_dir();
  const std::string web = position_source(dir, "web", 10000, 400);
  std::string message = error_of([&] { parse_data_sources("0.5:a/*.bin,0.5:a/*.bin", "--train-data"); });
  EXPECT_TRUE(contains(message, "--train-data: 'a/*.bin' is given twice; name each source once")) << message;
  message = error_of([&] { parse_data_sources("0.5:a/*.bin,0.3:b/*.bin,0.2:./a//*.bin", "--val-data"); });
  EXPECT_TRUE(contains(message, "--val-data: './a//*.bin' is given twice")) << message;
  const std::string same = (dir / "web" / "shard_*.bin").string();
  message = error_of(
      [&] { DataMixture("0.5:" + web + ",0.5:" + same, kVocab, 4, kT, DataOrder::sequential, 0, "--train-data"); });
  EXPECT_TRUE(contains(message, "shard_0.bin is matched by source 1 ('" + web + "') and source 2 ('" + same + "')"))
      << message;
}

// A resume compares the data it reads, not how --train-data spells it: a glob or another path to the
// same shards is the same data; other shards, weights or an order of sources are not.
TEST(DataMixture, SameDataSourcesComparesTheFilesRead) {
  const fs::path dir = testing::scratch_dir();
  const std::string web = position_source(dir, "web", 0, 40), code = position_source(dir, "code", 100, 40);
  const std::string web_file = (dir / "web" / "shard_0.bin").string();
  EXPECT_TRUE(same_data_sources(web, web_file));
  EXPECT_TRUE(same_data_sources(web, (dir / "web" / "." / "shard_0.bin").string()));
  EXPECT_FALSE(same_data_sources(web, code));
  EXPECT_TRUE(same_data_sources("0.5:" + web + ",0.5:" + code, "1:" + web_file + ",1:" + code));
  EXPECT_FALSE(same_data_sources("0.5:" + web + ",0.5:" + code, "0.7:" + web + ",0.3:" + code));
  EXPECT_FALSE(same_data_sources("0.5:" + web + ",0.5:" + code, "0.5:" + code + ",0.5:" + web));
  EXPECT_FALSE(same_data_sources(web, (dir / "gone" / "*.bin").string()));
}

}  // namespace
}  // namespace tessera
