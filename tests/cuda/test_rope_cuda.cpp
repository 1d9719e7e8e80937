// RoPE forward and backward on the GPU against the CPU twin, in place on fresh random qkv: fp32, and
// bf16 and f16 storage against the fp32 CPU op on the same (rounded) inputs, aligned and misaligned.
// Cases cover GQA (NKV < NH) and MHA, positions starting past 0 (a context-parallel rank), out of
// order and far (131071), Llama 2 theta and Llama 3.1's scaled frequencies, head sizes 2, 6 (HS/2
// odd: scalar path), 8, 16 and 128 (16-byte path where HS/2 allows it), and latent attention's
// rotated tails (64 of 192, 4 of 12), with YaRN's and DeepSeek's factors. Comparing the whole tensor
// also checks that v is untouched. bf16 and f16 tensors on the CPU are refused.
#include <gtest/gtest.h>

#include <vector>

#include "cuda/cuda_testing.h"
#include "ops/rope.h"

namespace tessera {
namespace {

using testing::random_tensor;
using testing::to_gpu;

struct RopeCase {
  int64_t B, T, NH, NKV, HS;
  std::vector<int32_t> positions;  // (T)
  RopeConfig config;
  int64_t R = 0;  // rotated channels, each head's last (latent attention's tail); 0 = HS
  RopeScales scales = {};
  Shape qkv() const { return {B, T, (NH + 2 * NKV) * HS}; }
  int64_t rotated() const { return R > 0 ? R : HS; }
};

RopeConfig llama3_config() { return {.theta = 500000, .factor = 8, .low_freq_factor = 1, .high_freq_factor = 4}; }

std::vector<int32_t> positions_from(int32_t first, int64_t T) {
  std::vector<int32_t> p(size_t(T), 0);
  for (int64_t t = 0; t < T; t++) p[size_t(t)] = first + int32_t(t);
  return p;
}

std::vector<RopeCase> rope_cases() {
  return {
      {2, 5, 4, 2, 8, positions_from(7, 5), {}},                           // GQA, offset positions
      {3, 37, 8, 2, 128, positions_from(4096, 37), llama3_config()},       // Llama 3.1 head size, GQA 4:1
      {1, 3, 3, 3, 16, {5, 8191, 131071}, llama3_config()},                // MHA, far positions
      {2, 7, 6, 3, 6, {9, 3, 4, 8, 5, 7, 6}, {.theta = 10000}},            // HS/2 = 3, out of order
      {2, 9, 4, 4, 192, positions_from(3, 9), {.theta = 10000}, 64},       // DeepSeek's tail of 64 in 192
      {1, 4, 2, 2, 12, positions_from(0, 4), {}, 4},                       // a tail of 4: scalar path
      {2, 9, 4, 4, 192, positions_from(3, 9), {}, 64, {1.1f, 0.45f}},      // YaRN's and DeepSeek's factors
      {2, 5, 4, 2, 16, positions_from(7, 5), {}, 0, {1.14f, 1.0f}},        // YaRN's factor, whole heads
      {2, 3, 3, 3, 14, positions_from(1, 3), {}, 4, {1.0f, 0.7f}},         // 10 query channels before a tail
      {1, 6, 2, 1, 2, {6, 5, 4, 3, 2, 1}, {.theta = 10000}},               // HS = 2
  };
}

Tensor positions_of(const std::vector<int32_t>& values) {
  Tensor t = Tensor::zeros({int64_t(values.size())}, DType::i32);
  std::copy(values.begin(), values.end(), t.data<int32_t>());
  return t;
}

class RopeCuda : public testing::CudaTest, public ::testing::WithParamInterface<DType> {};

// fp32: the GPU's cos and sin round the same fp64 angles once to fp32 as the CPU's table, so the
// rotations agree to an ulp or two (contraction into FMAs). bf16 and f16: plus half an ulp of the
// dtype, the one rounding of each stored result.
TEST_P(RopeCuda, ForwardAndBackwardMatchCpu) {
  const DType dtype = GetParam();
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  const double rel_l2 = dtype == DType::f32 ? 1e-6 : testing::scaled_from_bf16(1e-2, dtype);
  const double atol = 1e-6, rtol = testing::rounding_of(dtype) + 1e-6;
  for (const RopeCase& c : rope_cases()) {
    SCOPED_TRACE(::testing::Message() << "B=" << c.B << " T=" << c.T << " NH=" << c.NH << " NKV=" << c.NKV
                                      << " HS=" << c.HS);
    const Tensor inv_freq = rope_inv_freq(c.rotated(), c.config), positions = positions_of(c.positions);
    const Tensor qkv = testing::rounded_to(random_tensor(c.qkv(), seed, -2.0f, 2.0f), dtype);
    Tensor forward = testing::copy_of(qkv), backward = testing::copy_of(qkv);
    rope_forward(forward, positions, c.NH, c.NKV, inv_freq, c.scales);
    rope_backward(backward, positions, c.NH, c.NKV, inv_freq, c.scales);
    const Tensor inv_freq_gpu = to_gpu(inv_freq), positions_gpu = to_gpu(positions);
    for (const bool aligned : {true, false}) {
      SCOPED_TRACE(aligned ? "aligned" : "misaligned");
      const auto on_gpu = [&](const Tensor& host) {
        return aligned ? testing::to_gpu_as(host, dtype) : testing::misaligned_gpu(host, dtype);
      };
      Tensor forward_gpu = on_gpu(qkv), backward_gpu = on_gpu(qkv);
      rope_forward(forward_gpu, positions_gpu, c.NH, c.NKV, inv_freq_gpu, c.scales);
      rope_backward(backward_gpu, positions_gpu, c.NH, c.NKV, inv_freq_gpu, c.scales);
      testing::expect_matches_cpu(forward_gpu, forward, rel_l2, atol, rtol, "rope forward");
      testing::expect_matches_cpu(backward_gpu, backward, rel_l2, atol, rtol, "rope backward");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Storage, RopeCuda, ::testing::Values(DType::f32, DType::bf16, DType::f16),
                         testing::dtype_param_name);

// CPU kernels are the fp32 reference: a bf16 or f16 qkv on the CPU is an error naming the dtype.
TEST(RopeDtype, LowPrecisionOnTheCpuIsRefused) {
  const RopeCase c{1, 2, 2, 1, 4, {0, 1}, {}};
  const Tensor inv_freq = rope_inv_freq(c.HS, c.config), positions = positions_of(c.positions);
  for (const DType dtype : testing::kLowPrecisionDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor qkv = Tensor::zeros(c.qkv(), dtype);
    std::string message = testing::error_of([&] { rope_forward(qkv, positions, c.NH, c.NKV, inv_freq); });
    EXPECT_TRUE(testing::names_dtype_on_cpu(message, dtype)) << message;
    message = testing::error_of([&] { rope_backward(qkv, positions, c.NH, c.NKV, inv_freq); });
    EXPECT_TRUE(testing::names_dtype_on_cpu(message, dtype)) << message;
  }
}

}  // namespace
}  // namespace tessera
