// Per-rank memory of a planned run: parameters, gradients and moments by ZeRO stage, ZeRO-3's
// transient buffers, activations times the micro-batches in flight (and zero-bubble's deferred weight
// gradients' copies times those waiting), the logits chunk.
#include "train/memory_plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>

#include "checkpoint/run_folder.h"
#include "checkpoint/train_checkpoint.h"
#include "core/divisors.h"
#include "core/error.h"
#include "nn/activation_memory.h"
#include "nn/decoder_layout.h"
#include "nn/tensor_parallel.h"
#include "ops/attention.h"
#include "ops/cudnn_attention_rule.h"
#include "ops/matmul_tuning.h"
#include "optim/adamw_optimizer.h"
#include "parallel/dp/buckets.h"
#include "parallel/dp/powersgd.h"
#include "parallel/pp/pipeline_schedule.h"
#include "parallel/pp/pipeline_simulator.h"
#include "train/launch.h"
#include "train/model_setup.h"
#include "train/data_parallel.h"
#include "train/pipeline_plan.h"

namespace tessera {
namespace {

constexpr int64_t kF32 = 4;

// The data-parallel groups' sizes: dp×cp, and the replicas of an ep rank's experts (expert_dp).
struct ReplicaGroups {
  int dense = 1, experts = 1;
  int of(const Bucket& b) const { return b.group == 0 ? dense : experts; }
};

// Group rank 0's buckets over `layout`, cut as DataParallel cuts them (expert weights in buckets of
// their own under expert parallelism).
std::vector<Bucket> rank_buckets(const ParameterLayout& layout, const std::vector<OffsetRange>& experts,
                                 const TrainConfig& c, ReplicaGroups groups) {
  DataParallelOptions options;
  options.zero_stage = c.zero;
  options.bucket_bytes = int64_t(c.bucket_mb * double(1 << 20));
  return parameter_buckets(layout, options, experts, {{0, groups.dense}, {0, groups.experts}});
}

// Parameters, gradients and AdamW moments (`moment_size` bytes each) of `total` elements split into
// `buckets` over their `groups` (parallel/dp: grad_reducer.cpp, part_grad_reducer.cpp,
// zero3_parameters.cpp). `tied`: the classifier is the embedding, whose ZeRO 2/3 gradient buffer then
// stays from the classifier to the backward's end. `embeddings`: where the embeddings' part ends,
// the layout's first (0 on a stage without them); `reshard_after_forward` false: ZeRO-3 keeps
// every block gathered from its forward to its backward.
void add_states(RankMemory& r, const std::vector<Bucket>& buckets, int64_t total, int zero, ReplicaGroups groups,
                int64_t compute_size, int64_t moment_size, bool tied, int64_t embeddings, bool reshard_after_forward) {
  const int64_t shard = shard_size(buckets);
  r.master_weights = (zero == 3 ? shard : total) * kF32;
  r.compute_copy = compute_size == kF32 || zero == 3 ? 0 : total * compute_size;
  r.gradients = (zero >= 2 ? shard : total) * kF32;
  r.optimizer = 2 * (zero == 0 ? total : shard) * moment_size;
  // The parameters' all-gather after a ZeRO 1/2 update, two buckets at a time (a chunk in, every
  // chunk out).
  auto gather_window = [&] {
    std::vector<int64_t> gathers;
    for (const Bucket& b : buckets) gathers.push_back(b.chunk + b.chunk * groups.of(b));
    std::sort(gathers.rbegin(), gathers.rend());
    return gathers[0] + (gathers.size() > 1 ? gathers[1] : 0);
  };
  if (zero == 1) {
    // The shard, and the larger of two collectives' buffers: in backward, until the reduction
    // finishes, each bucket's reduce-scatter output (a chunk) and, when the bucket does not split
    // evenly, its padded copy; after the update, the parameters' all-gather.
    int64_t staging = 0;
    for (const Bucket& b : buckets) staging += b.chunk + (b.size() == b.chunk * groups.of(b) ? 0 : b.chunk * groups.of(b));
    r.gradient_shard = (shard + std::max(staging, gather_window())) * kF32;
  }
  if (zero < 2) return;
  // The peak comes in backward: the computing part's gradient buffer (padded; a tied embedding's
  // too) or, with other ranks, the reduce-scatters alive at once: two in flight and the one just
  // launched from the part computing (part_grad_reducer.cpp), each holding its padded input and chunk
  // output; a stage of fewer than three buckets repeats them (the next micro-batch's reductions follow
  // the last's). Under ZeRO-3 also the part computing and the one being gathered (fp32, padded to the
  // ranks' chunks) and the computing part's 16-bit copy. The largest parts stand for them all.
  // ZeRO-2's all-gather after the update needs less than the backward's buffers.
  std::vector<int64_t> padded;
  int64_t chunk = 0;
  for (const Bucket& b : buckets) {
    padded.push_back(b.chunk * groups.of(b));
    chunk = std::max(chunk, b.chunk);
  }
  std::sort(padded.rbegin(), padded.rend());
  int64_t reducing = 3 * chunk;
  for (size_t k = 0; k < 3; ++k) reducing += padded[k % padded.size()];
  padded.resize(std::max<size_t>(padded.size(), 3), 0);
  const int64_t largest = padded[0];
  const bool reduces = groups.dense > 1 || groups.experts > 1;
  r.part_buffers = ((reduces ? reducing : largest) + (tied ? padded[1] : 0)) * kF32;
  if (zero == 2) {
    r.part_buffers = std::max(r.part_buffers, gather_window() * kF32);
    return;
  }
  const int64_t copy_size = compute_size == kF32 ? 0 : compute_size;  // the 16-bit copy of a gathered part
  int64_t gathered = (padded[0] + padded[1]) * kF32 + largest * copy_size;
  if (!reshard_after_forward) {
    // At the backward's start every block is held, with the final part (and a tied classifier's
    // embeddings, gathered again for it); the embeddings alone are let go after their forward.
    int64_t held = 0;
    for (const Bucket& b : buckets)
      if (tied || b.begin >= embeddings) held += b.chunk * groups.of(b);
    gathered = std::max(gathered, held * (kF32 + copy_size));
  }
  r.part_buffers += gathered;
}

// The scratch of one layer's attention backward on cuDNN, where a GPU run's dispatch (ops/attention.h)
// would take cuDNN: 16-bit compute, a head size it covers, no document mask, no ring attention (cp).
// Assumes a build with cuDNN, as the GPU builds are.
int64_t attention_workspace_bytes(const TrainConfig& config, const ModelConfig& local, int64_t B, int64_t T,
                                  DType compute, Device device, int cp) {
  const int64_t HS = local.head_size();
  if (device != Device::cuda || dtype_size(compute) != 2 || cp > 1 || config.attention_mask == "document" ||
      !cudnn_attention_head_size_covered(HS))
    return 0;
  const int64_t bytes = cudnn_attention_workspace_bytes(B, local.num_heads, T, HS, config.deterministic);
  return cudnn_attention_allowed(parse_attention_kernel(config.attention_kernel), bytes) ? bytes : 0;
}

// A layer's attention backward under context parallelism, beyond its own scratch, for B local sequences
// of T tokens (parallel/cp): the ring's kv block in hand and the next, two gradient accumulators and the
// one arriving (fp32), and the rows' delta; all-to-all's qkv, out, dout, lse and dqkv regrouped by heads
// (each 1/cp of the heads over cp·T tokens: the local sizes), and dqkv's send and receive buffers on its
// way home, with the document starts of the whole sequences under document masks.
int64_t cp_exchange_bytes(const TrainConfig& config, const ModelConfig& local, int64_t B, int64_t T, DType compute,
                          int cp) {
  const int64_t NH = local.num_heads, NKV = local.kv_heads(), HS = local.head_size();
  if (config.cp_comm == "ring") return 5 * B * T * 2 * NKV * HS * kF32 + B * NH * T * kF32;
  const int64_t size = int64_t(dtype_size(compute)), qkv = B * T * (NH + 2 * NKV) * HS * size;
  const int64_t out = B * T * NH * HS * size, lse = B * NH * T * kF32;
  const int64_t starts = config.attention_mask == "document" ? 2 * B * T * cp * int64_t(sizeof(int32_t)) : 0;
  return 4 * qkv + 2 * out + lse + starts;
}

// decoder_layout(model, stage, tp rank 0 of tp, ep rank 0 of ep). The layout search plans one split of
// the ranks at every ZeRO stage, recomputation mode and micro-batch size, so the last model's most
// recent layouts are kept (per thread; a reference is good until the next call).
const ParameterLayout& stage_layout(const ModelConfig& model, const DecoderStage& stage, int tp, int ep) {
  struct Entry {
    DecoderStage stage;
    int tp, ep;
    ParameterLayout layout;
  };
  thread_local ModelConfig planned;
  thread_local std::vector<std::unique_ptr<Entry>> entries;
  if (!(planned == model) || entries.size() >= 64) entries.clear(), planned = model;
  for (const std::unique_ptr<Entry>& e : entries)
    if (e->tp == tp && e->ep == ep && e->stage == stage) return e->layout;
  ParameterLayout layout = decoder_layout(model, stage, TpPlace{0, tp}, EpPlace{0, ep});
  entries.push_back(std::make_unique<Entry>(Entry{stage, tp, ep, std::move(layout)}));
  return entries.back()->layout;
}

// --async-checkpoint's buffers, allocated at start-up (train/checkpoint_saver.cpp), for a rank with
// `state` moment elements: the moments in fp32, the weight shard with sharded weights, and rank 0's
// copy of the whole model's `whole` weights. Host memory: a CPU run's own; a GPU run copies straight
// from the device into them (side_copies.h), page-locked, so its device holds nothing more.
int64_t async_checkpoint_bytes(const TrainConfig& c, bool rank0, int64_t whole, int64_t state) {
  if (!c.async_checkpoint) return 0;
  const bool sharded = c.sharded_checkpoint_weights();
  return (sharded ? state : 0) * kF32 + 2 * state * kF32 + (rank0 && !sharded ? whole * kF32 : 0);
}

// Zero-bubble's deferred weight gradients of one micro-batch of `chunk` (nn/deferred_weight_grads.cpp):
// every linear layer of a block records a copy of the output gradient and of the input its weight
// gradient reads (attention_layer, mlp_layer, moe_layer backward), a grouped expert layer its row
// offsets too. `local`: the tp rank's shapes; the operands are whole sequences (gathered under
// sequence parallelism) of the compute dtype, MoE rows taken as N·top_k (even routing, no drops).
int64_t deferred_weight_grad_bytes(const ModelConfig& local, const BlockRange& chunk, int64_t B, int64_t T,
                                   DType compute) {
  const int64_t N = B * T, C = local.channels, s = dtype_size(compute);
  // An MLP's two layers (out: dout (N,C), act (N,F); in: dh (N,F) or SwiGLU's (N,2F), x (N,C)).
  const auto mlp = [&](MlpKind kind, int64_t F) {
    return (2 * N * C + N * F + N * (is_gated(kind) ? 2 : 1) * F) * s;
  };
  int64_t bytes = 0;
  for (int64_t l = chunk.first; l < chunk.end; ++l) {
    bytes += (N * C + N * local.value_width()) * s;  // attn_out: dout, core (latent attention: its values)
    if (local.mla.enabled()) {  // kv_b: d[k_nope | v], kv latent; kv_a: d[c | k_rope], x; q_proj or q_b, q_a
      const LatentAttentionConfig& m = local.mla;
      bytes += (N * local.num_heads * (m.nope_dim + m.v_dim) + N * m.kv_rank) * s;
      bytes += (N * (m.kv_rank + m.rope_dim) + N * C) * s;
      bytes += (N * local.attention_width() + N * (m.q_rank > 0 ? m.q_rank : C)) * s;
      if (m.q_rank > 0) bytes += (N * m.q_rank + N * C) * s;
    } else {
      bytes += (N * local.qkv_width() + N * C) * s;  // qkv: dqkv, x
    }
    if (!local.is_moe_block(l)) {
      bytes += mlp(local.mlp, local.hidden());
      continue;
    }
    const int64_t E = local.moe.num_experts, R = N * local.moe.top_k, Fe = local.moe.expert_hidden;
    // The experts' out (dout, act) and in (dh, xs) layers, each with the row offsets (int32).
    bytes += (R * C + R * Fe) * s + (R * 2 * Fe + R * C) * s + 2 * (E + 1) * int64_t(sizeof(int32_t));
    if (local.moe.num_shared_experts > 0) bytes += mlp(MlpKind::swiglu, local.moe.num_shared_experts * Fe);
    if (local.moe.shared_gate) bytes += (N + N * C) * s;  // its gate: dgate, tokens
    bytes += (N * E + N * C) * s;  // router: dlogits, tokens
  }
  return bytes;
}

// Under expert parallelism, the rows a rank's experts compute in a MoE layer of a micro-batch of
// `tokens` rows a rank: with --moe-capacity-factor, at most every expert's capacity from each of the
// ep ranks (moe_layer.cpp: ceil(factor·N·k / E) per expert and sender); dropless, an even share, N·k
// (a rank whose experts the router favours holds more: `tessera plan memory` notes how much).
int64_t expert_rows(const TrainConfig& config, const ModelConfig& model, int64_t tokens, int ep) {
  if (ep <= 1 || !model.moe.enabled()) return 0;
  const int64_t E = model.moe.num_experts, routed = tokens * model.moe.top_k;
  if (config.moe_capacity_factor <= 0) return routed;
  const auto capacity = int64_t(std::ceil(double(config.moe_capacity_factor) * double(routed) / double(E)));
  return E * capacity;
}

// The most micro-batches of `rank` whose weight gradients wait at once: from each backward_input to
// its backward_weight.
int most_deferred(const PipelineSchedule& schedule, int rank) {
  int waiting = 0, most = 0;
  for (const Action& a : schedule.ranks[size_t(rank)]) {
    waiting += a.kind == ActionKind::backward_input ? 1 : a.kind == ActionKind::backward_weight ? -1 : 0;
    most = std::max(most, waiting);
  }
  return most;
}

}  // namespace

std::optional<std::filesystem::path> resumed_checkpoint_shape(const TrainConfig& config) {
  if (!config.resume) return std::nullopt;
  for (const CheckpointFolder& folder : list_checkpoints(config.out_dir)) {
    try {
      read_checkpoint_model_config(folder.path);
      return folder.path;
    } catch (const Error&) {
      continue;  // an unfinished save: train skips it too
    }
  }
  return std::nullopt;
}

int64_t RankMemory::total() const {
  return master_weights + compute_copy + gradients + gradient_shard + optimizer + part_buffers + compression +
         async_checkpoint +
         int64_t(micro_batches_in_flight) * (activations + scratch) +
         int64_t(micro_batches_deferred) * deferred_weight_grads + attention_workspace + matmul_workspace + logits +
         tp_gathers + cp_exchange + pipeline_send + reserved;
}

const RankMemory& MemoryPlan::largest() const {
  return *std::max_element(ranks.begin(), ranks.end(),
                           [](const RankMemory& a, const RankMemory& b) { return a.total() < b.total(); });
}

MemoryPlan plan_memory(const TrainConfig& config, const ModelConfig& model, DType compute, Device device,
                       int64_t device_bytes, int64_t reserve_bytes) {
  if (reserve_bytes == kUnsetReserve) reserve_bytes = device == Device::cuda ? kDefaultGpuReserveBytes : 0;
  TS_CHECK(reserve_bytes >= 0, "--reserve-gb must not be negative");
  // TrainConfig::validate() holds every flag's own rule; a plan reads no data, so a copy names some.
  TrainConfig checked = config;
  checked.train_data = "(planned)";
  checked.validate();
  const int world = std::max(config.dp, 1) * config.tp * config.pp * config.cp;
  MemoryPlan plan;
  plan.dims = resolve_layout(config, model, world);
  check_flags_against_model(config, model);
  const ParallelDims& d = plan.dims;
  plan.zero_stage = config.zero;
  plan.dtype = compute;
  plan.moments = parse_optimizer_moments(config.optimizer_moments);
  plan.recompute = config.recompute;
  if (config.recompute != "none" && config.recompute_layers > 0)
    plan.recompute += " (first " + std::to_string(config.recompute_layers) + " blocks)";
  plan.micro_batch = config.micro_batch(d.dp);
  plan.seq_len = config.seq_len;
  plan.device_bytes = device_bytes;

  std::vector<DecoderStage> stages{whole_decoder(model.num_layers)};
  std::vector<int> in_flight{1}, deferred{0};
  if (d.pp > 1) {
    const PipelinePlan pipeline = plan_pipeline(config, model, d.dp);
    stages.clear();
    deferred.clear();
    for (int s = 0; s < d.pp; ++s) {
      stages.push_back(pipeline_stage(pipeline.boundaries, d.pp, s));
      deferred.push_back(most_deferred(pipeline.schedule, s));
    }
    in_flight = simulate_pipeline(pipeline.schedule).peak_in_flight;
  }
  const TpPlace tp{0, d.tp};
  const ModelConfig local = tp_local_config(model, tp);
  const int64_t T = config.seq_len / d.cp;
  const int64_t seq_shards = d.tp > 1 && config.sequence_parallel ? d.tp : 1;
  const RecomputePolicy recompute{parse_recompute(config.recompute), config.recompute_layers};
  // Expert weights reduce over the dp ranks holding the same experts (dp / ep of them, times cp).
  const ReplicaGroups groups{d.dp * d.cp, d.dp / d.ep * d.cp};
  const int64_t whole_params = config.async_checkpoint ? model.num_parameters() : 0;  // rank 0's whole copy
  for (size_t s = 0; s < stages.size(); ++s) {
    RankMemory r;
    r.stage = int(s);
    r.blocks = stages[s];
    const ParameterLayout& layout = stage_layout(model, stages[s], d.tp, d.ep);
    r.parameters = layout.total();
    const std::vector<OffsetRange> experts =
        d.ep > 1 ? expert_ranges(decoder_names(model, stages[s]), layout) : std::vector<OffsetRange>{};
    const std::vector<Bucket> buckets = rank_buckets(layout, experts, config, groups);
    add_states(r, buckets, layout.total(), config.zero, groups, int64_t(dtype_size(compute)),
               int64_t(dtype_size(plan.moments)), model.tied_embeddings && stages[s].has_head(),
               layout.block_range(kEmbeddingBlock, kEmbeddingBlock).end,
               config.reshard_after_forward);
    const int64_t state = config.zero == 0 ? layout.total() : shard_size(buckets);
    (device == Device::cuda ? r.pinned_host : r.async_checkpoint) =
        async_checkpoint_bytes(config, s == 0, whole_params, state);
    if (config.powersgd_rank > 0) {
      // The errors of the factored matrices; and, every bucket in flight at once at worst, the
      // packed first rounds (the elements no factor covers, every P) and second rounds (every Q).
      int64_t factored = 0, factors = 0;
      for (const GradMatrix& m : gradient_matrices(layout))
        if (PowerSgd::compresses(m, config.powersgd_rank)) {
          factored += m.rows * m.cols;
          factors += int64_t(config.powersgd_rank) * (m.rows + m.cols);
        }
      const int64_t errors = factored, uncovered = layout.total() - factored;
      r.compression = (errors + uncovered + factors) * kF32;
    }
    for (const BlockRange& chunk : stages[s].chunks) {
      const ActivationBytes a = decoder_activation_bytes(
          local, ActivationShape{plan.micro_batch, T, T / seq_shards, chunk, compute, recompute,
                                 expert_rows(config, model, plan.micro_batch * T, d.ep)});
      r.activations = std::max(r.activations, a.saved);
      r.scratch = std::max(r.scratch, a.scratch);
    }
    const auto holds_blocks = [](const BlockRange& chunk) { return chunk.end > chunk.first; };
    if (std::any_of(stages[s].chunks.begin(), stages[s].chunks.end(), holds_blocks))
      r.attention_workspace = attention_workspace_bytes(config, local, plan.micro_batch, T, compute, device, d.cp);
    if (device == Device::cuda) r.matmul_workspace = kMatmulWorkspaceBytes;  // held from the first matmul on
    r.reserved = reserve_bytes;
    r.micro_batches_in_flight = in_flight[s];
    // Zero-bubble (ZB-H1): a rank holds its most deferrals while its most micro-batches are in flight
    // (both peak at its last backward_input before a weight part runs), so the two add.
    r.micro_batches_deferred = deferred[s];
    if (r.micro_batches_deferred > 0)
      for (const BlockRange& chunk : stages[s].chunks)
        r.deferred_weight_grads =
            std::max(r.deferred_weight_grads, deferred_weight_grad_bytes(local, chunk, plan.micro_batch, T, compute));
    // A layer's backward under sequence parallelism: its output gradient all-gathered, its input
    // all-gathered again, and the partial input gradient before its reduce-scatter (mlp_layer.cpp,
    // attention_layer.cpp).
    if (seq_shards > 1) r.tp_gathers = 3 * plan.micro_batch * T * model.channels * int64_t(dtype_size(compute));
    if (d.cp > 1 && std::any_of(stages[s].chunks.begin(), stages[s].chunks.end(), holds_blocks))
      r.cp_exchange = cp_exchange_bytes(config, local, plan.micro_batch, T, compute, d.cp);
    // The executor releases a micro-batch at its gradient's send, whose buffer (B, T/cp/sp, C) lives
    // on until the previous stage has taken it (a rank with a chunk after the first block sends).
    const auto sends = [](const BlockRange& chunk) { return chunk.first > 0; };
    if (std::any_of(stages[s].chunks.begin(), stages[s].chunks.end(), sends)) r.pipeline_send = plan.micro_batch * (T / seq_shards) * model.channels * int64_t(dtype_size(compute));
    if (stages[s].has_head())
      r.logits = classifier_logits_bytes(plan.micro_batch * T, model.padded_vocab_size() / d.tp, compute);
    plan.ranks.push_back(r);
  }
  return plan;
}

std::optional<MemoryPlan> plan_largest_micro_batch(const TrainConfig& config, const ModelConfig& model, DType compute,
                                                   Device device, int64_t device_bytes, int64_t most,
                                                   int64_t reserve_bytes) {
  const int64_t share = config.batch_size / std::max(config.dp, 1);
  const std::vector<int64_t> sizes = divisors_up_to(share, most);  // largest first
  TrainConfig c = config;
  // The plan at sizes[k]; none for a micro-batch the layout does not allow.
  auto plan_at = [&](size_t k) -> std::optional<MemoryPlan> {
    c.micro_batch_size = sizes[k];
    try {
      return plan_memory(c, model, compute, device, device_bytes, reserve_bytes);
    } catch (const Error&) {
      return std::nullopt;
    }
  };
  // A rank's bytes never shrink as the micro-batch grows (activations and scratch grow with it; 1F1B,
  // interleaved and zero-bubble pipelines keep as many in flight at any size of at most share / pp), so
  // the largest size that fits is found by bisection: planning a 61-layer model of 256 experts over a
  // thousand layouts takes seconds, not a minute. GPipe keeps every micro-batch in flight, which makes
  // small ones dearer again, and a size the layout does not allow breaks the order: then every size is
  // tried, largest first.
  if (sizes.empty()) return std::nullopt;
  const bool gpipe = config.pp > 1 && parse_schedule_kind(config.pipeline_schedule) == ScheduleKind::gpipe;
  std::optional<MemoryPlan> best = gpipe ? std::nullopt : plan_at(sizes.size() - 1);
  if (best && !best->fits()) return std::nullopt;  // the smallest does not fit: none does
  if (best) {
    size_t fits = sizes.size() - 1, fails = 0;  // sizes[fits] fits; no size before sizes[fails] does
    while (fails < fits) {
      const size_t mid = (fails + fits) / 2;
      std::optional<MemoryPlan> plan = plan_at(mid);
      if (!plan) break;
      if (plan->fits()) {
        fits = mid;
        best = std::move(plan);
      } else {
        fails = mid + 1;
      }
    }
    if (fails == fits) return best;
  }
  for (size_t k = 0; k < sizes.size(); ++k)
    if (std::optional<MemoryPlan> plan = plan_at(k); plan && plan->fits()) return plan;
  return std::nullopt;
}

std::vector<std::string> memory_plan_fixes(const TrainConfig& config, const ModelConfig& model, DType compute,
                                           Device device, int64_t device_bytes, int64_t reserve_bytes) {
  std::vector<std::string> fixes;
  auto add_fix = [&](const std::string& flags, const MemoryPlan& plan, const char* note) {
    char text[200];
    std::snprintf(text, sizeof text, "%s (%.2f GiB%s)", flags.c_str(), double(plan.largest().total()) / double(1 << 30),
                  note);
    fixes.push_back(text);
  };
  // `change` applied to a copy of the flags; kept when that layout is valid and fits.
  auto try_fix = [&](const std::string& flags, const std::function<void(TrainConfig&)>& change,
                     const char* note = "") {
    TrainConfig changed = config;
    change(changed);
    try {
      const MemoryPlan plan = plan_memory(changed, model, compute, device, device_bytes, reserve_bytes);
      if (!plan.fits()) return false;
      add_fix(flags, plan, note);
      return true;
    } catch (const Error&) {
      return false;
    }
  };
  // The largest micro-batch below this one.
  const int dp = std::max(config.dp, 1);
  if (const std::optional<MemoryPlan> smaller =
          plan_largest_micro_batch(config, model, compute, device, device_bytes, config.micro_batch(dp) - 1,
                                   reserve_bytes))
    add_fix("--micro-batch-size " + std::to_string(smaller->micro_batch), *smaller, "");
  const Recompute mode = parse_recompute(config.recompute);
  const bool partial = config.recompute_layers > 0;
  if (mode == Recompute::none || (mode == Recompute::selective && partial))
    try_fix("--recompute selective", [](TrainConfig& c) { c.recompute = "selective", c.recompute_layers = 0; });
  if (mode != Recompute::full || partial)
    try_fix("--recompute full", [](TrainConfig& c) { c.recompute = "full", c.recompute_layers = 0; });
  if (parse_optimizer_moments(config.optimizer_moments) == DType::f32)
    try_fix("--optimizer-moments bf16", [](TrainConfig& c) { c.optimizer_moments = "bf16"; });
  for (int zero = config.zero + 1; zero <= 3 && dp * config.cp > 1; ++zero)
    if (try_fix("--zero " + std::to_string(zero), [zero](TrainConfig& c) { c.zero = zero; })) break;
  try_fix("--tp " + std::to_string(2 * config.tp), [](TrainConfig& c) { c.tp *= 2; }, ", twice the ranks");
  try_fix("--pp " + std::to_string(2 * config.pp), [](TrainConfig& c) { c.pp *= 2; }, ", twice the ranks");
  return fixes;
}

}  // namespace tessera
