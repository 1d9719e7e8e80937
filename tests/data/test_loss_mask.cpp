// Loss masks: the file's bits round-trip; the data loader turns a masked target into
// kIgnoredTarget and counts the targets of any part of a batch (plain and mixed sources); a
// corpus with prompts gets masks whose targets are exactly the completions and the <|endoftext|>
// ending each; bad masks, shards missing theirs and misused flags fail naming the file and the fix.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/ignored_target.h"
#include "data/batch_sampler.h"
#include "data/bpe_trainer.h"
#include "data/corpus.h"
#include "data/data_mixture.h"
#include "data/loss_mask.h"
#include "data/token_dataset.h"
#include "data/tokenizer.h"
#include "support/test_support.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using testing::contains;
using testing::error_of;

// Whether stream position p is a target in the masked datasets below: two of every three.
bool trained_at(int64_t p) { return p % 3 != 0; }

// Shards of the given sizes whose token at stream position p is p + 1000, each with its mask
// (trained_at); returns the glob.
std::string masked_shards(const fs::path& dir, const std::vector<int64_t>& sizes) {
  int64_t position = 0;
  for (size_t s = 0; s < sizes.size(); ++s) {
    std::vector<uint32_t> tokens(size_t(sizes[s]));
    std::vector<uint8_t> trained(size_t(sizes[s]));
    for (int64_t i = 0; i < sizes[s]; ++i, ++position) {
      tokens[size_t(i)] = uint32_t(position + 1000);
      trained[size_t(i)] = trained_at(position);
    }
    const fs::path shard = dir / ("train_" + std::to_string(s) + ".bin");
    write_token_shard(shard, tokens, 1);
    write_loss_mask(loss_mask_path(shard), trained);
  }
  return (dir / "train_*").string();  // matches the masks too: they are skipped
}

TEST(LossMask, BitsRoundTripAndCountTheTargets) {
  const fs::path dir = testing::scratch_dir();
  const std::vector<uint8_t> trained = {1, 0, 0, 1, 1, 1, 0, 1, 0, 0, 1, 1, 0};  // 13: a partial last byte
  write_loss_mask(dir / "a.mask", trained);
  const LossMask mask(dir / "a.mask");
  ASSERT_EQ(mask.num_tokens(), 13);
  EXPECT_EQ(mask.num_trained(), 7);
  for (size_t i = 0; i < trained.size(); ++i) EXPECT_EQ(mask.trained(int64_t(i)), trained[i] != 0) << i;
  EXPECT_EQ(fs::file_size(dir / "a.mask"), 1024u + 2u);
  EXPECT_EQ(loss_mask_path("data/train_000001.bin"), fs::path("data/train_000001.mask"));
}

TEST(LossMask, SamplerIgnoresMaskedTargetsAndCountsTheRest) {
  const fs::path dir = testing::scratch_dir();
  const TokenDataset data = TokenDataset::open(masked_shards(dir, {37, 50, 41}), 1 << 20, "--train-data");
  ASSERT_TRUE(data.has_loss_mask());
  EXPECT_EQ(data.num_tokens(), 128);
  int64_t expected_trained = 0;
  for (int64_t p = 0; p < 128; ++p) expected_trained += trained_at(p);
  EXPECT_EQ(data.num_trained(), expected_trained);
  const int64_t B = 4, T = 6;
  for (DataOrder order : {DataOrder::sequential, DataOrder::shuffled}) {
    const BatchSampler sampler(data, B, T, order, 5);
    for (int64_t k = 0; k < 2 * sampler.batches_per_epoch(); ++k) {
      std::vector<int32_t> inputs(size_t(B * T)), targets(size_t(B * T));
      sampler.fill(k, 0, B, inputs.data(), targets.data());
      int64_t trained = 0;
      for (int64_t s = 0; s < B; ++s) {
        const int64_t w = sampler.window_of(k, s);
        for (int64_t t = 0; t < T; ++t) {
          const int64_t target_position = w * T + t + 1;
          EXPECT_EQ(inputs[size_t(s * T + t)], target_position - 1 + 1000);
          EXPECT_EQ(targets[size_t(s * T + t)], trained_at(target_position) ? target_position + 1000 : kIgnoredTarget);
          trained += trained_at(target_position);
        }
      }
      EXPECT_EQ(sampler.count_trained(k, 0, B), trained);
      EXPECT_EQ(sampler.count_trained(k, 0, 1) + sampler.count_trained(k, 1, 3), trained);  // any split adds up
    }
  }
}

TEST(LossMask, MixtureCountsEachSourcesTargets) {
  const fs::path dir = testing::scratch_dir();
  fs::create_directories(dir / "masked");
  fs::create_directories(dir / "plain");
  masked_shards(dir / "masked", {120});
  std::vector<uint32_t> tokens(120, 7);
  write_token_shard(dir / "plain" / "train_0.bin", tokens, 1);
  const std::string text = "0.5:" + (dir / "masked" / "train_*.bin").string() + ",0.5:" +
                           (dir / "plain" / "train_*.bin").string();
  const int64_t B = 4, T = 5;
  const DataMixture mixture(text, 1 << 20, B, T, DataOrder::shuffled, 3, "--train-data");
  EXPECT_TRUE(contains(mixture.summary(10), "(loss masks: 66.7% of the tokens are targets)")) << mixture.summary(10);
  for (int64_t k = 0; k < 6; ++k) {
    std::vector<int32_t> inputs(size_t(B * T)), targets(size_t(B * T));
    mixture.fill(k, 0, B, inputs.data(), targets.data());
    const int64_t trained = std::count_if(targets.begin(), targets.end(), [](int32_t t) { return t != kIgnoredTarget; });
    EXPECT_LT(trained, B * T);  // half the sequences come from the masked source
    EXPECT_EQ(mixture.count_trained(k, 0, B), trained) << k;
  }
}

TEST(LossMask, BadMasksAndMissingOnesNameTheFileAndTheFix) {
  const fs::path dir = testing::scratch_dir();
  masked_shards(dir, {20, 20});
  auto open = [&](const std::string& glob) { TokenDataset::open(glob, 1 << 20, "--train-data"); };
  // A mask for fewer tokens than its shard.
  write_loss_mask(dir / "train_1.mask", std::vector<uint8_t>(19, 1));
  std::string message = error_of([&] { open((dir / "train_*.bin").string()); });
  EXPECT_TRUE(contains(message, "--train-data: loss mask " + (dir / "train_1.mask").string() +
                                    " covers 19 tokens but its shard holds 20")) << message;
  // A truncated mask, and one with a bad magic number.
  const std::string bytes = testing::read_text(dir / "train_0.mask");
  testing::write_text(dir / "train_0.mask", bytes.substr(0, bytes.size() - 1));
  message = error_of([&] { open((dir / "train_0.bin").string()); });
  EXPECT_TRUE(contains(message, "train_0.mask: the header says 20 tokens (3 bytes of bits) but the file holds 2"))
      << message;
  testing::write_text(dir / "train_0.mask", "x" + bytes.substr(1));
  message = error_of([&] { open((dir / "train_0.bin").string()); });
  EXPECT_TRUE(contains(message, "bad magic number")) << message;
  // Bits past the last token.
  std::string past = bytes;
  past.back() = char(0xFF);
  testing::write_text(dir / "train_0.mask", past);
  message = error_of([&] { open((dir / "train_0.bin").string()); });
  EXPECT_TRUE(contains(message, "bits are set past its 20 tokens")) << message;
  // One shard with a mask, one without.
  write_loss_mask(dir / "train_0.mask", std::vector<uint8_t>(20, 1));
  fs::remove(dir / "train_1.mask");
  message = error_of([&] { open((dir / "train_*.bin").string()); });
  EXPECT_TRUE(contains(message, "1 of the 2 shards have a loss mask but " + (dir / "train_1.bin").string() +
                                    " has none")) << message;
  // A glob that matches masks alone.
  message = error_of([&] { open((dir / "*.mask").string()); });
  EXPECT_TRUE(contains(message, "matches loss masks (*.mask) only")) << message;
}

// Fine-tuning records: the prompt and the completion of each, as JSON lines.
struct Record {
  std::string prompt, completion;
};
const std::vector<Record> kRecords = {{"Question: what is two plus two?\nAnswer:", " four."},
                                      {"Translate 'chat' to English:", " cat"},
                                      {"", " A record without a prompt trains on all of it."},
                                      {"Name a colour:", " blue"},
                                      {"Only a prompt", ""}};

TEST(LossMask, CorpusWithPromptsTrainsOnCompletionsAndTheirEnd) {
  const fs::path dir = testing::scratch_dir();
  std::string corpus, all_text;
  for (const Record& r : kRecords) {
    corpus += nlohmann::json{{"prompt", r.prompt}, {"completion", r.completion}}.dump() + "\n";
    all_text += r.prompt + r.completion + "\n";
  }
  testing::write_text(dir / "sft.jsonl", corpus);
  testing::write_text(dir / "vocab.txt", all_text + all_text + all_text);
  const Tokenizer tokenizer = train_bpe({dir / "vocab.txt"}, 300);
  ShardOptions options;
  options.documents.jsonl_key = "completion";
  options.documents.jsonl_prompt_key = "prompt";
  options.shard_tokens = 16;  // several shards, each with its mask
  const CorpusStats stats = tokenize_to_shards(tokenizer, {dir / "sft.jsonl"}, dir / "out", options);
  EXPECT_EQ(stats.documents, 4);  // the record without a completion has nothing to train on
  ASSERT_GT(stats.shards.size(), 2u);
  // The stream, split into its targets and the rest.
  const TokenDataset data = TokenDataset::open((dir / "out" / "train_*.bin").string(), 300, "--train-data");
  ASSERT_TRUE(data.has_loss_mask());
  std::vector<int32_t> tokens(size_t(data.num_tokens()));
  std::vector<uint8_t> trained(tokens.size());
  data.read(0, data.num_tokens(), tokens.data());
  data.read_loss_mask(0, data.num_tokens(), trained.data());
  EXPECT_EQ(stats.trained_tokens, std::count(trained.begin(), trained.end(), uint8_t(1)));
  std::vector<int32_t> targets, rest;
  for (size_t i = 0; i < tokens.size(); ++i) (trained[i] ? targets : rest).push_back(tokens[i]);
  const std::string eot = tokenizer.decode(std::vector<int32_t>{tokenizer.eot_token()});
  std::string expected_targets, expected_rest = eot;  // the stream's first <|endoftext|> ends nothing
  for (size_t r = 0; r < 4; ++r) {
    expected_targets += (r > 0 ? eot : "") + kRecords[r].completion;
    expected_rest += kRecords[r].prompt;
  }
  EXPECT_EQ(tokenizer.decode(targets), expected_targets);
  EXPECT_EQ(tokenizer.decode(rest), expected_rest);
}

TEST(LossMask, PromptKeyMisuseNamesTheFix) {
  const fs::path dir = testing::scratch_dir();
  testing::write_text(dir / "plain.txt", "some text\n");
  testing::write_text(dir / "sft.jsonl", "{\"prompt\": \"p\", \"completion\": \"c\"}\n{\"completion\": \"c\"}\n");
  auto read_all = [](const fs::path& file, const DocumentOptions& options) {
    DocumentReader reader(file, options);
    for (std::string d; reader.next(d);) {
    }
  };
  DocumentOptions options;
  options.jsonl_key = "completion";
  options.jsonl_prompt_key = "prompt";
  std::string message = error_of([&] { read_all(dir / "plain.txt", options); });
  EXPECT_TRUE(contains(message, "--jsonl-prompt-key needs JSON lines")) << message;
  message = error_of([&] { read_all(dir / "sft.jsonl", options); });
  EXPECT_TRUE(contains(message, "sft.jsonl' line 2: no string under 'prompt'; name the prompts' key with "
                                "--jsonl-prompt-key")) << message;
  options.jsonl_prompt_key = "completion";
  message = error_of([&] { read_all(dir / "sft.jsonl", options); });
  EXPECT_TRUE(contains(message, "--jsonl-prompt-key and --jsonl-key both name 'completion'")) << message;
}

}  // namespace
}  // namespace tessera
