// The training loop of one process: for each optimizer step, accumulate gradients over the
// micro-batches of the global batch, measure the global grad-norm, clip, step AdamW on the
// scheduled learning rate, then log, evaluate and checkpoint as configured. fp16 runs scale the loss
// (train/loss_scaler.h) and skip the update of a step whose gradients overflowed.
#pragma once

#include <algorithm>
#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "data/data_mixture.h"
#include "nn/decoder.h"
#include "optim/adamw_optimizer.h"
#include "optim/lr_schedule.h"
#include "parallel/cp/all_to_all_attention.h"
#include "parallel/cp/ring_attention.h"
#include "parallel/ep/token_dispatch.h"
#include "parallel/process_grid.h"
#include "train/bad_step_guard.h"
#include "train/checkpoint_saver.h"
#include "train/choice_eval.h"
#include "train/data_parallel.h"
#include "train/device_choice.h"
#include "train/loss_scaler.h"
#include "train/micro_batch_feed.h"
#include "train/pipeline_parallel.h"
#include "train/progress.h"
#include "train/run_lock.h"
#include "train/stop_signal.h"
#include "train/train_config.h"

namespace tessera {

class Tokenizer;

struct TrainResult {
  int64_t last_step = 0;
  float last_loss = 0.0f;
  std::optional<float> last_val_loss;
  std::filesystem::path last_checkpoint;  // the last one saved, or the one resumed from
  bool already_finished = false;          // resumed at --steps: nothing was left to train
  int stopped_by = 0;                     // the signal (SIGTERM, SIGINT, SIGUSR1) that stopped the run early, or 0
};

// A validation: over --val-data the sources' weighted mean loss and each source's (none without
// --val-data), and with --choices the accuracy on its examples.
struct Validation {
  double loss = 0;
  std::vector<float> by_source;
  std::optional<ChoiceAccuracy> choices;
};

// A grid of one process whose groups all have size 1 (tests, and runs without a launcher).
ProcessGrid single_process_grid();

class Trainer {
 public:
  // Collective. Throws RunRefused (train/launch.h) for a configuration the run refuses, and
  // StoppedDuringSetup when a rank received a stop request (StopSignals alive) during the set-up:
  // the ranks agree on it between its phases (after choosing the checkpoint, after loading it, at the end).
  explicit Trainer(TrainConfig config, ProcessGrid grid = single_process_grid());
  ~Trainer();
  TrainResult run();
  // Collective: validation at the current weights (every rank calls it; --val-data or --choices is set).
  Validation validate();
  // "step N: val_loss L" and, for a mixture, each source's loss; then --choices' accuracies.
  std::string validation_line(int64_t step, const Validation& v) const;
  int64_t start_step() const { return start_step_; }  // the resumed checkpoint's step, or 0
  Decoder& model() { return *model_; }
  const AdamW& optimizer() const { return *optimizer_; }
  // Fault injection for tests: called after each step's gradients are complete, before the update;
  // it may change the loss or the gradients (model().grads()) to simulate a bad batch.
  using FaultHook = std::function<void(int64_t step, float& loss)>;
  void set_fault_hook(FaultHook hook) { fault_hook_ = std::move(hook); }
  const Tokenizer* tokenizer() const { return tokenizer_.get(); }  // null when the run has none
  // What the start of run() reports, a line each: what --resume skipped, the flags that changed at
  // the resume, a warmup longer than the run.
  const std::string& start_notice() const { return start_notice_; }
  // For tests: called with every run of sequences a step reads, from sequence `sequence` of the run
  // (counting every sequence its steps read), `count` of them, inputs (count, T).
  using DataHook = std::function<void(int64_t sequence, int64_t count, const int32_t* inputs)>;
  void set_data_hook(DataHook hook) { data_hook_ = std::move(hook); }

 private:
  // Forward + backward over one global batch, the B sequences from step_sequence; returns its mean loss.
  float accumulate_gradients(int64_t step_sequence);
  // The data position of a resumed run (resume_data_position) and its notices.
  void resume_data(const CheckpointState& state);
  // Sequence g of the run as a global batch of the sampler and a sequence in it.
  BatchSequence locate(int64_t sequence) const;
  // Sequences [sequence, sequence + count) of the run, which may span two global batches: `piece`
  // gets each batch's part (where it starts, sequences before it, its count).
  void for_each_batch_piece(int64_t sequence, int64_t count,
                            const std::function<void(BatchSequence at, int64_t done, int64_t n)>& piece) const;
  void fill_sequences(int64_t sequence, int64_t count, int32_t* inputs, int32_t* targets) const;
  int64_t count_trained(int64_t sequence, int64_t count) const;
  // Unscales and clips the gradients of the last accumulate_gradients and steps the optimizer;
  // returns the global gradient norm, or nothing when the update was skipped (fp16 overflow, or a
  // bad step: skip_reason_ says which). Throws (every rank alike) after --max-bad-steps in a row.
  std::optional<float> update_parameters(int64_t step, float loss, float lr, ProgressLine& progress);
  // A validation's forwards 0..count-1 dealt round-robin over the dp ranks: this rank runs `runs`,
  // the m-th being forward index(m), and counts the first `mine`. Under ZeRO-3 and expert
  // parallelism every forward is collective with the other dp ranks, so each rank runs as many: one
  // short of a forward in the last round runs its last again without counting it.
  struct EvalShare {
    int64_t rank, ranks, count, mine, runs;
    int64_t index(int64_t m) const { return std::min(rank + m * ranks, count - 1); }
  };
  EvalShare eval_share(int64_t count) const;
  float evaluate(const DataMixture& val_data);
  // Collective: --choices' rows dealt over the dp ranks a micro-batch at a time, their losses summed
  // over dp×cp and the pipeline's stages (trainer_choices.cpp).
  ChoiceAccuracy evaluate_choices();
  bool validates() const { return !val_sources_.empty() || !choice_examples_.empty(); }
  // Saves step's checkpoint (in the background with --async-checkpoint, unless `now`); returns its
  // path and adds the training's stall to checkpoint_stall_s_.
  std::filesystem::path save_checkpoint(int64_t step, bool now = false);
  void print_sample(ProgressLine& progress);
  // "; attention on cudnn" (or tessera) for 16-bit attention on the GPU outside ring attention, as
  // the ops will choose it for this run's shapes; empty otherwise.
  std::string attention_note() const;
  void write_loss_plot(const std::filesystem::path& metrics_path);
  bool is_reporting_rank() const { return grid_.world_rank == 0; }
  // Collective over the world: the stop signal most ranks received (StopSignals::pending()), or 0.
  int agree_on_stop();
  // Collective: throws StoppedDuringSetup (every rank alike) when a rank received a stop request.
  void stop_if_asked_during_setup();
  // Sums over the ranks that hold different parts of the step: dp×cp, then the pipeline stages.
  std::vector<double> sum_over_ranks(const std::vector<double>& values);
  // The global gradient norm over every stage and tp rank (each parameter counted once).
  float grad_norm();

  TrainConfig config_;
  ProcessGrid grid_;
  DeviceChoice device_;
  DType compute_dtype_ = DType::f32;
  std::optional<RunFolderLock> run_lock_;  // rank 0's for the run, unless --eval-only (which writes nothing)
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<Decoder> model_;
  std::unique_ptr<DataParallel> data_parallel_;  // refers to *model_
  std::unique_ptr<PipelineParallel> pipeline_;   // refers to *model_; with --pp above 1 only
  std::unique_ptr<TensorParallel> tensor_parallel_;  // the tp group's mappings, with --tp above 1 only
  std::unique_ptr<EpAllToAll> expert_parallel_;      // the ep group's token dispatcher, with --ep above 1 only
  std::unique_ptr<ContextParallel> context_parallel_;  // the cp group's ring or all-to-all attention, --cp above 1 only
  // This rank's parameters that another rank also holds and counts (grad-norm) and writes (checkpoints).
  std::vector<OffsetRange> duplicates_;
  std::unique_ptr<AdamW> optimizer_;
  std::unique_ptr<CheckpointSaver> checkpoint_saver_;  // refers to the three above
  LossScaler loss_scaler_;
  BadStepGuard bad_steps_;
  std::string skip_reason_;  // why the last step was skipped
  FaultHook fault_hook_;
  struct ResumeTimes {
    double verify_s = 0;  // --resume's choice: every file's CRC-32
    double load_s = 0;    // reading the weights and this rank's moments
  };
  ResumeTimes resume_times_;  // reported on a resumed run's first metrics line
  double checkpoint_stall_s_ = -1;  // the last save's stall, reported on the next metrics line (-1: none)
  double comm_wait_s_ = 0;  // exposed communication of the last step
  const StopSignals* stop_signals_ = nullptr;  // run()'s handlers, while it runs
  int stop_signal_ = 0;  // the last step's stop request: the signal most ranks received, or 0
  // The MoE layers' statistics of the last step, over its micro-batches and the dp ranks.
  struct MoeStepStats {
    double aux = 0, z = 0;
    std::vector<double> expert_load;  // rows the experts computed per expert, layer-major
    std::vector<double> routed_load;  // the router's choices per expert (more than those under a capacity)
    EpTraffic ep;                     // this rank's all-to-alls, under expert parallelism
  };
  MoeStepStats moe_step_;
  nlohmann::json pipeline_step_;  // the last step's pipeline timings (PipelineParallel::step_metrics)
  void add_moe_metrics(nlohmann::json& line) const;
  std::optional<DataMixture> train_data_;
  double flops_per_token_ = 0, peak_flops_ = 0;  // for the metrics' TFLOP/s and MFU (peak 0: unknown)
  // Validation: each source of --val-data alone, weighted (one source: weight 1). A mixture's
  // validation loss is its sources' weighted mean, each source's reported beside it.
  struct ValSource {
    DataSource source;
    std::unique_ptr<DataMixture> data;
  };
  std::vector<ValSource> val_sources_;
  std::vector<ChoiceExample> choice_examples_;  // --choices'
  std::vector<ChoiceRow> choice_rows_;          // their choices as rows of at most --seq-len inputs
  std::optional<MicroBatchFeed> choice_feed_;   // micro-batches of those rows, as narrow as the widest allows
  LrSchedule schedule_;
  int64_t start_step_ = 0;  // optimizer steps already taken (resume)
  std::filesystem::path resumed_from_;  // the checkpoint resumed from, if any
  std::string start_notice_;            // start_notice()'s lines
  void add_start_notice(const std::string& line);  // a line, unless empty
  // The data position: the sequences the steps read so far (the next step reads B from here), the
  // epoch origin (zero unless a resume changed --batch-size) and a single source's batches per epoch.
  int64_t next_sequence_ = 0;
  SequenceOrigin data_origin_;
  int64_t epoch_batches_ = 0;
  DataHook data_hook_;
  int64_t micro_batch_ = 1;  // sequences per forward pass on this rank
  std::optional<MicroBatchFeed> feed_;  // this rank's share of each micro-batch, with its document starts
};

}  // namespace tessera
