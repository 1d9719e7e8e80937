// Step-by-step agreement with PyTorch: a Hugging Face folder written by a golden-run script under
// tests/reference/ (Debian's python3-torch) is loaded with --init-from and trained with AdamW, the
// lr schedule, clipping and gradient accumulation; losses, grad norms and the final weights must
// match PyTorch's to 1e-4 relative (and the MoE auxiliary losses too). GPT-2 is checked against fp32
// PyTorch, Llama, Qwen2, Qwen3, Qwen3-MoE, Mixtral, Phi-3, OLMo 2, OLMoE, SmolLM3, Gemma 3 and
// DeepSeek-V2/V3 against float64 (tests/reference/make_hf_llama_reference.py).
#include <gtest/gtest.h>

#include "checkpoint/hf_model.h"
#include "support/test_support.h"
#include "train/train_fixtures.h"
#include "train/trainer.h"

namespace tessera {
namespace {

// Runs `script args` into a scratch folder, trains on its golden run and compares, each step's loss,
// grad norm (and MoE losses) to `tolerance` relative.
void expect_trains_like_pytorch(const std::string& script, const std::string& args, double tolerance = 1e-4) {
  auto dir = testing::scratch_dir();
  testing::CommandResult made = testing::run_command("/usr/bin/python3 " + std::string(TESSERA_SOURCE_DIR) +
                                                     "/tests/reference/" + script + " --out " + dir.string() + " " +
                                                     args);
  ASSERT_EQ(made.exit_code, 0) << made.output;
  nlohmann::json expected = nlohmann::json::parse(testing::read_text(dir / "expected.json"));
  const nlohmann::json& rc = expected["config"];

  TrainConfig c;
  c.init_from = (dir / "hf").string();
  c.model.clear();  // the import's shape (tessera train clears --model when it is not given)
  c.train_data = (dir / "train.bin").string();
  c.data_order = "sequential";
  c.batch_size = rc["batch"].get<int64_t>();
  c.micro_batch_size = c.batch_size / rc.value("micro_batches", int64_t(2));  // accumulation must not change anything
  c.seq_len = rc["seq_len"].get<int64_t>();
  c.steps = rc["steps"].get<int64_t>();
  c.lr = rc["lr"].get<float>();
  c.min_lr = rc["min_lr"].get<float>();
  c.lr_schedule = rc["schedule"].get<std::string>();
  c.warmup = rc["warmup"].get<int64_t>();
  c.weight_decay = rc["weight_decay"].get<float>();
  c.beta1 = rc["beta1"].get<float>();
  c.beta2 = rc["beta2"].get<float>();
  c.eps = rc["eps"].get<float>();
  c.grad_clip = rc["grad_clip"].get<float>();
  c.moe_aux_coef = rc.value("aux_coef", c.moe_aux_coef);  // the MoE flags only where the reference routes
  c.moe_z_coef = rc.value("z_coef", c.moe_z_coef);
  if (rc.contains("bias_rate")) c.moe_bias_rate = rc["bias_rate"].get<float>();  // sigmoid routers' balancing
  c.out_dir = (dir / "run").string();
  c.quiet = true;
  Trainer trainer(c);
  trainer.run();

  auto lines = testing::read_metrics(std::filesystem::path(c.out_dir) / "metrics.jsonl");
  ASSERT_EQ(lines.size(), expected["losses"].size());
  for (size_t s = 0; s < lines.size(); ++s) {
    double loss = expected["losses"][s], norm = expected["grad_norms"][s], lr = expected["lrs"][s];
    EXPECT_NEAR(lines[s]["loss"].get<double>(), loss, tolerance * loss) << "step " << s + 1;
    EXPECT_NEAR(lines[s]["grad_norm"].get<double>(), norm, tolerance * norm) << "step " << s + 1;
    EXPECT_NEAR(lines[s]["lr"].get<double>(), lr, 1e-6 * lr) << "step " << s + 1;
    if (expected["aux_losses"].empty()) continue;
    const double aux = expected["aux_losses"][s];
    EXPECT_NEAR(lines[s]["aux_loss"].get<double>(), aux, tolerance * aux) << "step " << s + 1;
    if (c.moe_z_coef == 0.0f) continue;
    const double z = expected["z_losses"][s];
    EXPECT_NEAR(lines[s]["z_loss"].get<double>(), z, tolerance * z) << "step " << s + 1;
  }

  Decoder torch_final(read_hf_config(dir / "hf_final"));
  load_hf_model(dir / "hf_final", torch_final.config(), torch_final.named_params());
  const Tensor& ours = trainer.model().params();
  const Tensor& theirs = torch_final.params();
  ASSERT_EQ(ours.numel(), theirs.numel());
  double max_diff = 0, max_abs = 0;
  for (int64_t i = 0; i < ours.numel(); ++i) {
    max_diff = std::max(max_diff, double(std::fabs(ours.f32()[i] - theirs.f32()[i])));
    max_abs = std::max(max_abs, double(std::fabs(theirs.f32()[i])));
  }
  EXPECT_LT(max_diff, 1e-4 * max_abs) << "largest weight difference " << max_diff;
}

}  // namespace

TEST(TorchReference, HuggingFaceGpt2TrainsLikePyTorch) {
  expect_trains_like_pytorch("make_hf_reference.py",
                             "--steps 6 --schedule cosine --warmup 2 --lr 2e-3 --min-lr 1e-4 --grad-clip 1.0 "
                             "--weight-decay 0.1");
}

// Untied head, grouped-query attention, Llama 3.1 frequency scaling across all three bands.
TEST(TorchReference, HuggingFaceLlamaTrainsLikeFloat64PyTorch) {
  expect_trains_like_pytorch("make_hf_llama_reference.py",
                             "--model llama --steps 10 --rope-theta 500000 --rope-scaling llama3 --schedule cosine "
                             "--warmup 2 --lr 2e-3 --min-lr 1e-4 --grad-clip 1.0 --weight-decay 0.1");
}

// Tied embeddings, multi-head attention (kv heads = heads).
TEST(TorchReference, HuggingFaceTiedLlamaTrainsLikeFloat64PyTorch) {
  expect_trains_like_pytorch("make_hf_llama_reference.py", "--model llama --tie 1 --kv-heads 4 --steps 10 --lr 3e-3");
}

// Qwen2: Llama with q/k/v biases (here tied embeddings and grouped-query attention, as Qwen2.5-0.5B).
TEST(TorchReference, HuggingFaceQwen2TrainsLikeFloat64PyTorch) {
  expect_trains_like_pytorch("make_hf_llama_reference.py", "--model qwen2 --tie 1 --steps 10 --lr 3e-3 --grad-clip 1.0");
}

// Qwen3: per-head RMSNorm of the queries and keys before RoPE, heads wider than hidden_size / heads
// (4 heads of 16 over 32 channels, as Qwen3 0.6B's 16 of 128 over 1024), tied embeddings, GQA.
TEST(TorchReference, HuggingFaceQwen3TrainsLikeFloat64PyTorch) {
  expect_trains_like_pytorch("make_hf_llama_reference.py",
                             "--model qwen3 --tie 1 --head-dim 16 --steps 10 --lr 3e-3 --grad-clip 1.0 --weight-decay 0.1");
}

// Qwen3 with YaRN (factor 4 from 4,096 positions): with heads of 16 its frequencies are kept, blended
// and divided, and the rotated channels grow by YaRN's attention factor; Qwen3's sharp attention at
// initialisation makes the loss feel each of them.
TEST(TorchReference, HuggingFaceQwen3WithYarnTrainsLikeFloat64PyTorch) {
  expect_trains_like_pytorch("make_hf_llama_reference.py",
                             "--model qwen3 --tie 1 --head-dim 16 --rope-scaling yarn --steps 10 --lr 3e-3 "
                             "--grad-clip 1.0");
}

// Qwen3-MoE: Qwen3's attention with Mixtral's routing (softmax top-2 of 4, renormalised) under Qwen3-MoE's
// names (mlp.gate, mlp.experts.{e}.gate_proj/up_proj/down_proj), the load-balancing loss in the objective.
TEST(TorchReference, HuggingFaceQwen3MoeTrainsLikeFloat64PyTorch) {
  expect_trains_like_pytorch("make_hf_llama_reference.py",
                             "--model qwen3_moe --head-dim 16 --steps 10 --aux-coef 0.02 --lr 2e-3 --grad-clip 1.0");
}

// Qwen3-MoE with norm_topk_prob false: the chosen probabilities weigh the experts as they are. A
// renormalising router moves the losses by only 2e-5 but the grad norms by 2e-4 and the aux by 3e-3:
// compared to 1e-5.
TEST(TorchReference, HuggingFaceQwen3MoeUnrenormalisedTrainsLikeFloat64PyTorch) {
  expect_trains_like_pytorch("make_hf_llama_reference.py",
                             "--model qwen3_moe --head-dim 16 --norm-topk 0 --steps 10 --aux-coef 0.02 --lr 2e-3 "
                             "--grad-clip 1.0",
                             1e-5);
}

// Qwen2-MoE (Qwen2MoeForCausalLM): Qwen2's q/k/v biases over softmax top-2 of 4 experts, not renormalised,
// and a shared expert two experts wide times a sigmoid gate a token (mlp.shared_expert, shared_expert_gate);
// then renormalised with one kv head and a shared expert one expert wide. Seeds 7 and 9 keep every step's
// router margins above 8e-3; compared to 1e-5 (fp32 drifts 1e-6 at most), where dropping the gate or the
// shared expert, or renormalising by mistake, shows in step 1's grad norm.
TEST(TorchReference, HuggingFaceQwen2MoeTrainsLikeFloat64PyTorch) {
  expect_trains_like_pytorch("make_hf_llama_reference.py",
                             "--model qwen2_moe --steps 10 --lr 3e-3 --aux-coef 0.02 --seed 7", 1e-5);
  expect_trains_like_pytorch("make_hf_llama_reference.py",
                             "--model qwen2_moe --steps 10 --lr 3e-3 --aux-coef 0.02 --norm-topk 1 --kv-heads 1 "
                             "--shared-intermediate 48 --seed 9",
                             1e-5);
}

// GLM-4.5 (Glm4MoeForCausalLM): q/k/v biases, heads of 16 (C/NH is 8) whose first 8 channels rotate, over
// DeepSeek-V3's routing (sigmoid scores and a selection bias, renormalised, scaled by 2.5) of 4 experts and one
// shared expert after a dense first block, like GLM-4.5-Air; then with per-head q/k norms before RoPE and the
// selection biases balanced at 1e-3 a step, like GLM-4.5. Every step's router margins stay above 1.4e-3
// (seeds 9 and 386); fp32 drifts 3e-7 at most. At 1e-5, rotating a head's last channels instead, or dropping
// the biases, the q/k norms or the routed scaling, fails them.
TEST(TorchReference, HuggingFaceGlm4MoeTrainsLikeFloat64PyTorch) {
  expect_trains_like_pytorch("make_hf_llama_reference.py",
                             "--model glm4_moe --layers 3 --steps 10 --lr 3e-3 --aux-coef 0.02 --seed 9", 1e-5);
  expect_trains_like_pytorch("make_hf_llama_reference.py",
                             "--model glm4_moe --layers 3 --steps 10 --lr 3e-3 --aux-coef 0.02 --qk-norm 1 "
                             "--bias-rate 1e-3 --seed 386",
                             1e-5);
}

// Mixtral: softmax top-2 routing over 4 experts, load-balancing and z losses in the objective.
TEST(TorchReference, HuggingFaceMixtralTrainsLikeFloat64PyTorch) {
  expect_trains_like_pytorch("make_hf_llama_reference.py",
                             "--model mixtral --steps 10 --aux-coef 0.02 --z-coef 0.001 --schedule cosine --warmup 2 "
                             "--lr 2e-3 --min-lr 1e-4 --grad-clip 1.0 --weight-decay 0.1");
}

// DeepSeek-V3: latent attention (here without a query latent, its RoPE tails interleaved as DeepSeek's
// checkpoints keep them), a dense first layer, then sigmoid routing with the selection bias, a shared
// expert and the routed output scaled by 2.5. --rms-eps 1e-4 keeps the latents' fixed 1e-6 apart from
// the other norms' eps by more than the tolerance.
TEST(TorchReference, HuggingFaceDeepSeekV3TrainsLikeFloat64PyTorch) {
  expect_trains_like_pytorch("make_hf_llama_reference.py",
                             "--model deepseek_v3 --layers 3 --rms-eps 1e-4 --steps 10 --aux-coef 0.02 --lr 2e-3 "
                             "--grad-clip 1.0 --weight-decay 0.1");
}

// With a query latent, tails in halves order (rope_interleave false), tied embeddings and the
// balancing bias moving after every step (the final weights compared hold it).
TEST(TorchReference, HuggingFaceDeepSeekV3WithQueryLatentAndBiasBalancing) {
  expect_trains_like_pytorch("make_hf_llama_reference.py",
                             "--model deepseek_v3 --q-lora-rank 12 --rope-interleave 0 --bias-rate 1e-3 --tie 1 "
                             "--rms-eps 1e-4 --steps 10 --lr 3e-3 --grad-clip 1.0");
}

// DeepSeek-V3 with YaRN over RoPE tails of 8 (every frequency region), mscale 1 and mscale_all_dim 0.5:
// both the factor on the rotated channels and DeepSeek's on every score differ from 1. Its attention is
// nearly uniform at initialisation, so a wrong YaRN moves the losses by about 1e-5: compared to 1e-5.
TEST(TorchReference, HuggingFaceDeepSeekV3WithYarnTrainsLikeFloat64PyTorch) {
  expect_trains_like_pytorch("make_hf_llama_reference.py",
                             "--model deepseek_v3 --qk-rope-dim 8 --rope-scaling yarn --yarn-factor 40 --yarn-mscale 1 "
                             "--yarn-mscale-all-dim 0.5 --rms-eps 1e-4 --steps 10 --lr 3e-3 --grad-clip 1.0",
                             1e-5);
}

// DeepSeek-V2: latent attention (interleaved tails) over softmax routing whose weights are not
// renormalised but scaled by 1.5, a dense first layer, a shared expert; at 1e-5 (a renormalising or
// unscaled router moves the grad norms by 8e-4).
TEST(TorchReference, HuggingFaceDeepSeekV2TrainsLikeFloat64PyTorch) {
  expect_trains_like_pytorch("make_hf_llama_reference.py",
                             "--model deepseek_v2 --layers 3 --routed-scale 1.5 --rms-eps 1e-4 --steps 10 "
                             "--aux-coef 0.02 --lr 2e-3 --grad-clip 1.0",
                             1e-5);
}

// DeepSeek-V2 renormalising (its routed_scaling_factor of 2 then unused, as DeepSeek-V2 rules), with a
// query latent and YaRN over tails of 8.
TEST(TorchReference, HuggingFaceDeepSeekV2RenormalisedWithYarnTrainsLikeFloat64PyTorch) {
  expect_trains_like_pytorch("make_hf_llama_reference.py",
                             "--model deepseek_v2 --q-lora-rank 12 --norm-topk 1 --routed-scale 2 --rope-scaling yarn "
                             "--yarn-factor 40 --yarn-mscale 0.707 --yarn-mscale-all-dim 0.707 --qk-rope-dim 8 "
                             "--rms-eps 1e-4 --steps 10 --lr 3e-3 --grad-clip 1.0",
                             1e-5);
}

// Group-limited routing: DeepSeek-V3's (8 experts in 4 groups, the 2 of the best top-2 sums kept, with
// the balancing bias moving) and, keeping 1 group, the rule that a dropped group's experts compete at 0
// rather than not at all; DeepSeek-V2's group_limited_greedy (a group's best probability, 3 experts from
// 2 of 4 groups). Ignoring the limit moves the grad norms by 2e-3 to 7e-3 from the first step: at 1e-5.
TEST(TorchReference, HuggingFaceDeepSeekV3GroupLimitedRoutingTrainsLikeFloat64PyTorch) {
  expect_trains_like_pytorch("make_hf_llama_reference.py",
                             "--model deepseek_v3 --experts 8 --top-k 2 --n-group 4 --topk-group 2 --bias-rate 1e-3 "
                             "--rms-eps 1e-4 --steps 10 --aux-coef 0.02 --lr 2e-3 --grad-clip 1.0",
                             1e-5);
  expect_trains_like_pytorch("make_hf_llama_reference.py",
                             "--model deepseek_v3 --experts 8 --top-k 2 --n-group 4 --topk-group 1 --rms-eps 1e-4 "
                             "--steps 10 --aux-coef 0.02 --lr 2e-3 --grad-clip 1.0",
                             1e-5);
}

// Phi-3 and Phi-4 (Phi3ForCausalLM): Llama's computation with q, k and v in one qkv_proj and gate and up
// in one gate_up_proj, untied and tied; hf_final is read back in that form too.
TEST(TorchReference, HuggingFacePhi3TrainsLikeFloat64PyTorch) {
  expect_trains_like_pytorch("make_hf_llama_reference.py", "--model phi3 --steps 10 --lr 3e-3 --grad-clip 1.0");
  expect_trains_like_pytorch("make_hf_llama_reference.py", "--model phi3 --tie 1 --kv-heads 4 --steps 10 --lr 3e-3");
}

// OLMo 2 (Olmo2ForCausalLM): each block's norms on its attention's and MLP's outputs inside the residual
// branches, one RMSNorm over all of a token's query heads and one over its key heads; untied with 2
// kv heads, and tied with one kv head (unclipped, whose fp32 grad norm drifts to 1.1e-5 from float64's
// by step 8). hf_final is read back in that form too.
TEST(TorchReference, HuggingFaceOlmo2TrainsLikeFloat64PyTorch) {
  expect_trains_like_pytorch("make_hf_llama_reference.py", "--model olmo2 --steps 10 --lr 3e-3 --grad-clip 1.0", 1e-5);
  expect_trains_like_pytorch("make_hf_llama_reference.py", "--model olmo2 --tie 1 --kv-heads 1 --steps 10 --lr 3e-3");
}

// OLMoE (OlmoeForCausalLM): OLMo 2's query and key norms over all heads in pre-norm blocks, every layer
// a MoE (softmax top-2 of 4, not renormalised) under Qwen3-MoE's names, the load-balancing loss in the
// objective; and with one kv head, tied, renormalised, with the z-loss.
TEST(TorchReference, HuggingFaceOlmoeTrainsLikeFloat64PyTorch) {
  expect_trains_like_pytorch("make_hf_llama_reference.py",
                             "--model olmoe --experts 4 --top-k 2 --steps 10 --aux-coef 0.02 --lr 2e-3 --grad-clip 1.0",
                             1e-5);
  expect_trains_like_pytorch("make_hf_llama_reference.py",
                             "--model olmoe --experts 3 --top-k 2 --norm-topk 1 --kv-heads 1 --tie 1 --aux-coef 0.01 "
                             "--z-coef 1e-3 --steps 10 --lr 2e-3");
}

// SmolLM3 (SmolLM3ForCausalLM): Llama with blocks that take no RoPE, every second of three (the list
// from the interval), and blocks 0 and 2 tied with one kv head (the list given; its interval, which
// disagrees, unread). A run that turned every block matches neither.
TEST(TorchReference, HuggingFaceSmolLM3TrainsLikeFloat64PyTorch) {
  expect_trains_like_pytorch("make_hf_llama_reference.py",
                             "--model smollm3 --layers 3 --no-rope-interval 2 --steps 10 --lr 3e-3 --grad-clip 1.0", 1e-5);
  expect_trains_like_pytorch("make_hf_llama_reference.py",
                             "--model smollm3 --layers 3 --no-rope-layers 0,1,0 --kv-heads 1 --tie 1 --steps 10 --lr 3e-3");
}

// Sliding windows (Mistral 7B v0.1's, Phi-3's 4K models'), over sequences three times as long: each
// token attends to its 5 latest positions, itself included, as transformers masks them, for Mistral and
// for Phi-3 with its partial rotary embeddings. Attending over whole sequences moves the first loss by
// 1.3e-4.
TEST(TorchReference, HuggingFaceSlidingWindowTrainsLikeFloat64PyTorch) {
  expect_trains_like_pytorch("make_hf_llama_reference.py",
                             "--model mistral --sliding-window 5 --seq-len 16 --steps 10 --lr 3e-3 --grad-clip 1.0",
                             1e-5);
  expect_trains_like_pytorch("make_hf_llama_reference.py",
                             "--model phi3 --sliding-window 5 --partial-rotary-factor 0.5 --seq-len 16 --steps 10 "
                             "--lr 3e-3");
}

// Qwen's sliding windows (use_sliding_window): Qwen2's and Qwen3's first max_window_layers blocks
// attend to the whole sequence and the later ones to their 5 latest positions; Qwen3-MoE's slide in
// every block.
TEST(TorchReference, HuggingFaceQwenSlidingWindowsTrainLikeFloat64PyTorch) {
  expect_trains_like_pytorch("make_hf_llama_reference.py",
                             "--model qwen2 --layers 3 --sliding-window 5 --max-window-layers 1 --seq-len 16 "
                             "--steps 10 --lr 3e-3 --grad-clip 1.0",
                             1e-5);
  expect_trains_like_pytorch("make_hf_llama_reference.py",
                             "--model qwen3 --layers 3 --sliding-window 4 --max-window-layers 2 --seq-len 16 "
                             "--steps 8 --lr 3e-3");
  expect_trains_like_pytorch("make_hf_llama_reference.py",
                             "--model qwen3_moe --sliding-window 5 --seq-len 16 --steps 8 --lr 3e-3");
}

// StarCoder2 (Starcoder2ForCausalLM): LayerNorms, biases on every projection, a GELU (tanh) MLP of c_fc
// and c_proj, RoPE over grouped-query heads; then untied with one kv head and a window of 5 over 16 tokens.
TEST(TorchReference, HuggingFaceStarcoder2TrainsLikeFloat64PyTorch) {
  expect_trains_like_pytorch("make_hf_llama_reference.py",
                             "--model starcoder2 --layers 3 --steps 10 --lr 3e-3 --grad-clip 1.0", 1e-5);
  expect_trains_like_pytorch("make_hf_llama_reference.py",
                             "--model starcoder2 --tie 0 --kv-heads 1 --sliding-window 5 --seq-len 16 --steps 8 "
                             "--lr 3e-3");
}

// GPT-NeoX (GPTNeoXForCausalLM, Pythia): attention and MLP side by side on each block's input, LayerNorms and
// biases everywhere, the exact GELU, RoPE on the first quarter of each head (HF's fused q/k/v rows interleaved
// by head); then sequential blocks (use_parallel_residual false) with a tied head. Seeds 2 and 40: seed 1's
// parallel run has an embedding row first seen at step 4 whose gradient element (2.4e-9 in float64, -8.7e-9
// in fp32) sits below AdamW's eps, so the two step it in opposite directions (1.4e-3 of the largest weight).
TEST(TorchReference, HuggingFaceGptNeoxTrainsLikeFloat64PyTorch) {
  expect_trains_like_pytorch("make_hf_llama_reference.py",
                             "--model gpt_neox --layers 3 --steps 10 --lr 3e-3 --grad-clip 1.0 --seed 2", 1e-5);
  expect_trains_like_pytorch("make_hf_llama_reference.py",
                             "--model gpt_neox --layers 3 --steps 8 --lr 3e-3 --grad-clip 1.0 --parallel-residual 0 "
                             "--tie 1 --seq-len 16 --seed 40",
                             1e-5);
}

// Cohere (CohereForCausalLM: Command-R, Aya): attention and SwiGLU side by side on one LayerNorm without biases,
// RoPE over interleaved channel pairs (the import reorders q_proj and k_proj), logits times logit_scale 0.25;
// tied over grouped-query heads, then untied with one kv head.
TEST(TorchReference, HuggingFaceCohereTrainsLikeFloat64PyTorch) {
  expect_trains_like_pytorch("make_hf_llama_reference.py",
                             "--model cohere --layers 3 --steps 10 --lr 3e-3 --grad-clip 1.0 --seed 1", 1e-5);
  expect_trains_like_pytorch("make_hf_llama_reference.py",
                             "--model cohere --tie 0 --kv-heads 1 --seq-len 16 --steps 8 --lr 3e-3 --seed 3", 1e-5);
}

// Cohere2 (Cohere2ForCausalLM: Command R7B, Command A): Cohere's blocks sliding over 5 (then 4) of 16 positions
// with RoPE around global blocks without it (every second, then every third); tied, then untied with one kv head.
TEST(TorchReference, HuggingFaceCohere2TrainsLikeFloat64PyTorch) {
  expect_trains_like_pytorch("make_hf_llama_reference.py",
                             "--model cohere2 --layers 3 --sliding-window 5 --sliding-window-pattern 2 --seq-len 16 "
                             "--steps 10 --lr 3e-3 --grad-clip 1.0 --seed 7",
                             1e-5);
  expect_trains_like_pytorch("make_hf_llama_reference.py",
                             "--model cohere2 --layers 3 --tie 0 --kv-heads 1 --sliding-window 4 "
                             "--sliding-window-pattern 3 --seq-len 16 --steps 8 --lr 3e-3 --seed 6",
                             1e-5);
}

// Phi-1.5 / Phi-2 (PhiForCausalLM): attention and a GELU (tanh) MLP side by side on one LayerNorm, biases everywhere,
// the first half (then quarter) of each head rotating, an untied head with a bias; then one kv head. Seeds 89 and 98
// leave the widest margins for every mistake the reference checks (the exact GELU moves seed 1 by only 8.4e-5).
TEST(TorchReference, HuggingFacePhiTrainsLikeFloat64PyTorch) {
  expect_trains_like_pytorch("make_hf_llama_reference.py",
                             "--model phi --layers 3 --steps 10 --lr 3e-3 --grad-clip 1.0 --seed 89", 1e-5);
  expect_trains_like_pytorch("make_hf_llama_reference.py",
                             "--model phi --kv-heads 1 --seq-len 16 --steps 8 --lr 3e-3 --partial-rotary-factor 0.25 "
                             "--seed 98",
                             1e-5);
}

// Gemma 3 (Gemma3ForCausalLM): (1 + w) norms before and after each sublayer, embeddings times sqrt(C),
// GeGLU, per-head q/k norms; sliding layers (a window of 5 over 16 tokens, RoPE base 10,000) and global
// ones (theta 1e6); then with linear RoPE scaling on the global layers, query_pre_attn_scalar 24 on
// heads of 16 and one kv head. At 1e-4: by step 7 fp32 drifts 1.1e-5 from float64 (GELU's tanh is approximated).
TEST(TorchReference, HuggingFaceGemma3TrainsLikeFloat64PyTorch) {
  expect_trains_like_pytorch("make_hf_llama_reference.py",
                             "--model gemma3 --layers 3 --sliding-window-pattern 2 --sliding-window 5 --steps 10 "
                             "--lr 3e-3 --grad-clip 1.0");
  expect_trains_like_pytorch("make_hf_llama_reference.py",
                             "--model gemma3 --layers 3 --sliding-window-pattern 3 --sliding-window 3 --rope-scaling "
                             "linear --rope-factor 8 --query-pre-attn-scalar 24 --head-dim 16 --kv-heads 1 --steps 10 "
                             "--lr 3e-3");
}

// Gemma (GemmaForCausalLM): Gemma's (1 + w) RMSNorms before each sublayer, embeddings times sqrt(C),
// GeGLU (its MLP drawn wide, so GELU's tanh form shows against the exact one); tied, then untied with heads
// of 16 and one kv head. The grad norms of the second drift up to 4.7e-6 in fp32: compared at 1e-4.
TEST(TorchReference, HuggingFaceGemmaTrainsLikeFloat64PyTorch) {
  expect_trains_like_pytorch("make_hf_llama_reference.py",
                             "--model gemma --layers 3 --steps 10 --lr 3e-3 --grad-clip 1.0", 1e-5);
  expect_trains_like_pytorch("make_hf_llama_reference.py",
                             "--model gemma --layers 2 --head-dim 16 --kv-heads 1 --tie 0 --steps 10 --lr 3e-3");
}

// Gemma 2 (Gemma2ForCausalLM): Gemma 3's blocks without q/k norms, every other block sliding (a window of 5
// over 16 tokens, the first block sliding), one RoPE base; the scaled attention scores soft-capped at 0.05 and
// the logits at 1 (caps that bend this size's scores and logits: dropping either moves the grad norms by
// 3e-2 or more); then untied with query_pre_attn_scalar 24 on heads of 16 and one kv head.
TEST(TorchReference, HuggingFaceGemma2TrainsLikeFloat64PyTorch) {
  expect_trains_like_pytorch("make_hf_llama_reference.py",
                             "--model gemma2 --layers 3 --sliding-window 5 --steps 10 --lr 3e-3 --grad-clip 1.0");
  expect_trains_like_pytorch("make_hf_llama_reference.py",
                             "--model gemma2 --layers 3 --sliding-window 3 --query-pre-attn-scalar 24 --head-dim 16 "
                             "--kv-heads 1 --tie 0 --steps 10 --lr 3e-3");
}

// Phi-4-mini's and Phi-3.5's RoPE: partial rotary (transformers turns a head's first channels, Tessera
// its last, the import moving the rows) and LongRoPE, its short factors within the original 16
// positions and its long ones past them, with the attention factor. Dropping the attention factor or
// taking the other factors moves the grad norms by 5e-4 to 1e-2: at 1e-5.
TEST(TorchReference, HuggingFacePhi3PartialRotaryAndLongRopeTrainLikeFloat64PyTorch) {
  expect_trains_like_pytorch("make_hf_llama_reference.py",
                             "--model phi3 --partial-rotary-factor 0.75 --steps 10 --lr 3e-3 --grad-clip 1.0", 1e-5);
  expect_trains_like_pytorch("make_hf_llama_reference.py",
                             "--model phi3 --rope-scaling longrope --context 32 --seq-len 16 --steps 10 --lr 3e-3",
                             1e-5);
  expect_trains_like_pytorch("make_hf_llama_reference.py",
                             "--model phi3 --partial-rotary-factor 0.5 --rope-scaling longrope --context 32 "
                             "--seq-len 32 --longrope-original-max 16 --steps 10 --lr 3e-3 --grad-clip 1.0",
                             1e-5);
}

// DeepSeek-V3 as it ships, its linear weights in fine-grained FP8 (E4M3 codes, one fp32 scale per 8 x 12
// block, partial blocks at the edges), and a Llama whose tied embedding stays unquantized: each starts
// from float32(code) * scale, as PyTorch's does, and trains as it does.
TEST(TorchReference, HuggingFaceFp8BlockWeightsTrainLikeFloat64PyTorch) {
  expect_trains_like_pytorch("make_hf_llama_reference.py",
                             "--model deepseek_v3 --q-lora-rank 12 --fp8-block 8 12 --rms-eps 1e-4 --steps 10 "
                             "--aux-coef 0.02 --lr 2e-3 --grad-clip 1.0",
                             1e-5);
  expect_trains_like_pytorch("make_hf_llama_reference.py",
                             "--model llama --tie 1 --fp8-block 16 20 --steps 10 --lr 3e-3 --grad-clip 1.0");
}

TEST(TorchReference, HuggingFaceDeepSeekV2GroupLimitedRoutingTrainsLikeFloat64PyTorch) {
  expect_trains_like_pytorch("make_hf_llama_reference.py",
                             "--model deepseek_v2 --experts 8 --top-k 3 --n-group 4 --topk-group 2 --seed 2 "
                             "--routed-scale 1.5 --rms-eps 1e-4 --steps 10 --aux-coef 0.02 --lr 2e-3 --grad-clip 1.0",
                             1e-5);
}

}  // namespace tessera
