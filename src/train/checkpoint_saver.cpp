// Every rank's part of a save, the agreement over the dp group, and rank 0's commit.
#include "train/checkpoint_saver.h"

#include "core/cuda/device.h"
#include "core/error.h"
#include "data/tokenizer.h"

namespace tessera {

CheckpointSaver::CheckpointSaver(const TrainConfig& config, DataParallel& dp, const Decoder& model,
                                 const AdamW& optimizer, const Tokenizer* tokenizer)
    : out_dir_(config.out_dir),
      async_(config.async_checkpoint),
      retention_{config.keep_checkpoints, config.keep_every},
      dp_(dp),
      model_(model),
      optimizer_(optimizer),
      tokenizer_(tokenizer),
      segments_(dp.checkpoint_segments()) {
  if (tokenizer_) tokenizer_json_ = out_dir_ / "tokenizer.json";
  if (!async_) return;
  // The buffers' first touch happens now rather than as the first save's stall.
  if (dp_.rank() == 0) weights_ = snapshot_of(model);
  moments_ = OptimizerState{segments_, Tensor::zeros({optimizer.state_size()}), Tensor::zeros({optimizer.state_size()})};
  if (model.device() != Device::cuda) return;
  if (dp_.rank() == 0) device_params_ = Tensor::zeros(model.params().shape(), DType::f32, Device::cuda);
  device_m_ = Tensor::zeros({optimizer.state_size()}, DType::f32, Device::cuda);
  device_v_ = Tensor::zeros({optimizer.state_size()}, DType::f32, Device::cuda);
  if (dp_.rank() == 0) pinned_.push_back(std::make_unique<PinnedHost>(weights_.params));
  pinned_.push_back(std::make_unique<PinnedHost>(moments_.m));
  pinned_.push_back(std::make_unique<PinnedHost>(moments_.v));
}

CheckpointSaver::~CheckpointSaver() = default;

CheckpointPart CheckpointSaver::part(const ModelSnapshot& weights, const OptimizerState& moments) const {
  const bool first = dp_.rank() == 0;
  return CheckpointPart{dp_.rank(), dp_.size(), &model_.layout(), first ? &weights : nullptr, &moments,
                        first ? tokenizer_json_ : std::filesystem::path()};
}

std::filesystem::path CheckpointSaver::save(const CheckpointState& state, bool now) {
  finish();  // an asynchronous save reuses the host buffers of the previous one, so it must have landed
  if (dp_.rank() == 0 && tokenizer_ && !std::filesystem::exists(tokenizer_json_)) tokenizer_->save_json(tokenizer_json_);
  if (async_ && !now) {
    const bool from_gpu = device_m_.defined();
    // Into the host buffers, or on a GPU into the device buffers (queued: no wait here).
    if (dp_.rank() == 0) copy_tensor(from_gpu ? device_params_ : weights_.params, model_.params());
    copy_tensor(from_gpu ? device_m_ : moments_.m, optimizer_.m());
    copy_tensor(from_gpu ? device_v_ : moments_.v, optimizer_.v());
    pending_ = state;
    writer_.start([this, from_gpu, step = state.step] {
      if (from_gpu) {
        if (dp_.rank() == 0) copy_tensor_to_host_beside_compute(weights_.params, device_params_);
        copy_tensor_to_host_beside_compute(moments_.m, device_m_);
        copy_tensor_to_host_beside_compute(moments_.v, device_v_);
      }
      write_checkpoint_part(out_dir_, step, part(weights_, moments_));
    });
  } else {
    // The host's own buffers on the CPU; staged through the host from a GPU.
    const ModelSnapshot weights{model_.config(), model_.layout(),
                                dp_.rank() == 0 ? tensor_to(model_.params(), Device::cpu) : Tensor()};
    const OptimizerState moments{segments_, tensor_to(optimizer_.m(), Device::cpu), tensor_to(optimizer_.v(), Device::cpu)};
    std::exception_ptr error;
    try {
      write_checkpoint_part(out_dir_, state.step, part(weights, moments));
    } catch (...) {
      error = std::current_exception();
    }
    conclude(state, error, dp_.sum(error ? 1.0 : 0.0));
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
  if (!pending_ || landed < double(dp_.size())) return;
  CheckpointState state;
  const std::exception_ptr error = land(state);
  conclude(state, error, failed);
}

void CheckpointSaver::finish() {
  if (!pending_) return;
  CheckpointState state;
  const std::exception_ptr error = land(state);
  conclude(state, error, dp_.sum(error ? 1.0 : 0.0));
}

void CheckpointSaver::conclude(const CheckpointState& state, std::exception_ptr error, double failed) {
  if (error) std::rethrow_exception(error);
  if (failed > 0)
    throw QuietError("checkpoint " + checkpoint_dir_name(state.step) +
                         ": another rank could not write its part (its error says why); nothing was committed",
                     __FILE__);
  if (dp_.rank() == 0) commit_checkpoint(out_dir_, model_.config(), state, dp_.size(), retention_);
}

}  // namespace tessera
