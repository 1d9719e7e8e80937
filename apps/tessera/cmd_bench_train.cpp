// tessera bench train: training-step throughput of a model preset on random tokens — tokens/s, MFU
// (llm.c's 6·N + 6·L·C·T FLOPs per token against the GPU's bf16 dense peak), peak memory and the
// median time of each phase. --json prints one line for scripts (bench/, tools/gpu-check.sh).
// --config takes the run's own `tessera train --config` file: one process's step of that run.
#include <omp.h>

#include <cstdio>
#include <memory>
#include <set>

#include "commands.h"
#include "core/user_text.h"
#include "data/tokenizer.h"
#include "nn/recompute.h"
#include "ops/attention.h"
#include "ops/matmul_tuning.h"
#include "optim/adamw_optimizer.h"
#include "parallel/runtime.h"
#include "train/device_choice.h"
#include "train/memory_plan.h"
#include "train/model_setup.h"
#include "train/train_bench.h"

namespace tessera::cli {
namespace {

struct BenchTrainFlags {
  TrainConfig shape;  // --model and the shape overrides, resolved as `tessera train` does
  int64_t micro_batch = 8, seq_len = 1024, grad_accum = 1, steps = 20, warmup = 3, document_length = 0,
          matmul_tuning = 1;
  std::string device = "auto", dtype = "auto", attention_kernel = "auto", fp8 = "off", optimizer_moments = "fp32";
  std::string recompute = "none";
  int64_t recompute_layers = 0;
  double peak_tflops = 0;
  bool deterministic = true, json = false;
  MoeOptions moe;           // from --config (train's --moe-aux-coef, --moe-z-coef, --moe-capacity-factor)
  std::string config_path;  // the --config file's, for the report ("" without one)
  int threads = 0;          // from --config (train's --threads); 0 = all cores
  std::vector<std::string> notes;  // what the config sets that one process's bench does not time
};

// A `tessera train --config` file read against train's own flags, as train reads it: its keys, types
// and unknown keys are checked alike (errors exit 2), and `steps` and `warmup` keep train's meaning.
struct TrainFile {
  TrainConfig run;
  std::set<std::string> keys;  // the flags the file set ("--micro-batch-size")
};

TrainFile read_train_file(const std::string& path) {
  TrainFile file;
  CLI::App train("tessera train's flags", "train");
  bind_train_flags(train, file.run);
  enable_toml_config(train);
  check_number_flags(train);
  train.get_option("--config")->add_result(path);
  apply_toml_config(train);
  for (const CLI::Option* option : train.get_options())
    if (option->count() > 0 && option->get_name() != "--config") file.keys.insert(option->get_name());
  return file;
}

// Fills the flags not given on the bench's command line from the run's --config file: the model and
// its shape, one data-parallel rank's micro-batch and accumulation (--batch-size / (--dp x
// --micro-batch-size)), the sequence length, precision, kernels, recomputation and MoE options. A
// layout of more than one process per replica (tp, pp, cp, ep) is refused: one process cannot time it.
void take_train_file(BenchTrainFlags& f, const CLI::App& cmd) {
  f.config_path = cmd.get_option("--config")->as<std::string>();
  const TrainFile file = read_train_file(f.config_path);
  const TrainConfig& r = file.run;
  const auto given = [&](const char* flag) { return cmd.count(flag) > 0; };
  const std::string where = "--config " + quoted_text(f.config_path);
  TrainConfig checked = r;  // train's own checks of its flags (a bench reads no data)
  if (checked.train_data.empty()) checked.train_data = "(bench)";
  checked.validate();
  if (r.tp > 1 || r.pp > 1 || r.cp > 1 || r.ep > 1)
    throw ConfigError(where + " lays the run out over tp " + std::to_string(r.tp) + ", pp " + std::to_string(r.pp) +
                          ", cp " + std::to_string(r.cp) + ", ep " + std::to_string(r.ep) +
                          ", and bench train times one process; train it (metrics.jsonl has tokens/s and MFU per "
                          "rank), or bench a copy of the file with those keys removed",
                      "");
  TrainConfig& shape = f.shape;
  if (!given("--model")) shape.model = r.model;
  if (!given("--layers")) shape.layers = r.layers;
  if (!given("--heads")) shape.heads = r.heads;
  if (!given("--channels")) shape.channels = r.channels;
  if (!given("--vocab-size")) shape.vocab_size = r.vocab_size;
  if (!given("--context")) shape.context = r.context;
  shape.init_from = r.init_from, shape.tokenizer = r.tokenizer;  // the shape of an imported model, a tokenizer's vocabulary
  // A resumed or imported run without a model named takes its checkpoint's (or import's) shape, as train does.
  shape.resume = r.resume, shape.out_dir = r.out_dir;
  if ((r.resume || !r.init_from.empty()) && !given("--model") && !file.keys.count("--model")) shape.model.clear();
  const int64_t dp = std::max(r.dp, 1);
  if (!given("--micro-batch-size")) f.micro_batch = r.micro_batch(int(dp));
  if (!given("--grad-accum")) {
    const int64_t share = r.batch_size / dp;
    if (f.micro_batch <= 0 || r.batch_size % dp != 0 || share % f.micro_batch != 0)
      throw ConfigError("--batch-size " + std::to_string(r.batch_size) + " of " + where + " is not a multiple of --dp " +
                            std::to_string(dp) + " x --micro-batch-size " + std::to_string(f.micro_batch) +
                            ": every data-parallel rank needs a whole number of micro-batches (train refuses it too); "
                            "give --grad-accum, or a micro-batch that divides the rank's share",
                        "");
    f.grad_accum = share / f.micro_batch;
  }
  if (!given("--seq-len")) f.seq_len = r.seq_len;
  if (!given("--device")) f.device = r.device;
  if (!given("--dtype")) f.dtype = r.dtype;
  if (!given("--attention-kernel")) f.attention_kernel = r.attention_kernel;
  if (!given("--fp8")) f.fp8 = r.fp8;
  if (!given("--matmul-tuning")) f.matmul_tuning = r.matmul_tuning;
  if (!given("--nondeterministic")) f.deterministic = r.deterministic;
  if (!given("--optimizer-moments")) f.optimizer_moments = r.optimizer_moments;
  if (!given("--peak-tflops")) f.peak_tflops = r.peak_tflops;
  if (!given("--recompute")) f.recompute = r.recompute;
  if (!given("--recompute-layers")) f.recompute_layers = r.recompute_layers;
  f.moe = MoeOptions{r.moe_aux_coef, r.moe_z_coef, r.moe_capacity_factor};
  f.threads = r.threads;
  if (dp > 1)
    f.notes.push_back(where + " has --dp " + std::to_string(dp) + ": this is one data-parallel rank's step (" +
                      std::to_string(r.batch_size / dp) + " of the batch's " + std::to_string(r.batch_size) +
                      " sequences) without the gradient reduction; the run's tokens/s is about " +
                      std::to_string(dp) + " times this one's, less the reduction's time");
  if (r.dp == 0 && !given("--grad-accum") && f.grad_accum > 1)
    f.notes.push_back(where + " sets no --dp, so the run's is its number of processes: this benches the whole batch "
                      "in one process (" + std::to_string(f.grad_accum) + " micro-batches a step); give --grad-accum "
                      "for one rank's share (more accumulation only spreads the optimizer's time over more tokens)");
  if (r.attention_mask == "document" && !given("--document-length"))
    f.notes.push_back(where + " has --attention-mask document: give --document-length (the documents' typical "
                      "length) to time attention within documents; this times whole causal windows");
  if (dp > 1 && (r.zero > 0 || r.powersgd_rank > 0 || r.grad_reduce_dtype != "fp32"))
    f.notes.push_back(where + " sets --zero " + std::to_string(r.zero) + ", --powersgd-rank " +
                      std::to_string(r.powersgd_rank) + ", --grad-reduce-dtype " + r.grad_reduce_dtype +
                      ": they change the gradient reduction and the optimizer's shards, which one process does not "
                      "time (its optimizer updates the whole model)");
}

void run_bench_train(const BenchTrainFlags& f) {
  TrainBenchOptions o;
  // A preset's vocabulary follows --tokenizer, as in train (from --config; --vocab-size wins).
  std::unique_ptr<Tokenizer> tokenizer;
  if (!f.shape.tokenizer.empty()) tokenizer = std::make_unique<Tokenizer>(Tokenizer::load(f.shape.tokenizer));
  const std::optional<std::filesystem::path> checkpoint = resumed_checkpoint_shape(f.shape);
  o.model = resolve_model_config(f.shape, tokenizer.get(), checkpoint);
  o.model_name = !f.shape.model.empty() ? f.shape.model
                 : checkpoint           ? checkpoint->string()
                 : f.shape.init_from.empty() ? TrainConfig{}.model
                                             : f.shape.init_from;
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
  o.recompute = RecomputePolicy{parse_recompute(f.recompute), f.recompute_layers};
  o.moe = f.moe;
  check_train_bench_options(o);
  if (f.threads > 0) omp_set_num_threads(f.threads);
  for (const std::string& note : f.notes) std::fprintf(stderr, "tessera: note: %s\n", note.c_str());
  const DeviceChoice device = choose_device_noting(f.device, o.model);
  o.device = device.device;
  o.dtype = choose_compute_dtype(f.dtype, device);
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
  const std::string recompute =
      o.recompute.mode == Recompute::none ? "" : ", recompute " + j["recompute"].get<std::string>();
  const std::string config = f.config_path.empty() ? "" : " (--config " + quoted_text(f.config_path) + ")";
  std::printf("tessera bench train: %s%s in %s%s%s on %s (%s attention%s), B=%lld T=%lld%s x%lld accumulation%s, %lld "
              "timed steps\n",
              o.model_name.c_str(), config.c_str(), j["dtype"].get<std::string>().c_str(),
              o.fp8.recipe == Fp8Recipe::off ? "" : (" with fp8 " + fp8_recipe_name(o.fp8.recipe)).c_str(),
              o.moments == DType::bf16 ? ", bf16 AdamW moments" : "",
              j["device_name"].get<std::string>().c_str(),
              attention.c_str(), o.deterministic ? "" : ", nondeterministic",
              (long long)o.micro_batch, (long long)o.seq_len,
              documents.c_str(), (long long)o.grad_accum, recompute.c_str(), (long long)o.steps);
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
  cmd->add_option("--recompute", f->recompute, "Activation recomputation: none, selective or full (as train's)")
      ->capture_default_str();
  cmd->add_option("--recompute-layers", f->recompute_layers, "Recompute only the first N blocks (0 = all, as train's)")
      ->capture_default_str();
  cmd->add_option("--peak-tflops", f->peak_tflops, "Peak TFLOP/s for MFU (default: the GPU's bf16 dense peak)");
  cmd->add_flag("--json", f->json, "Print one JSON line");
  cmd->add_option("--config",
                  "The run's TOML file, as tessera train --config takes it (keys are train's flags): its model, "
                  "micro-batch, accumulation (--batch-size / (--dp x --micro-batch-size)), --seq-len, precision, "
                  "kernels and recomputation are benched; its steps and warmup are the run's, not the bench's. "
                  "Flags on the command line win")
      ->type_name("FILE");
  cmd->callback([f, cmd] {
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
    if (cmd->count("--config") > 1)
      throw ConfigError("--config given " + std::to_string(cmd->count("--config")) + " times; give one file", "");
    BenchTrainFlags flags = *f;
    if (cmd->count("--config") > 0) take_train_file(flags, *cmd);
    run_bench_train(flags);
  });
}

}  // namespace tessera::cli
