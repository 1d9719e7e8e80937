// The memory plan as a table (GiB) and as JSON (bytes), from one list of its rows.
#include "train/memory_plan_report.h"

#include <algorithm>
#include <cstdio>
#include <iterator>

#include "optim/adamw_optimizer.h"
#include "train/device_choice.h"

namespace tessera {
namespace {

struct Row {
  const char* label;  // the table's
  const char* key;    // the JSON's
  int64_t RankMemory::*bytes;
};

constexpr Row kRows[] = {
    {"fp32 master weights", "master_weights", &RankMemory::master_weights},
    {"16-bit compute copy", "compute_copy", &RankMemory::compute_copy},
    {"fp32 gradients", "gradients", &RankMemory::gradients},
    {"ZeRO-1 shard, collective buffers", "gradient_shard", &RankMemory::gradient_shard},
    {"AdamW moments (m, v)", "optimizer", &RankMemory::optimizer},
    {"ZeRO-2/3 part buffers", "part_buffers", &RankMemory::part_buffers},
    {"PowerSGD errors, packed rounds", "compression", &RankMemory::compression},
    {"async checkpoint buffers", "async_checkpoint", &RankMemory::async_checkpoint},
    {"activations per micro-batch", "activations", &RankMemory::activations},
    {"backward scratch per micro-batch", "scratch", &RankMemory::scratch},
    {"deferred dW copies per micro-batch", "deferred_weight_grads", &RankMemory::deferred_weight_grads},
    {"cuDNN attention backward scratch", "attention_workspace", &RankMemory::attention_workspace},
    {"cuBLASLt workspace", "matmul_workspace", &RankMemory::matmul_workspace},
    {"classifier logits chunk", "logits", &RankMemory::logits},
    {"sequence-parallel gathers", "tp_gathers", &RankMemory::tp_gathers},
    {"context-parallel attention exchange", "cp_exchange", &RankMemory::cp_exchange},
    {"gradient held by a pipeline send", "pipeline_send", &RankMemory::pipeline_send},
    {"CUDA context, NCCL, libs (est.)", "reserved", &RankMemory::reserved},
};
constexpr size_t kMicroBatchRows = 8;  // kRows' first per-micro-batch row
constexpr size_t kDeferredRow = 10;    // zero-bubble's, shown after its own count
static_assert(kRows[kDeferredRow].bytes == &RankMemory::deferred_weight_grads, "kDeferredRow names the deferred row");

double gib(int64_t bytes) { return double(bytes) / double(int64_t(1) << 30); }

// --device-memory-gb as the user gave it ("2.5", "0.05", "80"), from the bytes it was turned into.
std::string gib_given(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", gib(bytes));
  return text;
}

// "blocks 0-5 + embedding", "blocks 0-1, 4-5 + head", "whole model".
std::string stage_text(const DecoderStage& s) {
  if (s.is_whole()) return "whole model";
  std::string text = "blocks ";
  for (size_t i = 0; i < s.chunks.size(); ++i) {
    if (i > 0) text += ",";
    text += std::to_string(s.chunks[i].first) + "-" + std::to_string(s.chunks[i].end - 1);
  }
  if (s.has_embedding()) text += " +emb";
  if (s.has_head()) text += " +head";
  return text;
}

std::string layout_text(const MemoryPlan& p) {
  char line[300];
  std::snprintf(line, sizeof line, "dp %d, tp %d, pp %d, cp %d, ep %d; ZeRO %d; %s; micro-batch %lld x %lld tokens; recompute %s",
                p.dims.dp, p.dims.tp, p.dims.pp, p.dims.cp, p.dims.ep, p.zero_stage, compute_dtype_flag(p.dtype).c_str(),
                static_cast<long long>(p.micro_batch), static_cast<long long>(p.seq_len), p.recompute.c_str());
  return std::string(line) + (p.moments == DType::bf16 ? "; bf16 AdamW moments" : "");
}

std::string verdict_text(const MemoryPlan& p, const std::vector<std::string>& fixes) {
  const RankMemory& top = p.largest();
  char line[300];
  if (p.fits()) {
    std::snprintf(line, sizeof line, "fits: the largest rank (stage %d) needs %.2f GiB of --device-memory-gb %s (%.0f%%)\n",
                  top.stage, gib(top.total()), gib_given(p.device_bytes).c_str(),
                  100.0 * double(top.total()) / double(p.device_bytes));
    return line;
  }
  std::snprintf(line, sizeof line, "does not fit: stage %d needs %.2f GiB, %.2f GiB above --device-memory-gb %s; ",
                top.stage, gib(top.total()), gib(top.total() - p.device_bytes), gib_given(p.device_bytes).c_str());
  std::string text = line;
  if (fixes.empty())
    return text + "no single change of --micro-batch-size, --recompute, --optimizer-moments, --zero, --tp or --pp "
                  "fits: lower --seq-len, "
                  "or combine them\n";
  text += "each of these fits:";
  for (size_t i = 0; i < fixes.size(); ++i) {
    text += i > 0 ? ", " : " ";
    text += fixes[i];
  }
  return text + "\n";
}

}  // namespace

std::string memory_plan_text(const MemoryPlan& p, const std::string& title, const std::vector<std::string>& fixes) {
  std::string text = title + ": " + layout_text(p) + "\n";
  char cell[64];
  auto row = [&](const char* label, auto value) {
    std::snprintf(cell, sizeof cell, "  %-34s", label);
    text += cell;
    for (const RankMemory& r : p.ranks) {
      value(r);
      text += cell;
    }
    text += "\n";
  };
  const bool stages = p.ranks.size() > 1;
  if (stages)
    row("GiB per rank of pipeline stage", [&](const RankMemory& r) {
      std::snprintf(cell, sizeof cell, "%20s", ("stage " + std::to_string(r.stage)).c_str());
    });
  row(stages ? "" : "GiB per rank", [&](const RankMemory& r) {
    std::snprintf(cell, sizeof cell, "%20s", stage_text(r.blocks).c_str());
  });
  row("parameters (millions)", [&](const RankMemory& r) { std::snprintf(cell, sizeof cell, "%20.2f", r.parameters / 1e6); });
  auto bytes_row = [&](const Row& bytes) {
    row(bytes.label, [&](const RankMemory& r) {
      if (r.*bytes.bytes == 0)
        std::snprintf(cell, sizeof cell, "%20s", "-");
      else
        std::snprintf(cell, sizeof cell, "%20.3f", gib(r.*bytes.bytes));
    });
  };
  // The weights' states, then what a micro-batch in flight holds, then the logits chunk.
  for (size_t i = 0; i < kMicroBatchRows; ++i) bytes_row(kRows[i]);
  row("micro-batches in flight", [&](const RankMemory& r) {
    std::snprintf(cell, sizeof cell, "%20d", r.micro_batches_in_flight);
  });
  for (size_t i = kMicroBatchRows; i < kDeferredRow; ++i) bytes_row(kRows[i]);
  const auto defers = [](const RankMemory& r) { return r.micro_batches_deferred > 0; };
  if (std::any_of(p.ranks.begin(), p.ranks.end(), defers)) {  // zero-bubble
    row("micro-batches with deferred dW", [&](const RankMemory& r) {
      std::snprintf(cell, sizeof cell, "%20d", r.micro_batches_deferred);
    });
    bytes_row(kRows[kDeferredRow]);
  }
  for (size_t i = kDeferredRow + 1; i < std::size(kRows); ++i) bytes_row(kRows[i]);
  row("total", [&](const RankMemory& r) { std::snprintf(cell, sizeof cell, "%20.3f", gib(r.total())); });
  const auto pins = [](const RankMemory& r) { return r.pinned_host > 0; };
  if (std::any_of(p.ranks.begin(), p.ranks.end(), pins)) {
    row("pinned host memory (not above)", [&](const RankMemory& r) {
      std::snprintf(cell, sizeof cell, "%20.3f", gib(r.pinned_host));
    });
    text += "  (--async-checkpoint's buffers: each GPU rank of a node pins its own, the first the whole weights too)\n";
  }
  return text + verdict_text(p, fixes);
}

nlohmann::json memory_plan_json(const MemoryPlan& p, const std::string& title, const std::vector<std::string>& fixes) {
  nlohmann::json ranks = nlohmann::json::array();
  for (const RankMemory& r : p.ranks) {
    nlohmann::json j = {{"stage", r.stage}, {"blocks", stage_text(r.blocks)}, {"parameters", r.parameters}};
    for (const Row& bytes : kRows) j[bytes.key] = r.*bytes.bytes;
    j["micro_batches_in_flight"] = r.micro_batches_in_flight;
    j["micro_batches_deferred"] = r.micro_batches_deferred;
    j["pinned_host"] = r.pinned_host;
    j["total"] = r.total();
    ranks.push_back(j);
  }
  return {{"model", title},
          {"dp", p.dims.dp},
          {"tp", p.dims.tp},
          {"pp", p.dims.pp},
          {"cp", p.dims.cp},
          {"ep", p.dims.ep},
          {"zero", p.zero_stage},
          {"dtype", compute_dtype_flag(p.dtype)},
          {"optimizer_moments", optimizer_moments_flag(p.moments)},
          {"micro_batch", p.micro_batch},
          {"seq_len", p.seq_len},
          {"recompute", p.recompute},
          {"device_bytes", p.device_bytes},
          {"largest_total", p.largest().total()},
          {"fits", p.fits()},
          {"fixes", fixes},
          {"ranks", ranks}};
}

std::string layout_flags(const TrainConfig& c) {
  char text[200];
  const std::string cp_comm = c.cp > 1 && c.cp_comm != TrainConfig{}.cp_comm ? " --cp-comm " + c.cp_comm : "";
  std::snprintf(text, sizeof text,
                "--dp %d --tp %d --pp %d --cp %d%s --ep %d --zero %d --recompute %s --micro-batch-size %lld",
                c.dp, c.tp, c.pp, c.cp, cp_comm.c_str(), c.ep, c.zero, c.recompute.c_str(),
                static_cast<long long>(c.micro_batch_size));
  std::string flags = text;
  if (c.zero == 3 && !c.reshard_after_forward) flags += " --no-reshard-after-forward";
  // A pipeline's schedule and chunks per rank change its memory; the defaults go without saying.
  const TrainConfig defaults;
  if (c.pp > 1 && c.pipeline_schedule != defaults.pipeline_schedule)
    flags += " --pipeline-schedule " + c.pipeline_schedule;
  if (c.pp > 1 && c.virtual_stages != defaults.virtual_stages)
    flags += " --virtual-stages " + std::to_string(c.virtual_stages);
  return flags + (c.optimizer_moments == "fp32" ? "" : " --optimizer-moments " + c.optimizer_moments);
}

std::string layout_search_text(const std::vector<LayoutCandidate>& found, const std::string& title, int world,
                               size_t top) {
  char line[300];
  if (found.empty()) {
    std::snprintf(line, sizeof line,
                  "%s on %d ranks: no layout fits; add ranks, raise --device-memory-gb, or shorten --seq-len\n",
                  title.c_str(), world);
    return line;
  }
  const MemoryPlan& first = found.front().plan;
  std::string precision =
      compute_dtype_flag(first.dtype) + (first.moments == DType::bf16 ? " with bf16 AdamW moments" : "");
  // The schedule every layout with pp > 1 runs, when one is listed and it is not the default.
  const auto pipelined =
      std::find_if(found.begin(), found.end(), [](const LayoutCandidate& c) { return c.config.pp > 1; });
  if (pipelined != found.end() && pipelined->config.pipeline_schedule != TrainConfig{}.pipeline_schedule) {
    const TrainConfig& run = pipelined->config;
    precision += ", " + run.pipeline_schedule + " pipelines" +
                 (run.virtual_stages > 1 ? " of " + std::to_string(run.virtual_stages) + " virtual stages" : "");
  }
  std::snprintf(line, sizeof line,
                "%s on %d ranks, %lld-token sequences, %s: %zu layouts fit %s GiB; best first (least recomputation, "
                "smallest tp·pp·cp·ep, lowest ZeRO, largest micro-batch)\n",
                title.c_str(), world, static_cast<long long>(first.seq_len), precision.c_str(), found.size(),
                gib_given(first.device_bytes).c_str());
  std::string text = line;
  text += "    dp  tp  pp  cp  cp-comm  ep  zero  recompute  micro  peak GiB  of device\n";
  bool kept = false;  // a listed ZeRO-3 layout keeps its gathered parameters
  for (size_t i = 0; i < std::min(top, found.size()); ++i) {
    const TrainConfig& c = found[i].config;
    const MemoryPlan& p = found[i].plan;
    const char* comm = c.cp == 1 ? "-" : c.cp_comm == "ring" ? "ring" : "a2a";
    const bool keeps = c.zero == 3 && !c.reshard_after_forward;
    kept |= keeps;
    const std::string zero = std::to_string(c.zero) + (keeps ? "k" : "");
    std::snprintf(line, sizeof line, "  %4d%4d%4d%4d  %7s%4d%6s  %-9s%7lld%10.2f%10.0f%%\n", c.dp, c.tp, c.pp, c.cp,
                  comm, c.ep, zero.c_str(), c.recompute.c_str(), static_cast<long long>(c.micro_batch_size),
                  gib(p.largest().total()), 100.0 * double(p.largest().total()) / double(p.device_bytes));
    text += line;
  }
  if (kept)
    text += "zero 3k: ZeRO-3 keeping the gathered parameters from forward to backward (--no-reshard-after-forward)\n";
  return text + "best: " + layout_flags(found.front().config) + "\n";
}

nlohmann::json layout_search_json(const std::vector<LayoutCandidate>& found, const std::string& title, int world,
                                  size_t top) {
  nlohmann::json layouts = nlohmann::json::array();
  for (size_t i = 0; i < std::min(top, found.size()); ++i) {
    const TrainConfig& c = found[i].config;
    layouts.push_back({{"dp", c.dp}, {"tp", c.tp}, {"pp", c.pp}, {"cp", c.cp}, {"cp_comm", c.cp_comm},
                       {"ep", c.ep}, {"zero", c.zero}, {"reshard_after_forward", c.reshard_after_forward},
                       {"recompute", c.recompute}, {"micro_batch", c.micro_batch_size},
                       {"largest_total", found[i].plan.largest().total()}, {"flags", layout_flags(c)}});
  }
  return {{"model", title}, {"world", world}, {"fitting", found.size()}, {"layouts", layouts}};
}

}  // namespace tessera
