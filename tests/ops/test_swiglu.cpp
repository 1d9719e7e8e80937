// SwiGLU on a packed [gate | up] input: values against the double formula over a wide range, the
// gate-first layout, the gradient by finite differences, the written dh, saturation for large
// gates, one thread vs several, bad arguments; GeGLU's values and gradient.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "ops/op_testing.h"
#include "ops/swiglu.h"

namespace tessera {
namespace {

using testing::random_tensor;

double silu_reference(double g) { return g / (1.0 + std::exp(-g)); }

// out (N,F) = silu(h[:, :F]) * h[:, F:] in double.
std::vector<double> swiglu_reference(const Tensor& h) {
  const int64_t two_f = h.size(-1), F = two_f / 2, N = h.numel() / two_f;
  std::vector<double> out;
  for (int64_t n = 0; n < N; n++)
    for (int64_t f = 0; f < F; f++)
      out.push_back(silu_reference(h.f32()[n * two_f + f]) * double(h.f32()[n * two_f + F + f]));
  return out;
}

TEST(SwiGlu, ForwardMatchesDoubleFormula) {
  std::vector<float> gates = testing::random_floats(1000, 91, -12.0f, 12.0f);
  for (float extreme : {0.0f, 1e-6f, -1e-6f, 20.0f, -20.0f, 86.0f, -86.0f, 100.0f, -100.0f, 1e4f, -1e4f})
    gates.push_back(extreme);
  const int64_t F = int64_t(gates.size());
  std::vector<float> values = gates;
  const std::vector<float> ups = testing::random_floats(F, 92, -3.0f, 3.0f);
  values.insert(values.end(), ups.begin(), ups.end());
  Tensor h = testing::tensor_of({1, 2 * F}, values), out = Tensor::zeros({1, F});
  swiglu_forward(out, h);
  testing::expect_close(out, swiglu_reference(h), 1e-6, 2e-6, "swiglu");
}

TEST(SwiGlu, GateIsTheFirstHalfOfEachRow) {
  // Rows [g0 g1 | u0 u1]: out = [silu(g0) u0, silu(g1) u1]; silu(0) = 0 zeroes the second column.
  Tensor h = testing::tensor_of({2, 4}, {2.0f, 0.0f, 3.0f, 5.0f, -1.0f, 0.0f, 4.0f, 7.0f});
  Tensor out = Tensor::zeros({2, 2});
  swiglu_forward(out, h);
  EXPECT_NEAR(out.f32()[0], silu_reference(2.0) * 3.0, 1e-6);
  EXPECT_EQ(out.f32()[1], 0.0f);
  EXPECT_NEAR(out.f32()[2], silu_reference(-1.0) * 4.0, 1e-6);
  EXPECT_EQ(out.f32()[3], 0.0f);
}

TEST(SwiGlu, BatchedShapesMatchFlatRows) {
  const int64_t B = 2, T = 3, F = 19;
  Tensor h = random_tensor({B, T, 2 * F}, 93, -4.0f, 4.0f), out = Tensor::zeros({B, T, F});
  swiglu_forward(out, h);
  testing::expect_close(out, swiglu_reference(h), 1e-6, 2e-6, "swiglu (B,T,F)");
}

TEST(SwiGlu, BackwardMatchesFiniteDifferences) {
  const int64_t B = 3, T = 4, F = 21;
  Tensor h = random_tensor({B, T, 2 * F}, 94, -4.0f, 4.0f), dout = random_tensor({B, T, F}, 95);
  Tensor out = Tensor::zeros({B, T, F});
  auto loss = [&] {
    swiglu_forward(out, h);
    return testing::dot(out, dout);
  };
  const std::vector<double> dh_fd = testing::numeric_gradient(h, loss, 1e-2f);
  Tensor dh = Tensor::zeros(h.shape());
  swiglu_backward(dh, dout, h);
  testing::expect_close(dh, dh_fd, 5e-4, 2e-3, "dh");
}

TEST(SwiGlu, BackwardMatchesDoubleDerivative) {
  const int64_t N = 5, F = 40;
  Tensor h = random_tensor({N, 2 * F}, 96, -10.0f, 10.0f), dout = random_tensor({N, F}, 97);
  Tensor dh = Tensor::zeros(h.shape());
  swiglu_backward(dh, dout, h);
  std::vector<double> ref;
  for (int64_t n = 0; n < N; n++) {
    const float* gate = h.f32() + n * 2 * F;
    const float* up = gate + F;
    const float* dout_n = dout.f32() + n * F;
    for (int64_t f = 0; f < F; f++) {
      const double g = gate[f], s = 1.0 / (1.0 + std::exp(-g));
      ref.push_back(double(dout_n[f]) * double(up[f]) * s * (1.0 + g * (1.0 - s)));
    }
    for (int64_t f = 0; f < F; f++) ref.push_back(double(dout_n[f]) * silu_reference(gate[f]));
  }
  testing::expect_close(dh, ref, 1e-6, 4e-6, "dh");
}

// GeGLU (Gemma's): the gate through GELU's tanh form, in double, forward and its derivative; and the
// gradient by finite differences.
TEST(SwiGlu, GeGluMatchesDoubleFormulaAndFiniteDifferences) {
  const int64_t N = 5, F = 40;
  Tensor h = random_tensor({N, 2 * F}, 100, -6.0f, 6.0f), dout = random_tensor({N, F}, 101);
  Tensor out = Tensor::zeros({N, F}), dh = Tensor::zeros(h.shape());
  swiglu_forward(out, h, GateActivation::gelu_tanh);
  swiglu_backward(dh, dout, h, GateActivation::gelu_tanh);
  const double k = std::sqrt(2.0 / M_PI);
  std::vector<double> want_out, want_dh;
  for (int64_t n = 0; n < N; n++) {
    const float* gate = h.f32() + n * 2 * F;
    const float* up = gate + F;
    const float* dout_n = dout.f32() + n * F;
    std::vector<double> dup;
    for (int64_t f = 0; f < F; f++) {
      const double g = gate[f], th = std::tanh(k * (g + 0.044715 * g * g * g));
      const double gelu = 0.5 * g * (1.0 + th);
      const double dgelu = 0.5 * (1.0 + th) + 0.5 * g * (1.0 - th * th) * k * (1.0 + 3.0 * 0.044715 * g * g);
      want_out.push_back(gelu * double(up[f]));
      want_dh.push_back(double(dout_n[f]) * double(up[f]) * dgelu);
      dup.push_back(double(dout_n[f]) * gelu);
    }
    want_dh.insert(want_dh.end(), dup.begin(), dup.end());
  }
  // tanh_approx's 1 - 2/(e^2u + 1) cancels near u = -3 and below, where gelu is a few 1e-6 or less.
  testing::expect_close(out, want_out, 2e-5, 2e-4, "geglu");
  testing::expect_close(dh, want_dh, 2e-5, 2e-4, "geglu dh");
  auto loss = [&] {
    swiglu_forward(out, h, GateActivation::gelu_tanh);
    return testing::dot(out, dout);
  };
  testing::expect_close(dh, testing::numeric_gradient(h, loss, 1e-2f), 5e-4, 2e-3, "geglu dh by differences");
}

TEST(SwiGlu, BackwardWritesDh) {
  Tensor h = random_tensor({6, 2 * 33}, 98, -4.0f, 4.0f), dout = random_tensor({6, 33}, 99);
  Tensor dh = Tensor::zeros(h.shape());
  swiglu_backward(dh, dout, h);
  const Tensor dh1 = testing::copy_of(dh);
  testing::fill(dh, testing::kNaN);  // dh is written, never read
  swiglu_backward(dh, dout, h);
  testing::expect_identical(dh, dh1, "dh");
}

TEST(SwiGlu, SaturatesForLargeGates) {
  // silu(g) -> g and silu'(g) -> 1 for large g; both -> 0 (never NaN) for very negative g, where
  // exp_approx's clamp at 88 leaves a harmless ~1e-38 instead of e^g.
  Tensor h = testing::tensor_of({1, 8}, {50.0f, -50.0f, 1e4f, -1e4f, 2.0f, 2.0f, 2.0f, 2.0f});
  Tensor dout = testing::tensor_of({1, 4}, {1, 1, 1, 1});
  Tensor out = Tensor::zeros({1, 4}), dh = Tensor::zeros({1, 8});
  swiglu_forward(out, h);
  swiglu_backward(dh, dout, h);
  testing::expect_close(out, swiglu_reference(h), 1e-30, 1e-5, "out");
  const std::vector<double> dgate = {2.0, 0.0, 2.0, 0.0}, dup = {50.0, 0.0, 1e4, 0.0};
  testing::expect_close(dh.f32(), dgate, 1e-6, 1e-6, "dgate");
  testing::expect_close(dh.f32() + 4, dup, 1e-6, 1e-6, "dup");
}

TEST(SwiGlu, OneThreadAndSeveralAgree) {
  const int64_t N = 128, F = 300;  // above the parallel threshold; F not a multiple of 16
  Tensor h = random_tensor({N, 2 * F}, 100, -6.0f, 6.0f), dout = random_tensor({N, F}, 101);
  Tensor out[2], dh[2];
  for (int run = 0; run < 2; run++) {
    out[run] = Tensor::zeros({N, F});
    dh[run] = Tensor::zeros({N, 2 * F});
    testing::with_threads(run == 0 ? 1 : 3, [&] {
      swiglu_forward(out[run], h);
      swiglu_backward(dh[run], dout, h);
    });
  }
  testing::expect_identical(out[0], out[1], "out");
  testing::expect_identical(dh[0], dh[1], "dh");
}

// f throws an Error whose message reads "<op>: <argument> ...".
template <typename F>
void expect_error_naming(F&& f, const std::string& op, const std::string& argument) {
  const std::string message = testing::error_of(f);
  EXPECT_TRUE(testing::contains(message, op + ": " + argument + " "))
      << "message \"" << message << "\" does not name " << op << "'s " << argument;
}

TEST(SwiGlu, RejectsBadArguments) {
  Tensor h = Tensor::zeros({4, 10}), out = Tensor::zeros({4, 5}), dout = Tensor::zeros({4, 5});
  Tensor odd_h = Tensor::zeros({4, 9}), empty_h = Tensor::zeros({4, 0});
  expect_error_naming([&] { swiglu_forward(out, odd_h); }, "swiglu_forward", "h");
  expect_error_naming([&] { swiglu_forward(out, empty_h); }, "swiglu_forward", "h");
  Tensor full_out = Tensor::zeros({4, 10}), transposed_out = Tensor::zeros({5, 4});
  expect_error_naming([&] { swiglu_forward(full_out, h); }, "swiglu_forward", "out");
  expect_error_naming([&] { swiglu_forward(transposed_out, h); }, "swiglu_forward", "out");
  Tensor int_h = Tensor::zeros({4, 10}, DType::i32);
  expect_error_naming([&] { swiglu_forward(out, int_h); }, "swiglu_forward", "h");

  Tensor dh = Tensor::zeros({4, 10}), half_dh = Tensor::zeros({4, 5}), full_dout = Tensor::zeros({4, 10});
  expect_error_naming([&] { swiglu_backward(half_dh, dout, h); }, "swiglu_backward", "dh");
  expect_error_naming([&] { swiglu_backward(dh, full_dout, h); }, "swiglu_backward", "dout");
  expect_error_naming([&] { swiglu_backward(dh, dout, odd_h); }, "swiglu_backward", "h");
  Tensor int_dout = Tensor::zeros({4, 5}, DType::i32);
  expect_error_naming([&] { swiglu_backward(dh, int_dout, h); }, "swiglu_backward", "dout");
}

}  // namespace
}  // namespace tessera
