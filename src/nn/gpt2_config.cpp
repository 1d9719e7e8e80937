// GPT-2 presets (the OpenAI sizes) and config validation.
#include "nn/gpt2_config.h"

#include "core/error.h"

namespace tessera {

void GPT2Config::validate() const {
  TS_CHECK(num_layers > 0, "model: num_layers must be positive, got ", num_layers);
  TS_CHECK(num_heads > 0, "model: num_heads must be positive, got ", num_heads);
  TS_CHECK(channels > 0, "model: channels must be positive, got ", channels);
  TS_CHECK(vocab_size > 0, "model: vocab_size must be positive, got ", vocab_size);
  TS_CHECK(max_seq_len > 0, "model: max_seq_len must be positive, got ", max_seq_len);
  TS_CHECK(channels % num_heads == 0, "model: num_heads (", num_heads, ") does not divide channels (", channels,
           "); choose heads so that channels / heads is a whole number");
}

int64_t GPT2Config::num_parameters() const {
  int64_t C = channels, L = num_layers;
  int64_t per_layer = 2 * C + (3 * C * C + 3 * C) + (C * C + C) + 2 * C + (4 * C * C + 4 * C) + (4 * C * C + C);
  return padded_vocab_size() * C + max_seq_len * C + L * per_layer + 2 * C;
}

GPT2Config gpt2_preset(const std::string& name) {
  if (name == "gpt2-tiny") return GPT2Config{2, 2, 32, 256, 64};
  if (name == "gpt2-mini") return GPT2Config{4, 4, 192, 50257, 256};
  if (name == "gpt2-124m") return GPT2Config{12, 12, 768, 50257, 1024};
  if (name == "gpt2-350m") return GPT2Config{24, 16, 1024, 50257, 1024};
  if (name == "gpt2-774m") return GPT2Config{36, 20, 1280, 50257, 1024};
  if (name == "gpt2-1558m") return GPT2Config{48, 25, 1600, 50257, 1024};
  std::string known;
  for (const std::string& n : gpt2_preset_names()) known += (known.empty() ? "" : ", ") + n;
  TS_FAIL("--model: unknown model '", name, "'; known models: ", known);
}

std::vector<std::string> gpt2_preset_names() {
  return {"gpt2-tiny", "gpt2-mini", "gpt2-124m", "gpt2-350m", "gpt2-774m", "gpt2-1558m"};
}

}  // namespace tessera
