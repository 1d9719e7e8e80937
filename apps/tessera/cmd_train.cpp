// tessera train: every TrainConfig field as a flag (and --config key). With no data flags it runs
// the embedded default: a small GPT trained on Debian's fortunes corpus with its own tokenizer.
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include "checkpoint/hf_model.h"
#include "commands.h"
#include "core/cuda/device.h"
#include "core/user_text.h"
#include "data/tokenizer.h"
#include "nn/model_presets.h"
#include "parallel/runtime.h"
#include "train/stop_signal.h"
#include "train/default_run.h"
#include "train/generate.h"
#include "train/launch.h"
#include "train/model_setup.h"
#include "train/trainer.h"

namespace tessera::cli {
namespace {

std::string preset_list() {
  std::string names;
  for (const std::string& name : model_preset_names()) names += (names.empty() ? "" : ", ") + name;
  return names;
}

}  // namespace

void bind_layout_flags(CLI::App& cmd, TrainConfig& c) {
  cmd.add_option("--model", c.model,
                 "Model preset (with --resume: the checkpoint's): " + preset_list())
      ->capture_default_str();
  cmd.add_option("--layers", c.layers, "Override the preset's number of layers");
  cmd.add_option("--heads", c.heads, "Override the preset's attention heads");
  cmd.add_option("--channels", c.channels, "Override the preset's width");
  cmd.add_option("--vocab-size", c.vocab_size, "Override the vocabulary size (default: the preset's or the tokenizer's)");
  cmd.add_option("--context", c.context, "Override the preset's context length");
  cmd.add_option("--init-from", c.init_from,
                 "Start from the weights of a Hugging Face " TESSERA_HF_FAMILIES " folder (config.json "
                 "+ safetensors), or of a Tessera checkpoint or run folder (its newest): fine-tuning, with a fresh "
                 "optimizer from step 0");
  cmd.add_option("--recompute", c.recompute,
                 "Activation recomputation: none, selective (attention core and activations) or full (whole blocks)")
      ->capture_default_str();
  cmd.add_option("--recompute-layers", c.recompute_layers, "Recompute only the first N blocks (0 = every block)")
      ->capture_default_str();
  cmd.add_option("--batch-size", c.batch_size, "Global batch in sequences")->capture_default_str();
  cmd.add_option("--micro-batch-size", c.micro_batch_size, "Sequences per forward pass (0 = --batch-size)")
      ->capture_default_str();
  cmd.add_option("--seq-len", c.seq_len, "Tokens per sequence")->capture_default_str();
  cmd.add_option("--dtype", c.dtype, "Compute precision: auto (bf16 on the GPU, fp32 on the CPU), fp32, bf16 or fp16")
      ->capture_default_str();
  cmd.add_option("--dp", c.dp, "Data-parallel degree (0 = the world size / (tp·pp·cp))")->capture_default_str();
  cmd.add_option("--tp", c.tp, "Tensor-parallel degree")->capture_default_str();
  cmd.add_option("--pp", c.pp, "Pipeline-parallel degree")->capture_default_str();
  cmd.add_flag("--sequence-parallel,!--no-sequence-parallel", c.sequence_parallel,
               "With --tp: norms and residual adds hold 1/tp of the positions (on by default)");
  cmd.add_option("--virtual-stages", c.virtual_stages, "Model chunks per pipeline rank (interleaved schedule)")
      ->capture_default_str();
  cmd.add_option("--pipeline-schedule", c.pipeline_schedule, "gpipe, 1f1b, interleaved or zero-bubble")
      ->capture_default_str();
  cmd.add_option("--pipeline-boundaries", c.pipeline_boundaries,
                 "The first block of each pipeline chunk after the first (default: balanced by cost)")
      ->delimiter(',');
  cmd.add_option("--cp", c.cp,
                 "Context-parallel degree: each sequence split over cp ranks (--seq-len a multiple of 2·cp)")
      ->capture_default_str();
  cmd.add_option("--cp-comm", c.cp_comm,
                 "How the --cp ranks share attention: ring (key/value blocks passed around) or all-to-all (each rank "
                 "the whole sequence of 1/cp of the heads; cp divides the heads)")
      ->capture_default_str();
  cmd.add_option("--ep", c.ep,
                 "Expert-parallel degree: each MoE layer's experts shared out over ep data-parallel ranks (divides "
                 "--dp and the experts)")
      ->capture_default_str();
  cmd.add_option("--zero", c.zero,
                 "ZeRO stage: 0, 1 (shard optimizer state), 2 (and gradients, reduced block by block) or 3 (and "
                 "parameters; over --dp and --cp, a tp rank's slices of a pipeline stage, an ep rank's experts)")
      ->capture_default_str();
  cmd.add_option("--bucket-mb", c.bucket_mb, "Gradient bucket size in MiB (ZeRO 2/3: one bucket per block)")->capture_default_str();
  cmd.add_option("--grad-reduce-dtype", c.grad_reduce_dtype,
                 "fp32, or bf16: data-parallel gradients reduced compressed to half the bytes")
      ->capture_default_str();
  cmd.add_option("--optimizer-moments", c.optimizer_moments,
                 "fp32, or bf16: AdamW's two moments in half the memory and traffic, each update rounded "
                 "stochastically (unbiased; identical across layouts)")
      ->capture_default_str();
  cmd.add_flag("--async-checkpoint", c.async_checkpoint,
               "Write checkpoints on a background thread: training stalls only to copy the state to host memory "
               "(from a GPU beside the training, waiting for it only before the next update)");
  cmd.add_option("--checkpoint-weights", c.checkpoint_weights,
                 "whole: rank 0 gathers and writes model.safetensors; sharded: every rank writes its slices of the "
                 "weights beside its moments, nothing is gathered (convert --to-hf makes a whole copy); auto: "
                 "sharded under --zero 3")
      ->capture_default_str();
  cmd.add_option("--powersgd-rank", c.powersgd_rank,
                 "Compress data-parallel gradients with PowerSGD at this rank (0 = off; with --zero 0 or 1)")
      ->capture_default_str();
  cmd.add_option("--attention-kernel", c.attention_kernel, kAttentionKernelHelp)->capture_default_str();
  cmd.add_flag("!--nondeterministic", c.deterministic,
               "Let GPU kernels sum in a varying order where that is faster (cuDNN's attention backward adds dQ "
               "with atomics), so the last bits of a run's numbers differ from run to run");
  cmd.add_option("--attention-mask", c.attention_mask,
                 "causal: each token attends to the whole window before it; document: only to its own document's "
                 "tokens (documents start at the tokenizer's BOS or <|endoftext|>), for packed sequences")
      ->capture_default_str();
}

void bind_train_flags(CLI::App& cmd, TrainConfig& c) {
  bind_layout_flags(cmd, c);
  cmd.add_option("--moe-aux-coef", c.moe_aux_coef, "MoE load-balancing loss coefficient")->capture_default_str();
  cmd.add_option("--moe-z-coef", c.moe_z_coef, "MoE router z-loss coefficient (0 = off)")->capture_default_str();
  cmd.add_option("--moe-capacity-factor", c.moe_capacity_factor,
                 "MoE expert capacity as a multiple of an even share; tokens beyond it are dropped (0 = dropless)")
      ->capture_default_str();
  cmd.add_option("--moe-bias-rate", c.moe_bias_rate,
                 "Sigmoid routers: step of the auxiliary-loss-free bias balancing (DeepSeek-V3)")
      ->capture_default_str();
  cmd.add_option("--train-data", c.train_data, "Glob of llm.c token shards to train on, or a weighted mixture of globs: "
                 "0.7:web/train_*.bin,0.3:code/train_*.bin (each batch draws its sequences by the weights)");
  cmd.add_option("--val-data", c.val_data, "Glob of token shards for validation (or a weighted mixture, as --train-data)");
  cmd.add_option("--choices", c.choices, "Multiple-choice JSON lines (HellaSwag's hellaswag_val.jsonl, as eval's "
                 "--choices) scored at every validation: choices_acc, choices_acc_norm and choices_loss (the right "
                 "choices' loss per token) in metrics.jsonl");
  cmd.add_option("--tokenizer", c.tokenizer,
                 "tokenizer.json, a *.tiktoken file, or a folder with tokenizer.json (a Hugging Face model's) or "
                 "encoder.json + vocab.bpe; a preset's vocabulary follows it");
  cmd.add_option("--steps", c.steps, "Optimizer steps")->capture_default_str();
  cmd.add_option("--lr", c.lr, "Peak learning rate")->capture_default_str();
  cmd.add_option("--min-lr", c.min_lr, "Final learning rate of cosine/wsd")->capture_default_str();
  cmd.add_option("--lr-schedule", c.lr_schedule, "constant, cosine, linear or wsd")->capture_default_str();
  cmd.add_option("--warmup", c.warmup, "Linear warmup steps")->capture_default_str();
  cmd.add_option("--decay-fraction", c.decay_fraction, "wsd: fraction of steps spent decaying")->capture_default_str();
  cmd.add_option("--weight-decay", c.weight_decay, "AdamW decoupled weight decay (matrices and embeddings only)")
      ->capture_default_str();
  cmd.add_option("--beta1", c.beta1, "AdamW beta1")->capture_default_str();
  cmd.add_option("--beta2", c.beta2, "AdamW beta2")->capture_default_str();
  cmd.add_option("--eps", c.eps, "AdamW epsilon")->capture_default_str();
  cmd.add_option("--grad-clip", c.grad_clip, "Clip the global gradient norm to this (0 = off)")->capture_default_str();
  cmd.add_option("--data-order", c.data_order, "sequential or shuffled")->capture_default_str();
  cmd.add_option("--seed", c.seed, "Seed of initialisation and data order")->capture_default_str();
  cmd.add_option("--eval-every", c.eval_every, "Validate every N steps (0 = at the end only)")->capture_default_str();
  cmd.add_option("--eval-batches", c.eval_batches, "Micro-batches per validation")->capture_default_str();
  cmd.add_flag("--eval-only", c.eval_only,
               "Validate the (--resume'd) weights on --val-data under this run's layout, print val_loss and stop: "
               "no training step, nothing written (Megatron's --skip-train)");
  cmd.add_option("--checkpoint-every", c.checkpoint_every, "Checkpoint every N steps (0 = at the end only)")
      ->capture_default_str();
  cmd.add_option("--keep-checkpoints", c.keep_checkpoints, "Keep the newest N checkpoints in --out-dir (0 = all)")
      ->capture_default_str();
  cmd.add_option("--keep-every", c.keep_every, "Also keep every checkpoint whose step is a multiple of this (0 = none)")
      ->capture_default_str();
  cmd.add_option("--max-bad-steps", c.max_bad_steps,
                 "Skipped steps in a row (non-finite loss or grad norm, spikes) that stop the run")
      ->capture_default_str();
  cmd.add_option("--spike-zscore", c.spike_zscore,
                 "Skip a step whose loss or grad norm is this many standard deviations above the recent ones (0 = off)")
      ->capture_default_str();
  cmd.add_option("--sample-every", c.sample_every, "Print a generated sample every N steps (0 = never)")
      ->capture_default_str();
  cmd.add_option("--out-dir", c.out_dir, "Run folder: checkpoints, metrics, tokenizer")->capture_default_str();
  cmd.add_option("--metrics-file", c.metrics_file, "JSON lines per step (default <out-dir>/metrics.jsonl)");
  cmd.add_option("--tensorboard-dir", c.tensorboard_dir,
                 "Also write the metrics as TensorBoard scalars into this folder (tensorboard --logdir reads it)");
  cmd.add_option("--threads", c.threads, "CPU threads (0 = all cores)")->capture_default_str();
  cmd.add_option("--device", c.device, "auto (the GPU when one is usable, else the CPU), cuda or cpu")
      ->capture_default_str();
  cmd.add_option("--matmul-tuning", c.matmul_tuning,
                 "GPU matmuls: time this many of cuBLASLt's candidate algorithms on each shape's first call and keep "
                 "the fastest (1 = its first choice, untimed; up to 64)")
      ->capture_default_str();
  cmd.add_option("--peak-tflops", c.peak_tflops,
                 "Each rank's peak TFLOP/s for the metrics' MFU (0 = the GPU's bf16 dense peak; none on a CPU)")
      ->capture_default_str();
  cmd.add_option("--fp8", c.fp8,
                 "fp8 for the blocks' linear layers, delayed scaling: off, hybrid (E4M3 inputs and weights, E5M2 "
                 "gradients) or e4m3")
      ->capture_default_str();
  cmd.add_option("--fp8-amax-history", c.fp8_amax_history, "Steps of amax history behind each fp8 scale")
      ->capture_default_str();
  cmd.add_option("--fp8-margin", c.fp8_margin, "Headroom of the fp8 scales, in powers of two")->capture_default_str();
  cmd.add_option("--loss-scaling", c.loss_scaling, "auto (dynamic for fp16, off otherwise), dynamic or off")
      ->capture_default_str();
  cmd.add_option("--loss-scale", c.loss_scale, "Initial dynamic loss scale")->capture_default_str();
  cmd.add_option("--loss-scale-window", c.loss_scale_window, "Overflow-free steps before the loss scale doubles")
      ->capture_default_str();
  cmd.add_flag("!--no-overlap", c.overlap, "Reduce gradients after backward instead of during it");
  cmd.add_flag("!--no-reshard-after-forward", c.reshard_after_forward,
               "ZeRO-3: keep each block's gathered weights from its forward to its backward (one all-gather a block "
               "and micro-batch instead of two, for the memory of the gathered blocks)");
  cmd.add_option("--device-comm", c.device_comm,
                 "How GPU tensors travel between ranks: auto (NCCL when every rank has its own GPU), nccl, or host "
                 "(copied through host memory, over MPI)")
      ->capture_default_str();
  cmd.add_option("--comm-timeout", c.comm_timeout, "Seconds before a collective counts as hung")
      ->capture_default_str();
  cmd.add_flag("--resume", c.resume,
               "Continue from the newest complete checkpoint in --out-dir (start at step 0 when it holds none)");
  cmd.add_flag("--quiet", c.quiet, "No live progress line");
}

namespace {

// A sample from the trained model, drawn with `seed` (the run's --seed after training, reproducible; a new
// one each time a finished run is run again, so it shows another fortune).
void print_final_sample(Trainer& trainer, uint64_t seed) {
  const Tokenizer& tokenizer = *trainer.tokenizer();
  Rng rng(seed, stream_id("final-sample"));
  // Runs on past document ends (several short documents rather than one that may stop at once).
  SamplingOptions options{.max_new_tokens = std::min<int64_t>(160, trainer.model().config().max_seq_len),
                          .temperature = 0.8f, .top_k = 40, .stop_token = -1, .vocab_limit = tokenizer.vocab_size()};
  std::printf("\n--- sample ---\n");
  std::fflush(stdout);
  generate(trainer.model(), {tokenizer.document_start_token()}, options, rng, print_token_text(tokenizer));
  std::printf("\n--------------\n");
}

// Ends the process (exit 1, one line) when the job's start-up collectives, which have no timeout of
// their own (MPI_Init, the grid's communicators, NCCL's), take longer than --comm-timeout: a rank that
// is stuck or dead there would otherwise hang the whole job for good, and `tessera launch` with it.
// The launcher then ends the other ranks, and launch restarts the job.
class StartupWatchdog {
 public:
  StartupWatchdog(double seconds, LauncherPlace place)
      : thread_([this, seconds, place] {
          std::unique_lock<std::mutex> lock(mutex_);
          if (done_.wait_for(lock, std::chrono::duration<double>(seconds), [this] { return finished_; })) return;
          std::fprintf(stderr,
                       "tessera: error: rank %d of %d: the job's start-up (MPI_Init and the process grid's "
                       "communicators) did not complete within %s s (--comm-timeout); a rank is stuck or dead\n",
                       place.rank, place.size, number_text(seconds).c_str());
          std::fflush(stderr);
          std::_Exit(1);
        }) {}
  ~StartupWatchdog() {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      finished_ = true;
    }
    done_.notify_all();
    thread_.join();
  }
  StartupWatchdog(const StartupWatchdog&) = delete;
  StartupWatchdog& operator=(const StartupWatchdog&) = delete;

 private:
  std::mutex mutex_;
  std::condition_variable done_;
  bool finished_ = false;
  std::thread thread_;  // last: starts once the rest is set
};

}  // namespace

void keep_stored_shape_unless_named(TrainConfig& config, const CLI::App& command) {
  if ((config.resume || !config.init_from.empty()) && command.count("--model") == 0) config.model.clear();
}

void add_train_command(CLI::App& app) {
  auto config = std::make_shared<TrainConfig>();
  CLI::App* cmd = add_command(app, "train", "Train a model (no data flags: the embedded fortunes demo)");
  bind_train_flags(*cmd, *config);
  enable_toml_config(*cmd);
  cmd->callback([config, cmd] {
    // From here a stop request is kept: the set-up ends early when one comes (StoppedDuringSetup) and
    // the training loop saves and stops. The handlers go after the run, before the final sample.
    const LauncherPlace place = launcher_place();
    std::optional<StopSignals> stop_signals;
    stop_signals.emplace();
    StopSignals::acknowledge_on_stderr(place.rank == 0);
    apply_toml_config(*cmd);
    TrainConfig& c = *config;
    // The configuration first, before MPI starts: a refusal ends every rank at once, rank 0 saying why.
    ModelConfig model;
    try {
      // The default run names its own model (gpt2-mini), which its checkpoints hold.
      if (c.train_data.empty() && c.init_from.empty())
        apply_default_run(c, [cmd](const std::string& flag) { return cmd->count(flag) > 0; });
      else
        keep_stored_shape_unless_named(c, *cmd);
      model = check_run_config(c, place.size);
    } catch (const RunRefused& e) {
      // Refused as a bad flag is (exit 2): a restart (tessera launch) would be refused alike.
      if (place.rank != 0) throw QuietError(e.what(), e.where());  // rank 0 reports it
      throw ConfigError(e.what() + config_origin_note(e.what()), e.where());
    }
    // MPI's start and the grid's communicators wait for every rank without a timeout of their own.
    std::optional<StartupWatchdog> watchdog;
    if (place.size > 1) watchdog.emplace(c.comm_timeout, place);
    Runtime runtime(nullptr, nullptr);
    cuda_select_device_for_local_rank(runtime.local_rank());
    std::unique_ptr<Trainer> trainer;
    try {
      ProcessGrid grid = setup_process_grid(runtime, c, model);
      watchdog.reset();
      trainer = std::make_unique<Trainer>(c, grid);
    } catch (const StoppedDuringSetup& stop) {
      // Every rank agreed on it; nothing was trained, so nothing is saved. Exits 0 as a stop does.
      if (runtime.world_rank() == 0)
        std::printf("stopped by %s during set-up, before training: nothing to save, %s is as it was\n"
                    "continue with the same command\n",
                    StopSignals::name(stop.signal()), c.out_dir.c_str());
      return;
    } catch (const RunRefused& e) {
      // Refused as a bad flag is (exit 2): a restart (tessera launch) would be refused alike.
      if (runtime.world_rank() != 0) throw QuietError(e.what(), e.where());  // rank 0 reports it
      throw ConfigError(e.what() + config_origin_note(e.what()), e.where());
    } catch (const Error& e) {
      if (runtime.world_rank() != 0) throw QuietError(e.what(), e.where());  // rank 0 reports it
      throw;
    }
    if (c.eval_only) {
      stop_signals.reset();  // a validation has nothing to save: a signal ends it at once
      const Validation v = trainer->validate();  // every rank takes part
      if (runtime.world_rank() == 0) std::printf("%s\n", trainer->validation_line(trainer->start_step(), v).c_str());
      return;
    }
    TrainResult result = trainer->run();
    stop_signals.reset();
    // A save-and-stop request has nothing left to do; tessera launch repeats its request while the job
    // runs, and one landing now must not kill the rank (SIGUSR1's default) as the job winds down.
    std::signal(SIGUSR1, SIG_IGN);
    if (runtime.world_rank() != 0) return;
    if (result.already_finished) {
      std::printf("%s already finished at step %lld (--steps %lld); nothing to train: raise --steps to continue it\n"
                  "checkpoint: %s\n",
                  c.out_dir.c_str(), (long long)result.last_step, (long long)c.steps,
                  result.last_checkpoint.string().c_str());
      if (trainer->tokenizer() && trainer->model().can_generate()) print_final_sample(*trainer, std::random_device{}());
      return;
    }
    if (result.stopped_by != 0) {  // preempted: saved, and nothing else to do
      std::printf("stopped by %s after step %lld of %lld; checkpoint: %s\ncontinue with the same command%s\n",
                  StopSignals::name(result.stopped_by), (long long)result.last_step, (long long)c.steps,
                  result.last_checkpoint.string().c_str(), c.resume ? "" : " and --resume");
      return;
    }
    std::printf("trained to step %lld: loss %.4f", (long long)result.last_step, double(result.last_loss));
    if (result.last_val_loss) std::printf(", val_loss %.4f", double(*result.last_val_loss));
    std::printf("\ncheckpoint: %s\n", result.last_checkpoint.string().c_str());
    if (trainer->tokenizer() && trainer->model().can_generate()) print_final_sample(*trainer, c.seed);
  });
}

}  // namespace tessera::cli
