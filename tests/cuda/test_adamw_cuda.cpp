// Fused AdamW over several steps on the GPU against the CPU twin, on fresh random inputs of odd
// sizes: per tensor, and multi-tensor over many scattered segments, with and without the 16-bit
// mirror, with fp32 and with bf16 moments (the same rounding bits for the same keys).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <tuple>
#include <vector>

#include "cuda/cuda_testing.h"
#include "ops/adamw.h"

namespace tessera {
namespace {

using testing::random_tensor;
using testing::to_gpu;

class AdamWCuda : public testing::CudaTest {};

TEST_F(AdamWCuda, AdamWStepsMatch) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  const Shape shape{12345};
  Tensor param = random_tensor(shape, seed), m = Tensor::zeros(shape), v = Tensor::zeros(shape);
  Tensor param_gpu = to_gpu(param), m_gpu = to_gpu(m), v_gpu = to_gpu(v);
  AdamWParams p;
  p.lr = 1e-2f;
  p.weight_decay = 0.1f;
  p.grad_scale = 0.5f;
  for (int64_t step = 1; step <= 3; step++) {
    p.step = step;
    const Tensor grad = random_tensor(shape, seed + uint64_t(step), -2.0f, 2.0f);
    adamw_update(param, grad, m, v, p);
    adamw_update(param_gpu, to_gpu(grad), m_gpu, v_gpu, p);
  }
  testing::expect_matches_cpu(param_gpu, param, 1e-6, 1e-6, 1e-5, "adamw param");
  testing::expect_matches_cpu(m_gpu, m, 1e-6, 1e-7, 1e-5, "adamw m");
  testing::expect_matches_cpu(v_gpu, v, 1e-6, 1e-7, 1e-5, "adamw v");
}

// 700 short segments, then ones of 0, 300, 4,096 and 4,097 elements (the GPU's short runs end at
// 4,096, 32 to a launch, a block of 256 threads each) and one of 600,000, at scattered parameter
// offsets, decay on every other one.
std::vector<AdamWSegment> many_segments(int64_t* params, int64_t* state) {
  std::vector<AdamWSegment> segments;
  int64_t p = 3, s = 0;
  std::vector<int64_t> lengths;
  for (int i = 0; i < 700; ++i) lengths.push_back(17 + i % 50);
  for (const int64_t length : {0, 300, 4096, 4097}) lengths.push_back(length);
  for (size_t i = 0; i < lengths.size(); ++i) {
    segments.push_back({p, s, lengths[i], i % 2 == 0});
    p += lengths[i] + 5;
    s += lengths[i];
  }
  segments.push_back({p, s, 600000, true});
  *params = p + 600000 + 9;
  *state = s + 600000;
  return segments;
}

TEST_F(AdamWCuda, SegmentStepsMatchTheCpuWithAndWithoutAMirror) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  int64_t n_params = 0, n_state = 0;
  const std::vector<AdamWSegment> segments = many_segments(&n_params, &n_state);
  for (const DType mirror_dtype : {DType::f32, DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(mirror_dtype));
    Tensor param = random_tensor({n_params}, seed), m = Tensor::zeros({n_state}), v = Tensor::zeros({n_state});
    Tensor param_gpu = to_gpu(param), m_gpu = to_gpu(m), v_gpu = to_gpu(v);
    Tensor mirror = mirror_dtype == DType::f32 ? Tensor() : testing::poisoned_gpu({n_params}, mirror_dtype);
    AdamWParams p;
    p.lr = 1e-2f;
    p.weight_decay = 0.1f;
    p.grad_scale = 0.5f;
    for (int64_t step = 1; step <= 2; step++) {
      p.step = step;
      const Tensor grad = random_tensor({n_state}, seed + uint64_t(step), -2.0f, 2.0f);
      adamw_update_segments(param, grad, m, v, segments, p);
      adamw_update_segments(param_gpu, to_gpu(grad), m_gpu, v_gpu, segments, p,
                            mirror.defined() ? &mirror : nullptr);
    }
    testing::expect_matches_cpu(param_gpu, param, 1e-6, 1e-6, 1e-5, "adamw param");
    testing::expect_matches_cpu(m_gpu, m, 1e-6, 1e-7, 1e-5, "adamw m");
    testing::expect_matches_cpu(v_gpu, v, 1e-6, 1e-7, 1e-5, "adamw v");
    if (!mirror.defined()) continue;
    // Every covered element is the updated parameter rounded once; the rest keep their poison.
    const Tensor got = testing::to_f32(testing::to_cpu(mirror)), expected = testing::to_cpu(param_gpu);
    std::vector<bool> covered(size_t(n_params), false);
    for (const AdamWSegment& s : segments)
      for (int64_t i = 0; i < s.length; ++i) covered[size_t(s.param_offset + i)] = true;
    const Tensor rounded = testing::rounded_to(expected, mirror_dtype);
    for (int64_t i = 0; i < n_params; ++i) {
      if (covered[size_t(i)])
        ASSERT_EQ(got.f32()[i], rounded.f32()[i]) << "mirror " << i;
      else
        ASSERT_TRUE(std::isnan(got.f32()[i])) << "mirror " << i << " outside every segment was written";
    }
  }
}

// bf16 moments over the same segments, keyed (a strided column slice among them): the GPU draws the
// CPU's rounding bits. Each step starts both sides from the CPU's state, so differences cannot carry
// over: fp32 arithmetic may differ in its last bit (nvcc and GCC contract into FMAs differently), and
// a stochastic rounding then lands on the other neighbour with odds of about 2^-16 per ulp, so a
// handful of moments may sit one bf16 step away, or, where beta1 * m and (1 - beta1) * g nearly cancel,
// a few fp32 ulps of those terms away; the strided segment must match bit for bit. Without a mirror,
// with a bf16 one and with an f16 one.
TEST_F(AdamWCuda, Bf16MomentsMatchTheCpusRounding) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  int64_t n_params = 0, n_state = 0;
  std::vector<AdamWSegment> segments = many_segments(&n_params, &n_state);
  int64_t key = 0;
  for (AdamWSegment& s : segments) s.key_offset = (key += 4 * s.length);  // apart, the strided span too
  AdamWSegment& strided = segments[3];
  strided.key_cols = 5, strided.key_stride = 11, strided.key_col = 2;
  for (const DType mirror_dtype : {DType::f32, DType::bf16, DType::f16}) {  // f32: no mirror
    SCOPED_TRACE(dtype_name(mirror_dtype));
    Tensor param = random_tensor({n_params}, seed), m = Tensor::zeros({n_state}, DType::bf16);
    Tensor v = Tensor::zeros({n_state}, DType::bf16);
    Tensor mirror = mirror_dtype == DType::f32 ? Tensor() : testing::poisoned_gpu({n_params}, mirror_dtype);
    AdamWParams p;
    p.lr = 1e-2f;
    p.weight_decay = 0.1f;
    p.round_seed = seed;
    for (int64_t step = 1; step <= 3; step++) {
      SCOPED_TRACE(step);
      p.step = step;
      const Tensor grad = random_tensor({n_state}, seed + uint64_t(step), -2.0f, 2.0f);
      Tensor param_gpu = to_gpu(param), m_gpu = to_gpu(m), v_gpu = to_gpu(v);
      const Tensor m_before = testing::to_f32(m), v_before = testing::to_f32(v);
      adamw_update_segments(param, grad, m, v, segments, p);
      adamw_update_segments(param_gpu, to_gpu(grad), m_gpu, v_gpu, segments, p, mirror.defined() ? &mirror : nullptr);
      testing::expect_matches_cpu(param_gpu, param, 1e-6, 1e-6, 1e-5, "adamw param");
      // The size of each moment's two terms, beta * previous + (1 - beta) * g or g squared.
      const std::function<float(int64_t)> m_terms = [&](int64_t i) {
        return p.beta1 * std::fabs(m_before.f32()[i]) + (1 - p.beta1) * std::fabs(grad.f32()[i]);
      };
      const std::function<float(int64_t)> v_terms = [&](int64_t i) {
        return p.beta2 * v_before.f32()[i] + (1 - p.beta2) * grad.f32()[i] * grad.f32()[i];
      };
      for (auto [name, gpu, cpu, terms] : {std::tuple{"m", &m_gpu, &m, &m_terms}, {"v", &v_gpu, &v, &v_terms}}) {
        const Tensor got = testing::to_f32(testing::to_cpu(*gpu)), want = testing::to_f32(*cpu);
        int64_t differ = 0;
        for (int64_t i = 0; i < n_state; ++i) {
          const float a = got.f32()[i], b = want.f32()[i];
          if (a == b) continue;
          ++differ;
          const bool in_strided = i >= strided.state_offset && i < strided.state_offset + strided.length;
          ASSERT_FALSE(in_strided) << name << " " << i << " of the strided segment: " << a << " vs " << b;
          ASSERT_LE(std::fabs(a - b), std::ldexp(std::fabs(b), -7) + std::ldexp((*terms)(i), -22))
              << name << " " << i << ": " << a << " vs " << b;
        }
        EXPECT_LE(differ, 64) << name << ": " << differ << " of " << n_state << " differ";
      }
    }
  }
}

}  // namespace
}  // namespace tessera
