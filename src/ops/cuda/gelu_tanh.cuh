// GELU's tanh approximation and its derivative on the GPU, elementwise in fp32, for the kernels that
// apply it (GELU, GeGLU): with u = sqrt(2/pi) (x + 0.044715 x^3),
//   gelu(x) = 0.5 x (1 + tanh u);  gelu'(x) = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) du/dx.
#pragma once

namespace tessera::cuda {

constexpr float kGeluSqrt2OverPi = 0.7978845608f;
constexpr float kGeluCubic = 0.044715f;

__device__ __forceinline__ float gelu_tanh(float x) {
  const float u = kGeluSqrt2OverPi * (x + kGeluCubic * x * x * x);
  return 0.5f * x * (1.0f + tanhf(u));
}

__device__ __forceinline__ float gelu_tanh_derivative(float x) {
  const float u = kGeluSqrt2OverPi * (x + kGeluCubic * x * x * x);
  const float th = tanhf(u);
  const float du_dx = kGeluSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * x * x);
  return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du_dx;
}

}  // namespace tessera::cuda
