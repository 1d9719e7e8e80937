// An exported config.json names the tokenizer's special tokens as transformers' generate() needs them:
// bos_token_id the document start, eos_token_id the end of text and any chat end-of-turn token.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "checkpoint/hf_model.h"
#include "checkpoint/hf_source.h"
#include "checkpoint/hf_token_ids.h"
#include "data/tokenizer.h"
#include "nn/decoder.h"
#include "nn/model_presets.h"
#include "support/test_support.h"

namespace tessera {
namespace {

// The 256 bytes, then `specials` as ids 256, 257, ...; `bos` (an index into specials) put before a text.
Tokenizer byte_tokenizer(const std::vector<std::string>& specials, std::optional<int32_t> bos = std::nullopt) {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.push_back(std::string(1, char(b)));
  std::vector<SpecialToken> special_tokens;
  for (const std::string& s : specials) {
    special_tokens.push_back({s, int32_t(tokens.size())});
    tokens.push_back(s);
  }
  EncodingRules rules;
  if (bos) rules.prefix = {256 + *bos};
  return Tokenizer(tokens, {}, special_tokens, "test vocabulary", rules);
}

TEST(HfTokenIds, FromEachFamilysTokenizer) {
  const HfTokenIds gpt2 = hf_token_ids(byte_tokenizer({"<|endoftext|>"}));
  EXPECT_EQ(gpt2.bos, 256);
  EXPECT_EQ(gpt2.eos, (std::vector<int64_t>{256}));
  const HfTokenIds llama3 = hf_token_ids(byte_tokenizer({"<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"}, 0));
  EXPECT_EQ(llama3.bos, 256);
  EXPECT_EQ(llama3.eos, (std::vector<int64_t>{257, 258}));
  // Llama 3.1's vocabulary also ends a tool call's message with <|eom_id|> (its config lists three).
  const HfTokenIds llama31 = hf_token_ids(
      byte_tokenizer({"<|begin_of_text|>", "<|end_of_text|>", "<|eom_id|>", "<|eot_id|>"}, 0));
  EXPECT_EQ(llama31.eos, (std::vector<int64_t>{257, 259, 258}));
  const HfTokenIds chatml = hf_token_ids(byte_tokenizer({"<|endoftext|>", "<|im_start|>", "<|im_end|>"}));
  EXPECT_EQ(chatml.bos, 256);
  EXPECT_EQ(chatml.eos, (std::vector<int64_t>{256, 258}));
  // Phi-3's vocabulary ends a turn with <|end|> (its generation config lists it beside <|endoftext|>).
  const HfTokenIds phi3 = hf_token_ids(byte_tokenizer({"<|endoftext|>", "<|assistant|>", "<|end|>", "<|user|>"}));
  EXPECT_EQ(phi3.eos, (std::vector<int64_t>{256, 258}));
  // SentencePiece's vocabularies end a text with </s> (Llama 2, Mistral 7B) or <eos> (Gemma).
  const HfTokenIds llama2 = hf_token_ids(byte_tokenizer({"<unk>", "<s>", "</s>"}, 1));
  EXPECT_EQ(llama2.bos, 257);
  EXPECT_EQ(llama2.eos, (std::vector<int64_t>{258}));
  // Gemma's instruction-tuned models also stop at <end_of_turn> (their generation configs list [1, 106]).
  const HfTokenIds gemma = hf_token_ids(byte_tokenizer({"<pad>", "<eos>", "<bos>", "<end_of_turn>"}, 2));
  EXPECT_EQ(gemma.bos, 258);
  EXPECT_EQ(gemma.eos, (std::vector<int64_t>{257, 259}));
  const HfTokenIds none = hf_token_ids(byte_tokenizer({"<pad>"}));
  EXPECT_FALSE(none.bos);
  EXPECT_TRUE(none.eos.empty());
}

// tokenizer_config.json names the generic fast tokenizer and the special tokens by text: Llama 2's <s>, </s>
// and <unk>; GPT-2's end of text and no BOS.
TEST(HfTokenIds, TokenizerConfigNamesTheSpecialTokens) {
  const nlohmann::json llama2 = hf_tokenizer_config(byte_tokenizer({"<unk>", "<s>", "</s>"}, 1), 4096);
  EXPECT_EQ(llama2["tokenizer_class"], "PreTrainedTokenizerFast");
  EXPECT_EQ(llama2["bos_token"], "<s>");
  EXPECT_EQ(llama2["eos_token"], "</s>");
  EXPECT_EQ(llama2["unk_token"], "<unk>");
  EXPECT_EQ(llama2["model_max_length"], 4096);
  const nlohmann::json gpt2 = hf_tokenizer_config(byte_tokenizer({"<|endoftext|>"}), 1024);
  EXPECT_FALSE(gpt2.contains("bos_token"));
  EXPECT_EQ(gpt2["eos_token"], "<|endoftext|>");
  EXPECT_FALSE(gpt2.contains("unk_token"));
}

// One eos is a number, several a list (as Llama 3.1-Instruct's config.json has them); the Llama
// reader ignores both.
TEST(HfTokenIds, ExportedConfigNamesThem) {
  const ModelConfig config = model_preset("llama-tiny");
  const auto dir = testing::scratch_dir();
  const Decoder model(config);
  const ParameterValues values = values_of_named(model.layout(), model.named_params(), "test");
  save_hf_model(dir / "one", config, values, {256, {257}});
  save_hf_model(dir / "list", config, values, {256, {257, 258}});
  save_hf_model(dir / "none", config, values);
  const auto read = [&](const char* name) { return nlohmann::json::parse(testing::read_text(dir / name / "config.json")); };
  EXPECT_EQ(read("one")["bos_token_id"], 256);
  EXPECT_EQ(read("one")["eos_token_id"], 257);
  EXPECT_EQ(read("list")["eos_token_id"], nlohmann::json::array({257, 258}));
  EXPECT_FALSE(read("none").contains("eos_token_id"));
  EXPECT_TRUE(read_hf_config(dir / "list") == config);

  const ModelConfig gpt2 = model_preset("gpt2-tiny");
  const Decoder gpt2_model(gpt2);
  save_hf_model(dir / "gpt2", gpt2, values_of_named(gpt2_model.layout(), gpt2_model.named_params(), "test"),
                {200, {200}});
  EXPECT_EQ(read("gpt2")["bos_token_id"], 200);
  EXPECT_EQ(read("gpt2")["eos_token_id"], 200);
}

}  // namespace
}  // namespace tessera
