// The linear layer through cuBLASLt against OpenBLAS on the CPU (fp32, no TF32): forward with and
// without the bias epilogue, dx written over poison, dweight and dbias accumulated onto existing
// values, and a weight view at an offset of one element (4-byte alignment).
#include <gtest/gtest.h>

#include "cuda/cuda_testing.h"
#include "ops/matmul.h"

namespace tessera {
namespace {

using testing::random_tensor;
using testing::to_gpu;

class MatmulCuda : public testing::CudaTest, public ::testing::WithParamInterface<bool> {};

TEST_P(MatmulCuda, ForwardAndBackwardMatchCpu) {
  const bool with_bias = GetParam();
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  const int64_t B = 2, T = 65, C = 100, OC = 70;
  const Tensor x = random_tensor({B, T, C}, seed), dout = random_tensor({B, T, OC}, seed + 1);
  // weight: a view one element into a larger buffer, as parameters are views into one flat buffer
  const Tensor flat = random_tensor({OC * C + 1}, seed + 2);
  const Tensor weight = flat.view(1, {OC, C});
  const Tensor weight_gpu = to_gpu(flat).view(1, {OC, C});
  const Tensor bias = with_bias ? random_tensor({OC}, seed + 3) : Tensor();
  const Tensor bias_gpu = with_bias ? to_gpu(bias) : Tensor();

  Tensor out = Tensor::zeros({B, T, OC});
  matmul_forward(out, x, weight, bias);
  Tensor out_gpu = testing::poisoned_gpu({B, T, OC});
  const Tensor x_gpu = to_gpu(x);
  matmul_forward(out_gpu, x_gpu, weight_gpu, bias_gpu);
  testing::expect_matches_cpu(out_gpu, out, 1e-6, 1e-5, 1e-5, "matmul out");

  Tensor dx = Tensor::zeros({B, T, C}), dw = random_tensor({OC, C}, seed + 4);
  Tensor db = with_bias ? random_tensor({OC}, seed + 5) : Tensor();
  Tensor dx_gpu = testing::poisoned_gpu({B, T, C}), dw_gpu = to_gpu(dw);
  Tensor db_gpu = with_bias ? to_gpu(db) : Tensor();
  matmul_backward(dx, dw, db, dout, x, weight);
  matmul_backward(dx_gpu, dw_gpu, db_gpu, to_gpu(dout), x_gpu, weight_gpu);
  testing::expect_matches_cpu(dx_gpu, dx, 1e-6, 1e-5, 1e-5, "matmul dx");
  testing::expect_matches_cpu(dw_gpu, dw, 1e-6, 1e-5, 1e-5, "matmul dweight");
  if (with_bias) testing::expect_matches_cpu(db_gpu, db, 1e-6, 1e-5, 1e-5, "matmul dbias");
}

INSTANTIATE_TEST_SUITE_P(Bias, MatmulCuda, ::testing::Bool());

}  // namespace
}  // namespace tessera
