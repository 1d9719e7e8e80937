// Attention test shapes shared by the CUDA-core, tensor-core and cuDNN kernel tests: (B, T, NH, HS, NKV),
// the list the 16-bit kernels share, and the readable test names gtest prints for them; packed sequences
// for the document-mask tests (each batch row's document lengths, ops/op_testing.h); the process-wide
// kernel choice for a scope.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ops/attention.h"
#include "ops/op_testing.h"

namespace tessera::testing {

// Chooses an attention kernel for the scope, then restores the previous choice.
class AttentionKernelScope {
 public:
  explicit AttentionKernelScope(AttentionKernel kernel) : previous_(attention_kernel()) {
    set_attention_kernel(kernel);
  }
  ~AttentionKernelScope() { set_attention_kernel(previous_); }

 private:
  AttentionKernel previous_;
};

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

inline std::string attention_shape_name(const AttentionCase& c) {
  // Appended piece by piece: GCC 12's -Wrestrict misreads "literal" + std::string&& once inlined.
  std::string name;
  for (const auto& [tag, value] : {std::pair<const char*, int64_t>{"B", c.B}, {"_T", c.T}, {"_NH", c.NH}, {"_HS", c.HS},
                                   {"_KV", c.NKV}})
    if (value > 0) name.append(tag).append(std::to_string(value));
  return name;
}
inline std::string attention_case_name(const ::testing::TestParamInfo<AttentionCase>& info) {
  return attention_shape_name(info.param);
}

// A shape with packed sequences; `tag` tells cases of one shape apart in the test name.
struct DocumentCase {
  AttentionCase shape;
  DocumentLengths lengths;  // (B) rows
  const char* tag;
};

// Packed sequences for every kernel family: documents shorter and longer than a 64-row tile, boundaries
// inside a tile, exactly at a tile edge (64, 128) and one past a tile's first row (so later rows of that
// tile see no key of the tiles before it), runs of one-token documents, a row that is one document (plain
// causal through the masked code), T = 1, and a different split in every batch row.
inline std::vector<DocumentCase> document_cases(int64_t NH, int64_t HS, int64_t NKV = 0) {
  return {
      {{2, 136, NH, HS, NKV}, {{5, 70, 1, 60}, {64, 72}}, "mixed"},
      {{3, 200, NH, HS, NKV}, {{1, 1, 126, 72}, {200}, {65, 63, 2, 70}}, "edges"},
      {{1, 130, NH, HS, NKV}, {std::vector<int32_t>(130, 1)}, "one_token_each"},
      {{2, 1, NH, HS, NKV}, {{1}, {1}}, "single_token"},
  };
}
inline std::string document_case_name(const ::testing::TestParamInfo<DocumentCase>& info) {
  return attention_shape_name(info.param.shape) + "_" + info.param.tag;
}

}  // namespace tessera::testing
