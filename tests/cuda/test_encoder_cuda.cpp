// Token + position embedding on the GPU against the CPU: forward exact, backward accumulating
// onto existing gradients with repeated tokens (the atomics path), out-of-range ids refused.
#include <gtest/gtest.h>

#include "cuda/cuda_testing.h"
#include "ops/encoder.h"

namespace tessera {
namespace {

using testing::random_tensor;
using testing::to_gpu;

class EncoderCuda : public testing::CudaTest {};

TEST_F(EncoderCuda, ForwardAndBackwardMatchCpu) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  const int64_t B = 3, T = 17, C = 70, Vp = 24, maxT = 20;  // few ids: many repeats
  const Tensor tokens = testing::random_ids({B, T}, Vp, seed);
  const Tensor wte = random_tensor({Vp, C}, seed + 1), wpe = random_tensor({maxT, C}, seed + 2);
  const Tensor dout = random_tensor({B, T, C}, seed + 3);
  Tensor out = Tensor::zeros({B, T, C});
  encoder_forward(out, tokens, wte, wpe);
  Tensor out_gpu = testing::poisoned_gpu({B, T, C});
  const Tensor tokens_gpu = to_gpu(tokens);
  encoder_forward(out_gpu, tokens_gpu, to_gpu(wte), to_gpu(wpe));
  testing::expect_matches_cpu(out_gpu, out, 0.0, 0.0, 0.0, "encoder out");

  Tensor dwte = random_tensor({Vp, C}, seed + 4), dwpe = random_tensor({maxT, C}, seed + 5);
  Tensor dwte_gpu = to_gpu(dwte), dwpe_gpu = to_gpu(dwpe);
  encoder_backward(dwte, dwpe, dout, tokens);
  encoder_backward(dwte_gpu, dwpe_gpu, to_gpu(dout), tokens_gpu);
  testing::expect_matches_cpu(dwte_gpu, dwte, 1e-6, 1e-5, 1e-5, "encoder dwte");
  testing::expect_matches_cpu(dwpe_gpu, dwpe, 1e-6, 1e-5, 1e-5, "encoder dwpe");
}

TEST_F(EncoderCuda, OutOfRangeTokenIsRefused) {
  Tensor tokens = Tensor::zeros({1, 2}, DType::i32);
  tokens.data<int32_t>()[1] = 9;
  Tensor out = Tensor::zeros({1, 2, 4}, DType::f32, Device::cuda);
  const Tensor wte = Tensor::zeros({8, 4}, DType::f32, Device::cuda), wpe = Tensor::zeros({2, 4}, DType::f32, Device::cuda);
  const Tensor tokens_gpu = to_gpu(tokens);
  const std::string message = testing::error_of([&] { encoder_forward(out, tokens_gpu, wte, wpe); });
  EXPECT_TRUE(testing::contains(message, "token id 9")) << message;
}

}  // namespace
}  // namespace tessera
