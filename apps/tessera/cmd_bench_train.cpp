// tessera bench train: training-step throughput of a model preset on random tokens — tokens/s, MFU
// (llm.c's 6·N + 6·L·C·T FLOPs per token against the GPU's bf16 dense peak), peak memory and the
// median time of each phase. --json prints one line for scripts (bench/, tools/gpu-check.sh).
#include <cstdio>

#include "commands.h"
#include "ops/attention.h"
#include "ops/matmul_tuning.h"
#include "optim/adamw_optimizer.h"
#include "parallel/runtime.h"
#include "train/device_choice.h"
#include "train/model_setup.h"
#include "train/train_bench.h"

namespace tessera::cli {
namespace {

struct BenchTrainFlags {
  TrainConfig shape;  // --model and the shape overrides, resolved as `tessera train` does
  int64_t micro_batch = 8, seq_len = 1024, grad_accum = 1, steps = 20, warmup = 3, document_length = 0,
          matmul_tuning = 1;
  std::string device = "auto", dtype = "auto", attention_kernel = "auto", fp8 = "off", optimizer_moments = "fp32";
  double peak_tflops = 0;
  bool deterministic = true, json = false;
};

void run_bench_train(const BenchTrainFlags& f) {
  TrainBenchOptions o;
  o.model = resolve_model_config(f.shape, nullptr, std::nullopt);
  o.model_name = f.shape.model;
  o.micro_batch = f.micro_batch;
  o.seq_len = f.seq_len;
  o.grad_accum = f.grad_accum;
  o.steps = f.steps;
  o.warmup = f.warmup;
  o.peak_tflops = f.peak_tflops;
  o.document_length = f.document_length;
  o.attention_kernel = parse_attention_kernel(f.attention_kernel);  // flags first, then the device's notice
  o.fp8 = Fp8Options{parse_fp8_recipe(f.fp8)};
  o.matmul_tuning = f.matmul_tuning;
  o.deterministic = f.deterministic;
  o.moments = parse_optimizer_moments(f.optimizer_moments);
  check_train_bench_options(o);
  o.device = choose_device_noting(f.device);
  o.dtype = choose_compute_dtype(f.dtype, o.device);
  const TrainBenchResult r = run_train_bench(o);
  if (f.json) {
    std::printf("%s\n", train_bench_json(o, r).dump().c_str());
    return;
  }
  const nlohmann::json j = train_bench_json(o, r);
  const std::string documents =
      o.document_length > 0 ? ", documents of " + std::to_string(o.document_length) + " tokens" : "";
  const std::string attention =
      j["attention_kernel"].get<std::string>() + (r.attention_used.empty() ? "" : " -> " + r.attention_used);
  std::printf("tessera bench train: %s in %s%s%s on %s (%s attention%s), B=%lld T=%lld%s x%lld accumulation, %lld "
              "timed steps\n",
              o.model_name.c_str(), j["dtype"].get<std::string>().c_str(),
              o.fp8.recipe == Fp8Recipe::off ? "" : (" with fp8 " + fp8_recipe_name(o.fp8.recipe)).c_str(),
              o.moments == DType::bf16 ? ", bf16 AdamW moments" : "",
              j["device_name"].get<std::string>().c_str(),
              attention.c_str(), o.deterministic ? "" : ", nondeterministic",
              (long long)o.micro_batch, (long long)o.seq_len,
              documents.c_str(), (long long)o.grad_accum, (long long)o.steps);
  std::printf("  %.0f tokens/s, %.2f ms/step (min %.2f, max %.2f)\n", r.tokens_per_s, r.ms_per_step, r.ms_min,
              r.ms_max);
  std::printf("  forward %.2f ms, backward %.2f ms, grad-norm + AdamW %.2f ms\n", r.forward_ms, r.backward_ms,
              r.optimizer_ms);
  if (r.peak_flops > 0)
    std::printf("  MFU %.1f%% of %.0f TFLOP/s (%.3g FLOPs/token)\n", 100 * r.mfu, r.peak_flops / 1e12,
                r.flops_per_token);
  else
    std::printf("  MFU: peak unknown for this device; give --peak-tflops\n");
  std::printf("  peak memory %.2f GiB, final loss %.4f\n", j["peak_mem_gib"].get<double>(), double(r.final_loss));
  if (r.matmul_tuned.empty()) return;
  std::printf("  %s\n", matmul_tuning_summary(r.matmul_tuned).c_str());
  for (const MatmulTuningRecord& t : r.matmul_tuned)
    if (t.chosen != 0)
      std::printf("    %s: candidate %d of %d, %.1f -> %.1f us\n", t.problem.c_str(), t.chosen + 1, t.timed,
                  double(t.first_us), double(t.best_us));
}

}  // namespace

void add_bench_train_command(CLI::App& bench) {
  auto f = std::make_shared<BenchTrainFlags>();
  CLI::App* cmd = add_command(bench, "train", "Time training steps of a model on random tokens: tokens/s, MFU, memory");
  cmd->add_option("--model", f->shape.model, "Model preset")->capture_default_str();
  cmd->add_option("--layers", f->shape.layers, "Override the preset's number of layers");
  cmd->add_option("--heads", f->shape.heads, "Override the preset's attention heads");
  cmd->add_option("--channels", f->shape.channels, "Override the preset's width");
  cmd->add_option("--vocab-size", f->shape.vocab_size, "Override the preset's vocabulary size");
  cmd->add_option("--context", f->shape.context, "Override the preset's context length");
  cmd->add_option("--micro-batch-size", f->micro_batch, "Sequences per forward pass")->capture_default_str();
  cmd->add_option("--seq-len", f->seq_len, "Tokens per sequence")->capture_default_str();
  cmd->add_option("--grad-accum", f->grad_accum, "Micro-batches per optimizer step")->capture_default_str();
  cmd->add_option("--steps", f->steps, "Timed steps")->capture_default_str();
  cmd->add_option("--warmup", f->warmup, "Untimed steps first")->capture_default_str();
  cmd->add_option("--device", f->device, "auto, cuda or cpu")->capture_default_str();
  cmd->add_option("--dtype", f->dtype, "auto (bf16 on the GPU, fp32 on the CPU), fp32, bf16 or fp16")
      ->capture_default_str();
  cmd->add_option("--attention-kernel", f->attention_kernel, kAttentionKernelHelp)->capture_default_str();
  cmd->add_option("--document-length", f->document_length,
                  "Pack each window with documents of this many tokens and attend within each (train's "
                  "--attention-mask document); 0: one causal window")
      ->capture_default_str();
  cmd->add_option("--fp8", f->fp8, "fp8 for the blocks' linear layers: off, hybrid or e4m3 (as train's --fp8)")
      ->capture_default_str();
  cmd->add_option("--matmul-tuning", f->matmul_tuning,
                  "Time this many of cuBLASLt's candidate algorithms on each matmul shape's first call and keep the "
                  "fastest (1 = its first choice, untimed; up to 64)")
      ->capture_default_str();
  cmd->add_flag("!--nondeterministic", f->deterministic,
                "Let GPU kernels sum in a varying order where that is faster (as train's --nondeterministic)");
  cmd->add_option("--optimizer-moments", f->optimizer_moments,
                  "fp32, or bf16: AdamW's moments in half the memory, rounded stochastically (as train's)")
      ->capture_default_str();
  cmd->add_option("--peak-tflops", f->peak_tflops, "Peak TFLOP/s for MFU (default: the GPU's bf16 dense peak)");
  cmd->add_flag("--json", f->json, "Print one JSON line");
  cmd->callback([f] {
    // Under mpirun every rank would time its own one-process step and print its own report; rank 0
    // alone says so.
    const LauncherPlace place = launcher_place();
    if (place.size != 1) {
      const std::string message = "bench train times one process's training step, but the launcher started " +
                                  std::to_string(place.size) + "; run it without mpirun or srun (a multi-rank run's "
                                  "tokens/s is in its metrics.jsonl, and tessera bench comm times the collectives)";
      if (place.rank != 0) throw QuietError(message, "");
      TS_FAIL(message);
    }
    run_bench_train(*f);
  });
}

}  // namespace tessera::cli
