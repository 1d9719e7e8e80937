// Attention test shapes shared by the CUDA-core and tensor-core kernel tests: (B, T, NH, HS) and
// the readable test names gtest prints for them.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

namespace tessera::testing {

struct AttentionCase {
  int64_t B, T, NH, HS;
};

inline std::string attention_case_name(const ::testing::TestParamInfo<AttentionCase>& info) {
  const AttentionCase& c = info.param;
  return "B" + std::to_string(c.B) + "_T" + std::to_string(c.T) + "_NH" + std::to_string(c.NH) + "_HS" +
         std::to_string(c.HS);
}

}  // namespace tessera::testing
