// tessera plan: what a parallel layout will do, before a run. `plan pipeline` simulates a pipeline
// schedule (parallel/pp): each rank's timeline, the bubble against the textbook value, and the most
// micro-batches whose activations a stage holds at once; with --model, which blocks each chunk holds
// (nn/stage_partition: balanced by cost, or --pipeline-boundaries) and each chunk's share of the work.
// `plan memory` takes `tessera train`'s flags (or its --config file) and prints each rank's bytes
// (train/memory_plan), with the GPU's reserve for what is not Tessera's (--reserve-gb); `plan layout`
// lists the layouts that fit (train/layout_search).
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "data/tokenizer.h"
#include "nn/model_presets.h"
#include "nn/stage_partition.h"
#include "parallel/pp/pipeline_render.h"
#include "parallel/pp/pipeline_simulator.h"
#include "train/device_choice.h"
#include "train/memory_plan_report.h"
#include "train/model_setup.h"
#include "train/pipeline_plan.h"

namespace tessera::cli {
namespace {

struct PipelineOptions {
  int pp = 4, micro_batches = 8, virtual_stages = 1;
  std::string schedule = "1f1b", svg, model;
  int64_t seq_len = 1024;
  std::vector<int64_t> boundaries;
};

// Which blocks each chunk of `model` holds, and its share of a step's work.
std::string stages_text(const PipelineOptions& o) {
  const ModelConfig config = model_preset(o.model);
  const int chunks = o.pp * o.virtual_stages;
  const StageBoundaries b = o.boundaries.empty() ? balanced_boundaries(config, o.seq_len, chunks)
                                                 : explicit_boundaries(o.boundaries, config.num_layers, chunks);
  const std::vector<double> costs = chunk_costs(config, o.seq_len, b);
  double total = 0, most = 0;
  for (double c : costs) total += c, most = std::max(most, c);
  char line[200];
  std::snprintf(line, sizeof line, "%s, T = %lld: %s stages\n", o.model.c_str(), static_cast<long long>(o.seq_len),
                o.boundaries.empty() ? "cost-balanced" : "explicit");
  std::string text = line;
  for (int c = 0; c < chunks; ++c) {
    std::snprintf(line, sizeof line, "  chunk %d (rank %d): blocks %lld-%lld%s, %.1f%% of the work\n", c, c % o.pp,
                  static_cast<long long>(b[size_t(c)]), static_cast<long long>(b[size_t(c) + 1] - 1),
                  c == 0 && c == chunks - 1 ? " + embedding, head"
                  : c == 0                  ? " + embedding"
                  : c == chunks - 1         ? " + head"
                                            : "",
                  100.0 * costs[size_t(c)] / total);
    text += line;
  }
  std::snprintf(line, sizeof line, "  slowest chunk / mean: %.3f\n", most * chunks / total);
  return text + line;
}

void plan_pipeline(const PipelineOptions& o) {
  // Checked before the simulation and the timeline, which grow with pp²: --pp 30000 took 85 s.
  // A chunk holds a block at least, so no run has more chunks than the largest model has blocks.
  TS_CHECK(int64_t(o.pp) * o.virtual_stages <= kMaxLayers, "--pp ", o.pp, " x --virtual-stages ", o.virtual_stages,
           " is more pipeline chunks than the ", kMaxLayers,
           " blocks of the largest model Tessera builds (each chunk holds one at least); use fewer stages");
  const ScheduleKind kind = parse_schedule_kind(o.schedule);
  const PipelineSchedule schedule = make_pipeline_schedule(kind, o.pp, o.micro_batches, o.virtual_stages);
  const std::string stages = o.model.empty() ? std::string() : stages_text(o);  // refused before any output
  const PipelineTimeline t = simulate_pipeline(schedule);
  const std::string title = o.schedule + ", pp " + std::to_string(o.pp) + ", " + std::to_string(o.micro_batches) +
                            " micro-batches, " + std::to_string(o.virtual_stages) + " virtual stage(s)";
  std::printf("%s (forward 1, backward 2 per stage; zero-bubble: input and weight gradients 1 each)\n%s",
              title.c_str(), timeline_text(t).c_str());
  std::printf("bubble: %.4f of the ranks' time (textbook %.4f); makespan %.2f\n", t.bubble_fraction(),
              analytic_bubble_fraction(kind, o.pp, o.micro_batches, o.virtual_stages), t.makespan);
  std::printf("micro-batches in flight at most, per rank:");
  for (int peak : t.peak_in_flight) std::printf(" %d", peak);
  std::printf("\n");
  if (!o.svg.empty()) {
    write_file_atomic(o.svg, timeline_svg(t, title));
    std::printf("timeline: %s\n", o.svg.c_str());
  }
  std::printf("%s", stages.c_str());
}

// An H100 80GB's memory as the driver reports it: 81,559 MiB.
constexpr double kDefaultDeviceMemoryGb = 79.6;
constexpr const char* kDeviceMemoryHelp =
    "Memory of one device in GiB, as nvidia-smi reports it in MiB / 1024 (H100 80GB: 79.6; H200: 140.4)";
constexpr const char* kReserveHelp =
    "GiB of each GPU that are none of Tessera's allocations: the CUDA context, cuBLAS/cuDNN handles, NCCL's buffers "
    "(an estimate: a run's use in nvidia-smi, in MiB / 1024, less its metrics' peak_mem_mb / 1073.74 measures it)";

// --reserve-gb in bytes: as given, else the default of the device planned (none on the CPU); less
// than the device's memory.
int64_t reserve_bytes(double reserve_gb, bool given, Device device, double device_memory_gb) {
  TS_CHECK(reserve_gb >= 0, "--reserve-gb must not be negative, got ", reserve_gb);
  const int64_t bytes = !given ? (device == Device::cuda ? kDefaultGpuReserveBytes : 0)
                               : int64_t(reserve_gb * double(int64_t(1) << 30));
  TS_CHECK(double(bytes) < device_memory_gb * double(int64_t(1) << 30), "--reserve-gb ",
           double(bytes) / double(int64_t(1) << 30), " leaves nothing of --device-memory-gb ", device_memory_gb,
           "; give the device's whole memory there and a reserve below it");
  return bytes;
}

struct MemoryOptions {
  TrainConfig run;
  double device_memory_gb = kDefaultDeviceMemoryGb;
  double reserve_gb = double(kDefaultGpuReserveBytes) / double(int64_t(1) << 30);
  bool json = false;
};

// What train does with a model no GPU kernel serves yet.
constexpr const char* kTrainOnTheCpu =
    "`tessera train` runs it on the CPU under --device auto and refuses --device cuda";

// Notes on what the plan cannot know or does not model, one line each: a GPU plan of a model that runs on the
// CPU only, --fp8's copies, and under expert parallelism without a capacity, how much a rank the router
// favours holds beyond its even share.
std::vector<std::string> plan_notes(const TrainConfig& c, const ModelConfig& model, DType compute, Device device,
                                    int64_t device_bytes, int64_t reserve, const MemoryPlan& plan) {
  std::vector<std::string> notes;
  if (const std::string cpu_only = gpu_unsupported(model); !cpu_only.empty() && device == Device::cuda)
    notes.push_back(cpu_only + ": " + kTrainOnTheCpu + " (--device cpu plans the CPU run)");
  if (parse_fp8_recipe(c.fp8) != Fp8Recipe::off)
    notes.push_back("--fp8 " + c.fp8 + " is not planned: its quantized copies of each linear layer's operands are "
                    "not counted");
  if (model.moe.enabled() && plan.dims.ep > 1 && c.moe_capacity_factor <= 0) {
    std::string more;
    try {  // twice the even share: the rows a capacity factor of 2 lets a rank's experts take at most
      TrainConfig doubled = c;
      doubled.moe_capacity_factor = 2;
      const double extra = double(plan_memory(doubled, model, compute, device, device_bytes, reserve).largest().total() -
                                  plan.largest().total());
      char text[120];
      std::snprintf(text, sizeof text, "; at twice that share it holds %.2f GiB more", extra / double(int64_t(1) << 30));
      more = text;
    } catch (const Error&) {
    }
    notes.push_back("dropless routing under --ep " + std::to_string(plan.dims.ep) +
                    ": each rank's experts are planned at an even share of the routed rows (micro-batch x tokens x "
                    "top-k)" + more + "; a rank the router favours holds more (metrics.jsonl's ep_load_max_over_mean "
                    "says by how much), and --moe-capacity-factor bounds it (the plan then counts the bound)");
  }
  return notes;
}

void plan_memory_command(MemoryOptions o, const CLI::App& command) {
  TrainConfig& c = o.run;
  keep_stored_shape_unless_named(c, command);
  TS_CHECK(o.device_memory_gb > 0, "--device-memory-gb must be a positive number of GiB, got ", o.device_memory_gb);
  // Without --batch-size, a step of pp micro-batches per data-parallel rank: enough to fill a pipeline.
  if (command.count("--batch-size") == 0 && c.micro_batch_size > 0)
    c.batch_size = c.micro_batch_size * std::max(c.dp, 1) * c.pp;
  // A preset's vocabulary follows --tokenizer, as in train (--vocab-size, when given, wins).
  std::unique_ptr<Tokenizer> tokenizer;
  if (!c.tokenizer.empty()) tokenizer = std::make_unique<Tokenizer>(Tokenizer::load(c.tokenizer));
  // A resumed run's shape is its checkpoint's (as train takes it).
  const std::optional<std::filesystem::path> checkpoint = resumed_checkpoint_shape(c);
  const ModelConfig model = resolve_model_config(c, tokenizer.get(), checkpoint);
  // A GPU run unless --device cpu says otherwise (auto plans the GPU the plan is for).
  TS_CHECK(c.device == "auto" || c.device == "cuda" || c.device == "cpu", "--device must be auto, cuda or cpu, got '",
           c.device, "'");
  const Device device = c.device == "cpu" ? Device::cpu : Device::cuda;
  const DType compute = choose_compute_dtype(c.dtype, device);
  const auto device_bytes = int64_t(o.device_memory_gb * double(int64_t(1) << 30));
  const int64_t reserve = reserve_bytes(o.reserve_gb, command.count("--reserve-gb") > 0, device, o.device_memory_gb);
  const MemoryPlan plan = plan_memory(c, model, compute, device, device_bytes, reserve);
  const std::vector<std::string> fixes =
      plan.fits() ? std::vector<std::string>() : memory_plan_fixes(c, model, compute, device, device_bytes, reserve);
  const std::vector<std::string> notes = plan_notes(c, model, compute, device, device_bytes, reserve, plan);
  const std::string title = !c.model.empty() ? c.model
                            : checkpoint      ? checkpoint->string()
                            : c.init_from.empty() ? TrainConfig{}.model
                                                  : c.init_from;
  if (o.json) {
    nlohmann::json j = memory_plan_json(plan, title, fixes);
    j["notes"] = notes;
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("%s", memory_plan_text(plan, title, fixes).c_str());
  for (const std::string& note : notes) std::printf("note: %s\n", note.c_str());
}

struct LayoutOptions {
  TrainConfig run;
  int world = 8;
  double device_memory_gb = kDefaultDeviceMemoryGb;
  double reserve_gb = double(kDefaultGpuReserveBytes) / double(int64_t(1) << 30);
  size_t top = 10;
  bool json = false;
};

void plan_layout_command(LayoutOptions o) {
  TS_CHECK(o.device_memory_gb > 0, "--device-memory-gb must be a positive number of GiB, got ", o.device_memory_gb);
  TS_CHECK(o.top >= 1, "--top must be at least 1, got ", o.top);
  const ModelConfig model = resolve_model_config(o.run, nullptr, std::nullopt);
  if (const std::string cpu_only = gpu_unsupported(model); !cpu_only.empty())
    std::fprintf(stderr, "note: %s: %s\n", cpu_only.c_str(), kTrainOnTheCpu);
  const DType compute = choose_compute_dtype(o.run.dtype, Device::cuda);
  const auto device_bytes = int64_t(o.device_memory_gb * double(int64_t(1) << 30));
  const std::vector<LayoutCandidate> found =
      search_layouts(o.run, model, compute, o.world, device_bytes,
                     reserve_bytes(o.reserve_gb, true, Device::cuda, o.device_memory_gb));
  if (o.json)
    std::printf("%s\n", layout_search_json(found, o.run.model, o.world, o.top).dump(2).c_str());
  else
    std::printf("%s", layout_search_text(found, o.run.model, o.world, o.top).c_str());
}

}  // namespace

void add_plan_command(CLI::App& app) {
  CLI::App* plan = add_command(app, "plan",
                               "Plan a run before it starts: pipeline (schedule timeline, bubble), memory (bytes per "
                               "rank), layout (the layouts that fit)");
  plan->require_subcommand(1);
  auto o = std::make_shared<PipelineOptions>();
  CLI::App* pipeline =
      add_command(*plan, "pipeline", "Simulate a pipeline schedule: each rank's timeline, the bubble, micro-batches in flight");
  pipeline->add_option("--pp", o->pp, "Pipeline stages (ranks)")->capture_default_str();
  pipeline->add_option("--microbatches", o->micro_batches, "Micro-batches per step")->capture_default_str();
  pipeline->add_option("--virtual-stages", o->virtual_stages, "Model chunks per rank (interleaved schedule)")
      ->capture_default_str();
  pipeline->add_option("--schedule", o->schedule, "gpipe, 1f1b, interleaved or zero-bubble")->capture_default_str();
  pipeline->add_option("--svg", o->svg, "Also draw the timeline into this SVG file");
  pipeline->add_option("--model", o->model, "A preset: also show which blocks each chunk holds");
  pipeline->add_option("--seq-len", o->seq_len, "Tokens per sequence, for the attention cost")->capture_default_str();
  pipeline->add_option("--pipeline-boundaries", o->boundaries,
                       "The first block of each chunk after the first (default: balanced by cost)")
      ->delimiter(',');
  pipeline->callback([o] { plan_pipeline(*o); });

  auto m = std::make_shared<MemoryOptions>();
  CLI::App* memory = add_command(
      *plan, "memory",
      "Bytes each rank of a GPU run will hold at its peak (weights, gradients, AdamW moments, activations of the "
      "micro-batches in flight), and whether that fits the device; takes tessera train's flags");
  // Every train flag, so that a train command line plans as it is: the layout's, the shape's, --tokenizer
  // (a preset's vocabulary follows it) and --device change the plan; --fp8 is noted as not planned; the
  // rest (data, schedule, logging, checkpoints) change no byte and are ignored.
  bind_train_flags(*memory, m->run);
  memory->add_option("--device-memory-gb", m->device_memory_gb, kDeviceMemoryHelp)->capture_default_str();
  memory->add_option("--reserve-gb", m->reserve_gb, std::string(kReserveHelp) + "; 0 with --device cpu")
      ->capture_default_str();
  memory->add_flag("--json", m->json, "Print the plan as JSON (bytes) instead of a table");
  // --config: the run's own TOML file (`tessera train --config`), so that the plan is of that run.
  enable_toml_config(*memory);
  memory->footer(
      "--config takes the TOML file of tessera train --config (flags on the command line win). Without --batch-size, a step runs --pp micro-batches of --micro-batch-size per data-parallel rank. --device auto "
      "plans the GPU run (--device cpu the CPU's); --dtype auto is bf16, the GPU's default. Train's data, schedule, "
      "logging and checkpoint flags are accepted and change nothing; --fp8 is not planned. Under --ep, a rank's experts "
      "are planned at an even share of the routed rows, or at their capacity with --moe-capacity-factor.");
  memory->callback([m, memory] {
    apply_toml_config(*memory);
    plan_memory_command(*m, *memory);
  });

  auto l = std::make_shared<LayoutOptions>();
  CLI::App* layout = add_command(
      *plan, "layout",
      "The parallel layouts of --world ranks whose every rank fits the device (by plan memory), best first");
  layout->add_option("--model", l->run.model, "Model preset")->capture_default_str();
  layout->add_option("--world", l->world, "Ranks (GPUs) to lay out")->capture_default_str();
  layout->add_option("--batch-size", l->run.batch_size, "Global batch in sequences")->capture_default_str();
  layout->add_option("--seq-len", l->run.seq_len, "Tokens per sequence")->capture_default_str();
  layout->add_option("--dtype", l->run.dtype, "Compute precision: auto (bf16), fp32, bf16 or fp16")->capture_default_str();
  layout->add_option("--pipeline-schedule", l->run.pipeline_schedule, "gpipe, 1f1b, interleaved or zero-bubble")
      ->capture_default_str();
  layout->add_option("--virtual-stages", l->run.virtual_stages,
                     "Model chunks per pipeline rank of the interleaved schedule (every layout with --pp above 1)")
      ->capture_default_str();
  layout->add_option("--optimizer-moments", l->run.optimizer_moments, "AdamW's moments: fp32, or bf16 (half the bytes)")
      ->capture_default_str();
  layout->add_option("--device-memory-gb", l->device_memory_gb, kDeviceMemoryHelp)->capture_default_str();
  layout->add_option("--reserve-gb", l->reserve_gb, kReserveHelp)->capture_default_str();
  layout->add_option("--top", l->top, "How many layouts to list")->capture_default_str();
  layout->add_flag("--json", l->json, "Print the layouts as JSON instead of a table");
  layout->callback([l] { plan_layout_command(*l); });
}

}  // namespace tessera::cli
