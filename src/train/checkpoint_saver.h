// Saving checkpoints from every rank at once (checkpoint/train_checkpoint.h's two phases): each rank
// writes its part (rank 0 the weights and the tokenizer, every rank its share of the moments as
// slices of the whole tensors: one shard file per rank), the ranks agree that every part landed (a
// sum over the world that a failed rank joins too, so none is left waiting), and rank 0 commits.
// Under ZeRO-3 every dp rank takes part in gathering the weights to rank 0, part by part. With
// sharded weights (--checkpoint-weights, by default under ZeRO-3) nothing is gathered: every rank
// writes the weights of its moments' slices beside them, so no rank ever holds the whole model.
// Under pipeline and tensor parallelism the first dp rank of every (stage, tp rank) sends its weights
// to rank 0 at the save, which writes the whole model in the single-process format; parameters held
// twice (a stage's tied copy of the embedding, a tp rank's replicated ones) are written by one rank. With --async-checkpoint the parts are
// copied into host buffers at the step boundary and a background thread writes them while training
// goes on (from a GPU the step boundary queues copies to the host on a side stream, beside the
// training, and the compute stream waits for them only before the next update: before_update); the
// agreement then rides on each step's all-reduce (progress, after_step), and the next save, a stop
// or the end of the run waits for it (finish). The saver holds the run folder's lock for the run.
#pragma once

#include <array>
#include <filesystem>
#include <memory>
#include <vector>
#include <optional>

#include "checkpoint/train_checkpoint.h"
#include "core/cuda/device.h"
#include "core/cuda/side_copies.h"
#include "optim/adamw_optimizer.h"
#include "train/async_checkpoint.h"
#include "train/data_parallel.h"
#include "train/powersgd_state.h"
#include "train/train_config.h"
#include "parallel/process_grid.h"

namespace tessera {

class Tokenizer;

class CheckpointSaver {
 public:
  // Keeps references to dp, model, optimizer and tokenizer (which may be null). `stages`: every
  // pipeline rank's DecoderStage (one for no pipeline); `duplicates`: this rank's parameters that
  // another rank writes; `tied_copy`: among them, a pipeline's last-stage copy of the embedding.
  CheckpointSaver(const TrainConfig& config, const ProcessGrid& grid, DataParallel& dp, const Decoder& model,
                  const AdamW& optimizer, const Tokenizer* tokenizer, const std::vector<DecoderStage>& stages,
                  const std::vector<OffsetRange>& duplicates = {}, OffsetRange tied_copy = {});
  ~CheckpointSaver();

  // Collective. Saves the checkpoint of `state` (in the background with --async-checkpoint, unless
  // `now`) after the previous one is committed; returns its path.
  std::filesystem::path save(const CheckpointState& state, bool now);
  // This rank's part of the step's all-reduce: {1 once its background write has landed, 1 if that
  // write failed}; zeros when no save is in flight.
  std::array<double, 2> progress() const;
  // With the sums of progress() over the world: commits the save in flight once every rank's part
  // has landed (every rank throws if one failed).
  void after_step(double landed, double failed);
  // Collective: waits for the save in flight, if any, and commits it.
  void finish();
  // Call before the optimizer writes the weights and moments: an asynchronous save's copies from the
  // GPU are read before the update (the compute stream waits for them; the host does not).
  void before_update() { side_copies_.compute_waits(); }
  // A line for the user when an asynchronous save from the GPU will stall ("" when not): the system
  // refused to page-lock its host buffers, so each save waits for its copies.
  std::string notice() const;
  // Where this rank's PowerSGD state sits in the checkpoints it writes (and a resume reads).
  const PowerSgdPlace& powersgd_place() const { return powersgd_place_; }

 private:
  // Joins the write in flight, which is then no longer pending: its state into `state`, and its error.
  std::exception_ptr land(CheckpointState& state);
  CheckpointPart part(const ModelSnapshot& weights, const OptimizerState& moments, const Tensor& weight_shard) const;
  // Under --powersgd-rank, collective: PowerSGD's state into powersgd_ (its errors summed over the groups).
  void take_powersgd_state();
  // Collective over the first dp rank of every (stage, tp rank): rank 0 gets their weights into `full`
  // (a host tensor of the whole model's layout); the others send theirs. Alone, rank 0 copies.
  void gather_weights(Tensor& full) const;
  // Sharded weights: this rank's weights of segments_ into the host tensor `out` (laid out as the
  // moments): from a GPU by `side` copies when given, else at once.
  void copy_weight_shard(Tensor& out, SideCopies* side = nullptr) const;
  bool commits() const { return world_->rank() == 0; }  // rank 0 writes the tokenizer and commits
  bool writes_whole_weights() const { return commits() && !sharded_weights_; }
  // After this rank's write ended (with `error`, or none) and `failed` ranks' writes failed: rank 0
  // commits, or every rank throws.
  void conclude(const CheckpointState& state, std::exception_ptr error, double failed);

  std::filesystem::path out_dir_;
  std::shared_ptr<Comm> world_;
  int shard_ = 0, shards_ = 1;  // this rank's moments file, of how many
  ParameterLayout full_layout_;  // the whole model's (rank 0)
  struct Source {
    int world_rank;
    ParameterLayout layout;
  };
  std::vector<Source> sources_;  // rank 0: every (stage, tp rank, ep rank)'s first replica and its layout
  bool async_;
  bool sharded_weights_;
  Retention retention_;
  DataParallel& dp_;
  bool sends_weights_;  // this rank sends its parameters to rank 0 (rank 0: gathers them)
  const Decoder& model_;
  const AdamW& optimizer_;
  std::filesystem::path tokenizer_json_;  // empty when the run has no tokenizer
  const Tokenizer* tokenizer_;
  std::vector<OptimSegment> segments_;  // what this rank writes of the moments
  PowerSgdPlace powersgd_place_;
  PowerSgdPart powersgd_;  // the save's PowerSGD state (errors undefined without PowerSGD)
  // An asynchronous save's host copies, allocated once; declared before the writer, so that its
  // thread is joined before they go. From a GPU they are filled by side-stream copies (no device copy:
  // the compute stream waits for them before the next update, before_update()): the weights on a lone
  // rank 0 (no pipeline, tp, ep or ZeRO-3; else they are gathered through MPI as on the CPU), the weight
  // shard, and the moments into staged_m_/staged_v_ of the optimizer's dtype (moments_'s own buffers
  // for fp32; bf16 ones, widened into moments_ by the writer, for bf16).
  ModelSnapshot weights_;
  OptimizerState moments_;
  Tensor weight_shard_;
  Tensor staged_m_, staged_v_;
  bool weights_from_gpu_ = false;  // rank 0 copies its own weights, whole, from the GPU
  std::vector<std::unique_ptr<PinnedHost>> pinned_;  // the host copies, page-locked from a GPU
  SideCopies side_copies_;  // after pinned_: copies in flight land before the memory is unlocked
  AsyncCheckpointWriter writer_;
  std::optional<CheckpointState> pending_;  // the save in flight
};

}  // namespace tessera
