// GELU in both forms (the tanh approximation, the exact erf one): values against the double formula over
// a wide range (each form's own, which the other misses), the gradient by finite differences, the written
// dx (in place too), saturation, bad shapes.
#include <gtest/gtest.h>

#include <cmath>

#include "ops/gelu.h"
#include "ops/op_testing.h"

namespace tessera {
namespace {

constexpr GeluForm kForms[] = {GeluForm::tanh, GeluForm::exact};

const char* name_of(GeluForm form) { return form == GeluForm::tanh ? "tanh" : "exact"; }

double gelu_reference(double x, GeluForm form) {
  if (form == GeluForm::exact) return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

TEST(Gelu, ForwardMatchesDoubleFormula) {
  std::vector<float> xs = testing::random_floats(1000, 81, -6.0f, 6.0f);
  for (float extreme : {0.0f, 1e-6f, -1e-6f, 20.0f, -20.0f, 100.0f, -100.0f, 1e4f, -1e4f}) xs.push_back(extreme);
  Tensor x = testing::tensor_of({int64_t(xs.size())}, xs), out = Tensor::zeros(x.shape());
  for (GeluForm form : kForms) {
    gelu_forward(out, x, form);
    std::vector<double> ref, other;
    for (float v : xs) ref.push_back(gelu_reference(v, form));
    testing::expect_close(out, ref, 1e-6, 1e-6, name_of(form));
    // The forms differ by up to 5e-4 around |x| = 2: each test tells them apart.
    const GeluForm swapped = form == GeluForm::tanh ? GeluForm::exact : GeluForm::tanh;
    double largest = 0;
    for (size_t i = 0; i < xs.size(); ++i)
      largest = std::max(largest, std::fabs(double(out.f32()[i]) - gelu_reference(xs[i], swapped)));
    EXPECT_GT(largest, 1e-4) << name_of(form);
  }
}

TEST(Gelu, BackwardMatchesFiniteDifferences) {
  for (GeluForm form : kForms) {
    Tensor x = testing::random_tensor({3, 4, 21}, 82, -4.0f, 4.0f);
    Tensor dout = testing::random_tensor({3, 4, 21}, 83);
    Tensor out = Tensor::zeros(x.shape());
    auto loss = [&] {
      gelu_forward(out, x, form);
      return testing::dot(out, dout);
    };
    const std::vector<double> dx_fd = testing::numeric_gradient(x, loss, 1e-2f);
    Tensor dx = Tensor::zeros(x.shape());
    testing::fill(dx, testing::kNaN);  // dx is written, never read
    gelu_backward(dx, dout, x, form);
    testing::expect_close(dx, dx_fd, 2e-4, 2e-3, name_of(form));
    gelu_backward(dout, dout, x, form);  // in place, as the exact-form MLP runs it
    testing::expect_identical(dout, dx, name_of(form));
  }
}

TEST(Gelu, BackwardSaturatesForLargeInputs) {
  for (GeluForm form : kForms) {
    Tensor x = testing::tensor_of({4}, {50.0f, -50.0f, 1e4f, -1e4f}), dout = testing::tensor_of({4}, {1, 1, 1, 1});
    Tensor dx = Tensor::zeros({4});
    gelu_backward(dx, dout, x, form);
    EXPECT_FLOAT_EQ(dx.f32()[0], 1.0f) << name_of(form);
    EXPECT_FLOAT_EQ(dx.f32()[1], 0.0f) << name_of(form);
    EXPECT_FLOAT_EQ(dx.f32()[2], 1.0f) << name_of(form);
    EXPECT_FLOAT_EQ(dx.f32()[3], 0.0f) << name_of(form);
  }
}

TEST(Gelu, RejectsBadShapes) {
  Tensor x = Tensor::zeros({4, 5}), out = Tensor::zeros({5, 4}), dout = Tensor::zeros({4, 5});
  EXPECT_THROW(gelu_forward(out, x), Error);
  EXPECT_THROW(gelu_backward(out, dout, x), Error);
  Tensor dx = Tensor::zeros({4, 5}), short_dout = Tensor::zeros({4, 4});
  EXPECT_THROW(gelu_backward(dx, short_dout, x), Error);
}

}  // namespace
}  // namespace tessera
