// Special token ids for an exported config.json, from the tokenizer (hf_token_ids.h).
#include "checkpoint/hf_token_ids.h"

#include <algorithm>

#include "data/chat_template.h"
#include "data/tokenizer.h"

namespace tessera {

HfTokenIds hf_token_ids(const Tokenizer& tokenizer) {
  HfTokenIds ids;
  if (!tokenizer.has_eot_token()) return ids;
  ids.bos = tokenizer.document_start_token();
  ids.eos.push_back(tokenizer.eot_token());
  for (const char* name : {"llama3", "chatml", "phi3", "gemma"})
    for (std::string_view end : ChatTemplate::named(name).reply_ends())
      if (auto id = tokenizer.special_token_id(end); id && std::find(ids.eos.begin(), ids.eos.end(), *id) == ids.eos.end())
        ids.eos.push_back(*id);
  return ids;
}

nlohmann::json hf_tokenizer_config(const Tokenizer& tokenizer, int64_t context) {
  nlohmann::json config = {{"tokenizer_class", "PreTrainedTokenizerFast"},
                           {"model_max_length", context},
                           {"clean_up_tokenization_spaces", false}};
  if (const std::optional<int32_t> bos = tokenizer.bos_token()) config["bos_token"] = tokenizer.token_text(*bos);
  if (tokenizer.has_eot_token()) config["eos_token"] = tokenizer.token_text(tokenizer.eot_token());
  if (tokenizer.special_token_id("<unk>")) config["unk_token"] = "<unk>";
  return config;
}

void put_hf_token_ids(nlohmann::json& config, const HfTokenIds& ids) {
  if (ids.bos) config["bos_token_id"] = *ids.bos;
  if (ids.eos.size() == 1) config["eos_token_id"] = ids.eos[0];
  if (ids.eos.size() > 1) config["eos_token_id"] = ids.eos;
}

}  // namespace tessera
