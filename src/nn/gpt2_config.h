// GPT-2 hyper-parameters and the named presets. The vocabulary is padded internally to a multiple
// of 128 (padded_vocab_size); padding rows of the tied embedding are never predicted.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessera {

struct GPT2Config {
  int64_t num_layers = 12;       // L
  int64_t num_heads = 12;        // NH
  int64_t channels = 768;        // C
  int64_t vocab_size = 50257;    // V
  int64_t max_seq_len = 1024;    // maxT (context)

  int64_t padded_vocab_size() const { return (vocab_size + 127) / 128 * 128; }  // Vp
  int64_t head_size() const { return channels / num_heads; }                     // HS
  // Throws tessera::Error naming the field when the config is unusable (e.g. heads not dividing C).
  void validate() const;
  // Number of parameters, padding rows included.
  int64_t num_parameters() const;
};

// Presets: gpt2-tiny (tests), gpt2-mini (the CPU demo), gpt2-124m, gpt2-350m, gpt2-774m, gpt2-1558m.
GPT2Config gpt2_preset(const std::string& name);
std::vector<std::string> gpt2_preset_names();

}  // namespace tessera
