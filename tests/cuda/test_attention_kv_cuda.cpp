// Attention over a key/value cache on the GPU against the CPU twin, in fp32 and in bf16 and f16 storage
// (on the same rounded inputs): the new rows written into both caches at [past, past + Tq), rows
// before and after them untouched, and out, for a prompt into an empty cache, single tokens after
// hundreds of cached positions, grouped-query heads, head sizes 16 (part of a warp), 64 and 128, a
// cache filled to its last row and a sliding window. A head size the kernel does not cover is refused before any write.
#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "cuda/cuda_testing.h"
#include "ops/attention_kv.h"

namespace tessera {
namespace {

using testing::random_tensor;
using testing::rounded_to;
using testing::to_gpu_as;

struct KvCase {
  int64_t B, Tq, past, capacity, NH, NKV, HS;
  int64_t window = 0;  // a sliding window over the cache, or none
};

std::string kv_case_name(const ::testing::TestParamInfo<KvCase>& info) {
  const KvCase& c = info.param;
  std::ostringstream name;
  name << "B" << c.B << "_Tq" << c.Tq << "_past" << c.past << "_NH" << c.NH << "_KV" << c.NKV << "_HS" << c.HS
       << (c.window > 0 ? "_W" + std::to_string(c.window) : "");
  return name.str();
}

class AttentionKvCuda : public testing::CudaTest, public ::testing::WithParamInterface<KvCase> {};

TEST_P(AttentionKvCuda, CachesAndOutputMatchCpu) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  const auto [B, Tq, past, capacity, NH, NKV, HS, window] = GetParam();
  const Shape qkv_shape{B, Tq, (NH + 2 * NKV) * HS}, cache_shape{B, capacity, NKV * HS};
  for (const DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor qkv = rounded_to(random_tensor(qkv_shape, seed, -2.0f, 2.0f), dtype);
    Tensor k_cache = rounded_to(random_tensor(cache_shape, seed + 1), dtype);
    Tensor v_cache = rounded_to(random_tensor(cache_shape, seed + 2), dtype);
    Tensor k_gpu = to_gpu_as(k_cache, dtype), v_gpu = to_gpu_as(v_cache, dtype);
    Tensor out = Tensor::zeros({B, Tq, NH * HS}), out_gpu = testing::poisoned_gpu({B, Tq, NH * HS}, dtype);
    attention_kv_forward(out, k_cache, v_cache, qkv, past, int(NH), int(NKV), window);
    attention_kv_forward(out_gpu, k_gpu, v_gpu, to_gpu_as(qkv, dtype), past, int(NH), int(NKV), window);
    // The caches are copies of stored values: exact.
    testing::expect_matches_cpu(k_gpu, k_cache, 0.0, 0.0, 0.0, "k_cache");
    testing::expect_matches_cpu(v_gpu, v_cache, 0.0, 0.0, 0.0, "v_cache");
    // out: fp32 arithmetic in another order, then one rounding to the storage type.
    const double rounding = dtype == DType::f32 ? 1e-6 : testing::rounding_of(dtype);
    testing::expect_matches_cpu(out_gpu, out, 2 * rounding + 1e-5, 1e-5 + rounding * testing::max_abs(out),
                                2 * rounding, "out");
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionKvCuda,
                         ::testing::Values(KvCase{2, 9, 0, 32, 4, 4, 16},      // a prompt into an empty cache
                                           KvCase{1, 1, 700, 1024, 12, 12, 64},  // GPT-2's next token
                                           KvCase{3, 1, 41, 64, 8, 2, 128},     // GQA 4:1, Llama's head size
                                           KvCase{2, 3, 61, 64, 6, 3, 64},      // fills the cache to its end
                                           KvCase{2, 5, 40, 64, 4, 1, 64, 16}),  // a sliding window of 16
                         kv_case_name);

class AttentionKvCudaRefusal : public testing::CudaTest {};

TEST_F(AttentionKvCudaRefusal, HeadSizeAboveTheKernelsIsRefused) {
  const int64_t HS = 320;  // above kMaxKvHeadSize
  const Tensor k_cache = random_tensor({1, 4, HS}, 1);
  Tensor k_gpu = testing::to_gpu(k_cache), v_gpu = testing::to_gpu(k_cache);
  Tensor out_gpu = testing::poisoned_gpu({1, 1, HS});
  const Tensor qkv_gpu = testing::to_gpu(random_tensor({1, 1, 3 * HS}, 2));
  const std::string error = testing::error_of([&] { attention_kv_forward(out_gpu, k_gpu, v_gpu, qkv_gpu, 2, 1, 1); });
  EXPECT_TRUE(testing::contains(error, "head size 320")) << error;
  testing::expect_matches_cpu(k_gpu, k_cache, 0.0, 0.0, 0.0, "k_cache untouched");
}

}  // namespace
}  // namespace tessera
