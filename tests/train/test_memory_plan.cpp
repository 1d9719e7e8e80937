// `tessera plan memory` against what training really allocates: tiny GPT-2, Llama and Mixtral runs
// on the CPU (fp32), each under several recomputation modes, micro-batches, sequence lengths, ZeRO
// stages and moment dtypes. The weights', gradients' and moments' bytes must equal the plan's
// exactly; the host allocator's peak over a training step must be within kTolerance of the plan's total plus the
// trainer's host token buffers (host memory on a GPU, so not in a plan of device memory). Also the
// GPU-only term, cuDNN's attention workspace, under each choice that changes it.
#include <gtest/gtest.h>

#include "core/allocator.h"
#include "core/divisors.h"
#include "support/test_support.h"
#include "train/memory_plan.h"
#include "train/memory_plan_report.h"
#include "train/model_setup.h"
#include "train/train_fixtures.h"
#include "train/trainer.h"

namespace tessera {
namespace {

// ZeRO-3's buffers are planned from the largest parts (0.3% above what gpt2-tiny holds); the rest
// agrees to a few dozen bytes.
constexpr double kTolerance = 0.005;

struct Case {
  std::string model, recompute;
  int64_t micro_batch, seq_len;
  int zero = 0;
  int powersgd_rank = 0;
  std::string moments = "fp32";
  bool async_checkpoint = false;
  std::string checkpoint_weights = "auto";
};

std::string case_name(const Case& c) {
  return c.model + " recompute " + c.recompute + " B " + std::to_string(c.micro_batch) + " T " +
         std::to_string(c.seq_len) + " zero " + std::to_string(c.zero) + " powersgd " + std::to_string(c.powersgd_rank) +
         " moments " + c.moments + (c.async_checkpoint ? " async" : "") + " weights " + c.checkpoint_weights;
}

TrainConfig run_config(const Case& k, const std::filesystem::path& dir) {
  TrainConfig c = testing::tiny_run(dir);
  c.model = k.model;
  c.recompute = k.recompute;
  c.batch_size = 2 * k.micro_batch;  // two micro-batches: gradients accumulate
  c.micro_batch_size = k.micro_batch;
  c.seq_len = k.seq_len;
  c.zero = k.zero;
  c.powersgd_rank = k.powersgd_rank;
  c.optimizer_moments = k.moments;
  c.async_checkpoint = k.async_checkpoint;
  c.checkpoint_weights = k.checkpoint_weights;
  c.steps = 2;
  return c;
}

void expect_plan_matches_training(const Case& k) {
  SCOPED_TRACE(case_name(k));
  const std::filesystem::path dir = testing::scratch_dir();
  const TrainConfig config = run_config(k, dir);
  const ModelConfig model = resolve_model_config(config, nullptr, std::nullopt);
  const MemoryPlan plan = plan_memory(config, model, DType::f32, Device::cpu, int64_t(1) << 40);
  ASSERT_EQ(plan.ranks.size(), 1u);
  const RankMemory& planned = plan.ranks[0];

  const size_t before = host_allocator_stats().current_bytes;
  Trainer trainer(config);
  // The states, exactly: the parameters (or their ZeRO-3 shard, which the moments are laid out like)
  // and the gradients (or their ZeRO 2/3 shard), and AdamW's two moments.
  const int64_t state = trainer.optimizer().state_size() * 4;
  EXPECT_EQ(planned.optimizer, int64_t(trainer.optimizer().m().bytes() + trainer.optimizer().v().bytes()));
  EXPECT_EQ(planned.optimizer, k.moments == "bf16" ? state : 2 * state);
  // --async-checkpoint's host buffers (a CPU run): fp32 moments, and the weights whole or this rank's shard.
  const int64_t weights = config.sharded_checkpoint_weights() ? state : int64_t(trainer.model().params().bytes());
  EXPECT_EQ(planned.async_checkpoint, k.async_checkpoint ? 2 * state + weights : 0);
  EXPECT_EQ(planned.compute_copy, 0);
  EXPECT_EQ(planned.master_weights, k.zero == 3 ? state : int64_t(trainer.model().params().bytes()));
  EXPECT_EQ(planned.gradients, k.zero >= 2 ? state : int64_t(trainer.model().grads().bytes()));
  // The peak over a step: the second step's hook runs after its backward, the first step's update done.
  host_allocator_reset_peak();
  size_t peak = 0;
  trainer.set_fault_hook([&](int64_t step, float&) {
    if (step == 2) peak = host_allocator_stats().peak_bytes - before;
  });
  trainer.run();
  ASSERT_GT(peak, 0u);
  const int64_t host_tokens = 2 * k.micro_batch * k.seq_len * int64_t(sizeof(int32_t));  // inputs and targets
  EXPECT_NEAR(double(peak) / double(planned.total() + host_tokens), 1.0, kTolerance)
      << "measured " << peak << " bytes, planned " << planned.total() << " (activations " << planned.activations
      << ", scratch " << planned.scratch << ", logits " << planned.logits << ")";
}

// The plan against the allocator's peak for `model`'s 8 sequences of 64 tokens, without recomputation
// and with each kind of it.
void expect_plan_matches_training_each_recompute(const char* model) {
  for (const char* recompute : {"none", "selective", "full"}) expect_plan_matches_training({model, recompute, 8, 64});
}

TEST(MemoryPlan, Gpt2TinyMatchesTheAllocatorPeak) {
  for (const char* recompute : {"none", "selective", "full"}) {
    expect_plan_matches_training({"gpt2-tiny", recompute, 4, 32});
    expect_plan_matches_training({"gpt2-tiny", recompute, 8, 64});
  }
}

TEST(MemoryPlan, LlamaTinyMatchesTheAllocatorPeak) {
  expect_plan_matches_training_each_recompute("llama-tiny");
}

// Qwen3: the queries and keys kept before their norms, heads wider than the model (dcore outgrows dnormed).
TEST(MemoryPlan, Qwen3TinyMatchesTheAllocatorPeak) {
  expect_plan_matches_training_each_recompute("qwen3-tiny");
}

// OLMo 2: the query and key norms' statistics a token, not a head; the sublayers' output gradients
// (dbranch) beside the residual's.
TEST(MemoryPlan, Olmo2TinyMatchesTheAllocatorPeak) {
  expect_plan_matches_training_each_recompute("olmo2-tiny");
}

TEST(MemoryPlan, OlmoeTinyMatchesTheAllocatorPeak) {
  expect_plan_matches_training_each_recompute("olmoe-tiny");
}

// Qwen2-MoE: the shared expert's gate logits a block, and its backward's gradients of the shared output and gate.
TEST(MemoryPlan, Qwen2MoeTinyMatchesTheAllocatorPeak) {
  expect_plan_matches_training_each_recompute("qwen2-moe-tiny");
}

// Gemma 2: Gemma 3's activations without q/k norms; its caps work in place.
TEST(MemoryPlan, Gemma2TinyMatchesTheAllocatorPeak) {
  expect_plan_matches_training_each_recompute("gemma2-tiny");
}

// Gemma 3: four norms a block and the sublayers' output gradients; the sliding layers' first keys.
TEST(MemoryPlan, Gemma3TinyMatchesTheAllocatorPeak) {
  expect_plan_matches_training_each_recompute("gemma3-tiny");
}

// StarCoder2: LayerNorms and a GELU MLP (GPT-2's activations) with Llama's attention and a window.
TEST(MemoryPlan, Starcoder2TinyMatchesTheAllocatorPeak) {
  expect_plan_matches_training_each_recompute("starcoder2-tiny");
}

// Pythia: the MLP reads its own norm of the block's input, and its input gradient waits in dbranch while the
// attention's backward runs.
TEST(MemoryPlan, PythiaTinyMatchesTheAllocatorPeak) {
  expect_plan_matches_training_each_recompute("pythia-tiny");
}

// Cohere: one norm a block feeding both sublayers.
TEST(MemoryPlan, CohereTinyMatchesTheAllocatorPeak) {
  expect_plan_matches_training_each_recompute("cohere-tiny");
  expect_plan_matches_training_each_recompute("cohere2-tiny");
  expect_plan_matches_training_each_recompute("phi2-tiny");
}

TEST(MemoryPlan, MixtralTinyMatchesTheAllocatorPeak) {
  expect_plan_matches_training_each_recompute("mixtral-tiny");
}

// DeepSeek-V3: latent attention's latents and values kept, its backward's temporaries, the routed
// experts' scaled weights.
TEST(MemoryPlan, DeepSeekV3TinyMatchesTheAllocatorPeak) {
  expect_plan_matches_training_each_recompute("deepseek-v3-tiny");
}

TEST(MemoryPlan, ZeroStagesMatchTheAllocatorPeak) {
  for (int zero : {1, 2, 3}) expect_plan_matches_training({"gpt2-tiny", "none", 8, 64, zero});
}

TEST(MemoryPlan, Bf16MomentsMatchTheAllocatorPeak) {
  for (int zero : {0, 1, 3}) expect_plan_matches_training({"gpt2-tiny", "none", 8, 64, zero, 0, "bf16"});
}

TEST(MemoryPlan, AsyncCheckpointCopiesMatchTheAllocatorPeak) {
  for (int zero : {0, 1, 3}) expect_plan_matches_training({"gpt2-tiny", "none", 8, 64, zero, 0, "fp32", true});
  expect_plan_matches_training({"gpt2-tiny", "none", 8, 64, 1, 0, "bf16", true});
  expect_plan_matches_training({"llama-tiny", "none", 8, 64, 1, 0, "fp32", true, "sharded"});
}

// A preset's run of `batch` x `seq_len` tokens (a plan reads no data).
TrainConfig preset_run(const std::filesystem::path& dir, const std::string& model, int64_t batch, int64_t seq_len) {
  TrainConfig c = testing::tiny_run(dir);
  c.model = model;
  c.batch_size = batch;
  c.seq_len = seq_len;
  return c;
}

// On the GPU an asynchronous checkpoint copies straight into host memory (side_copies.h): the plan of
// device memory holds nothing for it, and the page-locked host buffers are planned beside it (GPT-2
// 1558M: fp32 moments and the whole fp32 weights, 17.4 GiB on one rank), in the table and the JSON,
// in fp32 too; a CPU run's are its own memory.
TEST(MemoryPlan, AsyncCheckpointTakesNoGpuMemoryButPinnedHostMemory) {
  TrainConfig c = preset_run(testing::scratch_dir(), "gpt2-1558m", 16, 1024);
  const ModelConfig model = resolve_model_config(c, nullptr, std::nullopt);
  const int64_t h100 = int64_t(80) << 30;
  const MemoryPlan sync = plan_memory(c, model, DType::bf16, Device::cuda, h100);
  EXPECT_EQ(sync.ranks[0].pinned_host, 0);
  EXPECT_EQ(memory_plan_text(sync, "gpt2-1558m", {}).find("pinned"), std::string::npos);
  c.async_checkpoint = true;
  const MemoryPlan async = plan_memory(c, model, DType::bf16, Device::cuda, h100);
  EXPECT_EQ(async.ranks[0].async_checkpoint, 0);
  EXPECT_EQ(async.largest().total(), sync.largest().total());
  EXPECT_EQ(async.ranks[0].pinned_host, 3 * async.ranks[0].parameters * 4) << "moments and weights, fp32";
  const MemoryPlan cpu = plan_memory(c, model, DType::f32, Device::cpu, h100);
  EXPECT_EQ(cpu.ranks[0].async_checkpoint, async.ranks[0].pinned_host);
  EXPECT_EQ(cpu.ranks[0].pinned_host, 0);
  const MemoryPlan gpu_fp32 = plan_memory(c, model, DType::f32, Device::cuda, h100);
  EXPECT_EQ(gpu_fp32.ranks[0].async_checkpoint, 0);
  EXPECT_EQ(gpu_fp32.ranks[0].pinned_host, async.ranks[0].pinned_host);
  const std::string table = memory_plan_text(async, "gpt2-1558m", {});
  EXPECT_NE(table.find("pinned host memory (not above)"), std::string::npos) << table;
  EXPECT_NE(table.find("17.409"), std::string::npos) << table;
  EXPECT_EQ(memory_plan_json(async, "gpt2-1558m", {})["ranks"][0]["pinned_host"], async.ranks[0].pinned_host);
}

// The largest micro-batch that fits, found by bisection, is the one trying every size finds: over
// device sizes from nothing fitting to everything fitting, for one process, a 1F1B pipeline (its
// in-flight count does not depend on the size) and GPipe (whose small micro-batches cost more again,
// every one in flight: the sizes are tried one by one).
TEST(MemoryPlan, TheLargestMicroBatchThatFitsIsTheOneEverySizeFinds) {
  for (const char* schedule : {"", "1f1b", "gpipe"}) {
    TrainConfig c = preset_run(testing::scratch_dir(), "llama3.1-8b", 128, 8192);
    if (*schedule) c.pp = 2, c.tp = 2, c.dp = 4, c.zero = 1, c.recompute = "full", c.pipeline_schedule = schedule;
    const ModelConfig model = resolve_model_config(c, nullptr, std::nullopt);
    const int64_t share = c.batch_size / std::max(c.dp, 1), most = share / c.pp;
    for (double gib = 20; gib <= 400; gib *= 1.01) {
      const int64_t device = int64_t(gib * double(1 << 30));
      std::optional<int64_t> want;
      for (const int64_t m : divisors_up_to(share, most)) {
        TrainConfig sized = c;
        sized.micro_batch_size = m;
        if (plan_memory(sized, model, DType::bf16, Device::cuda, device).fits()) {
          want = m;
          break;
        }
      }
      const std::optional<MemoryPlan> got = plan_largest_micro_batch(c, model, DType::bf16, Device::cuda, device, most);
      EXPECT_EQ(got ? got->micro_batch : 0, want.value_or(0)) << schedule << " at " << gib << " GiB";
    }
  }
}

// A run that misses by less than half its moments is told that bf16 moments would fit.
TEST(MemoryPlan, Bf16MomentsAreOfferedWhenTheyFit) {
  const TrainConfig c = preset_run(testing::scratch_dir(), "gpt2-124m", 1, 64);
  const ModelConfig model = resolve_model_config(c, nullptr, std::nullopt);
  const int64_t fp32 = plan_memory(c, model, DType::f32, Device::cpu, int64_t(1) << 40).largest().total();
  TrainConfig halved = c;
  halved.optimizer_moments = "bf16";
  const RankMemory bf16 = plan_memory(halved, model, DType::f32, Device::cpu, int64_t(1) << 40).largest();
  EXPECT_EQ(fp32 - bf16.total(), bf16.optimizer) << "half of the fp32 moments' bytes";
  const int64_t device = (fp32 + bf16.total()) / 2;
  const std::vector<std::string> fixes = memory_plan_fixes(c, model, DType::f32, Device::cpu, device);
  bool offered = false;
  for (const std::string& fix : fixes) offered |= fix.starts_with("--optimizer-moments bf16");
  EXPECT_TRUE(offered) << "fixes: " << ::testing::PrintToString(fixes);
  EXPECT_TRUE(plan_memory(halved, model, DType::f32, Device::cpu, device).fits());
}

TEST(MemoryPlan, PowerSgdMatchesTheAllocatorPeak) {
  for (int zero : {0, 1}) expect_plan_matches_training({"gpt2-tiny", "none", 8, 64, zero, 2});
  expect_plan_matches_training({"llama-tiny", "none", 8, 64, 0, 1});
}

// A GPU run's attention backward on cuDNN: deterministic, its workspace holds dS for every head
// (B·NH·T² 16-bit values); --nondeterministic, only the fp32 dq accumulator; none on Tessera's
// kernels, under the document mask, under cp's ring attention, or in fp32. auto leaves cuDNN (and its
// workspace) above 2 GiB: GPT-2 124M at micro-batch 64 (1.5 GiB) keeps it, at 128 it does not.
TEST(MemoryPlan, CudnnAttentionWorkspaceOnTheGpu) {
  const std::filesystem::path dir = testing::scratch_dir();
  TrainConfig c = testing::tiny_run(dir);
  c.model = "gpt2-124m";
  c.batch_size = c.micro_batch_size = 64;
  c.seq_len = 1024;
  const ModelConfig model = resolve_model_config(c, nullptr, std::nullopt);
  const auto rank = [&](const TrainConfig& config, DType compute = DType::bf16) {
    return plan_memory(config, model, compute, Device::cuda, int64_t(80) << 30).ranks[0];
  };
  const int64_t dS = 64 * 12 * int64_t(1024 * 1024) * 2;
  EXPECT_EQ(rank(c).attention_workspace, dS);
  EXPECT_EQ(rank(c, DType::f16).attention_workspace, dS);
  EXPECT_EQ(rank(c, DType::f32).attention_workspace, 0);
  TrainConfig changed = c;
  changed.attention_kernel = "tessera";
  EXPECT_EQ(rank(changed).attention_workspace, 0);
  EXPECT_EQ(rank(c).total() - rank(changed).total(), dS) << "the workspace is all the kernel changes";
  changed = c;
  changed.deterministic = false;
  EXPECT_EQ(rank(changed).attention_workspace, 64 * 12 * 1024 * 64 * 4);
  changed = c;
  changed.attention_mask = "document";
  EXPECT_EQ(rank(changed).attention_workspace, 0);
  changed = c;
  changed.cp = 2;
  EXPECT_EQ(rank(changed).attention_workspace, 0);
  changed = c;
  changed.batch_size = changed.micro_batch_size = 128;
  EXPECT_EQ(rank(changed).attention_workspace, 0) << "3 GiB: auto takes Tessera's kernels";
  changed.attention_kernel = "cudnn";
  EXPECT_EQ(rank(changed).attention_workspace, 2 * dS) << "chosen by name, cuDNN keeps its workspace";
}

// A GPU run's matmuls hold cuBLASLt's workspace from the first on, in every dtype (fp32 runs through
// cuBLASLt too); a CPU run's hold none.
TEST(MemoryPlan, CublasLtWorkspaceOnTheGpu) {
  const std::filesystem::path dir = testing::scratch_dir();
  TrainConfig c = testing::tiny_run(dir);
  const ModelConfig model = resolve_model_config(c, nullptr, std::nullopt);
  const auto rank = [&](DType compute, Device device = Device::cuda) {
    return plan_memory(c, model, compute, device, int64_t(80) << 30).ranks[0];
  };
  EXPECT_EQ(rank(DType::bf16).matmul_workspace, int64_t(32) << 20);
  EXPECT_EQ(rank(DType::f16).matmul_workspace, int64_t(32) << 20);
  EXPECT_EQ(rank(DType::f32).matmul_workspace, int64_t(32) << 20);
  EXPECT_EQ(rank(DType::f32, Device::cpu).matmul_workspace, 0);
  const RankMemory bf16 = rank(DType::bf16);
  RankMemory without = bf16;
  without.matmul_workspace = 0;
  EXPECT_EQ(bf16.total() - without.total(), int64_t(32) << 20) << "the total counts it";
}

}  // namespace
}  // namespace tessera
