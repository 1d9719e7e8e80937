// Fused AdamW over several steps on the GPU against the CPU twin, on fresh random inputs of odd
// sizes: per tensor, and multi-tensor over many scattered segments, with and without the 16-bit
// mirror.
#include <gtest/gtest.h>

#include <cmath>
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

// 700 short segments and one of 600,000 elements, at scattered parameter offsets, decay on every
// other one.
std::vector<AdamWSegment> many_segments(int64_t* params, int64_t* state) {
  std::vector<AdamWSegment> segments;
  int64_t p = 3, s = 0;
  for (int i = 0; i < 700; ++i) {
    const int64_t length = 17 + i % 50;
    segments.push_back({p, s, length, i % 2 == 0});
    p += length + 5;
    s += length;
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

}  // namespace
}  // namespace tessera
