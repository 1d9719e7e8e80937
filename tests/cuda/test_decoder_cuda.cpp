// The decoder on the GPU against the same model on the CPU: loss, every gradient and one AdamW update
// for GPT-2 and for Llama (grouped-query attention, RoPE, RMSNorm, SwiGLU) in fp32, and in bf16 within
// its rounding; a short training run whose per-step losses match (fp32 on both sides, so only
// summation order differs); mixed-precision training runs in bf16 and in f16 (with its loss scaling)
// tracking the fp32 CPU loss; generation over the key/value cache; multiple-choice scoring; bf16 and f16
// compute on the CPU refused. The families: GPT-2, Llama with grouped-query attention, Qwen3's and OLMo
// 2's query/key norms (OLMo 2's norms after the sublayers), Mixtral-style experts (softmax router) and
// DeepSeek-style experts (sigmoid router with its balancing bias, a shared expert, a dense first layer).
// Skipped without a GPU.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "core/rng.h"
#include "cuda/cuda_testing.h"
#include "nn/decoder.h"
#include "nn/model_presets.h"
#include "optim/adamw_optimizer.h"
#include "train/choice_eval.h"
#include "train/train_fixtures.h"
#include "train/trainer.h"

namespace tessera {
namespace {

// GPT-2 with head size 16 (the CUDA-core attention in every dtype) and T spanning several attention
// tiles; Vp = 384 pads a vocabulary of 300.
ModelConfig gpt2_test_config() { return ModelConfig{2, 4, 64, 300, 160}; }

// Llama with 4 query heads on 2 kv heads of 32 (the tensor-core attention in bf16), an untied head.
ModelConfig llama_test_config() {
  ModelConfig config = model_preset("llama-tiny");
  config.channels = 128;
  config.num_heads = 4;
  config.num_kv_heads = 2;
  config.mlp_hidden = 256;
  config.vocab_size = 300;
  config.max_seq_len = 160;
  config.tied_embeddings = false;
  return config;
}

// Qwen3-style: the Llama above with per-head query and key norms, 4 heads of 64 over its 128 channels.
ModelConfig qwen3_test_config() {
  ModelConfig config = llama_test_config();
  config.qk_norm = true;
  config.head_dim = 64;
  config.norm_eps = 1e-6f;
  return config;
}

// OLMo 2-style: the Llama above with its norms after attention and the MLP and one RMSNorm over all of
// a token's query heads (and one over its key heads).
ModelConfig olmo2_test_config() {
  ModelConfig config = llama_test_config();
  config.norm_placement = NormPlacement::post;
  config.qk_norm = true;
  config.qk_norm_all_heads = true;
  config.norm_eps = 1e-6f;
  return config;
}

// StarCoder2-style: the Llama above with LayerNorms, biases on every projection and norm, a GELU MLP,
// and a sliding window of 48 positions over the 160.
ModelConfig starcoder2_test_config() {
  ModelConfig config = llama_test_config();
  config.norm = NormKind::layernorm;
  config.bias = true;
  config.mlp = MlpKind::gelu;
  config.attention_window = 48;
  return config;
}

// GPT-NeoX-20B-style: StarCoder2's pieces without the window, attention and MLP side by side on each
// block's input (parallel residual), a quarter of each head rotating.
ModelConfig gpt_neox_test_config() {
  ModelConfig config = starcoder2_test_config();
  config.attention_window = 0;
  config.num_kv_heads = config.num_heads;
  config.parallel_residual = true;
  config.rotary_dims = config.head_size() / 4;
  return config;
}

// Phi-2-style: GPT-NeoX's above with one norm feeding both sublayers and a bias on the head.
ModelConfig phi2_test_config() {
  ModelConfig config = gpt_neox_test_config();
  config.shared_norm = true;
  config.tied_embeddings = false;
  config.head_bias = true;
  return config;
}

// Mixtral-style: the Llama above with 4 experts of 64, top-2.
ModelConfig mixtral_test_config() {
  ModelConfig config = llama_test_config();
  config.moe.num_experts = 4;
  config.moe.top_k = 2;
  config.moe.expert_hidden = 64;
  return config;
}

// DeepSeek-style: 8 experts of 32, top-2, one shared expert, sigmoid router with bias, dense first layer.
ModelConfig deepseek_test_config() {
  ModelConfig config = llama_test_config();
  config.moe.num_experts = 8;
  config.moe.top_k = 2;
  config.moe.expert_hidden = 32;
  config.moe.num_shared_experts = 1;
  config.moe.router = RouterKind::sigmoid_bias;
  config.moe.first_dense_layers = 1;
  return config;
}

// DeepSeek-V3-style: the DeepSeek MoE above under latent attention (a query latent of 96, a kv latent of
// 64, 4 heads of 48 + a RoPE tail of 16, values of 32 padded to 64), the routed output scaled by 2.5.
ModelConfig deepseek_v3_test_config() {
  ModelConfig config = deepseek_test_config();
  config.num_kv_heads = 0;
  config.mla = {.q_rank = 96, .kv_rank = 64, .nope_dim = 48, .rope_dim = 16, .v_dim = 32};
  config.moe.routed_scale = 2.5f;
  config.norm_eps = 1e-6f;
  return config;
}

struct FamilyCase {
  const char* name;
  ModelConfig (*config)();
};

class DecoderCuda : public testing::CudaTest, public ::testing::WithParamInterface<FamilyCase> {};

// The same initial weights in both models, the second moved to the GPU with compute in `dtype`.
void init_twins(Decoder& cpu, Decoder& gpu, uint64_t seed, DType dtype = DType::f32) {
  cpu.init_weights(seed);
  gpu.init_weights(seed);
  gpu.to(Device::cuda, dtype);
}

Tensor random_ids(int64_t B, int64_t T, int64_t V, uint64_t seed) {
  Tensor t = Tensor::zeros({B, T}, DType::i32);
  Rng rng(seed);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<int32_t>()[i] = int32_t(rng.below(uint64_t(V)));
  return t;
}

TEST_P(DecoderCuda, LossGradientsAndUpdateMatchCpu) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  Decoder cpu(GetParam().config()), gpu(GetParam().config());
  init_twins(cpu, gpu, seed);
  ASSERT_EQ(gpu.params().device(), Device::cuda);
  const int64_t B = 3, T = 150, V = cpu.config().vocab_size;
  const Tensor tokens = random_ids(B, T, V, seed + 1), targets = random_ids(B, T, V, seed + 2);
  const float dloss = 1.0f / float(B * T);
  for (Decoder* m : {&cpu, &gpu}) m->zero_grad();
  // Two micro-batches accumulate into the gradients on both sides.
  float cpu_loss = 0, gpu_loss = 0;
  for (int micro = 0; micro < 2; ++micro) {
    cpu_loss = cpu.forward(tokens, targets, dloss);
    cpu.backward();
    gpu_loss = gpu.forward(tokens, targets, dloss);
    gpu.backward();
  }
  EXPECT_NEAR(gpu_loss, cpu_loss, 1e-5 * std::fabs(cpu_loss));
  const NamedTensors cpu_grads = cpu.named_grads(), gpu_grads = gpu.named_grads();
  for (size_t i = 0; i < cpu_grads.size(); ++i) {
    const Tensor& g = cpu_grads[i].tensor;
    double scale = 0;
    for (int64_t k = 0; k < g.numel(); ++k) scale = std::max(scale, double(std::fabs(g.f32()[k])));
    testing::expect_matches_cpu(gpu_grads[i].tensor, g, 1e-4, 1e-4 * scale + 1e-9, 1e-3, cpu_grads[i].name.c_str());
  }

  // AdamW moves each weight by about lr·g/(|g| + eps): with the default eps = 1e-8 a gradient near
  // eps turns summation-order noise into a sizeable step (2e-5 and 1e-4 of lr = 1e-3 seen on an
  // H100), so the test takes eps = 1e-3, where the update follows the gradient smoothly.
  const AdamWConfig adamw{0.9f, 0.95f, 1e-3f, 0.1f};
  AdamW cpu_opt(full_segments(cpu.layout()), adamw), gpu_opt(full_segments(gpu.layout()), adamw, Device::cuda);
  cpu_opt.step(cpu.params(), cpu.grads(), 1e-3f, 1.0f);
  gpu_opt.step(gpu.params(), gpu.grads(), 1e-3f, 1.0f);
  testing::expect_matches_cpu(gpu.params(), cpu.params(), 1e-5, 1e-5, 1e-4, "params after AdamW");
}

// Generation's cached path (the key/value cache kernel on the GPU): a 7-token prompt, then three
// tokens one at a time, for two sequences; after each feed the GPU's logits match the CPU's (fp32 on
// both sides), and the cache grew by the tokens fed.
TEST_P(DecoderCuda, CachedGenerationMatchesCpu) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  Decoder cpu(GetParam().config()), gpu(GetParam().config());
  init_twins(cpu, gpu, seed);
  KvCache cpu_cache = cpu.kv_cache(2), gpu_cache = gpu.kv_cache(2);
  const int64_t V = cpu.config().vocab_size;
  for (const int64_t T : {7, 1, 1, 1}) {
    const Tensor tokens = random_ids(2, T, V, seed + uint64_t(cpu_cache.length) + 1);
    const Tensor& cpu_logits = cpu.forward_cached(tokens, cpu_cache);
    const Tensor& gpu_logits = gpu.forward_cached(tokens, gpu_cache);
    SCOPED_TRACE(cpu_cache.length);
    const double scale = testing::max_abs(cpu_logits);
    testing::expect_matches_cpu(gpu_logits, cpu_logits, 1e-5, 1e-5 * scale, 1e-4, "cached logits");
    EXPECT_EQ(gpu_cache.length, cpu_cache.length);
  }
  EXPECT_EQ(gpu_cache.length, 10);
}

// Multiple-choice scoring (eval --choices) on the GPU: forwards of whole examples whose widths vary
// from batch to batch, rows padded with ignored targets; every choice's summed loss matches the
// CPU's (fp32 on both sides).
TEST_P(DecoderCuda, ChoiceLossesMatchCpu) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  Decoder cpu(GetParam().config()), gpu(GetParam().config());
  init_twins(cpu, gpu, seed);
  const int64_t V = cpu.config().vocab_size;
  Rng rng(seed + 1);
  std::vector<ChoiceExample> examples(7);
  for (ChoiceExample& x : examples) {
    x.context.resize(1 + rng.below(120));
    for (int32_t& t : x.context) t = int32_t(rng.below(uint64_t(V)));
    x.choices.resize(2 + rng.below(3));
    for (std::vector<int32_t>& choice : x.choices) {
      choice.resize(1 + rng.below(30));
      for (int32_t& t : choice) t = int32_t(rng.below(uint64_t(V)));
    }
  }
  const auto on_cpu = choice_losses(cpu, examples, 5, 140), on_gpu = choice_losses(gpu, examples, 5, 140);
  for (size_t e = 0; e < examples.size(); ++e)
    for (size_t c = 0; c < examples[e].choices.size(); ++c)
      EXPECT_NEAR(on_gpu[e][c].sum, on_cpu[e][c].sum, 1e-4 * on_cpu[e][c].sum) << "example " << e << " choice " << c;
}

// bf16 compute (fp32 master weights and gradients): the loss within bf16's rounding of the fp32 CPU
// loss, and each gradient close to the CPU's relative to its largest element. With experts, bf16
// router logits send some tokens to other experts than the fp32 CPU's routing does (a near-tie flips;
// those tokens' gradients land on other experts' weights), so there the whole gradient is held to a
// relative L2 bound instead of each tensor.
TEST_P(DecoderCuda, Bf16LossAndGradientsTrackCpu) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  Decoder cpu(GetParam().config()), gpu(GetParam().config());
  init_twins(cpu, gpu, seed, DType::bf16);
  const int64_t B = 2, T = 150, V = cpu.config().vocab_size;
  const Tensor tokens = random_ids(B, T, V, seed + 1), targets = random_ids(B, T, V, seed + 2);
  const float dloss = 1.0f / float(B * T);
  for (Decoder* m : {&cpu, &gpu}) m->zero_grad();
  const float cpu_loss = cpu.forward(tokens, targets, dloss);
  cpu.backward();
  const float gpu_loss = gpu.forward(tokens, targets, dloss);
  gpu.backward();
  EXPECT_NEAR(gpu_loss, cpu_loss, 1e-2 * std::fabs(cpu_loss));
  if (cpu.config().moe.enabled()) {
    const double loose = 2.0 * testing::max_abs(cpu.grads());  // no per-element bound
    return testing::expect_matches_cpu(gpu.grads(), cpu.grads(), 0.15, loose, 0.0, "all gradients");
  }
  const NamedTensors cpu_grads = cpu.named_grads(), gpu_grads = gpu.named_grads();
  for (size_t i = 0; i < cpu_grads.size(); ++i) {
    const Tensor& g = cpu_grads[i].tensor;
    double scale = 0;
    for (int64_t k = 0; k < g.numel(); ++k) scale = std::max(scale, double(std::fabs(g.f32()[k])));
    testing::expect_matches_cpu(gpu_grads[i].tensor, g, 3e-2, 5e-2 * scale + 1e-9, 1.0, cpu_grads[i].name.c_str());
  }
}

INSTANTIATE_TEST_SUITE_P(Families, DecoderCuda,
                         ::testing::Values(FamilyCase{"gpt2", gpt2_test_config}, FamilyCase{"llama_gqa", llama_test_config},
                                           FamilyCase{"qwen3", qwen3_test_config},
                                           FamilyCase{"olmo2", olmo2_test_config},
                                           FamilyCase{"starcoder2", starcoder2_test_config},
                                           FamilyCase{"gpt_neox", gpt_neox_test_config},
                                           FamilyCase{"phi2", phi2_test_config},
                                           FamilyCase{"mixtral", mixtral_test_config},
                                           FamilyCase{"deepseek", deepseek_test_config},
                                           FamilyCase{"deepseek_v3", deepseek_v3_test_config}),
                         [](const ::testing::TestParamInfo<FamilyCase>& info) { return std::string(info.param.name); });

using GPT2Cuda = testing::CudaTest;

TEST_F(GPT2Cuda, TrainerLossesMatchCpuAndCheckpointLoadsOnCpu) {
  const std::filesystem::path dir = testing::scratch_dir();
  TrainConfig cpu_run = testing::tiny_run(dir);
  cpu_run.steps = 5;
  TrainConfig gpu_run = cpu_run;
  gpu_run.device = "cuda";
  gpu_run.dtype = "fp32";
  gpu_run.out_dir = (dir / "gpu").string();
  gpu_run.metrics_file = (dir / "gpu.jsonl").string();
  cpu_run.out_dir = (dir / "cpu").string();
  cpu_run.metrics_file = (dir / "cpu.jsonl").string();
  Trainer(cpu_run).run();
  const TrainResult gpu_result = Trainer(gpu_run).run();
  const auto cpu_metrics = testing::read_metrics(cpu_run.metrics_file);
  const auto gpu_metrics = testing::read_metrics(gpu_run.metrics_file);
  ASSERT_EQ(cpu_metrics.size(), gpu_metrics.size());
  for (size_t i = 0; i < cpu_metrics.size(); ++i) {
    const double c = cpu_metrics[i]["loss"], g = gpu_metrics[i]["loss"];
    EXPECT_NEAR(g, c, 1e-4 * std::fabs(c)) << "step " << i + 1;
  }
  // The GPU run's checkpoint resumes on the CPU with the same next loss as continuing on the GPU.
  TrainConfig resume_cpu = gpu_run, resume_gpu = gpu_run;
  resume_cpu.steps = resume_gpu.steps = 6;
  resume_cpu.resume = resume_gpu.resume = true;
  resume_cpu.device = "cpu";
  resume_cpu.out_dir = (dir / "resume_cpu").string();
  resume_gpu.out_dir = (dir / "resume_gpu").string();
  for (const std::string& copy : {resume_cpu.out_dir, resume_gpu.out_dir})
    std::filesystem::copy(gpu_run.out_dir, copy,
                          std::filesystem::copy_options::recursive | std::filesystem::copy_options::copy_symlinks);
  resume_cpu.metrics_file = (dir / "resume_cpu.jsonl").string();
  resume_gpu.metrics_file = (dir / "resume_gpu.jsonl").string();
  ASSERT_FALSE(gpu_result.last_checkpoint.empty());
  Trainer(resume_cpu).run();
  Trainer(resume_gpu).run();
  const double on_cpu = testing::read_metrics(resume_cpu.metrics_file).back()["loss"];
  const double on_gpu = testing::read_metrics(resume_gpu.metrics_file).back()["loss"];
  EXPECT_NEAR(on_gpu, on_cpu, 1e-4 * std::fabs(on_cpu));
}

// An asynchronous save from the GPU (copies to the host on a side stream beside the next step, which
// waits for them before its update) writes the same bytes as a synchronous one, at every save: with
// fp32 and bf16 moments (staged in bf16, widened on the writer's thread), and with sharded weights (a
// copy per segment of the moments' layout).
TEST_F(GPT2Cuda, AsyncCheckpointWritesTheSynchronousBytes) {
  for (const auto& [moments, weights] : {std::pair{"fp32", "whole"}, {"bf16", "whole"}, {"fp32", "sharded"}}) {
    SCOPED_TRACE(std::string(moments) + " moments, " + weights + " weights");
    const std::filesystem::path dir = testing::scratch_dir();
    TrainConfig sync_run = testing::tiny_run(dir);
    sync_run.optimizer_moments = moments;
    sync_run.checkpoint_weights = weights;
    sync_run.steps = 6;
    sync_run.checkpoint_every = 2;
    sync_run.keep_checkpoints = 0;
    sync_run.device = "cuda";
    sync_run.dtype = "bf16";
    sync_run.out_dir = (dir / "sync").string();
    TrainConfig async_run = sync_run;
    async_run.async_checkpoint = true;
    async_run.out_dir = (dir / "async").string();
    Trainer(sync_run).run();
    Trainer(async_run).run();
    auto bytes_of = [](const std::filesystem::path& file) {
      std::ifstream in(file, std::ios::binary);
      return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    };
    int compared = 0;
    for (const auto& entry : std::filesystem::recursive_directory_iterator(sync_run.out_dir)) {
      if (entry.path().extension() != ".safetensors") continue;
      const std::filesystem::path relative = std::filesystem::relative(entry.path(), sync_run.out_dir);
      const std::filesystem::path other = std::filesystem::path(async_run.out_dir) / relative;
      ASSERT_TRUE(std::filesystem::exists(other)) << relative;
      EXPECT_TRUE(bytes_of(entry.path()) == bytes_of(other)) << relative << " differs";
      compared++;
    }
    EXPECT_GE(compared, std::string(weights) == "whole" ? 6 : 3) << "three checkpoints: a moments shard each (with "
                                                                       "the weights in it when sharded, beside it else)";
  }
}

// Mixed precision: bf16 or f16 activations and weights copy, fp32 master weights, gradients and
// AdamW; f16 also scales the loss (dynamically, from the trainer's default scale). The loss tracks the
// fp32 CPU run within 2% for bf16 (the bar for a 20-step curve; here 8 steps), and within the
// same bar scaled by the rounding for f16 (0.25%), with no update skipped for an fp16 overflow.
using GPT2CudaLowPrecision = testing::CudaLowPrecisionTest;

TEST_P(GPT2CudaLowPrecision, TrainingTracksTheFp32CpuLoss) {
  const DType dtype = GetParam();
  const std::filesystem::path dir = testing::scratch_dir();
  TrainConfig cpu_run = testing::tiny_run(dir);
  cpu_run.steps = 8;
  cpu_run.metrics_file = (dir / "cpu.jsonl").string();
  TrainConfig gpu_run = cpu_run;
  gpu_run.device = "cuda";
  gpu_run.dtype = dtype == DType::bf16 ? "bf16" : "fp16";
  gpu_run.out_dir = (dir / "gpu").string();
  gpu_run.metrics_file = (dir / "gpu.jsonl").string();
  Trainer(cpu_run).run();
  Trainer(gpu_run).run();
  const auto cpu_metrics = testing::read_metrics(cpu_run.metrics_file);
  const auto gpu_metrics = testing::read_metrics(gpu_run.metrics_file);
  ASSERT_EQ(cpu_metrics.size(), gpu_metrics.size());
  const double rel = testing::scaled_from_bf16(0.02, dtype);
  for (size_t i = 0; i < cpu_metrics.size(); ++i) {
    ASSERT_FALSE(gpu_metrics[i].contains("skipped")) << "step " << i + 1 << ": update skipped, the runs diverge";
    const double c = cpu_metrics[i]["loss"], g = gpu_metrics[i]["loss"];
    EXPECT_NEAR(g, c, rel * std::fabs(c)) << "step " << i + 1;
    EXPECT_NE(g, c) << "step " << i + 1 << ": identical to fp32, so " << dtype_name(dtype) << " was not used";
  }
}

INSTANTIATE_TEST_SUITE_P(Storage, GPT2CudaLowPrecision, ::testing::ValuesIn(testing::kLowPrecisionDTypes),
                         testing::dtype_param_name);

TEST(GPT2Precision, LowPrecisionOnTheCpuIsRefused) {
  for (const DType dtype : testing::kLowPrecisionDTypes) {
    Decoder model(gpt2_test_config());
    EXPECT_THROW(model.to(Device::cpu, dtype), Error) << dtype_name(dtype);
  }
}

}  // namespace
}  // namespace tessera
