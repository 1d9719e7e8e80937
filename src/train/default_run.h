// The embedded default run (`tessera train` with no data flags, `make demo`): a small GPT trained
// on Debian's fortunes corpus (installed by scripts/setup.sh) with a BPE tokenizer trained on that
// corpus. Tokenizer and shards are built once under <out-dir>/data and reused.
#pragma once

#include <functional>
#include <string>

#include "train/train_config.h"

namespace tessera {

// Where the fortunes corpus lives on Debian.
inline constexpr const char* kFortunesDir = "/usr/share/games/fortunes";

// Sets data, tokenizer and the demo's defaults on every field for which `given(flag)` is false (flags
// the user set keep their values; the demo always resumes its folder), checks the flags
// (TrainConfig::validate), then prepares the corpus. A data flag (an empty --train-data, --val-data,
// --tokenizer) is an error: the demo is the run with none. Refused flags throw RunRefused.
void apply_default_run(TrainConfig& config, const std::function<bool(const std::string&)>& given);

}  // namespace tessera
