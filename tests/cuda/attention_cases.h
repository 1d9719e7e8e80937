// Attention test shapes shared by the CUDA-core, tensor-core and cuDNN kernel tests: (B, T, NH, HS, NKV),
// the list the 16-bit kernels share, and the readable test names gtest prints for them.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <utility>

namespace tessera::testing {

struct AttentionCase {
  int64_t B, T, NH, HS;
  int64_t NKV = 0;  // kv heads; 0 = NH (multi-head), fewer = grouped-query attention
  int64_t kv_heads() const { return NKV > 0 ? NKV : NH; }
  int64_t qkv_width() const { return (NH + 2 * kv_heads()) * HS; }
};

// The shapes every 16-bit kernel is checked on: T not a multiple of a 64-row tile, T = 1, GPT-2 small's
// T = 1024 and NH = 12, head sizes 32, 64, 128, and grouped-query heads (a kv head shared by 2 to 8).
inline const AttentionCase kAttention16BitCases[] = {
    {2, 131, 3, 64}, {1, 1024, 12, 64}, {1, 1, 2, 64},       {2, 200, 2, 128},   {1, 70, 2, 32},
    {1, 64, 1, 64},  {2, 131, 4, 64, 2}, {1, 200, 8, 128, 1}, {1, 70, 6, 32, 2}};

inline std::string attention_case_name(const ::testing::TestParamInfo<AttentionCase>& info) {
  // Appended piece by piece: GCC 12's -Wrestrict misreads "literal" + std::string&& once inlined.
  const AttentionCase& c = info.param;
  std::string name;
  for (const auto& [tag, value] : {std::pair<const char*, int64_t>{"B", c.B}, {"_T", c.T}, {"_NH", c.NH}, {"_HS", c.HS},
                                   {"_KV", c.NKV}})
    if (value > 0) name.append(tag).append(std::to_string(value));
  return name;
}

}  // namespace tessera::testing
