// Loss masks: the file's bits round-trip; the data loader turns a masked target into
// kIgnoredTarget and counts the targets of any part of a batch (plain and mixed sources); a
// corpus with prompts gets masks whose targets are exactly the completions and the <|endoftext|>
// ending each, and one of conversations (chat templates) the assistant's turns; bad masks, shards
// missing theirs and misused flags fail naming the file and the fix.
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
#include "data/chat_template.h"
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

// Masks that mark no target would train nothing and read as a loss of 0: refused, naming the glob.
TEST(LossMask, MasksWithoutATargetAreRefused) {
  const fs::path dir = testing::scratch_dir();
  masked_shards(dir, {20, 20});
  for (const char* mask : {"train_0.mask", "train_1.mask"}) write_loss_mask(dir / mask, std::vector<uint8_t>(20, 0));
  const std::string glob = (dir / "train_*.bin").string();
  const std::string message = error_of([&] { TokenDataset::open(glob, 1 << 20, "--val-data"); });
  EXPECT_TRUE(contains(message, "--val-data: the loss masks of '" + glob + "' mark none of its 40 tokens as a target"))
      << message;
  write_loss_mask(dir / "train_1.mask", std::vector<uint8_t>(20, 1));
  EXPECT_EQ(TokenDataset::open(glob, 1 << 20, "--val-data").num_trained(), 20);
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

// Packed for T = 32: every window of the split (positions [wT, wT + T]) starts with a start token,
// so no record crosses one; the targets are still each record's completion and the <|endoftext|>
// ending it (a record cut short ends without one), padding never trains; a record longer than T is
// cut to its first T tokens; shards hold whole windows; training with another --seq-len is refused.
TEST(LossMask, PackedRecordsStayInsideTheirWindows) {
  const fs::path dir = testing::scratch_dir();
  const std::vector<Record> records = {{"Q: 1+1?", " 2"},           {"Q: capital of Peru?", " Lima"},
                                       {"Hi", " there, friend"},
                                       {"A long prompt that cannot fit in one window of thirty-two tokens", " x"},
                                       {"Q:", " ok"},                 {"Name:", " Ada"}};
  std::string corpus, all_text;
  for (const Record& r : records) {
    corpus += nlohmann::json{{"prompt", r.prompt}, {"completion", r.completion}}.dump() + "\n";
    all_text += r.prompt + r.completion + "\n";
  }
  testing::write_text(dir / "sft.jsonl", corpus);
  testing::write_text(dir / "vocab.txt", all_text);
  const Tokenizer tokenizer = train_bpe({dir / "vocab.txt"}, 270);
  const int64_t T = 32;
  ShardOptions options;
  options.documents.jsonl_key = "completion";
  options.documents.jsonl_prompt_key = "prompt";
  options.pack_seq_len = T;
  options.shard_tokens = 70;  // rounded down to whole windows: 64
  const CorpusStats stats = tokenize_to_shards(tokenizer, {dir / "sft.jsonl"}, dir / "out", options);
  EXPECT_EQ(stats.truncated_documents, 1);
  EXPECT_GT(stats.padding_tokens, 0);
  for (size_t s = 0; s + 1 < stats.shards.size(); ++s) EXPECT_EQ(TokenShard(stats.shards[s]).num_tokens(), 64) << s;
  const TokenDataset data = TokenDataset::open((dir / "out" / "train_*.bin").string(), 270, "--train-data");
  EXPECT_EQ(data.packed_seq_len(), T);
  std::vector<int32_t> tokens(size_t(data.num_tokens()));
  std::vector<uint8_t> trained(tokens.size());
  data.read(0, data.num_tokens(), tokens.data());
  data.read_loss_mask(0, data.num_tokens(), trained.data());
  const int32_t eot = tokenizer.eot_token();
  for (size_t p = 0; p < tokens.size(); p += size_t(T)) EXPECT_EQ(tokens[p], eot) << "window at " << p;
  std::vector<int32_t> targets;
  for (size_t i = 0; i < tokens.size(); ++i)
    if (trained[i]) targets.push_back(tokens[i]);
  const std::string end = tokenizer.decode(std::vector<int32_t>{eot});
  std::string expected;
  for (size_t r = 0; r < records.size(); ++r)
    if (r != 3) expected += (expected.empty() ? "" : end) + records[r].completion;  // record 3 lost its completion
  EXPECT_EQ(tokenizer.decode(targets), expected);
  // The sampler's windows: only --seq-len 32 reads them as they were packed.
  EXPECT_NO_THROW(BatchSampler(data, 1, T, DataOrder::sequential, 1));
  EXPECT_TRUE(contains(error_of([&] { BatchSampler(data, 1, 8, DataOrder::sequential, 1); }),
                       "--train-data: the shards were packed for sequences of 32 tokens (tokenize --pack-seq-len 32), "
                       "which --seq-len 8 would cut across; train with --seq-len 32 or tokenize again with "
                       "--pack-seq-len 8"));
  ShardOptions plain;
  plain.pack_seq_len = T;
  EXPECT_TRUE(contains(error_of([&] { tokenize_to_shards(tokenizer, {dir / "vocab.txt"}, dir / "plain", plain); }),
                       "--pack-seq-len needs --jsonl-prompt-key or --chat-template"));
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

TEST(ChatTemplate, RendersTurnsAndTrainsTheAssistants) {
  const std::vector<ChatMessage> chat = {{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello."}};
  const std::vector<DocumentPiece> llama = ChatTemplate::named("llama3").render(chat);
  ASSERT_EQ(llama.size(), 6u);
  const std::vector<std::pair<std::string, bool>> want_llama = {
      {"<|start_header_id|>system<|end_header_id|>\n\n", false}, {"Be brief.<|eot_id|>", false},
      {"<|start_header_id|>user<|end_header_id|>\n\n", false},   {"Hi<|eot_id|>", false},
      {"<|start_header_id|>assistant<|end_header_id|>\n\n", false}, {"Hello.<|eot_id|>", true}};
  for (size_t i = 0; i < llama.size(); ++i) {
    EXPECT_EQ(llama[i].text, want_llama[i].first) << i;
    EXPECT_EQ(llama[i].trained, want_llama[i].second) << i;
  }
  std::string chatml;
  for (const DocumentPiece& piece : ChatTemplate::named("chatml").render(chat))
    chatml += (piece.trained ? "[" : "") + piece.text + (piece.trained ? "]" : "");
  EXPECT_EQ(chatml, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                    "<|im_start|>assistant\n[Hello.<|im_end|>]\n");
  EXPECT_TRUE(contains(error_of([] { ChatTemplate::named("alpaca"); }),
                       "--chat-template: unknown template 'alpaca'; use llama3, chatml, qwen2.5, qwen3, phi3, "
                       "phi4, olmo2, gemma, cohere, llama2, mistral or mistral-v3"));
  // Qwen2.5's template: ChatML, with Qwen2.5-Instruct's system message unless the conversation has one.
  std::string qwen;
  for (const DocumentPiece& piece : ChatTemplate::named("qwen2.5").render({{"user", "Hi"}})) qwen += piece.text;
  EXPECT_EQ(qwen, "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
                  "<|im_start|>user\nHi<|im_end|>\n");
  std::string own;
  for (const DocumentPiece& piece : ChatTemplate::named("qwen2.5").render(chat)) own += piece.text;
  EXPECT_EQ(own, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
                 "Hello.<|im_end|>\n");
}

// The text of a rendering, its trained pieces in brackets.
std::string marked(const std::vector<DocumentPiece>& pieces) {
  std::string text;
  for (const DocumentPiece& piece : pieces) text += (piece.trained ? "[" : "") + piece.text + (piece.trained ? "]" : "");
  return text;
}

// Qwen3's template: the final assistant turn always opens with a think block (empty without
// reasoning); earlier turns after the last user query only when they reasoned; turns before it lose
// their reasoning. Reasoning comes from "reasoning_content" or from the content before </think>.
TEST(ChatTemplate, Qwen3ThinksAfterTheLastQuery) {
  const ChatTemplate qwen3 = ChatTemplate::named("qwen3");
  EXPECT_EQ(marked(qwen3.render({{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello."}})),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
            "[<think>\n\n</think>\n\nHello.<|im_end|>]\n");
  EXPECT_EQ(marked(qwen3.render({{"user", "2+2?"},
                                 {"assistant", "<think>\nAdd them.\n</think>\n\n4"},
                                 {"user", "And 3+3?"},
                                 {"assistant", "\n6", "\nAdd again.\n\n"}})),
            "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n[4<|im_end|>]\n"
            "<|im_start|>user\nAnd 3+3?<|im_end|>\n<|im_start|>assistant\n"
            "[<think>\nAdd again.\n</think>\n\n6<|im_end|>]\n");
  // After the query, through tool calls: a turn with a thought keeps it, one without does not; the
  // results share one user turn; a user message that is only a tool result is not a query.
  EXPECT_EQ(marked(qwen3.render({{"user", "Weather?"},
                                 {"assistant", "<think>Look it up.</think>call get_weather"},
                                 {"tool", "sunny"},
                                 {"tool", "22 C"},
                                 {"assistant", "call get_time"},
                                 {"user", "<tool_response>noon</tool_response>"},
                                 {"assistant", "Sunny, 22 C, at noon."}})),
            "<|im_start|>user\nWeather?<|im_end|>\n"
            "<|im_start|>assistant\n[<think>\nLook it up.\n</think>\n\ncall get_weather<|im_end|>]\n"
            "<|im_start|>user\n<tool_response>\nsunny\n</tool_response>\n<tool_response>\n22 C\n</tool_response>"
            "<|im_end|>\n"
            "<|im_start|>assistant\n[call get_time<|im_end|>]\n"
            "<|im_start|>user\n<tool_response>noon</tool_response><|im_end|>\n"
            "<|im_start|>assistant\n[<think>\n\n</think>\n\nSunny, 22 C, at noon.<|im_end|>]\n");
  // From a JSON line: a message's "reasoning_content" fills its think block.
  const fs::path dir = testing::scratch_dir();
  testing::write_text(dir / "chat.jsonl", R"({"messages": [{"role": "user", "content": "Hi"}, )"
                                          R"({"role": "assistant", "content": "Hello.", "reasoning_content": "Greet."}]})"
                                          "\n");
  DocumentOptions options;
  options.jsonl_key = "messages";
  options.chat_template = "qwen3";
  DocumentReader reader(dir / "chat.jsonl", options);
  DocumentRecord record;
  Document document;
  ASSERT_TRUE(reader.next_record(record));
  reader.document_of(record, document);
  EXPECT_EQ(marked(document.pieces), "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
                                     "[<think>\nGreet.\n</think>\n\nHello.<|im_end|>]\n");
  // Without a user message no turn thinks.
  EXPECT_EQ(marked(qwen3.render({{"assistant", "Hi."}})), "<|im_start|>assistant\n[Hi.<|im_end|>]\n");
  EXPECT_EQ(qwen3.generation_prompt(), "<|im_start|>assistant\n");
  EXPECT_EQ(qwen3.generation_prompt(false), "<|im_start|>assistant\n<think>\n\n</think>\n\n");  // enable_thinking=False
  EXPECT_EQ(ChatTemplate::named("chatml").generation_prompt(false), "<|im_start|>assistant\n");
  // Qwen2.5 puts tool results into user turns the same way; plain ChatML keeps the tool role.
  const std::vector<ChatMessage> tool_chat = {{"system", "S"}, {"tool", "r1"}, {"user", "ok"}};
  EXPECT_EQ(marked(ChatTemplate::named("qwen2.5").render(tool_chat)),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\n<tool_response>\nr1\n</tool_response><|im_end|>\n"
            "<|im_start|>user\nok<|im_end|>\n");
  EXPECT_EQ(marked(ChatTemplate::named("chatml").render(tool_chat)),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>tool\nr1<|im_end|>\n<|im_start|>user\nok<|im_end|>\n");
}

// Phi-3's and Phi-4's templates as their tokenizer_config.json writes them (Phi-3: a role token, a
// newline, the content, <|end|> and a newline; Phi-4: ChatML with <|im_sep|> and no newlines), the
// assistants' turns and their end trained; the prompt a reply follows.
TEST(ChatTemplate, Phi3AndPhi4) {
  const std::vector<ChatMessage> chat = {{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello."}};
  const ChatTemplate phi3 = ChatTemplate::named("phi3"), phi4 = ChatTemplate::named("phi4");
  EXPECT_EQ(marked(phi3.render(chat)), "<|system|>\nBe brief.<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\n"
                                       "[Hello.<|end|>]\n");
  EXPECT_EQ(phi3.generation_prompt(), "<|assistant|>\n");
  EXPECT_EQ(phi3.reply_ends().front(), "<|end|>");
  EXPECT_FALSE(phi3.knows_role("tool"));
  EXPECT_EQ(marked(phi4.render(chat)), "<|im_start|>system<|im_sep|>Be brief.<|im_end|><|im_start|>user<|im_sep|>Hi"
                                       "<|im_end|><|im_start|>assistant<|im_sep|>[Hello.<|im_end|>]");
  EXPECT_EQ(phi4.generation_prompt(), "<|im_start|>assistant<|im_sep|>");
  EXPECT_EQ(phi4.reply_ends().front(), "<|im_end|>");
}

// OLMo 2 Instruct's template (Tulu 3's), as its tokenizer_config.json writes it: system and user turns end
// with a newline, assistant turns with the end of text and a newline but the conversation's last turn,
// which ends bare; the role markers are text, the end of text its only special token. A tool message
// is a role it does not know.
TEST(ChatTemplate, Olmo2) {
  const ChatTemplate olmo2 = ChatTemplate::named("olmo2");
  EXPECT_EQ(marked(olmo2.render({{"system", "S"}, {"user", "U"}, {"assistant", "A"}})),
            "<|system|>\nS\n<|user|>\nU\n<|assistant|>\n[A<|endoftext|>]");
  EXPECT_EQ(marked(olmo2.render({{"user", "U"}, {"assistant", "A"}, {"user", "V"}, {"assistant", "B"}})),
            "<|user|>\nU\n<|assistant|>\n[A<|endoftext|>]\n<|user|>\nV\n<|assistant|>\n[B<|endoftext|>]");
  EXPECT_EQ(marked(olmo2.render({{"user", "U"}, {"assistant", "A"}, {"user", "V"}})),
            "<|user|>\nU\n<|assistant|>\n[A<|endoftext|>]\n<|user|>\nV\n");
  EXPECT_EQ(olmo2.generation_prompt(), "<|assistant|>\n");
  EXPECT_EQ(olmo2.reply_ends(), (std::vector<std::string_view>{"<|endoftext|>", "<|end_of_text|>", "<eos>"}));
  EXPECT_FALSE(olmo2.knows_role("tool"));
  EXPECT_EQ(olmo2.known_roles(), "system, user, assistant");
}

// Gemma's template (Gemma 2's and 3's instruction-tuned models): the assistant's turns are the
// "model"'s; a system message opens the first user turn's content, untrimmed and a blank line before the
// (trimmed) query; the turns must alternate user, model, user, ...
TEST(ChatTemplate, Gemma) {
  const ChatTemplate gemma = ChatTemplate::named("gemma");
  EXPECT_EQ(marked(gemma.render({{"system", "Be brief. "}, {"user", " Hi\n"}, {"assistant", "Hello. "}})),
            "<start_of_turn>user\nBe brief. \n\nHi<end_of_turn>\n<start_of_turn>model\n[Hello.<end_of_turn>]\n");
  EXPECT_EQ(marked(gemma.render({{"user", "U"}, {"assistant", "A"}, {"user", "V"}})),
            "<start_of_turn>user\nU<end_of_turn>\n<start_of_turn>model\n[A<end_of_turn>]\n"
            "<start_of_turn>user\nV<end_of_turn>\n");
  EXPECT_EQ(gemma.generation_prompt(), "<start_of_turn>model\n");
  EXPECT_EQ(gemma.reply_ends(),
            (std::vector<std::string_view>{"<end_of_turn>", "<|endoftext|>", "<|end_of_text|>", "<eos>"}));
  EXPECT_EQ(gemma.known_roles(), "system, user, assistant");
  std::string message = error_of([&] { gemma.render({{"user", "U"}, {"user", "V"}}); });
  EXPECT_TRUE(contains(message, "--chat-template gemma: message 2 is 'user' where the conversation's turns must "
                                "alternate user, assistant, user, ... (after one system message)")) << message;
  message = error_of([&] { gemma.render({{"system", "S"}, {"assistant", "A"}}); });
  EXPECT_TRUE(contains(message, "message 2 is 'assistant'")) << message;
}

// Llama 2 chat's template: [INST] turns, each user turn but the first (which follows the document's start
// token) opening with <s>, the reply after a space and before " </s>", content stripped, the system message
// folded into the first user turn; nothing opens the reply, which follows [/INST].
TEST(ChatTemplate, Llama2) {
  const ChatTemplate llama2 = ChatTemplate::named("llama2");
  EXPECT_EQ(marked(llama2.render({{"system", "S"}, {"user", "U1 "}, {"assistant", " A1"}, {"user", "U2"},
                                  {"assistant", "A2"}})),
            "[INST] <<SYS>>\nS\n<</SYS>>\n\nU1 [/INST][ A1 </s>]<s>[INST] U2 [/INST][ A2 </s>]");
  EXPECT_EQ(marked(llama2.render({{"user", "U1"}, {"assistant", "A1"}, {"user", "U2"}})),
            "[INST] U1 [/INST][ A1 </s>]<s>[INST] U2 [/INST]");
  EXPECT_EQ(llama2.generation_prompt(), "");
  EXPECT_EQ(llama2.reply_ends().front(), "</s>");
  EXPECT_FALSE(llama2.knows_role("tool"));
  const std::string message = error_of([&] { llama2.render({{"assistant", "A"}}); });
  EXPECT_TRUE(contains(message, "--chat-template llama2: message 1 is 'assistant' where the conversation's turns "
                                "must alternate")) << message;
}

// Mistral-7B-Instruct's (v0.1 and v0.2, as their templates are since 2024): " [INST] ... [/INST]" turns,
// the reply after a space and before </s>, content as given, the system message and a blank line opening
// the first user turn; the document's start token is the only <s>.
TEST(ChatTemplate, Mistral) {
  const ChatTemplate mistral = ChatTemplate::named("mistral");
  EXPECT_EQ(marked(mistral.render({{"system", "S"}, {"user", "U1"}, {"assistant", "A1"}, {"user", "U2 "},
                                   {"assistant", "A2"}})),
            " [INST] S\n\nU1 [/INST][ A1</s>] [INST] U2  [/INST][ A2</s>]");
  EXPECT_EQ(mistral.generation_prompt(), "");
  EXPECT_EQ(mistral.reply_ends().front(), "</s>");
  const std::string message = error_of([&] { mistral.render({{"user", "U"}, {"user", "V"}}); });
  EXPECT_TRUE(contains(message, "--chat-template mistral: message 2 is 'user'")) << message;
}

// Command-R's and Aya's: a token names each role, user and assistant content stripped (Python's strip), the system
// message a turn of its own as given; after it the turns alternate; the reply opens with <|CHATBOT_TOKEN|>.
TEST(ChatTemplate, CohereRoleTokens) {
  const ChatTemplate cohere = ChatTemplate::named("cohere");
  EXPECT_EQ(marked(cohere.render({{"system", " Be brief. "}, {"user", " Hi\n"}, {"assistant", " Hello. "}})),
            "<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|> Be brief. <|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|>"
            "<|USER_TOKEN|>Hi<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>[Hello.<|END_OF_TURN_TOKEN|>]");
  EXPECT_EQ(cohere.generation_prompt(), "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>");
  EXPECT_EQ(cohere.reply_ends().front(), "<|END_OF_TURN_TOKEN|>");
  EXPECT_FALSE(cohere.knows_role("tool"));
  const std::string message = error_of([&] { cohere.render({{"user", "a"}, {"user", "b"}}); });
  EXPECT_TRUE(contains(message, "--chat-template cohere: message 2 is 'user'")) << message;
}

// Mistral's v3 tokenizer's (Mistral-7B-Instruct v0.3, Mixtral-8x22B-Instruct, ...): "[INST] ...[/INST]" turns
// ([INST] and [/INST] its special tokens), the reply after a space, trimmed, before </s>; the system message and
// a blank line open the last user turn (mistral-common's placement), whichever role ends the conversation.
TEST(ChatTemplate, MistralV3PutsTheSystemMessageInTheLastUserTurn) {
  const ChatTemplate v3 = ChatTemplate::named("mistral-v3");
  EXPECT_EQ(marked(v3.render({{"system", "S"}, {"user", "U1"}, {"assistant", " A1\n"}, {"user", "U2 "},
                              {"assistant", "A2"}})),
            "[INST] U1[/INST][ A1</s>][INST] S\n\nU2 [/INST][ A2</s>]");
  EXPECT_EQ(marked(v3.render({{"system", "S"}, {"user", "U1"}, {"assistant", "A1"}, {"user", "U2"}})),
            "[INST] U1[/INST][ A1</s>][INST] S\n\nU2[/INST]");
  EXPECT_EQ(marked(v3.render({{"system", "S"}, {"user", "U1"}})), "[INST] S\n\nU1[/INST]");
  EXPECT_EQ(marked(v3.render({{"user", " U1"}, {"assistant", "A1"}})), "[INST]  U1[/INST][ A1</s>]");
  EXPECT_EQ(v3.generation_prompt(), "");
  EXPECT_EQ(v3.reply_ends().front(), "</s>");
  EXPECT_FALSE(v3.knows_role("tool"));
  const std::string message = error_of([&] { v3.render({{"system", "S"}, {"assistant", "A"}}); });
  EXPECT_TRUE(contains(message, "--chat-template mistral-v3: message 2 is 'assistant'")) << message;
}

// Llama 3's templates trim each message (Jinja's `| trim`: Python's whitespace, Unicode's included);
// ChatML's keep it as given.
TEST(ChatTemplate, Llama3TrimsContentAsItsTemplateDoes) {
  const std::vector<ChatMessage> chat = {{"user", " \n\tHi there\xE3\x80\x80 \n"}, {"assistant", "\xC2\xA0Hello.\r\n"},
                                         {"user", " \n "}};
  std::string llama;
  for (const DocumentPiece& piece : ChatTemplate::named("llama3").render(chat)) llama += piece.text;
  EXPECT_EQ(llama, "<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>"
                   "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
                   "<|start_header_id|>user<|end_header_id|>\n\n<|eot_id|>");
  std::string chatml;
  for (const DocumentPiece& piece : ChatTemplate::named("chatml").render({chat[0]})) chatml += piece.text;
  EXPECT_EQ(chatml, "<|im_start|>user\n \n\tHi there\xE3\x80\x80 \n<|im_end|>\n");
}

// A generated reply ends at the end of its turn, at an end of text, or (Llama 3.1) at <|eom_id|>,
// the tokens Llama 3.1's and Qwen2.5's generation configs list as eos_token_id.
TEST(ChatTemplate, ReplyEndsAreTheGenerationConfigsStops) {
  using Ends = std::vector<std::string_view>;
  EXPECT_EQ(ChatTemplate::named("llama3").reply_ends(),
            (Ends{"<|eot_id|>", "<|endoftext|>", "<|end_of_text|>", "<eos>", "<|eom_id|>"}));
  EXPECT_EQ(ChatTemplate::named("chatml").reply_ends(),
            (Ends{"<|im_end|>", "<|endoftext|>", "<|end_of_text|>", "<eos>"}));
  EXPECT_EQ(ChatTemplate::named("qwen2.5").reply_ends().front(), "<|im_end|>");
}

// The 256 byte tokens, then `specials` (the first is <|endoftext|>); with `bos`, the second special
// is put before every text, as Llama 3's post-processor does.
Tokenizer byte_tokenizer(const std::vector<std::string>& specials, bool bos) {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.emplace_back(1, char(b));
  std::vector<SpecialToken> special_tokens;
  for (const std::string& s : specials) {
    tokens.push_back(s);
    special_tokens.push_back({s, int32_t(tokens.size() - 1)});
  }
  EncodingRules rules;
  if (bos) rules.prefix = {special_tokens[1].id};
  return Tokenizer(tokens, {}, special_tokens, "byte tokenizer", std::move(rules));
}

// Conversations tokenized through each template: the targets are the assistants' turns (with
// their end of turn) and, for a tokenizer without a BOS, the <|endoftext|> ending each document;
// a conversation without an assistant's turn is skipped.
TEST(ChatTemplate, CorpusOfConversationsTrainsOnTheAssistantsTurns) {
  const fs::path dir = testing::scratch_dir();
  const std::vector<std::vector<ChatMessage>> conversations = {
      {{"user", "2+2?"}, {"assistant", "4"}},
      {{"system", "Terse."}, {"user", "Capital of France?"}, {"assistant", "Paris"}, {"user", "And Italy?"},
       {"assistant", "Rome"}},
      {{"user", "no answer here"}}};
  std::string corpus;
  for (const auto& conversation : conversations) {
    nlohmann::json messages = nlohmann::json::array();
    for (const ChatMessage& m : conversation) messages.push_back({{"role", m.role}, {"content", m.content}});
    corpus += nlohmann::json{{"messages", messages}}.dump() + "\n";
  }
  testing::write_text(dir / "chat.jsonl", corpus);
  struct Case {
    std::string name;
    Tokenizer tokenizer;
    std::string targets, rest;
  };
  const std::vector<Case> cases = {
      {"chatml", byte_tokenizer({"<|endoftext|>", "<|im_start|>", "<|im_end|>"}, false),
       "4<|im_end|><|endoftext|>Paris<|im_end|>Rome<|im_end|>",
       "<|endoftext|><|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n\n<|im_start|>system\nTerse."
       "<|im_end|>\n<|im_start|>user\nCapital of France?<|im_end|>\n<|im_start|>assistant\n\n<|im_start|>user\n"
       "And Italy?<|im_end|>\n<|im_start|>assistant\n\n"},
      {"llama3",
       byte_tokenizer({"<|end_of_text|>", "<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"},
                      true),
       "4<|eot_id|>Paris<|eot_id|>Rome<|eot_id|>",
       "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n2+2?<|eot_id|><|start_header_id|>assistant"
       "<|end_header_id|>\n\n<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nTerse.<|eot_id|>"
       "<|start_header_id|>user<|end_header_id|>\n\nCapital of France?<|eot_id|><|start_header_id|>assistant"
       "<|end_header_id|>\n\n<|start_header_id|>user<|end_header_id|>\n\nAnd Italy?<|eot_id|>"
       "<|start_header_id|>assistant<|end_header_id|>\n\n"},
      {"mistral-v3", byte_tokenizer({"</s>", "<s>", "[INST]", "[/INST]"}, true), " 4</s> Paris</s> Rome</s>",
       "<s>[INST] 2+2?[/INST]<s>[INST] Capital of France?[/INST][INST] Terse.\n\nAnd Italy?[/INST]"}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    ShardOptions options;
    options.documents.jsonl_key = "messages";
    options.documents.chat_template = c.name;
    const CorpusStats stats = tokenize_to_shards(c.tokenizer, {dir / "chat.jsonl"}, dir / c.name, options);
    EXPECT_EQ(stats.documents, 2);
    const TokenDataset data = TokenDataset::open((dir / c.name / "train_*.bin").string(), 1 << 20, "--train-data");
    std::vector<int32_t> tokens(size_t(data.num_tokens()));
    std::vector<uint8_t> trained(tokens.size());
    data.read(0, data.num_tokens(), tokens.data());
    data.read_loss_mask(0, data.num_tokens(), trained.data());
    std::vector<int32_t> targets, rest;
    for (size_t i = 0; i < tokens.size(); ++i) (trained[i] ? targets : rest).push_back(tokens[i]);
    EXPECT_EQ(c.tokenizer.decode(targets), c.targets);
    EXPECT_EQ(c.tokenizer.decode(rest), c.rest);
  }
}

// Shard options for conversations under 'messages' rendered with ChatML.
ShardOptions chatml_conversations() {
  ShardOptions options;
  options.documents.jsonl_key = "messages";
  options.documents.chat_template = "chatml";
  return options;
}

TEST(ChatTemplate, BadConversationsAndTokenizersNameTheFix) {
  const fs::path dir = testing::scratch_dir();
  ShardOptions options = chatml_conversations();
  const Tokenizer chatml = byte_tokenizer({"<|endoftext|>", "<|im_start|>", "<|im_end|>"}, false);
  auto error_for = [&](const std::string& line, const Tokenizer& tokenizer) {
    testing::write_text(dir / "chat.jsonl", line + "\n");
    return error_of([&] { tokenize_to_shards(tokenizer, {dir / "chat.jsonl"}, dir / "out", options); });
  };
  std::string message = error_for(R"({"messages": "hello"})", chatml);
  EXPECT_TRUE(contains(message, "chat.jsonl' line 1: no list of messages under 'messages'; name the conversations' "
                                "key with --jsonl-key")) << message;
  message = error_for(R"({"messages": [{"role": "user", "content": "a"}, {"role": "assistant"}]})", chatml);
  EXPECT_TRUE(contains(message, "line 1: message 2 is not an object with string \"role\" and \"content\"")) << message;
  message = error_for(R"({"messages": []})", byte_tokenizer({"<|endoftext|>"}, false));
  EXPECT_TRUE(contains(message, "--chat-template chatml: the tokenizer (byte tokenizer) has no special token "
                                "<|im_start|>; give the tokenizer of the model the template is for")) << message;
  options.documents.chat_template = "mistral-v3";  // a v0.1 tokenizer, without v3's control tokens
  message = error_for(R"({"messages": []})", byte_tokenizer({"</s>", "<s>"}, true));
  EXPECT_TRUE(contains(message, "--chat-template mistral-v3: the tokenizer (byte tokenizer) has no special token "
                                "[INST]")) << message;
  options.documents.chat_template = "gemma";
  message = error_for(R"({"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]})",
                      byte_tokenizer({"<|endoftext|>", "<start_of_turn>", "<end_of_turn>"}, false));
  EXPECT_TRUE(contains(message, "chat.jsonl' line 1: --chat-template gemma: message 2 is 'user' where the "
                                "conversation's turns must alternate")) << message;
  options.documents.chat_template = "chatml";
  options.documents.jsonl_prompt_key = "prompt";
  message = error_for(R"({"messages": []})", chatml);
  EXPECT_TRUE(contains(message, "--jsonl-prompt-key and --chat-template exclude each other")) << message;
}

// ShareGPT's roles (human, gpt) have no 'assistant' turn to train on: a corpus of them is refused
// naming the roles seen; a corpus with some is tokenized, and the conversations left out and the
// roles the template does not know are reported.
TEST(ChatTemplate, ConversationsWithoutAnAssistantAreCountedAndNamed) {
  const fs::path dir = testing::scratch_dir();
  ShardOptions options = chatml_conversations();
  const Tokenizer chatml = byte_tokenizer({"<|endoftext|>", "<|im_start|>", "<|im_end|>"}, false);
  const std::string sharegpt = R"({"messages": [{"role": "human", "content": "Hi"}, {"role": "gpt", "content": "Yo"}]})";
  testing::write_text(dir / "sharegpt.jsonl", sharegpt + "\n" + sharegpt + "\n");
  const std::string message =
      error_of([&] { tokenize_to_shards(chatml, {dir / "sharegpt.jsonl"}, dir / "none", options); });
  EXPECT_TRUE(contains(message, "tokenize: none of the 2 conversations in '" + (dir / "sharegpt.jsonl").string() +
                                "' has a turn whose role is 'assistant', and a chat template trains on the "
                                "assistant's turns alone (roles seen: 'gpt' 2, 'human' 2); name the roles user and "
                                "assistant")) << message;
  EXPECT_TRUE(shard_files_in(dir / "none").empty());

  const std::string answered = R"({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]})";
  testing::write_text(dir / "mixed.jsonl", sharegpt + "\n" + answered + "\n");
  const CorpusStats stats = tokenize_to_shards(chatml, {dir / "mixed.jsonl"}, dir / "mixed", options);
  EXPECT_EQ(stats.documents, 1);
  EXPECT_EQ(stats.skipped_documents, 1);
  EXPECT_EQ(stats.roles, (std::map<std::string, int64_t>{{"assistant", 1}, {"gpt", 1}, {"human", 1}, {"user", 1}}));
  EXPECT_EQ(stats.unknown_roles, (std::map<std::string, int64_t>{{"gpt", 1}, {"human", 1}}));
  const std::vector<std::string> notes = corpus_notes(stats, options.documents);
  ASSERT_EQ(notes.size(), 2u);
  EXPECT_TRUE(contains(notes[0], "1 of the 2 conversations left out: no turn whose role is 'assistant'")) << notes[0];
  EXPECT_EQ(notes[1], "roles the chatml template does not know, rendered as given (messages: 'gpt' 1, 'human' 1); "
                      "it knows system, user, assistant, tool");
}

}  // namespace
}  // namespace tessera
