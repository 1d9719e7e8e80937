// Attention test shapes shared by the CUDA-core and tensor-core kernel tests: (B, T, NH, HS, NKV) and
// the readable test names gtest prints for them.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

namespace tessera::testing {

struct AttentionCase {
  int64_t B, T, NH, HS;
  int64_t NKV = 0;  // kv heads; 0 = NH (multi-head), fewer = grouped-query attention
  int64_t kv_heads() const { return NKV > 0 ? NKV : NH; }
  int64_t qkv_width() const { return (NH + 2 * kv_heads()) * HS; }
};

inline std::string attention_case_name(const ::testing::TestParamInfo<AttentionCase>& info) {
  const AttentionCase& c = info.param;
  return "B" + std::to_string(c.B) + "_T" + std::to_string(c.T) + "_NH" + std::to_string(c.NH) + "_HS" +
         std::to_string(c.HS) + (c.NKV > 0 ? "_KV" + std::to_string(c.NKV) : "");
}

}  // namespace tessera::testing
