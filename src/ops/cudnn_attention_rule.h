// The head sizes cuDNN's fused flash attention covers (cuDNN 9's SDPA: a multiple of 8, at most 128):
// one rule for the CUDA launcher and for the memory planner, which runs without a GPU.
#pragma once

#include <cstdint>

namespace tessera {

constexpr bool cudnn_attention_head_size_covered(int64_t head_size) {
  return head_size > 0 && head_size <= 128 && head_size % 8 == 0;
}

}  // namespace tessera
