// The special token ids a Hugging Face config.json names (bos_token_id, eos_token_id), which
// transformers' generate() stops at; read from the tokenizer exported beside the weights. Without
// them LlamaConfig's defaults (1 and 2) apply, ordinary tokens of Llama 3's or Qwen2's vocabulary.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

namespace tessera {

class Tokenizer;

struct HfTokenIds {
  std::optional<int64_t> bos;  // what a document starts with: the BOS, else the end of text (GPT-2, Qwen2)
  std::vector<int64_t> eos;    // the end of text, then the chat templates' end-of-turn tokens it holds
};

// `tokenizer`'s ids: Llama 3's <|begin_of_text|> / <|end_of_text|>, <|eot_id|>, <|eom_id|>; GPT-2's and
// Qwen2's <|endoftext|>, ChatML's <|im_end|> (every ChatTemplate::reply_ends() the vocabulary holds). Nothing when it has no end-of-text token.
HfTokenIds hf_token_ids(const Tokenizer& tokenizer);

// Sets config["bos_token_id"] and config["eos_token_id"] (a number, or a list when several) when known.
void put_hf_token_ids(nlohmann::json& config, const HfTokenIds& ids);

// The tokenizer_config.json beside an exported tokenizer.json: transformers' generic fast tokenizer
// (PreTrainedTokenizerFast, which takes tokenizer.json as it is; without this file AutoTokenizer picks the
// model type's class, whose defaults, Llama's <s> and </s>, need not be this vocabulary's), the BOS and
// end-of-text tokens by text, <unk> where the vocabulary has it, and the model's context.
nlohmann::json hf_tokenizer_config(const Tokenizer& tokenizer, int64_t context);

}  // namespace tessera
