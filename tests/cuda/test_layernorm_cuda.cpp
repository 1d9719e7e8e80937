// LayerNorm on the GPU against the CPU: out, mean, rstd; dx written over poison; dweight and dbias
// accumulated onto existing values. Widths below, at and above a warp, and GPT-2's 768.
#include <gtest/gtest.h>

#include "cuda/cuda_testing.h"
#include "ops/layernorm.h"

namespace tessera {
namespace {

using testing::random_tensor;
using testing::to_gpu;

class LayerNormCuda : public testing::CudaTest, public ::testing::WithParamInterface<int64_t> {};

TEST_P(LayerNormCuda, ForwardAndBackwardMatchCpu) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  const int64_t B = 4, T = 67, C = GetParam();
  const Tensor x = random_tensor({B, T, C}, seed, -2.0f, 3.0f), dout = random_tensor({B, T, C}, seed + 1);
  const Tensor weight = random_tensor({C}, seed + 2, 0.5f, 1.5f), bias = random_tensor({C}, seed + 3);
  Tensor out = Tensor::zeros({B, T, C}), mean = Tensor::zeros({B, T}), rstd = Tensor::zeros({B, T});
  layernorm_forward(out, mean, rstd, x, weight, bias);
  Tensor out_gpu = testing::poisoned_gpu({B, T, C}), mean_gpu = testing::poisoned_gpu({B, T}),
         rstd_gpu = testing::poisoned_gpu({B, T});
  const Tensor x_gpu = to_gpu(x), weight_gpu = to_gpu(weight);
  layernorm_forward(out_gpu, mean_gpu, rstd_gpu, x_gpu, weight_gpu, to_gpu(bias));
  testing::expect_matches_cpu(out_gpu, out, 1e-6, 1e-5, 1e-5, "layernorm out");
  testing::expect_matches_cpu(mean_gpu, mean, 1e-6, 1e-6, 1e-5, "layernorm mean");
  testing::expect_matches_cpu(rstd_gpu, rstd, 1e-6, 1e-6, 1e-5, "layernorm rstd");

  Tensor dx = Tensor::zeros({B, T, C}), dw = random_tensor({C}, seed + 4), db = random_tensor({C}, seed + 5);
  Tensor dx_gpu = testing::poisoned_gpu({B, T, C}), dw_gpu = to_gpu(dw), db_gpu = to_gpu(db);
  layernorm_backward(dx, dw, db, dout, x, weight, mean, rstd);
  layernorm_backward(dx_gpu, dw_gpu, db_gpu, to_gpu(dout), x_gpu, weight_gpu, to_gpu(mean), to_gpu(rstd));
  testing::expect_matches_cpu(dx_gpu, dx, 1e-5, 1e-5, 1e-4, "layernorm dx");
  testing::expect_matches_cpu(dw_gpu, dw, 1e-5, 1e-4, 1e-4, "layernorm dweight");
  testing::expect_matches_cpu(db_gpu, db, 1e-5, 1e-4, 1e-4, "layernorm dbias");
}

INSTANTIATE_TEST_SUITE_P(Widths, LayerNormCuda, ::testing::Values(int64_t(7), int64_t(32), int64_t(37), int64_t(768)));

}  // namespace
}  // namespace tessera
