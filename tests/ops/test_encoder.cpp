// Token + position embedding: values, gradients (with repeated tokens), the += contract, the
// vocabulary-parallel slices (tensor parallelism), bad input.
#include <gtest/gtest.h>

#include "ops/encoder.h"
#include "ops/op_testing.h"

namespace tessera {
namespace {

using testing::random_tensor;

struct EncoderCase {
  int64_t B = 2, T = 5, C = 20, Vp = 7, maxT = 8;
  Tensor tokens = Tensor::zeros({B, T}, DType::i32);
  Tensor wte = random_tensor({Vp, C}, 1);
  Tensor wpe = random_tensor({maxT, C}, 2);
  Tensor dout = random_tensor({B, T, C}, 3);
  EncoderCase() {
    const int32_t ids[] = {3, 0, 3, 6, 3, 1, 1, 5, 0, 3};  // repeats, within and across rows
    std::copy(std::begin(ids), std::end(ids), tokens.data<int32_t>());
  }
};

TEST(Encoder, ForwardAddsTokenAndPositionRows) {
  EncoderCase e;
  Tensor out = Tensor::zeros({e.B, e.T, e.C});
  encoder_forward(out, e.tokens, e.wte, e.wpe);
  for (int64_t b = 0; b < e.B; b++)
    for (int64_t t = 0; t < e.T; t++)
      for (int64_t c = 0; c < e.C; c++) {
        const int32_t id = e.tokens.data<int32_t>()[b * e.T + t];
        EXPECT_FLOAT_EQ(out.f32()[(b * e.T + t) * e.C + c], e.wte.f32()[id * e.C + c] + e.wpe.f32()[t * e.C + c]);
      }
}

TEST(Encoder, BackwardMatchesFiniteDifferences) {
  EncoderCase e;
  Tensor out = Tensor::zeros({e.B, e.T, e.C});
  auto loss = [&] {
    encoder_forward(out, e.tokens, e.wte, e.wpe);
    return testing::dot(out, e.dout);
  };
  const std::vector<double> dwte_fd = testing::numeric_gradient(e.wte, loss, 1e-2f);
  const std::vector<double> dwpe_fd = testing::numeric_gradient(e.wpe, loss, 1e-2f);
  Tensor dwte = Tensor::zeros({e.Vp, e.C}), dwpe = Tensor::zeros({e.maxT, e.C});
  encoder_backward(dwte, dwpe, e.dout, e.tokens);
  testing::expect_close(dwte, dwte_fd, 1e-4, 1e-4, "dwte");
  testing::expect_close(dwpe, dwpe_fd, 1e-4, 1e-4, "dwpe");
  // Token 3 appears four times, so its row gathers four rows of dout; token 2 never appears.
  EXPECT_NE(dwte.f32()[3 * e.C], 0.0f);
  EXPECT_EQ(dwte.f32()[2 * e.C], 0.0f);
}

TEST(Encoder, BackwardAccumulatesIntoParameterGradients) {
  EncoderCase e;
  Tensor dwte = Tensor::zeros({e.Vp, e.C}), dwpe = Tensor::zeros({e.maxT, e.C});
  encoder_backward(dwte, dwpe, e.dout, e.tokens);
  const Tensor once_wte = testing::copy_of(dwte), once_wpe = testing::copy_of(dwpe);
  encoder_backward(dwte, dwpe, e.dout, e.tokens);
  for (int64_t i = 0; i < dwte.numel(); i++) EXPECT_FLOAT_EQ(dwte.f32()[i], 2.0f * once_wte.f32()[i]);
  for (int64_t i = 0; i < dwpe.numel(); i++) EXPECT_FLOAT_EQ(dwpe.f32()[i], 2.0f * once_wpe.f32()[i]);
}

TEST(Encoder, OneThreadAndSeveralAgree) {
  const int64_t B = 4, T = 64, C = 150, Vp = 50;  // above the parallel threshold; C not a multiple of 16
  Tensor tokens = Tensor::zeros({B, T}, DType::i32);
  for (int64_t i = 0; i < B * T; i++) tokens.data<int32_t>()[i] = int32_t((i * 7) % Vp);
  Tensor wte = random_tensor({Vp, C}, 5), wpe = random_tensor({T, C}, 6), dout = random_tensor({B, T, C}, 7);
  Tensor out[2], dwte[2], dwpe[2];
  for (int run = 0; run < 2; run++) {
    out[run] = Tensor::zeros({B, T, C});
    dwte[run] = Tensor::zeros({Vp, C});
    dwpe[run] = Tensor::zeros({T, C});
    testing::with_threads(run == 0 ? 1 : 3, [&] {
      encoder_forward(out[run], tokens, wte, wpe);
      encoder_backward(dwte[run], dwpe[run], dout, tokens);
    });
  }
  testing::expect_identical(out[0], out[1], "out");
  testing::expect_identical(dwte[0], dwte[1], "dwte");
  testing::expect_identical(dwpe[0], dwpe[1], "dwpe");
}

TEST(Encoder, RejectsBadShapesAndTokens) {
  EncoderCase e;
  Tensor out = Tensor::zeros({e.B, e.T, e.C});
  Tensor wrong_out = Tensor::zeros({e.B, e.T, e.C + 1});
  EXPECT_THROW(encoder_forward(wrong_out, e.tokens, e.wte, e.wpe), Error);
  Tensor short_wpe = random_tensor({e.T - 1, e.C}, 4);  // fewer positions than T
  EXPECT_THROW(encoder_forward(out, e.tokens, e.wte, short_wpe), Error);
  Tensor float_tokens = Tensor::zeros({e.B, e.T});
  EXPECT_THROW(encoder_forward(out, float_tokens, e.wte, e.wpe), Error);
  e.tokens.data<int32_t>()[4] = int32_t(e.Vp);  // one past the last row of wte
  EXPECT_THROW(encoder_forward(out, e.tokens, e.wte, e.wpe), Error);
  Tensor dwte = Tensor::zeros({e.Vp, e.C}), dwpe = Tensor::zeros({e.maxT, e.C});
  EXPECT_THROW(encoder_backward(dwte, dwpe, e.dout, e.tokens), Error);
  e.tokens.data<int32_t>()[4] = -1;
  EXPECT_THROW(encoder_backward(dwte, dwpe, e.dout, e.tokens), Error);
}

// A table cut into row slices (tensor parallelism): the slices' outputs, the positions added by one
// of them, sum to the whole op's (a token of another slice gives the position row or zeros); their
// gradients, stacked, are the whole gradient; every slice's position gradient is the whole one.
// Tokens are checked against the whole table, and the slice must lie inside it.
TEST(Encoder, VocabularySlicesSumToTheWholeTable) {
  EncoderCase e;
  Tensor out = Tensor::zeros({e.B, e.T, e.C}), dwte = Tensor::zeros({e.Vp, e.C}), dwpe = Tensor::zeros({e.maxT, e.C});
  encoder_forward(out, e.tokens, e.wte, e.wpe);
  encoder_backward(dwte, dwpe, e.dout, e.tokens);
  for (const std::vector<int64_t>& cuts : {std::vector<int64_t>{0, 3, 7}, {0, 2, 4, 6, 7}, {0, 1, 7}}) {
    std::vector<double> sum(size_t(out.numel()), 0.0);
    for (size_t k = 0; k + 1 < cuts.size(); k++) {
      const int64_t first = cuts[k], rows = cuts[k + 1] - cuts[k];
      const Tensor slice = e.wte.view(first * e.C, {rows, e.C});
      Tensor part = Tensor::zeros({e.B, e.T, e.C}), dslice = Tensor::zeros({rows, e.C}),
             dpositions = Tensor::zeros({e.maxT, e.C});
      encoder_forward(part, e.tokens, slice, k == 0 ? e.wpe : Tensor(), first, e.Vp);
      for (int64_t i = 0; i < part.numel(); i++) sum[size_t(i)] += part.f32()[i];
      for (int64_t bt = 0; bt < e.B * e.T; bt++) {  // another slice's token: the position row, or zeros
        const int32_t id = e.tokens.data<int32_t>()[bt];
        if (id >= first && id < first + rows) continue;
        for (int64_t c = 0; c < e.C; c++)
          ASSERT_EQ(part.f32()[bt * e.C + c], k == 0 ? e.wpe.f32()[(bt % e.T) * e.C + c] : 0.0f) << bt << "," << c;
      }
      encoder_backward(dslice, dpositions, e.dout, e.tokens, first, e.Vp);
      testing::expect_identical(dslice, dwte.view(first * e.C, {rows, e.C}), "dwte slice");
      testing::expect_identical(dpositions, dwpe, "dwpe");
    }
    testing::expect_close(out.f32(), sum, 1e-6, 1e-6, "sum of the slices' outputs");
  }
  // Tokens are checked against the whole table, not the slice.
  Tensor part = Tensor::zeros({e.B, e.T, e.C});
  e.tokens.data<int32_t>()[2] = int32_t(e.Vp);
  EXPECT_NE(testing::error_of([&] { encoder_forward(part, e.tokens, e.wte.view(0, {2, e.C}), e.wpe, 0, e.Vp); })
                .find("token id 7"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] { encoder_forward(part, e.tokens, e.wte.view(0, {2, e.C}), e.wpe, 6, e.Vp); })
                .find("rows [6, 8) of wte lie outside the table's 7"),
            std::string::npos);
  e.tokens.data<int32_t>()[2] = -1;
  Tensor dslice = Tensor::zeros({2, e.C});
  EXPECT_NE(testing::error_of([&] { encoder_backward(dslice, dwpe, e.dout, e.tokens, 2, e.Vp); })
                .find("encoder_backward: token id -1 at position 2 is outside [0, 7)"),
            std::string::npos);
  e.tokens.data<int32_t>()[2] = 0;
  EXPECT_NE(testing::error_of([&] { encoder_backward(dslice, dwpe, e.dout, e.tokens, -1, e.Vp); })
                .find("encoder_backward: rows [-1, 1) of dwte lie outside the table's 7"),
            std::string::npos);
}

}  // namespace
}  // namespace tessera
