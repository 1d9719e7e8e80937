// Token + position embedding on the GPU against the CPU: forward exact, backward accumulating
// onto existing gradients with repeated tokens (positions sorted by token on the device, no atomics),
// the same bits on every run and as the CPU's, over a step's worth of positions too; bf16 and f16
// activations with fp32 gradients; out-of-range ids, and bf16 and f16 on the CPU, refused.
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

// A tensor-parallel rank's rows [first, first + rows) of the vocabulary: tokens outside them add
// nothing (the position row alone), and only in-slice tokens reach dwte; the same as the CPU.
TEST_F(EncoderCuda, VocabularySliceMatchesCpu) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  const int64_t B = 3, T = 17, C = 72, Vp = 24, maxT = 20, first = 8, rows = 8;
  const Tensor tokens = testing::random_ids({B, T}, Vp, seed);
  const Tensor wte = random_tensor({rows, C}, seed + 1), wpe = random_tensor({maxT, C}, seed + 2);
  const Tensor dout = random_tensor({B, T, C}, seed + 3);
  Tensor out = Tensor::zeros({B, T, C}), out_gpu = testing::poisoned_gpu({B, T, C});
  const Tensor tokens_gpu = to_gpu(tokens);
  encoder_forward(out, tokens, wte, wpe, first, Vp);
  encoder_forward(out_gpu, tokens_gpu, to_gpu(wte), to_gpu(wpe), first, Vp);
  testing::expect_matches_cpu(out_gpu, out, 0.0, 0.0, 0.0, "sliced encoder out");
  Tensor dwte = random_tensor({rows, C}, seed + 4), dwpe = random_tensor({maxT, C}, seed + 5);
  Tensor dwte_gpu = to_gpu(dwte), dwpe_gpu = to_gpu(dwpe);
  encoder_backward(dwte, dwpe, dout, tokens, first, Vp);
  encoder_backward(dwte_gpu, dwpe_gpu, to_gpu(dout), tokens_gpu, first, Vp);
  testing::expect_matches_cpu(dwte_gpu, dwte, 1e-6, 1e-5, 1e-5, "sliced encoder dwte");
  testing::expect_matches_cpu(dwpe_gpu, dwpe, 1e-6, 1e-5, 1e-5, "sliced encoder dwpe");
}

// A step's worth of positions (20,480: CUB sorts them in several tiles, as in training) over a slice
// of GPT-2's vocabulary, so a quarter of them lie outside it: dwte the CPU's bits.
TEST_F(EncoderCuda, BackwardOverManyPositionsIsTheCpusBits) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  const int64_t B = 20, T = 1024, C = 8, Vp = 50304, first = 12576, rows = 37728;
  const Tensor tokens = testing::random_ids({B, T}, Vp, seed);
  const Tensor dout = random_tensor({B, T, C}, seed + 1);
  Tensor dwte = random_tensor({rows, C}, seed + 2), dwpe;
  Tensor dwte_gpu = to_gpu(dwte), dwpe_gpu;
  encoder_backward(dwte, dwpe, dout, tokens, first, Vp);
  encoder_backward(dwte_gpu, dwpe_gpu, to_gpu(dout), to_gpu(tokens), first, Vp);
  testing::expect_identical(testing::to_cpu(dwte_gpu), dwte, "sliced dwte over 20,480 positions");
}

// bf16 or f16 out/wte/wpe/dout, f32 dwte/dwpe. Forward: the fp32 sum of two stored values, rounded
// once to nearest even: the CPU result on the same inputs rounded to the dtype, bit for bit. Backward:
// fp32 sums of the same stored values the CPU sums, so the fp32 tolerances hold. C = 72 takes the
// 16-byte path, C = 70 the scalar one.
using EncoderCudaLowPrecision = testing::CudaLowPrecisionTest;

TEST_P(EncoderCudaLowPrecision, MatchesCpuOnRoundedInputs) {
  const DType dtype = GetParam();
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  for (const int64_t C : {int64_t(72), int64_t(70)}) {
    SCOPED_TRACE(C);
    const int64_t B = 3, T = 17, Vp = 24, maxT = 20;
    const Tensor tokens = testing::random_ids({B, T}, Vp, seed);
    const Tensor wte = testing::rounded_to(random_tensor({Vp, C}, seed + 1), dtype);
    const Tensor wpe = testing::rounded_to(random_tensor({maxT, C}, seed + 2), dtype);
    const Tensor dout = testing::rounded_to(random_tensor({B, T, C}, seed + 3), dtype);
    Tensor out = Tensor::zeros({B, T, C});
    encoder_forward(out, tokens, wte, wpe);
    Tensor out_gpu = testing::poisoned_gpu({B, T, C}, dtype);
    const Tensor tokens_gpu = to_gpu(tokens);
    encoder_forward(out_gpu, tokens_gpu, testing::to_gpu_as(wte, dtype), testing::to_gpu_as(wpe, dtype));
    testing::expect_matches_cpu(out_gpu, testing::rounded_to(out, dtype), 0.0, 0.0, 0.0, "encoder out");

    Tensor dwte = random_tensor({Vp, C}, seed + 4), dwpe = random_tensor({maxT, C}, seed + 5);
    Tensor dwte_gpu = to_gpu(dwte), dwpe_gpu = to_gpu(dwpe);
    encoder_backward(dwte, dwpe, dout, tokens);
    encoder_backward(dwte_gpu, dwpe_gpu, testing::to_gpu_as(dout, dtype), tokens_gpu);
    testing::expect_matches_cpu(dwte_gpu, dwte, 1e-6, 1e-5, 1e-5, "encoder dwte");
    testing::expect_matches_cpu(dwpe_gpu, dwpe, 1e-6, 1e-5, 1e-5, "encoder dwpe");
  }
}

INSTANTIATE_TEST_SUITE_P(Storage, EncoderCudaLowPrecision, ::testing::ValuesIn(testing::kLowPrecisionDTypes),
                         testing::dtype_param_name);

// Every dwte element is summed by one thread, starting from its old value and adding the rows of
// its token in (b,t) order, as the CPU does: two runs give the same bits, and the CPU's bits too.
// Five ids over 512 positions: each is repeated about a hundred times.
TEST_F(EncoderCuda, BackwardIsDeterministic) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  const int64_t B = 8, T = 64, C = 300, Vp = 5;
  const Tensor tokens = testing::random_ids({B, T}, Vp, seed);
  const Tensor tokens_gpu = to_gpu(tokens);
  const Tensor dwte0 = random_tensor({Vp, C}, seed + 2), dwpe0 = random_tensor({T, C}, seed + 3);
  for (const DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor dout = testing::rounded_to(random_tensor({B, T, C}, seed + 1), dtype);  // what the GPU reads
    Tensor dwte_cpu = testing::copy_of(dwte0), dwpe_cpu = testing::copy_of(dwpe0);
    encoder_backward(dwte_cpu, dwpe_cpu, dout, tokens);
    const Tensor dout_gpu = testing::to_gpu_as(dout, dtype);
    Tensor dwte[2], dwpe[2];
    for (int run = 0; run < 2; run++) {
      Tensor dwte_gpu = to_gpu(dwte0), dwpe_gpu = to_gpu(dwpe0);
      encoder_backward(dwte_gpu, dwpe_gpu, dout_gpu, tokens_gpu);
      dwte[run] = testing::to_cpu(dwte_gpu);
      dwpe[run] = testing::to_cpu(dwpe_gpu);
    }
    testing::expect_identical(dwte[0], dwte[1], "dwte, run 1 against run 2");
    testing::expect_identical(dwpe[0], dwpe[1], "dwpe, run 1 against run 2");
    testing::expect_identical(dwte[0], dwte_cpu, "dwte, GPU against CPU");
  }
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

// CPU kernels are the fp32 reference: bf16 or f16 activations on the CPU are an error naming the dtype.
TEST(EncoderDtype, LowPrecisionOnTheCpuIsRefused) {
  for (const DType dtype : testing::kLowPrecisionDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor tokens = Tensor::zeros({1, 2}, DType::i32);
    Tensor out = Tensor::zeros({1, 2, 4}, dtype);
    const Tensor wte = Tensor::zeros({8, 4}, dtype), wpe = Tensor::zeros({2, 4}, dtype);
    std::string message = testing::error_of([&] { encoder_forward(out, tokens, wte, wpe); });
    EXPECT_TRUE(testing::names_dtype_on_cpu(message, dtype)) << message;
    Tensor dwte = Tensor::zeros({8, 4}), dwpe = Tensor::zeros({2, 4});
    message = testing::error_of([&] { encoder_backward(dwte, dwpe, out, tokens); });
    EXPECT_TRUE(testing::names_dtype_on_cpu(message, dtype)) << message;
  }
}

}  // namespace
}  // namespace tessera
