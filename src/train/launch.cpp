// Grid set-up and the configuration agreement check.
#include "train/launch.h"

#include <cstdio>

#include "core/rng.h"
#include "parallel/nccl_comm.h"
#include "train/device_choice.h"
#include "train/model_setup.h"
#include "nn/tensor_parallel.h"
#include "train/pipeline_plan.h"

namespace tessera {
namespace {

// What every rank must agree on: the run's configuration, and the flags that decide when ranks meet
// (evaluations, saves, samples, the gradient buckets, ZeRO-3's gathers), where they write, and what
// they compute with (the loss scale, the GPU kernels). A rank of its own there waits on a collective
// the others never start, writes its checkpoint shards into another folder, or drifts from its
// replicas. Left out: --threads, --quiet, --metrics-file, --peak-tflops and --comm-timeout, each one
// rank's own business.
nlohmann::json rank_agreement_json(const TrainConfig& c) {
  nlohmann::json agreed = run_config_json(c);
  agreed.update({{"out-dir", c.out_dir},
                 {"resume", c.resume},
                 {"eval-only", c.eval_only},
                 {"eval-every", c.eval_every},
                 {"eval-batches", c.eval_batches},
                 {"checkpoint-every", c.checkpoint_every},
                 {"keep-checkpoints", c.keep_checkpoints},
                 {"sample-every", c.sample_every},
                 {"bucket-mb", c.bucket_mb},
                 {"overlap", c.overlap},
                 {"reshard-after-forward", c.reshard_after_forward},
                 {"device-comm", c.device_comm},
                 {"loss-scaling", c.loss_scaling},
                 {"loss-scale", c.loss_scale},
                 {"loss-scale-window", c.loss_scale_window},
                 {"attention-kernel", c.attention_kernel},
                 {"matmul-tuning", c.matmul_tuning},
                 {"deterministic", c.deterministic}});
  return agreed;
}

// Every rank must run the same configuration: compare a hash of it (as four exact 16-bit pieces in
// fp32) through a max and a min over the world.
void check_same_config(Comm& world, const TrainConfig& config) {
  const uint64_t hash = stream_id(rank_agreement_json(config).dump());
  Tensor high = Tensor::zeros({4}), low = Tensor::zeros({4});
  for (int i = 0; i < 4; ++i) high.f32()[i] = low.f32()[i] = float((hash >> (16 * i)) & 0xffff);
  world.all_reduce(high, ReduceOp::max);
  world.all_reduce(low, ReduceOp::min);
  for (int i = 0; i < 4; ++i)
    TS_REFUSE_UNLESS(high.f32()[i] == low.f32()[i], "the ranks were started with different configurations (rank ",
                     world.rank(), " differs from another rank); give every rank the same flags and config file");
}

}  // namespace

ParallelDims resolve_layout(const TrainConfig& config, const ModelConfig& model, int world_size) {
  ParallelDims dims = ParallelDims::resolve({config.dp, config.tp, config.pp, config.cp, config.ep}, world_size);
  dims.check_model(ModelShape{model.num_layers, model.num_heads, model.channels, model.hidden(), model.moe.num_experts},
                   config.seq_len,
                   config.batch_size, config.micro_batch(dims.dp));
  TS_CHECK(dims.cp == 1 || !model.moe.enabled() || config.moe_capacity_factor == 0, "--cp ", dims.cp,
           " with --moe-capacity-factor ", config.moe_capacity_factor,
           " is not implemented (which tokens an expert drops depends on the whole sequences' order); drop "
           "--moe-capacity-factor (dropless) or --cp");
  const ModelConfig local = tp_local_config(model, TpPlace{0, dims.tp});  // --tp divides the heads, kv heads, widths and vocabulary, or one line says which
  TS_CHECK(config.cp_comm != "all-to-all" || (local.num_heads % dims.cp == 0 && local.kv_heads() % dims.cp == 0),
           "--cp-comm all-to-all gives each of the --cp ", dims.cp, " ranks an equal share of ",
           dims.tp > 1 ? "a tp rank's " : "the ", local.num_heads, " query and ", local.kv_heads(),
           " key/value heads, which do not split that way; use --cp-comm ring, or a --cp (times --tp) that divides "
           "both head counts");
  // After the world and the model took --tp: a --seq-len cannot mend a --tp that divides neither.
  TS_CHECK(dims.tp == 1 || !config.sequence_parallel || config.seq_len % dims.tp == 0,
           "sequence parallelism splits each sequence's ", config.seq_len, " positions over --tp ", dims.tp,
           " ranks; use a --seq-len that is a multiple of ", dims.tp, " or --no-sequence-parallel");
  if (dims.pp > 1) plan_pipeline(config, model, dims.dp);  // its stages and schedule fit, or one line says why
  return dims;
}

ModelConfig check_run_config(const TrainConfig& config, int world_size) {
  return refuse_on_error([&] {
    const ModelConfig model = model_config_for_run(config);
    config.validate();  // the flags' own rules first, then how they meet the world and the model
    check_flags_against_model(config, model);
    resolve_layout(config, model, world_size);
    return model;
  });
}

ProcessGrid setup_process_grid(Runtime& runtime, const TrainConfig& config, const ModelConfig& model) {
  const ParallelDims dims = refuse_on_error([&] {
    config.validate();
    return resolve_layout(config, model, runtime.world_size());
  });
  CommOptions options;
  options.timeout_s = config.comm_timeout;
  const DeviceCommChoice transport = refuse_on_error([&] {
    return choose_device_comm(config.device_comm, {choose_device(config.device, model).device, runtime.world_size(),
                                                   nccl_built(), runtime.gpu_per_rank()});
  });
  // Every rank must build the same kind of communicators, or the first NCCL group would wait forever.
  TS_REFUSE_UNLESS(runtime.same_on_every_rank(int64_t(transport.transport)), "the ranks chose different ways to move ",
                   "GPU tensors (some NCCL, some host memory): give every rank the same --device and --device-comm, ",
                   "on nodes with the same GPUs");
  if (!transport.notice.empty() && runtime.world_rank() == 0) std::fprintf(stderr, "%s\n", transport.notice.c_str());
  options.device_transport = transport.transport;
  ProcessGrid grid = build_process_grid(runtime, dims, options);
  check_same_config(*grid.world, config);
  return grid;
}

}  // namespace tessera
