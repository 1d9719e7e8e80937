// The FLOPs per token behind tokens/s -> MFU, pinned to numbers worked out by hand from the published
// shapes (train/train_bench.h states the convention: llm.c's 6·N + 6·L·C·T, N without an untied input
// embedding table, a MoE model's active parameters only). And the figures a run reports from them:
// metrics.jsonl's tflops_per_rank and mfu against its tokens_per_s, bench train's against its own.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "nn/model_presets.h"
#include "support/test_support.h"
#include "train/train_bench.h"
#include "train/train_fixtures.h"
#include "train/trainer.h"

namespace tessera {
namespace {

// GPT-2 124M (tied): llm.c's num_parameters with the vocabulary padded to 50,304:
//   wte 50304·768 = 38,633,472; wpe 1024·768 = 786,432; final LayerNorm 1,536;
//   a block: ln 2·1536, qkv 768·2304 + 2304, proj 768·768 + 768, fc 768·3072 + 3072, fcproj 3072·768 + 768
//            = 7,087,872, times 12 = 85,054,464.
// N = 124,475,904; at T = 1024: 6·N = 746,855,424 and 6·12·768·1024 = 56,623,104.
TEST(ModelFlops, Gpt2CountsEveryParameterAsLlmCDoes) {
  const ModelConfig gpt2 = model_preset("gpt2-124m");
  EXPECT_EQ(gpt2.num_parameters(), 124'475'904);
  EXPECT_EQ(flops_parameters(gpt2), 124'475'904);
  EXPECT_DOUBLE_EQ(model_flops_per_token(gpt2, 1024), 803'478'528.0);
  EXPECT_DOUBLE_EQ(model_flops_per_token(gpt2, 512), 746'855'424.0 + 28'311'552.0);
}

// Llama 3.1 8B (untied; 32 query heads of 128, 8 kv heads; SwiGLU of 14,336; vocabulary 128,256 = 1002·128):
//   a block: 2 RMSNorms 2·4096; qkv (32 + 2·8)·128·4096 = 25,165,824; o 4096·4096 = 16,777,216;
//            gate and up 2·14336·4096 = 117,440,512; down 58,720,256; = 218,112,000, times 32.
//   embedding and head 128256·4096 = 525,336,576 each; final norm 4096. In all 8,030,261,248.
// N leaves the embedding (a lookup) out: 7,504,924,672. At T = 8192: 6·N = 45,029,548,032 and
// 6·32·4096·8192 = 6,442,450,944.
TEST(ModelFlops, LlamaLeavesTheUntiedEmbeddingOut) {
  const ModelConfig llama = model_preset("llama3.1-8b");
  EXPECT_EQ(llama.num_parameters(), 8'030'261'248);
  EXPECT_EQ(flops_parameters(llama), 7'504'924'672);
  EXPECT_DOUBLE_EQ(model_flops_per_token(llama, 8192), 51'471'998'976.0);
  // Tied (Llama 3.2 1B): the one table is the head, counted once. 16 blocks of 2·2048 + (32 + 16)·64·2048
  // + 2048·2048 + 3·8192·2048 = 60,821,504; 128256·2048 = 262,668,288; final norm 2048.
  const ModelConfig tied = model_preset("llama3.2-1b");
  EXPECT_EQ(tied.num_parameters(), 16 * 60'821'504LL + 262'668'288 + 2048);
  EXPECT_EQ(flops_parameters(tied), tied.num_parameters());
}

// Qwen2.5 0.5B (tied; 14 query heads of 64, 2 kv heads, SwiGLU of 4,864, biases on q, k and v alone,
// vocabulary 151,936 = 1187·128): a block 2·896 + 1152·896 + 1152 + 896·896 + 3·4864·896 = 14,912,384,
// times 24; the table 151936·896 = 136,134,656 once; final norm 896. In all 494,032,768.
// At T = 4096: 6·N = 2,964,196,608 and 6·24·896·4096 = 528,482,304.
TEST(ModelFlops, Qwen2CountsItsQkvBiases) {
  const ModelConfig qwen = model_preset("qwen2.5-0.5b");
  EXPECT_EQ(qwen.num_parameters(), 494'032'768);
  EXPECT_EQ(flops_parameters(qwen), 494'032'768);
  EXPECT_DOUBLE_EQ(model_flops_per_token(qwen, 4096), 3'492'678'912.0);
}

// The vocabulary is padded to a multiple of 128, and the padded rows are counted (llm.c's Vp):
// gpt2-124m at --vocab-size 50000 pads to 50,048 rows, 256 fewer than 50,304.
TEST(ModelFlops, PaddedVocabularyRowsCount) {
  ModelConfig gpt2 = model_preset("gpt2-124m");
  gpt2.vocab_size = 50000;
  EXPECT_EQ(flops_parameters(gpt2), 124'475'904 - 256 * 768);
}

// Mixtral 8x7B: 8 experts of SwiGLU 14,336, top 2, untied vocabulary of 32,000.
//   a block: qkv 25,165,824; o 16,777,216; 2 RMSNorms 8,192; router 8·4096 = 32,768;
//            an expert 3·14336·4096 = 176,160,768. All 8 experts: 1,451,270,144 a block.
//   In all 32·1,451,270,144 + 2·32000·4096 + 4096 = 46,702,792,704 (the published 46.7B).
// N: each block with its 2 routed experts, 394,305,536, times 32, and the head 131,072,000 and final
// norm 4096: 12,748,853,248. At T = 4096: 6·N = 76,493,119,488 and 6·32·4096·4096 = 3,221,225,472.
TEST(ModelFlops, MixtralCountsTheTopKExpertsAndTheRouter) {
  const ModelConfig mixtral = model_preset("mixtral-8x7b");
  EXPECT_EQ(mixtral.num_parameters(), 46'702'792'704);
  EXPECT_EQ(flops_parameters(mixtral), 12'748'853'248);
  EXPECT_DOUBLE_EQ(model_flops_per_token(mixtral, 4096), 79'714'344'960.0);
}

// DeepSeek-style (deepseek-moe-tiny: C 32, 4 heads of 8, SwiGLU 64, 8 experts of 16, top 2, one shared
// expert, the first block dense, a sigmoid router with its bias, untied vocabulary of 256):
//   block 0 (dense): norms 64, qkv 12·8·32 = 3072, o 1024, gate/up 4096, down 2048 = 10,304;
//   block 1 (MoE), active: norms 64, qkv 3072, o 1024, router 256 + bias 8, 2 experts 2·3·16·32 = 3072,
//   the shared expert 3·16·32 = 1536 = 9,032 (all 8 experts: 18,248);
//   head 8192, final norm 32. N = 27,560; at T = 64: 6·N = 165,360, 6·2·32·64 = 24,576.
TEST(ModelFlops, DeepSeekCountsSharedExpertsAndTheDenseBlock) {
  const ModelConfig deepseek = model_preset("deepseek-moe-tiny");
  EXPECT_EQ(deepseek.num_parameters(), 10'304 + 18'248 + 2 * 8192 + 32);
  EXPECT_EQ(flops_parameters(deepseek), 27'560);
  EXPECT_DOUBLE_EQ(model_flops_per_token(deepseek, 64), 189'936.0);
}

// DeepSeek-V3 (deepseek-v3-tiny: C 32, 3 blocks, 4 heads; latent attention with a query latent of 12, a
// kv latent of 16, q/k heads of 8 + 4 (the RoPE tail), values of 6; the MoE of deepseek-moe-tiny):
//   attention: q_a 12·32 = 384, its norm 12, q_b 48·12 = 576, kv_a 20·32 = 640, its norm 16,
//   kv_b 4·14·16 = 896, o 32·24 = 768 = 3,292; with the block's norms 3,356;
//   block 0 (dense): 3,356 + 6,144 = 9,500; blocks 1, 2 (MoE): 3,356 + router 264 + the shared expert
//   1,536 + experts 3,072 active (12,288 all) = 8,228 active (17,444 all);
//   N = 9,500 + 2·8,228 + head 8,192 + final norm 32 = 34,180; at T = 64: 6·N = 205,080, and the
//   attention's scores over q/k heads of 12 with sums over values of 6: 3·3·(48 + 24)·64 = 41,472.
TEST(ModelFlops, LatentAttentionCountsItsProjectionsAndNarrowValues) {
  const ModelConfig deepseek = model_preset("deepseek-v3-tiny");
  EXPECT_EQ(deepseek.num_parameters(), 9'500 + 2 * 17'444 + 2 * 8192 + 32);
  EXPECT_EQ(flops_parameters(deepseek), 34'180);
  EXPECT_DOUBLE_EQ(model_flops_per_token(deepseek, 64), 246'552.0);
}

std::vector<nlohmann::json> train_lines(const std::filesystem::path& metrics) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(metrics);
  for (std::string line; std::getline(in, line);) {
    nlohmann::json j = nlohmann::json::parse(line);
    if (j.contains("tokens_per_s")) lines.push_back(j);
  }
  return lines;
}

// metrics.jsonl: tokens_per_s is the global batch's tokens over the step's seconds, tflops_per_rank
// and mfu that times the FLOPs per token over the ranks (one here) and the peak.
TEST(ModelFlops, MetricsLineHoldsTheFormula) {
  for (const char* model : {"gpt2-tiny", "llama-tiny", "mixtral-tiny"}) {
    SCOPED_TRACE(model);
    const std::filesystem::path dir = testing::scratch_dir() / model;
    std::filesystem::create_directories(dir);
    TrainConfig config = testing::tiny_run(dir);
    config.model = model;
    config.steps = 2;
    config.peak_tflops = 0.5;
    Trainer trainer(config);
    trainer.run();
    const double flops = model_flops_per_token(trainer.model().config(), config.seq_len);
    const std::vector<nlohmann::json> lines = train_lines(dir / "run" / "metrics.jsonl");
    ASSERT_EQ(lines.size(), 2u);
    for (const nlohmann::json& j : lines) {
      const double tokens_per_s = j["tokens_per_s"].get<double>();
      EXPECT_NEAR(tokens_per_s * j["step_s"].get<double>(), double(config.batch_size * config.seq_len), 1e-6 * tokens_per_s);
      EXPECT_NEAR(j["tflops_per_rank"].get<double>(), tokens_per_s * flops / 1e12, 1e-9 * tokens_per_s * flops / 1e12);
      EXPECT_NEAR(j["mfu"].get<double>(), tokens_per_s * flops / 0.5e12, 1e-9 * tokens_per_s * flops / 0.5e12);
    }
  }
}

}  // namespace
}  // namespace tessera
