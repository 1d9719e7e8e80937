// Ring attention's block kernels on the GPU against the CPU twin, in fp32 and with bf16 and f16 storage
// (on the same rounded inputs): a context-parallel rank's query block (chunks 0 and 3 of a sequence
// cut in four) over its own key/value block, then over the other rank's (chunks 1 and 2), merged into
// out and lse; delta; the backward's dq accumulated over both blocks and each block's dk and dv; the
// k/v copies to and from the packed qkv. MHA and grouped-query heads; head sizes 16, 64 and 128. With
// document masks (packed sequences) too, where query rows may see no key of a block, taking either block
// first.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "cuda/attention_cases.h"
#include "cuda/cuda_testing.h"
#include "ops/attention_block.h"

namespace tessera {
namespace {

using testing::random_tensor;
using testing::rounded_to;
using testing::to_gpu_as;

struct BlockCase {
  int64_t B, chunk, NH, NKV, HS;
};

std::string block_case_name(const ::testing::TestParamInfo<BlockCase>& info) {
  const BlockCase& c = info.param;
  std::ostringstream name;
  name << "B" << c.B << "_chunk" << c.chunk << "_NH" << c.NH << "_KV" << c.NKV << "_HS" << c.HS;
  return name.str();
}

std::vector<int32_t> chunk_positions(std::initializer_list<int> chunks, int64_t len) {
  std::vector<int32_t> p;
  for (int c : chunks)
    for (int64_t t = c * len; t < (c + 1) * len; t++) p.push_back(int32_t(t));
  return p;
}

// A rank's ring steps on the GPU against the CPU. doc_starts: the whole sequence's (B, 4 chunk) document
// starts on the host, or undefined (plain causal). own_first: the rank's own kv block comes first, where
// every row sees a key; otherwise the other rank's, where rows of chunk 0 (and, with documents, rows whose
// document starts in chunk 3) see none.
void expect_ring_steps_match_cpu(const BlockCase& c, const Tensor& doc_starts, bool own_first) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  const auto [B, chunk, NH, NKV, HS] = c;
  const int n = int(NH), nkv = int(NKV);
  const int64_t T = 2 * chunk, W = (NH + 2 * NKV) * HS, C = NH * HS;
  const std::vector<int32_t> mine = chunk_positions({0, 3}, chunk), theirs = chunk_positions({1, 2}, chunk);
  const BlockPositions own{mine, mine}, other{mine, theirs};
  const Tensor docs = doc_starts.defined() ? testing::doc_starts_at(doc_starts, mine) : Tensor{};  // (B, T)
  const Tensor docs_gpu = docs.defined() ? testing::to_gpu(docs) : Tensor{};
  for (const DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const double rounding = dtype == DType::f32 ? 1e-6 : testing::rounding_of(dtype);
    const Tensor qkv = rounded_to(random_tensor({B, T, W}, seed, -2.0f, 2.0f), dtype);
    const Tensor their_qkv = rounded_to(random_tensor({B, T, W}, seed + 1, -2.0f, 2.0f), dtype);
    const Tensor dout = rounded_to(random_tensor({B, T, C}, seed + 2), dtype);
    const Tensor qkv_gpu = to_gpu_as(qkv, dtype), dout_gpu = to_gpu_as(dout, dtype);

    // The k/v blocks: copies of stored values, exact.
    const Tensor kv = attention_block_kv(qkv, n, nkv), their_kv = attention_block_kv(their_qkv, n, nkv);
    const Tensor kv_gpu = attention_block_kv(qkv_gpu, n, nkv);
    const Tensor their_kv_gpu = attention_block_kv(to_gpu_as(their_qkv, dtype), n, nkv);
    testing::expect_matches_cpu(kv_gpu, kv, 0.0, 0.0, 0.0, "kv");

    Tensor out = Tensor::zeros({B, T, C}), lse = Tensor::zeros({B, NH, T});
    Tensor out_gpu = testing::poisoned_gpu({B, T, C}, dtype), lse_gpu = testing::poisoned_gpu({B, NH, T});
    for (const bool own_block : {own_first, !own_first}) {
      const bool first = own_block == own_first;
      attention_block_forward(out, lse, qkv, own_block ? kv : their_kv, own_block ? own : other, n, nkv, first, docs);
      attention_block_forward(out_gpu, lse_gpu, qkv_gpu, own_block ? kv_gpu : their_kv_gpu, own_block ? own : other,
                              n, nkv, first, docs_gpu);
    }
    // out is rounded to the storage type after each block's merge.
    testing::expect_matches_cpu(out_gpu, out, 3 * rounding + 1e-5, 1e-5 + 2 * rounding * testing::max_abs(out),
                                3 * rounding, "out");
    testing::expect_matches_cpu(lse_gpu, lse, 1e-5, 1e-4, 1e-4, "lse");

    // The backward from the CPU's final out and lse on both sides (so only the kernels differ).
    Tensor delta = Tensor::zeros({B, NH, T}), delta_gpu = testing::poisoned_gpu({B, NH, T});
    const Tensor out_rounded = rounded_to(out, dtype), out_rounded_gpu = to_gpu_as(out, dtype);
    attention_block_delta(delta, dout, out_rounded, n);
    attention_block_delta(delta_gpu, dout_gpu, out_rounded_gpu, n);
    testing::expect_matches_cpu(delta_gpu, delta, 1e-5, 1e-5 * testing::max_abs(delta), 1e-4, "delta");
    const Tensor lse_gpu_in = testing::to_gpu(lse);
    Tensor dqkv = Tensor::zeros(qkv.shape()), dqkv_gpu = to_gpu_as(Tensor::zeros(qkv.shape()), dtype);
    for (const bool own_block : {true, false}) {
      SCOPED_TRACE(own_block ? "own block" : "other block");
      Tensor dkv = Tensor::zeros(kv.shape()), dkv_gpu = testing::to_gpu(Tensor::zeros(kv.shape()));
      attention_block_backward(dqkv, dkv, dout, qkv, own_block ? kv : their_kv, lse, delta, own_block ? own : other,
                               n, nkv, docs);
      attention_block_backward(dqkv_gpu, dkv_gpu, dout_gpu, qkv_gpu, own_block ? kv_gpu : their_kv_gpu, lse_gpu_in,
                               testing::to_gpu(delta), own_block ? own : other, n, nkv, docs_gpu);
      testing::expect_matches_cpu(dkv_gpu, dkv, 1e-4, 1e-4 * testing::max_abs(dkv), 1e-3, "dkv");
    }
    // dq: the q channels (k and v untouched at zero), rounded to the storage type after each block.
    testing::expect_matches_cpu(dqkv_gpu, dqkv, 3 * rounding + 1e-4, 1e-4 + 2 * rounding * testing::max_abs(dqkv),
                                3 * rounding + 1e-3, "dqkv");

    // dkv back into the k and v channels of the packed gradient.
    attention_block_kv_to_qkv(dqkv, kv, n, nkv);
    attention_block_kv_to_qkv(dqkv_gpu, kv_gpu, n, nkv);
    Tensor expected = rounded_to(dqkv, dtype);
    testing::expect_matches_cpu(dqkv_gpu, expected, 3 * rounding + 1e-4, 1e-4 + 2 * rounding * testing::max_abs(dqkv),
                                3 * rounding + 1e-3, "dqkv with k and v");
  }
}

class AttentionBlockCuda : public testing::CudaTest, public ::testing::WithParamInterface<BlockCase> {};

TEST_P(AttentionBlockCuda, RingStepsMatchCpu) { expect_ring_steps_match_cpu(GetParam(), {}, true); }

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionBlockCuda,
                         ::testing::Values(BlockCase{2, 8, 4, 4, 16},     // MHA, part of a warp per head
                                           BlockCase{1, 40, 8, 2, 64},    // GQA 4:1, GPT-2's head size
                                           BlockCase{2, 5, 2, 1, 128}),   // MQA, Llama's head size
                         block_case_name);

// Packed sequences over the whole sequence (4 chunks): documents inside a chunk, across chunks, starting
// exactly at chunk 3 (its rows see none of the other rank's keys) or inside it, one-token documents, and
// a batch row that is one document.
struct BlockDocumentCase {
  BlockCase shape;
  testing::DocumentLengths lengths;  // (B) rows summing to 4 chunk
};

std::string block_document_case_name(const ::testing::TestParamInfo<BlockDocumentCase>& info) {
  return block_case_name({info.param.shape, info.index});
}

class AttentionBlockDocumentsCuda : public testing::CudaTest,
                                    public ::testing::WithParamInterface<BlockDocumentCase> {};

TEST_P(AttentionBlockDocumentsCuda, RingStepsMatchCpu) {
  const auto& [shape, lengths] = GetParam();
  const Tensor doc_starts = testing::doc_starts_of_lengths(4 * shape.chunk, lengths);
  for (const bool own_first : {true, false}) {
    SCOPED_TRACE(own_first ? "own block first" : "other block first");
    expect_ring_steps_match_cpu(shape, doc_starts, own_first);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Packed, AttentionBlockDocumentsCuda,
    ::testing::Values(BlockDocumentCase{{2, 8, 4, 4, 16}, {{3, 20, 3, 6}, {24, 8}}},  // 24: chunk 3's start
                      BlockDocumentCase{{1, 40, 8, 2, 64}, {{5, 70, 1, 60, 24}}},     // 136 inside chunk 3
                      BlockDocumentCase{{2, 5, 2, 1, 128}, {{1, 1, 1, 17}, {20}}}),
    block_document_case_name);

}  // namespace
}  // namespace tessera
