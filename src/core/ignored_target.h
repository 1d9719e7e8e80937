// The target id of a position that is not a training target (a prompt token of supervised
// fine-tuning data): the data loader writes it where a shard's loss mask is 0, and cross-entropy
// gives such a row loss 0 and no gradient.
#pragma once

#include <cstdint>

namespace tessera {

inline constexpr int32_t kIgnoredTarget = -1;

}  // namespace tessera
