// The layout-equivalence harness (DESIGN.md invariant 1): train a tiny model for a few steps in one
// process, then under mpirun in every layout of the table below, and require the same losses, grad
// norms and final weights. Adding a parallel axis means adding columns and rows to kLayouts.
// Pipeline rows run every schedule at pp 2 and 4 (interleaved with 2 chunks per rank), alone and
// with dp and ZeRO, over models deepened with --layers so that every chunk has a block. Tensor rows
// run tp 2 and 4 with sequence parallelism (the default) and without, alone and with dp and pp.
// Expert rows run ep 2 and 4 (an expert per rank) over dp, with ZeRO, pp, tp and recomputation;
// context rows cp 2 and 4 (ring attention), over dp with ZeRO (3 too) and recomputation, with tp and
// with pp.
// ZeRO-3 rows run dp 2 and 4 with several micro-batches per rank, recomputation and every family,
// and over tp, pp, cp and ep.
// A MoE model's auxiliary loss (and capacity) is taken per micro-batch, as in Megatron and Hugging
// Face, so its reference runs the row's micro-batch size; dense models compare to one forward of
// the whole batch.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "core/rng.h"
#include "data/token_shard.h"
#include "data/tokenizer.h"
#include "parallel/train_runs.h"
#include "support/test_support.h"
#include "train/train_fixtures.h"

namespace tessera {
namespace {

// How far a layout's run may be from one process's: its losses and gradient norms (relative), and its
// final weights per tensor (relative in the L2 norm, plus a floor in fractions of one step of lr 1e-3).
// Reduction order changes fp32 rounding, and Adam's normalisation turns rounding noise into
// full-size steps where the exact gradient is (near) zero: for a whole tensor (the key bias of
// attention: softmax ignores a constant added to every score), hence the floor; and for a lone
// element (one of llama-tiny's value-projection weights moved 6% of a step, the rest agreeing to
// 1e-6, when the CPU code went from AVX-512 to AVX2), hence the largest tenth of a percent of each
// tensor's differences (at least one) may each reach one step. A layout bug moves rows, columns or
// whole shards, far beyond these.
struct Tolerance {
  double relative;
  double floor_steps;
};
constexpr Tolerance kFp32{1e-5, 1e-3};
// With fp8 linear layers, from the second step on. An fp8 cast keeps 3 mantissa bits, so an operand
// at a rounding boundary that another reduction order moved by one fp32 ulp changes by up to 1/16 of
// itself; from step 2 the layouts' weights differ by rounding, and such flips come: gpt2-tiny under
// tp2·pp2 agreed with one process to every digit for three steps, then its gradient norm was 1.7e-4
// apart at step 4 and its key biases 0.5% of a step in RMS. The first step has the same weights in
// every layout and keeps kFp32; a wrong scale (one rank's amax instead of the group's) moves every
// cast at once.
constexpr Tolerance kFp8{1e-3, 1e-2};

// The tolerance for a run with `flags` at step `step` (1-based), or for its final weights (step 0).
Tolerance tolerance(const std::string& flags, size_t step) {
  return flags.find("--fp8") != std::string::npos && step != 1 ? kFp8 : kFp32;
}

using Tensors = std::vector<std::pair<std::string, std::vector<float>>>;

void expect_weights_match(const Tensors& want_all, const Tensors& got_all, Tolerance tolerance) {
  constexpr double kLr = 1e-3;
  ASSERT_EQ(got_all.size(), want_all.size());
  ASSERT_FALSE(want_all.empty());
  for (size_t t = 0; t < want_all.size(); ++t) {
    const auto& [name, want] = want_all[t];
    const std::vector<float>& got = got_all[t].second;
    ASSERT_EQ(got.size(), want.size()) << name;
    std::vector<double> diffs(want.size());
    double norm = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      diffs[i] = std::fabs(double(got[i]) - want[i]);
      norm += double(want[i]) * want[i];
    }
    std::sort(diffs.begin(), diffs.end());
    const size_t lone = std::max<size_t>(1, diffs.size() / 1000);
    EXPECT_LE(diffs.back(), kLr) << name;
    double rest = 0;
    for (size_t i = 0; i + lone < diffs.size(); ++i) rest += diffs[i] * diffs[i];
    const double floor = tolerance.floor_steps * kLr * std::sqrt(double(want.size()));
    EXPECT_LE(std::sqrt(rest), tolerance.relative * std::sqrt(norm) + floor)
        << name << " (largest element differences " << diffs.back() << ", then " << diffs[diffs.size() - lone - 1]
        << ")";
  }
}

// Global batch 8 sequences: every dp degree and micro-batch size below divides it.
const Layout kLayouts[] = {
    {1, 1, 0, 2}, {1, 1, 1, 1}, {1, 1, 2, 2},                                   //
    {2, 2, 0, 1}, {2, 2, 0, 2}, {2, 2, 1, 1}, {2, 2, 1, 2}, {2, 2, 2, 1}, {2, 2, 2, 2},  //
    {4, 4, 0, 1}, {4, 4, 0, 2}, {4, 4, 1, 1}, {4, 4, 1, 2}, {4, 4, 2, 1}, {4, 4, 2, 2},
    {1, 1, 0, 2, "llama-tiny"}, {2, 2, 1, 2, "llama-tiny"}, {4, 4, 2, 1, "llama-tiny"},         //
    {2, 2, 1, 2, "mixtral-tiny"}, {4, 4, 2, 1, "mixtral-tiny"}, {2, 2, 2, 1, "deepseek-moe-tiny"},
    // ZeRO-3 (dp alone): parameters gathered part by part, gradients reduce-scattered every micro-batch
    {1, 1, 3, 2}, {2, 2, 3, 1}, {2, 2, 3, 2}, {4, 4, 3, 1}, {4, 4, 3, 2},
    {2, 2, 3, 1, "gpt2-tiny", 1, "1f1b", 1, 0, "--recompute full"}, {4, 4, 3, 1, "llama-tiny"},
    {2, 2, 3, 1, "mixtral-tiny"}, {4, 4, 3, 1, "deepseek-moe-tiny"},
    // ZeRO-3 keeping the blocks gathered from forward to backward: over micro-batches, under a
    // pipeline's micro-batches in flight, over tp slices, over expert groups with recomputation
    {2, 2, 3, 2, "gpt2-tiny", 1, "1f1b", 1, 0, "--no-reshard-after-forward"},
    {4, 2, 3, 1, "gpt2-tiny", 2, "1f1b", 1, 0, "--no-reshard-after-forward"},
    {4, 2, 3, 2, "llama-tiny", 1, "1f1b", 1, 0, "--no-reshard-after-forward", 2},
    {4, 4, 3, 1, "mixtral-tiny", 1, "1f1b", 1, 0, "--no-reshard-after-forward --recompute full", 1, 2},
    // ZeRO-3 over a tp rank's slices (columns below): dp2·tp2 with and without sequence parallelism,
    // and tp4 above llama-tiny's 2 kv heads (the replicated kv rows summed over tp part by part)
    {4, 2, 3, 2, "gpt2-tiny", 1, "1f1b", 1, 0, "", 2},
    {4, 2, 3, 2, "llama-tiny", 1, "1f1b", 1, 0, "--no-sequence-parallel", 2},
    {8, 2, 3, 2, "llama-tiny", 1, "1f1b", 1, 0, "--recompute full", 4},
    // ZeRO-3 over pipeline stages: gpt2-tiny's tied embedding summed between the end stages' shards,
    // every schedule that does not defer weight gradients, with tp, and an untied family
    {4, 2, 3, 2, "gpt2-tiny", 2, "1f1b"}, {4, 2, 3, 1, "gpt2-tiny", 2, "gpipe"},
    {4, 2, 3, 1, "gpt2-tiny", 2, "interleaved", 2, 4}, {4, 1, 3, 2, "llama-tiny", 4, "1f1b", 1, 4},
    {8, 2, 3, 2, "llama-tiny", 2, "1f1b", 1, 0, "", 2}, {8, 2, 3, 1, "mixtral-tiny", 2, "interleaved", 2, 4, "", 2},
    // ZeRO-3 over expert groups: a MoE block's part is two buckets (dense weights over dp×cp, experts
    // over expert_dp); ep2 and ep4 (an expert per rank, with a shared expert), with tp and with pp
    {4, 4, 3, 1, "mixtral-tiny", 1, "1f1b", 1, 0, "", 1, 2}, {4, 4, 3, 2, "deepseek-moe-tiny", 1, "1f1b", 1, 0, "", 1, 4},
    {8, 4, 3, 2, "mixtral-tiny", 1, "1f1b", 1, 0, "", 2, 2}, {8, 4, 3, 2, "mixtral-tiny", 2, "1f1b", 1, 0, "", 1, 2},
    // Qwen3's query and key gains, whole on every tp rank (their gradients summed over tp, at tp4 from
    // replicated kv heads too), in ZeRO-3 parts, under a pipeline and all-to-all cp
    {4, 2, 1, 2, "qwen3-tiny", 1, "1f1b", 1, 0, "", 2}, {4, 1, 0, 2, "qwen3-tiny", 1, "1f1b", 1, 0, "", 4},
    {4, 2, 3, 2, "qwen3-tiny", 1, "1f1b", 1, 0, "--no-sequence-parallel", 2},
    {4, 2, 0, 2, "qwen3-tiny", 2, "1f1b", 1, 0, "--recompute full"},
    {4, 2, 1, 2, "qwen3-tiny", 1, "1f1b", 1, 0, "--cp-comm all-to-all", 1, 1, 2},
    // Qwen3-MoE: over ep2, and tp2 with ZeRO-2
    {4, 4, 1, 2, "qwen3-moe-tiny", 1, "1f1b", 1, 0, "", 1, 2}, {4, 2, 2, 2, "qwen3-moe-tiny", 1, "1f1b", 1, 0, "", 2},
    // Qwen2's q/k/v biases sliced over tp, and at tp4 replicated with their kv heads (summed over tp)
    {4, 2, 1, 2, "qwen2-tiny", 1, "1f1b", 1, 0, "", 2}, {4, 1, 0, 2, "qwen2-tiny", 1, "1f1b", 1, 0, "", 4},
    // Phi-4-mini's RoPE (6 of 8 channels, LongRoPE's long factors at 16 positions): tp2 cuts whole heads,
    // ring cp rotates each chunk at its true positions, pp2 splits the blocks
    {4, 2, 1, 2, "phi3-tiny", 1, "1f1b", 1, 0, "", 2}, {4, 2, 1, 2, "phi3-tiny", 1, "1f1b", 1, 0, "", 1, 1, 2},
    {4, 2, 0, 2, "phi3-tiny", 2, "1f1b"},
    // OLMo 2: norms after the sublayers, q/k norms over all heads (their statistics summed over tp, at
    // tp4 from replicated kv heads; the key gains' gradients summed between replicas), in ZeRO-3 parts
    // over tp, under zero-bubble's deferred weight gradients, ring cp with recomputation
    {4, 2, 1, 2, "olmo2-tiny", 1, "1f1b", 1, 0, "", 2},
    {4, 1, 0, 2, "olmo2-tiny", 1, "1f1b", 1, 0, "--recompute full", 4},
    {4, 2, 3, 2, "olmo2-tiny", 1, "1f1b", 1, 0, "--no-sequence-parallel", 2},
    {4, 2, 0, 2, "olmo2-tiny", 2, "zero-bubble"},
    {4, 2, 1, 2, "olmo2-tiny", 1, "1f1b", 1, 0, "--recompute selective", 1, 1, 2},
    // OLMoE: those query/key norms in pre-norm blocks over experts (not renormalised): tp2 with ep2, tp4
    // with its kv heads replicated, ep4 with ZeRO-3
    {4, 2, 1, 2, "olmoe-tiny", 1, "1f1b", 1, 0, "", 2, 2}, {4, 1, 0, 2, "olmoe-tiny", 1, "1f1b", 1, 0, "", 4},
    {4, 4, 3, 2, "olmoe-tiny", 1, "1f1b", 1, 0, "", 1, 4},
    // SmolLM3: its second block without RoPE on the second pipeline stage, over tp2 and under ring cp2
    // (each chunk's positions unturned there)
    {4, 2, 0, 2, "smollm3-tiny", 2, "1f1b"}, {4, 2, 1, 2, "smollm3-tiny", 1, "1f1b", 1, 0, "", 2},
    {4, 2, 1, 2, "smollm3-tiny", 1, "1f1b", 1, 0, "--recompute full", 1, 1, 2},
    // Sliding windows of 8 over sequences of 16 (the first visible keys from true positions): tp2, ring
    // and all-to-all cp2 (the window crossing the ranks' chunks), pp2
    {4, 2, 1, 2, "mistral-tiny", 1, "1f1b", 1, 0, "", 2}, {4, 2, 1, 2, "mistral-tiny", 1, "1f1b", 1, 0, "", 1, 1, 2},
    {4, 2, 0, 2, "mistral-tiny", 1, "1f1b", 1, 0, "--cp-comm all-to-all", 1, 1, 2},
    {4, 2, 0, 2, "mistral-tiny", 2, "1f1b"},
    // Gemma 3: sliding blocks (8 of 16 positions, their own RoPE base) and a global one, norms on both
    // sides of each sublayer, scaled embeddings: tp2, ring cp2 with recomputation, pp2, ZeRO-3
    {4, 2, 1, 2, "gemma3-tiny", 1, "1f1b", 1, 0, "", 2},
    {4, 2, 1, 2, "gemma3-tiny", 1, "1f1b", 1, 0, "--recompute selective", 1, 1, 2},
    {4, 2, 0, 2, "gemma3-tiny", 2, "1f1b"}, {4, 4, 3, 2, "gemma3-tiny"},
    // Gemma 2: soft-capped scores and logits (caps of 0.05 and 1 that bend them), every other block sliding:
    // tp2 (the capped logits' gradient on each vocabulary shard), ring cp2, tp2 over pp2
    {4, 2, 1, 2, "gemma2-tiny", 1, "1f1b", 1, 0, "", 2}, {4, 2, 1, 2, "gemma2-tiny", 1, "1f1b", 1, 0, "", 1, 1, 2},
    {4, 1, 0, 2, "gemma2-tiny", 2, "1f1b", 1, 0, "", 2},
    // Qwen2-MoE: a shared expert gated a token (the gate's gradient summed over tp from partial outputs):
    // tp2, ep2 over dp4, zero-bubble pp2 (the gate's weight gradient deferred)
    {4, 2, 1, 2, "qwen2-moe-tiny", 1, "1f1b", 1, 0, "", 2}, {4, 4, 1, 2, "qwen2-moe-tiny", 1, "1f1b", 1, 0, "", 1, 2},
    {2, 1, 0, 2, "qwen2-moe-tiny", 2, "zero-bubble"},
    // GLM-4.5: q/k/v biases, per-head q/k norms and a head's first half rotating over DeepSeek-V3's routing
    // (a dense first block, a shared expert, routed outputs scaled): tp2, ep2 over dp4, ring cp2
    {4, 2, 1, 2, "glm4.5-tiny", 1, "1f1b", 1, 0, "", 2}, {4, 4, 1, 2, "glm4.5-tiny", 1, "1f1b", 1, 0, "", 1, 2},
    {4, 2, 1, 2, "glm4.5-tiny", 1, "1f1b", 1, 0, "", 1, 1, 2},
    // StarCoder2: LayerNorms and biases on every projection (o_proj's and the MLP's output added once over
    // tp), a GELU MLP, a window of 8: tp2, ring cp2, pp2, ZeRO-3
    {4, 2, 1, 2, "starcoder2-tiny", 1, "1f1b", 1, 0, "", 2},
    {4, 2, 1, 2, "starcoder2-tiny", 1, "1f1b", 1, 0, "", 1, 1, 2},
    {4, 2, 0, 2, "starcoder2-tiny", 2, "1f1b"}, {4, 4, 3, 2, "starcoder2-tiny"},
    // Pythia (GPT-NeoX): attention and MLP side by side on the block's input (both outputs summed over tp),
    // the exact GELU, a quarter of each head rotating: tp2, ring cp2 with recomputation, zero-bubble pp2
    // (the MLP's weight gradients deferred), ZeRO-3
    {4, 2, 1, 2, "pythia-tiny", 1, "1f1b", 1, 0, "", 2},
    {4, 2, 1, 2, "pythia-tiny", 1, "1f1b", 1, 0, "--recompute selective", 1, 1, 2},
    {4, 2, 0, 2, "pythia-tiny", 2, "zero-bubble"}, {4, 4, 3, 2, "pythia-tiny"},
    // Cohere: one bias-less LayerNorm feeding attention and MLP side by side, scaled logits (their gradient on each
    // vocabulary shard under tp): tp2 with ZeRO-2, ring cp2, pp2, ZeRO-3 over tp2
    {4, 2, 2, 2, "cohere-tiny", 1, "1f1b", 1, 0, "", 2}, {4, 2, 1, 2, "cohere-tiny", 1, "1f1b", 1, 0, "", 1, 1, 2},
    {4, 2, 0, 2, "cohere-tiny", 2, "1f1b"}, {4, 2, 3, 2, "cohere-tiny", 1, "1f1b", 1, 0, "", 2},
    // Cohere2: blocks sliding over 8 of 16 positions with RoPE around a global one without: tp2, ring and
    // all-to-all cp2 (the window and the unturned block across the ranks' chunks), pp2
    {4, 2, 1, 2, "cohere2-tiny", 1, "1f1b", 1, 0, "", 2}, {4, 2, 1, 2, "cohere2-tiny", 1, "1f1b", 1, 0, "", 1, 1, 2},
    {4, 2, 0, 2, "cohere2-tiny", 1, "1f1b", 1, 0, "--cp-comm all-to-all", 1, 1, 2},
    {4, 2, 0, 2, "cohere2-tiny", 2, "1f1b"},
    // Phi-2: Cohere's parallel block with biases everywhere and the head's bias (sliced with its vocabulary rows
    // over tp, in the head's ZeRO-3 part), a head's first half rotating: tp2, ring cp2, zero-bubble pp2, ZeRO-3
    {4, 2, 1, 2, "phi2-tiny", 1, "1f1b", 1, 0, "", 2}, {4, 2, 1, 2, "phi2-tiny", 1, "1f1b", 1, 0, "", 1, 1, 2},
    {4, 2, 0, 2, "phi2-tiny", 2, "zero-bubble"}, {4, 2, 3, 2, "phi2-tiny", 1, "1f1b", 1, 0, "", 2},
    // pipeline: {ranks, dp, zero, micro, model, pp, schedule, virtual stages, layers, extra}
    {2, 1, 0, 2, "gpt2-tiny", 2, "gpipe"}, {2, 1, 0, 2, "gpt2-tiny", 2, "1f1b"},
    {2, 1, 0, 2, "gpt2-tiny", 2, "zero-bubble"}, {2, 1, 0, 1, "gpt2-tiny", 2, "interleaved", 2, 4},
    {4, 1, 0, 2, "gpt2-tiny", 4, "gpipe", 1, 4}, {4, 1, 0, 2, "gpt2-tiny", 4, "1f1b", 1, 4},
    {4, 1, 0, 2, "gpt2-tiny", 4, "zero-bubble", 1, 4}, {4, 1, 0, 2, "gpt2-tiny", 4, "interleaved", 2, 8},
    {4, 2, 1, 2, "gpt2-tiny", 2, "1f1b", 1, 0, "--recompute full"}, {4, 2, 2, 1, "gpt2-tiny", 2, "interleaved", 2, 4},
    {2, 1, 0, 2, "llama-tiny", 2, "1f1b"}, {4, 1, 0, 2, "llama-tiny", 4, "interleaved", 2, 8},
    {4, 2, 1, 1, "llama-tiny", 2, "zero-bubble", 1, 4},
    {2, 1, 0, 2, "mixtral-tiny", 2, "1f1b"}, {4, 1, 0, 2, "mixtral-tiny", 4, "gpipe", 1, 4},
    {4, 2, 1, 2, "mixtral-tiny", 2, "interleaved", 2, 4}, {2, 1, 0, 2, "deepseek-moe-tiny", 2, "zero-bubble", 1, 4},
    // tensor parallel: {..., tp}, alone, with dp and ZeRO, with pipelines, and all three on 8 ranks
    {2, 1, 0, 8, "gpt2-tiny", 1, "1f1b", 1, 0, "", 2}, {4, 1, 0, 8, "gpt2-tiny", 1, "1f1b", 1, 0, "--heads 4", 4},
    {4, 2, 1, 4, "gpt2-tiny", 1, "1f1b", 1, 0, "--recompute full", 2},
    {4, 1, 0, 2, "gpt2-tiny", 2, "zero-bubble", 1, 0, "", 2},
    {8, 2, 2, 1, "gpt2-tiny", 2, "interleaved", 2, 4, "", 2},
    {2, 1, 0, 8, "llama-tiny", 1, "1f1b", 1, 0, "", 2}, {4, 2, 0, 4, "llama-tiny", 1, "1f1b", 1, 0, "", 2},
    {2, 1, 0, 2, "mixtral-tiny", 1, "1f1b", 1, 0, "", 2}, {4, 1, 0, 2, "mixtral-tiny", 2, "1f1b", 1, 0, "", 2},
    {2, 1, 0, 2, "deepseek-moe-tiny", 1, "1f1b", 1, 0, "", 2},
    // tp above the kv heads (llama-tiny and mixtral-tiny: 4 heads, 2 kv heads): each kv head on 2 ranks
    {8, 2, 1, 4, "llama-tiny", 1, "1f1b", 1, 0, "", 4}, {8, 2, 1, 2, "mixtral-tiny", 1, "1f1b", 1, 0, "", 4},
    // the same without sequence parallelism (on by default with tp)
    {2, 1, 0, 8, "gpt2-tiny", 1, "1f1b", 1, 0, "--no-sequence-parallel", 2},
    {4, 2, 1, 4, "llama-tiny", 1, "1f1b", 1, 0, "--no-sequence-parallel", 2},
    {4, 1, 0, 2, "mixtral-tiny", 2, "zero-bubble", 1, 0, "--no-sequence-parallel", 2},
    {2, 1, 0, 2, "deepseek-moe-tiny", 1, "1f1b", 1, 0, "--no-sequence-parallel", 2},
    // expert parallel: {..., tp, ep}; mixtral-tiny has 4 experts, deepseek-moe-tiny 8 and a shared one
    {4, 4, 0, 2, "mixtral-tiny", 1, "1f1b", 1, 0, "", 1, 2}, {4, 4, 0, 1, "mixtral-tiny", 1, "1f1b", 1, 0, "", 1, 4},
    {2, 2, 1, 2, "mixtral-tiny", 1, "1f1b", 1, 0, "", 1, 2}, {4, 4, 2, 1, "deepseek-moe-tiny", 1, "1f1b", 1, 0, "", 1, 4},
    {4, 2, 0, 2, "mixtral-tiny", 2, "1f1b", 1, 0, "", 1, 2},
    {4, 4, 1, 2, "mixtral-tiny", 1, "1f1b", 1, 0, "--recompute full --moe-capacity-factor 1.0", 1, 2},
    {4, 2, 0, 2, "mixtral-tiny", 2, "zero-bubble", 1, 0, "--recompute selective", 1, 2},
    {8, 4, 1, 2, "mixtral-tiny", 1, "1f1b", 1, 0, "", 2, 2},
    // context parallel: {..., tp, ep, cp}; --seq-len 16 is 2·cp chunks of 4 (cp 2) or 2 (cp 4)
    {2, 1, 0, 8, "gpt2-tiny", 1, "1f1b", 1, 0, "", 1, 1, 2}, {4, 1, 0, 8, "gpt2-tiny", 1, "1f1b", 1, 0, "", 1, 1, 4},
    {2, 1, 0, 4, "llama-tiny", 1, "1f1b", 1, 0, "", 1, 1, 2}, {4, 1, 0, 8, "llama-tiny", 1, "1f1b", 1, 0, "", 1, 1, 4},
    {4, 2, 1, 2, "gpt2-tiny", 1, "1f1b", 1, 0, "--recompute selective", 1, 1, 2},
    {4, 2, 2, 2, "llama-tiny", 1, "1f1b", 1, 0, "--recompute full", 1, 1, 2},
    {4, 1, 0, 4, "gpt2-tiny", 1, "1f1b", 1, 0, "", 2, 1, 2}, {4, 1, 0, 4, "llama-tiny", 1, "1f1b", 1, 0, "", 2, 1, 2},
    {8, 2, 1, 2, "llama-tiny", 1, "1f1b", 1, 0, "--no-sequence-parallel", 2, 1, 2},
    {4, 2, 3, 2, "gpt2-tiny", 1, "1f1b", 1, 0, "", 1, 1, 2},
    {4, 1, 0, 2, "gpt2-tiny", 2, "1f1b", 1, 0, "", 1, 1, 2}, {4, 1, 0, 1, "llama-tiny", 2, "interleaved", 2, 4, "", 1, 1, 2},
    {8, 1, 0, 2, "llama-tiny", 2, "zero-bubble", 1, 0, "", 2, 1, 2},
    // all-to-all attention under cp (each rank the whole sequence of 1/cp of the heads): alone, over
    // dp with recomputation, over tp (a tp rank's heads shared out), under a pipeline with MoE blocks,
    // over dp·cp ZeRO-3 shards kept gathered
    {2, 1, 0, 8, "gpt2-tiny", 1, "1f1b", 1, 0, "--cp-comm all-to-all", 1, 1, 2},
    {4, 2, 1, 2, "llama-tiny", 1, "1f1b", 1, 0, "--cp-comm all-to-all --recompute full", 1, 1, 2},
    {4, 1, 0, 4, "gpt2-tiny", 1, "1f1b", 1, 0, "--heads 4 --cp-comm all-to-all", 2, 1, 2},
    {4, 1, 0, 2, "mixtral-tiny", 2, "1f1b", 1, 0, "--cp-comm all-to-all", 1, 1, 2},
    {4, 2, 3, 1, "llama-tiny", 1, "1f1b", 1, 0, "--cp-comm all-to-all --no-reshard-after-forward", 1, 1, 2},
    // MoE under cp: the load-balancing loss over the whole sequences; with ep, tp and recomputation
    {2, 1, 0, 2, "mixtral-tiny", 1, "1f1b", 1, 0, "", 1, 1, 2}, {4, 1, 0, 2, "deepseek-moe-tiny", 1, "1f1b", 1, 0, "", 1, 1, 4},
    {4, 2, 1, 2, "mixtral-tiny", 1, "1f1b", 1, 0, "--recompute full --moe-z-coef 0.001", 1, 2, 2},
    {8, 2, 0, 2, "deepseek-moe-tiny", 1, "1f1b", 1, 0, "", 2, 1, 2}, {4, 1, 3, 4, "llama-tiny", 1, "1f1b", 1, 0, "--recompute full", 1, 1, 4},
    // DeepSeek-V3's latent attention (its latents whole on every tp rank, their gradients summed over
    // tp): tp2 with sequence parallelism and ZeRO-1, tp4 without, ring and all-to-all cp with
    // recomputation, zero-bubble's deferred weight gradients over pp2, ep2 with ZeRO-3
    {4, 2, 1, 2, "deepseek-v3-tiny", 1, "1f1b", 1, 0, "", 2},
    {4, 1, 0, 2, "deepseek-v3-tiny", 1, "1f1b", 1, 0, "--no-sequence-parallel", 4},
    {2, 1, 0, 2, "deepseek-v3-tiny", 1, "1f1b", 1, 0, "--recompute selective", 1, 1, 2},
    {4, 2, 1, 2, "deepseek-v3-tiny", 1, "1f1b", 1, 0, "--cp-comm all-to-all --recompute full", 1, 1, 2},
    {2, 1, 0, 2, "deepseek-v3-tiny", 2, "zero-bubble"},
    {4, 4, 3, 2, "deepseek-v3-tiny", 1, "1f1b", 1, 0, "", 1, 2},
    // DeepSeek-V2: its softmax router's weights not renormalised but scaled, over tp2 and ep2
    {4, 2, 1, 2, "deepseek-v2-tiny", 1, "1f1b", 1, 0, "", 2}, {4, 4, 2, 2, "deepseek-v2-tiny", 1, "1f1b", 1, 0, "", 1, 2},
    // fp8 linear layers: the scales (from every rank's amaxes) are the same for any layout; over dp
    // with ZeRO, tp with ZeRO-3, tp·pp, zero-bubble's deferred weight gradients, cp with
    // recomputation, ep (the experts' GEMMs, amaxes over every ep rank's experts) and ZeRO-2 with
    // DeepSeek's shared experts
    {2, 2, 1, 2, "gpt2-tiny", 1, "1f1b", 1, 0, "--fp8 hybrid"},
    {4, 2, 3, 2, "llama-tiny", 1, "1f1b", 1, 0, "--fp8 hybrid", 2},
    {4, 1, 0, 2, "gpt2-tiny", 2, "1f1b", 1, 0, "--fp8 hybrid", 2},
    {2, 1, 0, 2, "gpt2-tiny", 2, "zero-bubble", 1, 0, "--fp8 hybrid"},
    {4, 2, 1, 2, "llama-tiny", 1, "1f1b", 1, 0, "--fp8 e4m3 --recompute full", 1, 1, 2},
    {4, 4, 0, 2, "mixtral-tiny", 1, "1f1b", 1, 0, "--fp8 hybrid", 1, 2},
    {4, 4, 2, 1, "deepseek-moe-tiny", 1, "1f1b", 1, 0, "--fp8 hybrid", 1, 4},
    // bf16 moments: each element's rounding bits are keyed on its place in the whole model, so a
    // ZeRO shard, a tp slice (and the norms every tp rank holds), a pipeline stage's tied embedding
    // copy and an ep rank's experts round as one process does
    {2, 2, 1, 2, "gpt2-tiny", 1, "1f1b", 1, 0, "--optimizer-moments bf16"},
    {4, 2, 3, 2, "llama-tiny", 1, "1f1b", 1, 0, "--optimizer-moments bf16", 2},
    {4, 1, 0, 2, "gpt2-tiny", 2, "1f1b", 1, 0, "--optimizer-moments bf16", 2},
    {4, 4, 2, 1, "mixtral-tiny", 1, "1f1b", 1, 0, "--optimizer-moments bf16", 1, 2},
};

class LayoutEquivalence : public ::testing::TestWithParam<Layout> {};

// `flags` without those of a layout that one process refuses (it has no tp group to split
// sequences over, no ZeRO-3 shards to keep gathered, no cp ranks to share attention).
std::string without_layout_flags(const std::string& flags) {
  std::istringstream in(flags);
  std::string flag, kept;
  while (in >> flag) {
    if (flag == "--cp-comm") in >> flag;  // and its value
    else if (flag != "--no-sequence-parallel" && flag != "--no-reshard-after-forward") kept += (kept.empty() ? "" : " ") + flag;
  }
  return kept;
}

}  // namespace

TEST_P(LayoutEquivalence, MatchesOneProcess) {
  // Each case trains its own one-process reference (a few milliseconds), so cases run independently.
  const Layout layout = GetParam();
  const std::filesystem::path dir = testing::scratch_dir();
  const std::string shard = testing::write_random_shard(dir, 8192, 256, 23).string();
  Layout one_process{1, 1, 0, layout.moe() ? layout.micro_batch : 8, layout.model};
  one_process.layers = layout.layers;
  // The same model (--heads) and recomputation; a tp or ZeRO-3 flag means nothing to one process.
  const std::string extra = without_layout_flags(layout.extra);
  one_process.extra = extra.c_str();
  const RunResult ref = train(one_process, dir / "reference", shard);
  const RunResult run = train(layout, dir / layout_name(layout), shard);
  ASSERT_EQ(run.metrics.size(), ref.metrics.size());
  // A MoE run's routing figures are counts summed once over the ranks that route their own tokens:
  // the same as one process's in every layout.
  for (size_t s = 0; s < ref.metrics.size(); ++s)
    for (const char* key : {"loss", "grad_norm", "aux_loss", "expert_load_max", "expert_load_max_over_mean",
                            "dropped_tokens", "dropped_fraction"}) {
      if (!ref.metrics[s].contains(key)) continue;
      const nlohmann::json want = ref.metrics[s][key], got = run.metrics[s][key];
      ASSERT_EQ(got.size(), want.size()) << key;  // a number's is 1
      for (size_t i = 0; i < want.size(); ++i) {
        const double w = (want.is_array() ? want[i] : want).get<double>();
        const double g = (got.is_array() ? got[i] : got).get<double>();
        EXPECT_NEAR(g, w, tolerance(layout.extra, s + 1).relative * std::fabs(w))
            << key << " [" << i << "] at step " << s + 1;
      }
    }
  expect_weights_match(ref.weights, run.weights, tolerance(layout.extra, 0));
}

// Resharding on resume and elastic restarts: two steps under one layout, a checkpoint, two more under
// another (the world size changing with --dp 0 too), against four steps in one process. The
// checkpoint holds full tensors and batch k's samples depend on (seed, k) only, so any layout
// continues the same trajectory from the same token position.
struct Reshard {
  Layout before, after;
  const char* both = "";  // flags of every run of the pair, the reference's too
};

class ReshardOnResume : public ::testing::TestWithParam<Reshard> {};

TEST_P(ReshardOnResume, ContinuesTheOneProcessTrajectory) {
  const Reshard r = GetParam();
  const std::filesystem::path dir = testing::scratch_dir();
  const std::string shard = testing::write_random_shard(dir, 8192, 256, 23).string();
  // A constant schedule, so that the first part's two steps see the rates of a four-step run.
  // A MoE pair keeps one micro-batch size (its auxiliary loss is taken per micro-batch).
  Layout one_process{1, 1, 0, r.before.moe() ? r.before.micro_batch : 8, r.before.model};
  one_process.layers = r.before.layers;
  const std::string both = std::string(" --lr-schedule constant ") + r.both;
  const RunResult ref = train(one_process, dir / "reference", shard, "--steps 4" + both);
  train(r.before, dir / "run", shard, "--steps 2" + both);
  const RunResult run = train(r.after, dir / "run", shard, "--steps 4 --resume" + both);
  ASSERT_EQ(run.metrics.size(), 4u);  // steps 1-2 of the first part, 3-4 of the second
  for (size_t s = 0; s < 4; ++s)
    for (const char* key : {"loss", "grad_norm"}) {
      const double want = ref.metrics[s][key], got = run.metrics[s][key];
      EXPECT_NEAR(got, want, tolerance(both, s + 1).relative * std::fabs(want)) << key << " at step " << s + 1;
    }
  expect_weights_match(ref.weights, run.weights, tolerance(both, 0));
}

void PrintTo(const Reshard& r, std::ostream* os) {
  *os << layout_name(r.before) << "_to_" << layout_name(r.after);
  if (*r.both) *os << "_with";
  for (const char* c = r.both; *c; ++c) *os << (std::isalnum(static_cast<unsigned char>(*c)) ? *c : '_');
}

const Reshard kReshards[] = {
    {{2, 2, 1, 2}, {1, 1, 0, 2}},  // dp2·zero1 -> one process
    {{1, 1, 0, 2}, {4, 4, 2, 1}},  // one process -> dp4·zero2
    {{4, 4, 2, 1}, {2, 2, 1, 2}},  // dp4·zero2 -> dp2·zero1
    {{4, 0, 0, 1}, {2, 0, 0, 2}},  // elastic: 4 ranks -> 2 ranks, --dp 0 takes the world
    {{2, 2, 3, 2}, {1, 1, 0, 2}},  // dp2·zero3 -> one process
    {{1, 1, 0, 2}, {4, 4, 3, 1}},  // one process -> dp4·zero3
    {{4, 2, 3, 2, "gpt2-tiny", 1, "1f1b", 1, 0, "", 2}, {1, 1, 0, 2}},  // dp2·tp2·zero3 -> one process
    {{1, 1, 0, 2}, {4, 2, 3, 1, "gpt2-tiny", 1, "1f1b", 1, 0, "", 2}},  // one process -> dp2·tp2·zero3
    {{4, 2, 3, 2, "gpt2-tiny", 2, "1f1b"}, {2, 2, 1, 2}},               // dp2·pp2·zero3 -> dp2·zero1
    {{4, 4, 3, 2, "mixtral-tiny", 1, "1f1b", 1, 0, "", 1, 2}, {1, 1, 0, 2, "mixtral-tiny"}},  // dp4·ep2·zero3 -> one process
    // dp2·pp2·ep2 (whole weights) -> dp4·ep2·zero3: each rank reads only its experts' shard of them
    {{4, 2, 1, 2, "mixtral-tiny", 2, "1f1b", 1, 0, "", 1, 2}, {4, 4, 3, 2, "mixtral-tiny", 1, "1f1b", 1, 0, "", 1, 2}},
    // dp4·zero1 with sharded weights -> dp2·tp2·zero3
    {{4, 4, 1, 2, "gpt2-tiny", 1, "1f1b", 1, 0, "--checkpoint-weights sharded"},
     {4, 2, 3, 2, "gpt2-tiny", 1, "1f1b", 1, 0, "", 2}},
    {{4, 4, 3, 1, "gpt2-tiny", 1, "1f1b", 1, 0, "--async-checkpoint"}, {2, 2, 1, 2}},  // dp4·zero3, async -> dp2·zero1
    {{2, 1, 0, 2, "gpt2-tiny", 2, "1f1b"}, {1, 1, 0, 2}},  // pp2 -> one process
    {{2, 2, 1, 2}, {4, 2, 1, 1, "gpt2-tiny", 2, "zero-bubble"}},  // dp2·zero1 -> dp2·pp2·zero1
    {{2, 1, 0, 2, "gpt2-tiny", 1, "1f1b", 1, 0, "", 2}, {1, 1, 0, 2}},           // tp2 -> one process
    {{1, 1, 0, 2}, {4, 2, 1, 2, "gpt2-tiny", 1, "1f1b", 1, 0, "", 2}},           // one process -> dp2·tp2·zero1
    {{4, 1, 0, 2, "gpt2-tiny", 2, "1f1b", 1, 0, "", 2}, {4, 2, 2, 2, "gpt2-tiny", 1, "1f1b", 1, 0, "", 2}},  // tp2·pp2 -> dp2·tp2·zero2
    {{4, 1, 0, 2, "llama-tiny", 1, "1f1b", 1, 0, "", 4}, {2, 1, 0, 2, "llama-tiny", 1, "1f1b", 1, 0, "", 2}},  // tp4 (kv replicated) -> tp2
    // dp2·tp2·pp2 with ZeRO 1 and asynchronous checkpoints -> tp2·pp2 zero-bubble
    {{8, 2, 1, 2, "llama-tiny", 2, "1f1b", 1, 4, "--async-checkpoint", 2},
     {4, 1, 0, 2, "llama-tiny", 2, "zero-bubble", 1, 4, "", 2}},
    {{4, 4, 0, 2, "mixtral-tiny", 1, "1f1b", 1, 0, "", 1, 2}, {1, 1, 0, 2, "mixtral-tiny"}},  // dp4·ep2 -> one process
    // dp2·zero1 -> dp4·ep4·zero2 (an expert per rank), and dp4·ep2·zero1 under a pipeline -> dp2·ep2·tp2
    {{2, 2, 1, 2, "deepseek-moe-tiny"}, {4, 4, 2, 2, "deepseek-moe-tiny", 1, "1f1b", 1, 0, "", 1, 4}},
    {{8, 4, 1, 2, "mixtral-tiny", 2, "1f1b", 1, 0, "", 1, 2}, {4, 2, 0, 2, "mixtral-tiny", 1, "1f1b", 1, 0, "", 2, 2}},
    // dp2·cp2·zero1 -> one process, and one process -> tp2·cp2
    {{4, 2, 1, 2, "gpt2-tiny", 1, "1f1b", 1, 0, "", 1, 1, 2}, {1, 1, 0, 2}},
    {{1, 1, 0, 2, "llama-tiny"}, {4, 1, 0, 4, "llama-tiny", 1, "1f1b", 1, 0, "", 2, 1, 2}},
    // fp8: the amax history continues in another layout (dp2·tp2 -> pp2)
    {{4, 2, 1, 2, "gpt2-tiny", 1, "1f1b", 1, 0, "", 2}, {2, 1, 0, 2, "gpt2-tiny", 2, "1f1b"}, "--fp8 hybrid"},
    // PowerSGD: the compression depends on the ranks only through sums, so each group's error sum
    // and Q continue it under any dp degree (dp2 -> dp4·zero1; dp4·ep2, expert groups of 2 -> one
    // process; dp2·pp2 of an untied model -> one process)
    {{2, 2, 0, 2}, {4, 4, 1, 1}, "--powersgd-rank 2"},
    {{4, 2, 0, 2, "llama-tiny", 2, "1f1b"}, {1, 1, 0, 2, "llama-tiny"}, "--powersgd-rank 2"},
    {{4, 4, 0, 2, "mixtral-tiny", 1, "1f1b", 1, 0, "", 1, 2}, {1, 1, 0, 2, "mixtral-tiny"}, "--powersgd-rank 2"},
    // bf16 moments: the checkpoint's fp32 moments round back to the same bits in another layout
    // (dp2·zero1 -> dp2·tp2·zero3)
    {{2, 2, 1, 2}, {4, 2, 3, 2, "gpt2-tiny", 1, "1f1b", 1, 0, "", 2}, "--optimizer-moments bf16"},
};

// Validation where every forward is collective with other dp ranks (expert parallelism, ZeRO-3): 5
// batches over 4 dp ranks, so some ranks run a batch more than they count. The validation loss is
// the one process's, and no rank waits on a forward another never runs.
TEST(ValidationOfCollectiveForwards, MatchesOneProcess) {
  const std::filesystem::path dir = testing::scratch_dir();
  const std::string shard = testing::write_random_shard(dir, 8192, 256, 23).string();
  const std::string extra = "--steps 2 --eval-every 2 --eval-batches 5 --val-data " + shard;
  auto val_loss = [](const RunResult& r) {
    for (const nlohmann::json& line : r.metrics)
      if (line.contains("val_loss")) return line["val_loss"].get<double>();
    ADD_FAILURE() << "no validation loss";
    return 0.0;
  };
  const double want = val_loss(train(Layout{1, 1, 0, 2, "mixtral-tiny"}, dir / "reference", shard, extra));
  const Layout layouts[] = {{4, 4, 0, 2, "mixtral-tiny", 1, "1f1b", 1, 0, "", 1, 2},
                            {4, 2, 0, 2, "mixtral-tiny", 2, "1f1b", 1, 0, "", 1, 2},
                            {4, 4, 3, 2, "mixtral-tiny"}, {4, 4, 3, 2, "mixtral-tiny", 1, "1f1b", 1, 0, "", 1, 2}};
  for (const Layout& l : layouts)
    EXPECT_NEAR(val_loss(train(l, dir / layout_name(l), shard, extra)), want, 1e-5 * want) << layout_name(l);
}

namespace {

// Layout l's run has the reference's metrics lines: the losses, grad norms and validation losses.
void expect_same_metrics(const RunResult& run, const RunResult& ref, const Layout& l) {
  ASSERT_EQ(run.metrics.size(), ref.metrics.size()) << layout_name(l);
  for (size_t s = 0; s < ref.metrics.size(); ++s)
    for (const char* key : {"loss", "grad_norm", "val_loss"}) {
      if (!ref.metrics[s].contains(key)) continue;
      const double want = ref.metrics[s][key], got = run.metrics[s][key];
      EXPECT_NEAR(got, want, 1e-5 * std::fabs(want)) << layout_name(l) << " " << key << " at line " << s + 1;
    }
}

}  // namespace

// Loss masks (supervised fine-tuning): every rank weighs its targets by the global batch's count,
// so runs whose ranks and micro-batches hold unequal numbers of targets match one process, in
// training and in validation (whose batches are a micro-batch, 2 sequences in every run): dp with
// ZeRO-1, a pipeline, tensor parallelism (vocabulary-parallel cross-entropy), context parallelism.
TEST(LossMasks, MatchOneProcess) {
  const std::filesystem::path dir = testing::scratch_dir();
  const std::filesystem::path shard = testing::write_random_shard(dir, 8192, 256, 23);
  testing::write_random_loss_mask(shard, 8192, 9);
  const std::string extra = "--steps 3 --eval-every 3 --eval-batches 4 --val-data " + shard.string();
  const RunResult ref = train(Layout{1, 1, 0, 2}, dir / "reference", shard.string(), extra);
  const Layout layouts[] = {{2, 2, 1, 2},
                            {4, 2, 0, 2, "gpt2-tiny", 2, "1f1b"},
                            {2, 1, 0, 2, "gpt2-tiny", 1, "1f1b", 1, 0, "", 2},
                            {2, 1, 0, 2, "gpt2-tiny", 1, "1f1b", 1, 0, "", 1, 1, 2}};
  for (const Layout& l : layouts) expect_same_metrics(train(l, dir / layout_name(l), shard.string(), extra), ref, l);
}

// Document masks (packed sequences): every rank takes its micro-batch's document starts from the whole
// sequences' tokens (a cp rank before taking its share of them, every pipeline stage for its own
// attention), so training and validation match one process: dp with ZeRO-1, a pipeline, tp, cp with
// recomputation, and Llama's RoPE under cp4, tp2·pp2 and all-to-all cp2 (whose ranks attend over the
// whole sequences within the all-gathered document starts), and the same under a sliding window of 8
// (each token's first key the later of its document's start and its window's) over cp4 and all-to-all cp2.
TEST(DocumentMasks, MatchOneProcess) {
  const std::filesystem::path dir = testing::scratch_dir();
  testing::write_text(dir / "corpus.txt", "a packed window holds several documents, each its own\n");
  const std::string tokenizer = (dir / "tok.json").string();
  const testing::CommandResult made = testing::run_command(std::string(TESSERA_EXE) + " tokenizer-train --in " +
                                                           (dir / "corpus.txt").string() + " --vocab-size 260 --out " + tokenizer);
  ASSERT_EQ(made.exit_code, 0) << made.output;
  // Random tokens, a document starting at about one position in six (some windows hold none).
  const uint32_t start = uint32_t(Tokenizer::load(tokenizer).document_start_token());
  std::vector<uint32_t> tokens(8192);
  Rng rng(29);
  for (uint32_t& t : tokens) t = rng.uniform() < 1.0 / 6 ? start : uint32_t(rng.below(256));
  const std::filesystem::path shard = dir / "train_000000.bin";
  write_token_shard(shard, tokens, 2);
  const std::string extra = "--steps 3 --eval-every 3 --eval-batches 4 --attention-mask document --tokenizer " +
                            tokenizer + " --val-data " + shard.string();
  for (const char* model : {"gpt2-tiny", "llama-tiny", "mistral-tiny"}) {
    const RunResult ref = train(Layout{1, 1, 0, 2, model}, dir / (std::string(model) + "_reference"), shard.string(), extra);
    const RunResult causal = train(Layout{1, 1, 0, 2, model}, dir / (std::string(model) + "_causal"), shard.string(),
                                   "--steps 3 --tokenizer " + tokenizer);
    EXPECT_GT(std::fabs(causal.metrics[0]["loss"].get<double>() - ref.metrics[0]["loss"].get<double>()), 1e-4)
        << "the mask changes the first step's loss";
    const std::vector<Layout> layouts =
        std::string(model) == "gpt2-tiny"
            ? std::vector<Layout>{{2, 2, 1, 2},
                                  {4, 2, 0, 2, model, 2, "1f1b"},
                                  {2, 1, 0, 2, model, 1, "1f1b", 1, 0, "", 2},
                                  {4, 2, 1, 2, model, 1, "1f1b", 1, 0, "--recompute full", 1, 1, 2}}
        : std::string(model) == "llama-tiny"
            ? std::vector<Layout>{{4, 1, 0, 2, model, 1, "1f1b", 1, 0, "", 1, 1, 4},
                                  {4, 1, 0, 2, model, 2, "1f1b", 1, 0, "", 2},
                                  {2, 1, 0, 2, model, 1, "1f1b", 1, 0, "--cp-comm all-to-all", 1, 1, 2}}
            : std::vector<Layout>{{4, 1, 0, 2, model, 1, "1f1b", 1, 0, "", 1, 1, 4},
                                  {2, 1, 0, 2, model, 1, "1f1b", 1, 0, "--cp-comm all-to-all", 1, 1, 2}};
    for (const Layout& l : layouts) expect_same_metrics(train(l, dir / layout_name(l), shard.string(), extra), ref, l);
  }
}

INSTANTIATE_TEST_SUITE_P(Pairs, ReshardOnResume, ::testing::ValuesIn(kReshards), [](const auto& info) {
  std::ostringstream s;
  PrintTo(info.param, &s);
  return s.str();
});

INSTANTIATE_TEST_SUITE_P(Table, LayoutEquivalence, ::testing::ValuesIn(kLayouts),
                         [](const ::testing::TestParamInfo<Layout>& info) { return layout_name(info.param); });

}  // namespace tessera
