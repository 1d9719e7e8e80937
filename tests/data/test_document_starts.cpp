// Document starts of packed windows: each token's document begins at the last start token at or before
// it (position 0 without one), per sequence; bad inputs are refused.
#include <gtest/gtest.h>

#include <vector>

#include "data/document_starts.h"
#include "support/test_support.h"

namespace tessera {
namespace {

Tensor tokens_of(int64_t B, const std::vector<int32_t>& values) {
  Tensor t = Tensor::zeros({B, int64_t(values.size()) / B}, DType::i32);
  std::copy(values.begin(), values.end(), t.data<int32_t>());
  return t;
}

TEST(DocumentStarts, EachTokenBelongsToTheLastStartAtOrBeforeIt) {
  const int32_t S = 9;  // the start token
  const Tensor starts = document_starts(tokens_of(3, {S, 1, 2, S, S, 5,    //
                                                      4, 4, S, 1, 1, 1,    // a window opening mid-document
                                                      2, 2, 2, 2, 2, S}),  // a document starting last
                                        S);
  const std::vector<int32_t> want = {0, 0, 0, 3, 4, 4,  //
                                     0, 0, 2, 2, 2, 2,  //
                                     0, 0, 0, 0, 0, 5};
  ASSERT_EQ(starts.shape(), (Shape{3, 6}));
  EXPECT_EQ(std::vector<int32_t>(starts.data<int32_t>(), starts.data<int32_t>() + 18), want);
}

TEST(DocumentStarts, RefusesWhatIsNotABatchOfTokens) {
  EXPECT_TRUE(testing::contains(testing::error_of([] { document_starts(Tensor::zeros({2, 3}), 0); }), "(B,T) i32"));
  EXPECT_THROW(document_starts(Tensor::zeros({6}, DType::i32), 0), Error);
}

}  // namespace
}  // namespace tessera
