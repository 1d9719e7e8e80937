// Every rank's part of a save, the agreement over the world, and rank 0's commit.
#include "train/checkpoint_saver.h"

#include <algorithm>

#include "core/cuda/device.h"
#include "core/error.h"
#include "data/tokenizer.h"
#include "ops/cast.h"

namespace tessera {
namespace {

// `moments` (f32 or bf16, on any device) as fp32 on the host: what a checkpoint holds.
Tensor f32_on_host(const Tensor& moments) {
  const Tensor held = tensor_to(moments, Device::cpu);
  if (held.dtype() == DType::f32) return held;
  Tensor wide = Tensor::zeros(held.shape());
  cast_copy(wide, held);
  return wide;
}

}  // namespace

CheckpointSaver::CheckpointSaver(const TrainConfig& config, const ProcessGrid& grid, DataParallel& dp,
                                 const Decoder& model, const AdamW& optimizer, const Tokenizer* tokenizer,
                                 const std::vector<DecoderStage>& stages, const std::vector<OffsetRange>& duplicates,
                                 OffsetRange tied_copy)
    : out_dir_(config.out_dir),
      world_(grid.world),
      shard_(grid.world_rank),
      shards_(grid.world->size()),
      async_(config.async_checkpoint),
      sharded_weights_(config.sharded_checkpoint_weights()),
      retention_{config.keep_checkpoints, config.keep_every},
      dp_(dp),
      // The first expert group of each (stage, tp rank) holds every weight between them.
      sends_weights_(grid.coord.dp < grid.dims.ep && grid.coord.cp == 0),
      model_(model),
      optimizer_(optimizer),
      tokenizer_(tokenizer),
      segments_(dp.checkpoint_segments(duplicates)),
      powersgd_place_{&model.layout(), TpPlace{grid.coord.tp, grid.dims.tp}, tied_copy} {
  if (tokenizer_) tokenizer_json_ = out_dir_ / "tokenizer.json";
  if (writes_whole_weights()) {
    full_layout_ = decoder_layout(model.config());
    for (int s = 0; s < int(stages.size()); ++s)
      for (int t = 0; t < grid.dims.tp; ++t)
        for (int e = 0; e < grid.dims.ep; ++e)
          sources_.push_back({grid_rank(grid.dims, GridCoord{t, 0, e, s}),
                              decoder_layout(model.config(), stages[size_t(s)], TpPlace{t, grid.dims.tp},
                                             EpPlace{e, grid.dims.ep})});
  }
  if (!async_) return;
  // The buffers' first touch happens now rather than as the first save's stall.
  const int64_t state_size = optimizer.state_size();
  if (writes_whole_weights()) weights_ = ModelSnapshot{model.config(), full_layout_, Tensor::zeros({full_layout_.total()})};
  if (sharded_weights_) weight_shard_ = Tensor::zeros({state_size});
  moments_ = OptimizerState{segments_, Tensor::zeros({state_size}), Tensor::zeros({state_size})};
  if (model.device() != Device::cuda) return;
  // Rank 0 holds every weight itself (under ZeRO-3 only its shard).
  const bool alone = grid.dims.pp == 1 && grid.dims.tp == 1 && grid.dims.ep == 1 && dp.zero_stage() < 3;
  weights_from_gpu_ = writes_whole_weights() && alone;
  const DType moments = optimizer.config().moments;
  staged_m_ = moments == DType::f32 ? moments_.m : Tensor::zeros({state_size}, moments);
  staged_v_ = moments == DType::f32 ? moments_.v : Tensor::zeros({state_size}, moments);
  if (writes_whole_weights()) pinned_.push_back(std::make_unique<PinnedHost>(weights_.params));
  if (sharded_weights_) pinned_.push_back(std::make_unique<PinnedHost>(weight_shard_));
  pinned_.push_back(std::make_unique<PinnedHost>(staged_m_));
  pinned_.push_back(std::make_unique<PinnedHost>(staged_v_));
}

CheckpointSaver::~CheckpointSaver() = default;

std::string CheckpointSaver::notice() const {
  int64_t refused = 0;
  for (const auto& p : pinned_) refused += p->refused() ? 1 : 0;
  if (refused == 0) return "";
  return "--async-checkpoint: the system refused to page-lock " + std::to_string(refused) + " of the " +
         std::to_string(pinned_.size()) + " host buffers (raise the locked-memory limit, ulimit -l), so each save "
         "waits for its copies from the GPU";
}

CheckpointPart CheckpointSaver::part(const ModelSnapshot& weights, const OptimizerState& moments,
                                     const Tensor& weight_shard) const {
  return CheckpointPart{shard_,
                        shards_,
                        &model_.layout(),
                        writes_whole_weights() ? &weights : nullptr,
                        &moments,
                        commits() ? tokenizer_json_ : std::filesystem::path(),
                        sharded_weights_ ? &weight_shard : nullptr,
                        powersgd_.errors.defined() ? &powersgd_ : nullptr};
}

void CheckpointSaver::take_powersgd_state() {
  if (dp_.grad_reducer().powersgd())
    powersgd_ = powersgd_part(dp_.grad_reducer(), powersgd_place_, segments_, optimizer_.state_size());
}

void CheckpointSaver::copy_weight_shard(Tensor& out, SideCopies* side) const {
  // The optimizer's parameters: the model's own, or under ZeRO-3 the shard, laid out as the moments.
  const Tensor& params = dp_.optimizer_params();
  const bool laid_out_as_moments = dp_.zero_stage() == 3;
  for (const OptimSegment& s : segments_) {
    Tensor to = out.view(s.state_offset, {s.length});
    const Tensor from = params.view(laid_out_as_moments ? s.state_offset : s.param_offset, {s.length});
    if (side)
      side->add(to, from);
    else
      copy_tensor(to, from);
  }
}

void CheckpointSaver::gather_weights(Tensor& full) const {
  if (sharded_weights_) return;
  // This rank's parameters, whole: under ZeRO-3 they come together from every dp rank's shard on
  // the ranks that send them (a collective: the others take part with nothing to receive).
  Tensor held = model_.params();
  if (dp_.zero_stage() == 3) {
    if (commits() && sources_.size() == 1) return dp_.gather_params(full);
    if (sends_weights_) held = Tensor::zeros({model_.layout().total()}, DType::f32, model_.device());
    dp_.gather_params(held);
  }
  if (!sends_weights_) return;
  if (!commits()) return world_->send(held, 0);  // another (stage, tp rank, experts)'s
  if (sources_.size() == 1) return copy_tensor(full, held);
  // Rank 0: each source's parameters, placed by name and slice (a tied copy lands on the embedding
  // it copies, a replicated parameter on itself: the same values).
  for (const Source& source : sources_) {
    Tensor part = Tensor::zeros({source.layout.total()}, DType::f32, model_.device());
    if (source.world_rank == 0)
      copy_tensor(part, held);
    else
      world_->recv(part, source.world_rank);
    const Tensor host = tensor_to(part, Device::cpu);
    for (const ParamSpec& spec : source.layout.specs()) {
      const float* values = host.f32() + spec.offset;
      float* whole = full.f32() + full_layout_.find(spec.name).offset;
      if (spec.slice.is_whole()) {
        std::copy_n(values, spec.numel(), whole);
        continue;
      }
      spec.slice.for_each_run([&](int64_t from, int64_t to, int64_t count) { std::copy_n(values + from, count, whole + to); });
    }
  }
}

std::filesystem::path CheckpointSaver::save(const CheckpointState& state, bool now) {
  finish();  // an asynchronous save reuses the host buffers of the previous one, so it must have landed
  if (commits() && tokenizer_ && !std::filesystem::exists(tokenizer_json_)) tokenizer_->save_json(tokenizer_json_);
  take_powersgd_state();
  if (async_ && !now) {
    // Into the host buffers: on the CPU now; from a GPU by side-stream copies (queued: no wait here;
    // the next update waits for them, before_update) but for weights gathered over MPI.
    const bool from_gpu = model_.device() == Device::cuda;
    if (weights_from_gpu_)
      side_copies_.add(weights_.params, model_.params());
    else
      gather_weights(weights_.params);
    if (sharded_weights_) copy_weight_shard(weight_shard_, from_gpu ? &side_copies_ : nullptr);
    // Checkpoints hold fp32 moments whatever the optimizer keeps (bf16 widens exactly): on the CPU
    // here, from a GPU in the writer.
    if (from_gpu) {
      side_copies_.add(staged_m_, optimizer_.m());
      side_copies_.add(staged_v_, optimizer_.v());
    } else {
      cast_copy(moments_.m, optimizer_.m());
      cast_copy(moments_.v, optimizer_.v());
    }
    writer_.start([this, from_gpu, step = state.step] {
      side_copies_.wait();
      if (from_gpu && staged_m_.dtype() != DType::f32) {
        cast_copy(moments_.m, staged_m_);
        cast_copy(moments_.v, staged_v_);
      }
      write_checkpoint_part(out_dir_, step, part(weights_, moments_, weight_shard_));
    });
    pending_ = state;  // only once its write is under way
  } else {
    // The host's own buffers on the CPU; staged through the host from a GPU.
    ModelSnapshot weights{model_.config(), full_layout_, Tensor()};
    if (writes_whole_weights()) weights.params = Tensor::zeros({full_layout_.total()});
    gather_weights(weights.params);
    Tensor weight_shard;
    if (sharded_weights_) {
      weight_shard = Tensor::zeros({optimizer_.state_size()});
      copy_weight_shard(weight_shard);
    }
    const OptimizerState moments{segments_, f32_on_host(optimizer_.m()), f32_on_host(optimizer_.v())};
    std::exception_ptr error;
    try {
      write_checkpoint_part(out_dir_, state.step, part(weights, moments, weight_shard));
    } catch (...) {
      error = std::current_exception();
    }
    conclude(state, error, sum_over(*world_, {error ? 1.0 : 0.0})[0]);
  }
  return out_dir_ / checkpoint_dir_name(state.step);
}

std::array<double, 2> CheckpointSaver::progress() const {
  if (!pending_ || !writer_.landed()) return {0.0, 0.0};
  return {1.0, writer_.failed() ? 1.0 : 0.0};
}

std::exception_ptr CheckpointSaver::land(CheckpointState& state) {
  state = *pending_;
  pending_.reset();
  try {
    writer_.wait();
  } catch (...) {
    return std::current_exception();
  }
  return nullptr;
}

void CheckpointSaver::after_step(double landed, double failed) {
  if (!pending_ || landed < double(world_->size())) return;
  CheckpointState state;
  const std::exception_ptr error = land(state);
  conclude(state, error, failed);
}

void CheckpointSaver::finish() {
  if (!pending_) return;
  CheckpointState state;
  const std::exception_ptr error = land(state);
  conclude(state, error, sum_over(*world_, {error ? 1.0 : 0.0})[0]);
}

void CheckpointSaver::conclude(const CheckpointState& state, std::exception_ptr error, double failed) {
  if (error) std::rethrow_exception(error);
  if (failed > 0)
    throw QuietError("checkpoint " + checkpoint_dir_name(state.step) +
                         ": another rank could not write its part (its error says why); nothing was committed",
                     __FILE__);
  if (commits()) commit_checkpoint(out_dir_, model_.config(), state, shards_, retention_);
}

}  // namespace tessera
