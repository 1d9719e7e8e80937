// tessera plan: what a parallel layout will do, before a run. `plan pipeline` simulates a pipeline
// schedule (parallel/pp): each rank's timeline, the bubble against the textbook value, and the most
// micro-batches whose activations a stage holds at once; with --model, which blocks each chunk holds
// (nn/stage_partition: balanced by cost, or --pipeline-boundaries) and each chunk's share of the work.
// `plan memory` takes `tessera train`'s layout flags and prints each rank's bytes (train/memory_plan).
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "nn/model_presets.h"
#include "nn/stage_partition.h"
#include "parallel/pp/pipeline_render.h"
#include "parallel/pp/pipeline_simulator.h"
#include "train/device_choice.h"
#include "train/memory_plan_report.h"
#include "train/model_setup.h"

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

struct MemoryOptions {
  TrainConfig run;
  double device_memory_gb = 80;
  bool json = false;
};

void plan_memory_command(MemoryOptions o, const CLI::App& command) {
  TrainConfig& c = o.run;
  TS_CHECK(o.device_memory_gb > 0, "--device-memory-gb must be a positive number of GiB, got ", o.device_memory_gb);
  // Without --batch-size, a step of pp micro-batches per data-parallel rank: enough to fill a pipeline.
  if (command.count("--batch-size") == 0 && c.micro_batch_size > 0)
    c.batch_size = c.micro_batch_size * std::max(c.dp, 1) * c.pp;
  const ModelConfig model = resolve_model_config(c, nullptr, std::nullopt);
  const DType compute = choose_compute_dtype(c.dtype, Device::cuda);
  const auto device_bytes = int64_t(o.device_memory_gb * double(int64_t(1) << 30));
  const MemoryPlan plan = plan_memory(c, model, compute, Device::cuda, device_bytes);
  const std::vector<std::string> fixes =
      plan.fits() ? std::vector<std::string>() : memory_plan_fixes(c, model, compute, Device::cuda, device_bytes);
  const std::string title = c.init_from.empty() ? c.model : c.init_from;
  if (o.json)
    std::printf("%s\n", memory_plan_json(plan, title, fixes).dump(2).c_str());
  else
    std::printf("%s", memory_plan_text(plan, title, fixes).c_str());
}

struct LayoutOptions {
  TrainConfig run;
  int world = 8;
  double device_memory_gb = 80;
  size_t top = 10;
  bool json = false;
};

void plan_layout_command(LayoutOptions o) {
  TS_CHECK(o.device_memory_gb > 0, "--device-memory-gb must be a positive number of GiB, got ", o.device_memory_gb);
  TS_CHECK(o.top >= 1, "--top must be at least 1, got ", o.top);
  const ModelConfig model = resolve_model_config(o.run, nullptr, std::nullopt);
  const DType compute = choose_compute_dtype(o.run.dtype, Device::cuda);
  const auto device_bytes = int64_t(o.device_memory_gb * double(int64_t(1) << 30));
  const std::vector<LayoutCandidate> found = search_layouts(o.run, model, compute, o.world, device_bytes);
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
  bind_layout_flags(*memory, m->run);
  memory->add_option("--device-memory-gb", m->device_memory_gb, "Memory of one device in GiB (H100 80GB: 80)")
      ->capture_default_str();
  memory->add_flag("--json", m->json, "Print the plan as JSON (bytes) instead of a table");
  memory->footer(
      "Without --batch-size, a step runs --pp micro-batches of --micro-batch-size per data-parallel rank. --dtype auto "
      "is bf16, the GPU's default.");
  memory->callback([m, memory] { plan_memory_command(*m, *memory); });

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
  layout->add_option("--optimizer-moments", l->run.optimizer_moments, "AdamW's moments: fp32, or bf16 (half the bytes)")
      ->capture_default_str();
  layout->add_option("--device-memory-gb", l->device_memory_gb, "Memory of one device in GiB (H100 80GB: 80)")
      ->capture_default_str();
  layout->add_option("--top", l->top, "How many layouts to list")->capture_default_str();
  layout->add_flag("--json", l->json, "Print the layouts as JSON instead of a table");
  layout->callback([l] { plan_layout_command(*l); });
}

}  // namespace tessera::cli
