// Training loop, evaluation and checkpoint cadence.
#include "train/trainer.h"

#include <omp.h>

#include <chrono>
#include <cmath>
#include <iomanip>
#include <sstream>

#include "checkpoint/run_folder.h"
#include "checkpoint/train_checkpoint.h"
#include "core/allocator.h"
#include "core/atomic_file.h"
#include "core/cuda/device.h"
#include "core/file_checks.h"
#include "core/user_text.h"
#include "data/tokenizer.h"
#include "ops/attention.h"
#include "ops/deterministic_kernels.h"
#include "ops/matmul_tuning.h"
#include "optim/grad_clip.h"
#include "parallel/mpi_comm.h"
#include "train/generate.h"
#include "train/loss_plot.h"
#include "train/metrics_log.h"
#include "train/model_setup.h"
#include "parallel/tp/tp_mappings.h"
#include "train/pipeline_plan.h"
#include "train/powersgd_state.h"
#include "train/run_refused.h"
#include "train/stop_signal.h"
#include "train/train_bench.h"
#include "train/trainer_resume.h"
#include "train/utf8_stream.h"

namespace tessera {

namespace {

LossScalerConfig loss_scaler_config(const TrainConfig& c, DType compute) {
  const bool dynamic = c.loss_scaling == "dynamic" || (c.loss_scaling == "auto" && compute == DType::f16);
  return LossScalerConfig{dynamic, c.loss_scale, c.loss_scale_window};
}

// The step's fp8 amaxes, each the max over every rank, move the scales on: every rank then holds
// the same scales for the next step, whatever its share of the model and the batch.
void update_fp8_scales(Fp8Scaling& fp8, Comm& world) {
  const std::vector<float> amaxes = fp8.take_amaxes();
  Tensor reduced = Tensor::zeros({int64_t(amaxes.size())});
  std::copy(amaxes.begin(), amaxes.end(), reduced.f32());
  world.all_reduce(reduced, ReduceOp::max);
  fp8.update(std::vector<float>(reduced.f32(), reduced.f32() + reduced.numel()));
}

// "20971520 bytes (21.0 MB)".
std::string bytes_text(uint64_t bytes) {
  std::ostringstream text;
  text << bytes << " bytes";
  if (bytes >= 100000) text << std::fixed << std::setprecision(1) << " (" << double(bytes) / 1e6 << " MB)";
  return text.str();
}

}  // namespace

Trainer::Trainer(TrainConfig config, ProcessGrid grid)
    : config_(std::move(config)),
      grid_(std::move(grid)),
      loss_scaler_(LossScalerConfig{}),
      bad_steps_(config_.max_bad_steps, config_.spike_zscore) {
  refuse_on_error([&] { config_.validate(); });
  // Before any rank reads the folder: a second run into it is refused before it reads a checkpoint the
  // first is writing or pruning.
  if (!config_.eval_only) lock_run_folder(run_lock_, config_.out_dir, *grid_.world);
  // The grid was checked against the batch (ParallelDims::check_model): dp · micro divides it.
  micro_batch_ = config_.micro_batch(grid_.dims.dp);
  set_attention_kernel(parse_attention_kernel(config_.attention_kernel));
  set_matmul_tuning(int(config_.matmul_tuning));
  set_deterministic_kernels(config_.deterministic);
  if (config_.threads > 0) omp_set_num_threads(config_.threads);
  if (!config_.tokenizer.empty()) tokenizer_ = std::make_unique<Tokenizer>(Tokenizer::load(config_.tokenizer));
  std::optional<int32_t> document_start;  // --attention-mask document: the token that starts a document
  if (config_.attention_mask == "document") {
    TS_REFUSE_UNLESS(tokenizer_, "--attention-mask document needs --tokenizer: its document start token (BOS, or "
                                 "<|endoftext|>) marks where each document of a training window begins");
    document_start = tokenizer_->document_start_token();
  }

  using Clock = std::chrono::steady_clock;
  const auto choice_start = Clock::now();
  // Each rank checks the CRC-32 of its share of a candidate's files; the world agrees on the verdict.
  const auto all_agree = [this](bool ok) {
    Tensor flag = Tensor::zeros({1});
    flag.f32()[0] = ok ? 0.0f : 1.0f;
    grid_.world->all_reduce(flag);
    return flag.f32()[0] == 0.0f;
  };
  ResumePoint start = run_start_point(config_, FileShare{grid_.world_rank, grid_.world->size()}, all_agree);
  resume_times_.verify_s = std::chrono::duration<double>(Clock::now() - choice_start).count();
  stop_if_asked_during_setup();  // before reading the weights (the CRC pass of a large checkpoint may be long)
  const std::optional<std::filesystem::path>& checkpoint = start.checkpoint;
  TS_REFUSE_UNLESS(!config_.eval_only || checkpoint || !config_.init_from.empty(), "--eval-only: ",
                   quoted_text(config_.out_dir), " holds no checkpoint; point --out-dir at the run folder to evaluate ",
                   "(with --resume), or evaluate a Hugging Face folder with --init-from");
  add_start_notice(start.notice);
  // A pipeline rank builds only its stage; plan_pipeline's checks ran at start-up (launch.cpp).
  const ModelConfig model_config = resolve_model_config(config_, tokenizer_.get(), checkpoint);
  device_ = choose_device(config_.device, model_config);  // auto runs a model no GPU kernel serves on the CPU
  compute_dtype_ = choose_compute_dtype(config_.dtype, device_);
  loss_scaler_ = LossScaler(loss_scaler_config(config_, compute_dtype_));
  std::optional<PipelinePlan> pipeline_plan;
  if (grid_.dims.pp > 1) pipeline_plan = plan_pipeline(config_, model_config, grid_.dims.dp);
  std::vector<DecoderStage> stages;
  for (int s = 0; pipeline_plan && s < grid_.dims.pp; ++s)
    stages.push_back(pipeline_stage(pipeline_plan->boundaries, grid_.dims.pp, s));
  const TpPlace tp{grid_.coord.tp, grid_.dims.tp};
  const EpPlace ep{grid_.ep->rank(), grid_.ep->size()};
  // ZeRO-3 fills each rank's shards range by range from the initial (or --init-from's) or the
  // checkpoint's weights, so the model is built without parameters.
  const ParamStorage storage = config_.zero == 3 ? ParamStorage::sharded_later : ParamStorage::whole;
  model_ = build_model(config_, model_config, checkpoint,
                       pipeline_plan ? std::optional(stages[size_t(grid_.coord.pp)]) : std::nullopt, tp, ep, storage);
  if (ep.size > 1) {
    expert_parallel_ = std::make_unique<EpAllToAll>(grid_.ep, device_.device);
    model_->set_expert_parallel(expert_parallel_.get());
  }
  if (grid_.dims.cp > 1) {
    if (config_.cp_comm == "all-to-all")
      context_parallel_ = std::make_unique<AllToAllAttention>(grid_.cp);
    else
      context_parallel_ = std::make_unique<RingAttention>(grid_.cp);
    model_->set_context_parallel(context_parallel_.get());
  }
  if (tp.size > 1) {
    tensor_parallel_ = std::make_unique<TpMappings>(grid_.tp, config_.sequence_parallel);
    model_->set_tensor_parallel(tensor_parallel_.get());
    // tp rank 0 counts and writes the parameters every tp rank holds whole, and the first of a
    // replicated kv head's ranks its rows.
    if (tp.rank > 0) duplicates_ = model_->layout().whole_parameter_ranges();
    for (const OffsetRange& kv : model_->replicated_kv_ranges()) duplicates_.push_back(kv);
  }
  if (!pipeline_plan) stages.push_back(model_->stage());
  check_flags_against_model(config_, model_->config());
  model_->set_recompute(RecomputePolicy{parse_recompute(config_.recompute), config_.recompute_layers});
  model_->set_moe_options(MoeOptions{config_.moe_aux_coef, config_.moe_z_coef, config_.moe_capacity_factor});
  const ModelConfig& mc = model_->config();
  // Weights load on the host; the model then moves to its device once (under ZeRO-3 as shards).
  // run_start_point chose the checkpoint with its checksums verified.
  CheckpointState state;
  ParameterValues zero3_values;
  const auto load_start = Clock::now();
  if (storage == ParamStorage::sharded_later) {
    if (checkpoint) {
      CheckpointModel opened =
          open_checkpoint_model(*checkpoint, model_->config(), model_->layout(), /*checksums_verified=*/true);
      state = std::move(opened.state);
      zero3_values = std::move(opened.weights);
    } else {
      zero3_values = initial_weights(config_, *model_);
    }
  } else if (checkpoint) {
    state = load_checkpoint(*checkpoint, *model_, /*checksums_verified=*/true);
  }
  // Data parallelism takes the model while it is still on the host: ZeRO-3 shards it there (or fills
  // its shards from zero3_values, reading a checkpoint's ranges here), so that only each rank's shard
  // reaches the device.
  data_parallel_ = std::make_unique<DataParallel>(
      grid_, *model_,
      DataParallelOptions{config_.zero, int64_t(config_.bucket_mb * double(1 << 20)), config_.overlap,
                          parse_grad_reduce_dtype(config_.grad_reduce_dtype), config_.powersgd_rank,
                          config_.reshard_after_forward},
      device_.device, zero3_values);
  resume_times_.load_s = std::chrono::duration<double>(Clock::now() - load_start).count();
  model_->to(device_.device, compute_dtype_);
  model_->set_fp8(config_.fp8_options());
  // A run that turns fp8 on starts its history afresh; one that turns it off drops the saved one.
  if (model_->fp8() && !state.fp8_amax_history.empty())
    model_->fp8()->restore_history(state.fp8_amax_history, "checkpoint " + checkpoint->string());
  const DType moments = parse_optimizer_moments(config_.optimizer_moments);
  optimizer_ = std::make_unique<AdamW>(
      data_parallel_->optimizer_segments(/*rounding_keys=*/moments != DType::f32),
      AdamWConfig{config_.beta1, config_.beta2, config_.eps, config_.weight_decay, moments, config_.seed},
      device_.device);
  if (pipeline_plan) {
    pipeline_ = std::make_unique<PipelineParallel>(grid_, *model_, pipeline_plan->schedule);
    if (pipeline_->duplicate_range().end > 0) duplicates_.push_back(pipeline_->duplicate_range());
  }
  checkpoint_saver_ = std::make_unique<CheckpointSaver>(config_, grid_, *data_parallel_, *model_, *optimizer_,
                                                        tokenizer_.get(), stages, duplicates_,
                                                        pipeline_ ? pipeline_->duplicate_range() : OffsetRange{});
  if (checkpoint) {
    // Each rank reads only its own share of the moments, whatever layout wrote them.
    const auto moments_start = Clock::now();
    const OptimizerState moments = load_optimizer_state(*checkpoint, model_->layout(),
                                                        data_parallel_->moment_segments(), /*checksums_verified=*/true);
    optimizer_->import_state(moments.m, moments.v);
    if (data_parallel_->grad_reducer().powersgd()) {
      const std::string notice =
          restore_powersgd(data_parallel_->grad_reducer(), checkpoint_saver_->powersgd_place(), *checkpoint);
      add_start_notice(notice);
    }
    resume_times_.load_s += std::chrono::duration<double>(Clock::now() - moments_start).count();
    optimizer_->set_steps_taken(state.optimizer_steps);
    start_step_ = state.step;
    // Checkpoints hold fp32 moments, so the setting may change at a resume; the run says so.
    const std::string saved_moments = state.run_config.value("optimizer-moments", std::string("fp32"));
    if (saved_moments != config_.optimizer_moments)
      add_start_notice("--optimizer-moments " + config_.optimizer_moments +
                       ": the checkpoint's run kept its AdamW moments in " + quoted_text(saved_moments) +
                       (optimizer_->config().moments == DType::bf16 ? "; they are rounded to bf16 once" : ""));
    loss_scaler_.restore(state.loss_scale, state.loss_scale_clean_steps);
    resumed_from_ = *checkpoint;
    TS_REFUSE_UNLESS(start_step_ <= config_.steps, "--steps ", config_.steps, " is below step ", start_step_, " of ",
                     checkpoint->string(), "; give --steps above ", start_step_, " to train further");
  }

  stop_if_asked_during_setup();  // the weights and moments are in; the data scan comes
  DataOrder order = parse_data_order(config_.data_order);
  train_data_.emplace(config_.train_data, mc.vocab_size, config_.batch_size, config_.seq_len, order, config_.seed,
                      "--train-data");
  if (train_data_->sources().size() == 1) epoch_batches_ = train_data_->batches_per_epoch();
  if (checkpoint) resume_data(state);
  if (!config_.val_data.empty())
    for (const DataSource& source : parse_data_sources(config_.val_data, "--val-data"))
      val_sources_.push_back({source, std::make_unique<DataMixture>(source.glob, mc.vocab_size, micro_batch_,
                                                                    config_.seq_len, DataOrder::sequential,
                                                                    config_.seed, "--val-data")});
  if (!config_.choices.empty()) {  // with --tokenizer (TrainConfig::validate)
    refuse_on_error([&] {  // a defect of the file is the user's to mend: no restart would help
      choice_examples_ = read_choice_examples(config_.choices, *tokenizer_);
      choice_rows_ = choice_rows(choice_examples_, config_.seq_len);
    });
  }
  flops_per_token_ = model_flops_per_token(mc, config_.seq_len);
  peak_flops_ = peak_flops_for(config_.peak_tflops, device_.device);
  schedule_ = LrSchedule{parse_lr_schedule(config_.lr_schedule), config_.lr, config_.min_lr, config_.warmup,
                         config_.steps, config_.decay_fraction};
  // ZeRO-2 and 3 reduce each block's gradients as the backward leaves it, whatever these say.
  const bool own_buckets = config_.bucket_mb != TrainConfig{}.bucket_mb, no_overlap = !config_.overlap;
  if (config_.zero >= 2 && (own_buckets || no_overlap))
    add_start_notice(std::string(own_buckets && no_overlap ? "--bucket-mb and --no-overlap have" :
                                 own_buckets                ? "--bucket-mb has"
                                                            : "--no-overlap has") +
                     " no effect with --zero " + std::to_string(config_.zero) + ": its gradients are reduced a block "
                     "at a time, each as the backward leaves it");
  if (config_.warmup > config_.steps)
    add_start_notice("--warmup " + std::to_string(config_.warmup) + " is longer than the run's " +
                     std::to_string(config_.steps) + " steps: the learning rate ends at " +
                     number_text(schedule_.at(config_.steps)) + ", short of --lr " + number_text(config_.lr));
  feed_.emplace(micro_batch_, config_.seq_len, context_parallel_.get(), document_start);
  if (!choice_rows_.empty()) {
    // --choices' forwards are as wide as their widest row (HellaSwag's are a tenth of a 1024-token
    // window), rounded up to a multiple of 16·cp·tp, which cp's chunks and sequence parallelism split.
    int64_t widest = 1;
    for (const ChoiceRow& row : choice_rows_) widest = std::max(widest, row.inputs());
    const int64_t multiple = 16 * grid_.dims.cp * grid_.dims.tp;
    const int64_t width = std::min(config_.seq_len, (widest + multiple - 1) / multiple * multiple);
    choice_feed_.emplace(micro_batch_, width, context_parallel_.get(), document_start);
  }
  stop_if_asked_during_setup();
}

int Trainer::agree_on_stop() {
  const auto votes = stop_votes(StopSignals::pending());
  const std::vector<double> summed = sum_over(*grid_.world, {votes.begin(), votes.end()});
  return stop_vote_result(summed.data());
}

void Trainer::stop_if_asked_during_setup() {
  if (const int signal = agree_on_stop(); signal != 0) throw StoppedDuringSetup(signal, __FILE__);
}

Trainer::~Trainer() = default;

void Trainer::add_start_notice(const std::string& line) {
  if (!line.empty()) start_notice_ += (start_notice_.empty() ? "" : "\n") + line;
}

ProcessGrid single_process_grid() {
  CommOptions options;
  ProcessGrid grid;
  grid.world = grid.tp = grid.cp = grid.dp = grid.dp_cp = grid.pp = grid.ep = grid.expert_dp =
      make_self_comm("world", 0, options);
  return grid;
}

float Trainer::accumulate_gradients(int64_t step_sequence) {
  const int64_t micro = micro_batch_, B = config_.batch_size, T = config_.seq_len;
  // This dp rank's share of global batch k: sequences [rank·B/dp, (rank+1)·B/dp).
  const int64_t share = B / data_parallel_->size(), first_sequence = data_parallel_->rank() * share;
  // Each token's loss enters the step's loss with weight 1/(B*T), whatever the micro-batch split
  // and the dp degree; summing over dp ranks then gives the full batch's gradient (times the loss
  // scale, which update_parameters divides out again). Under loss masks a training target's weight
  // is 1/(the global batch's targets) instead, which every rank counts from the data alone.
  const float dloss = loss_scaler_.scale() / float(B * T);
  const int64_t trained = count_trained(step_sequence, B);
  model_->set_target_loss_weight(trained > 0 ? float(double(B * T) / double(trained)) : 1.0f);
  if (expert_parallel_) expert_parallel_->take_traffic();  // the step's alone, not an evaluation's
  if (Fp8Scaling* fp8 = model_->fp8()) fp8->clear_amaxes();  // likewise: evaluations' amaxes set no scale
  if (context_parallel_) context_parallel_->reset_stats();
  model_->zero_grad();
  double loss_sum = 0.0;  // the step's token losses on this rank
  // The dp reduction overlaps the backward that makes gradients final, unless they still have to
  // be summed over the tp group first (sequence parallelism's norms, replicated kv heads); under a
  // pipeline, chunk by chunk as their last micro-batch's backward runs, the embedding (summed with
  // its tied copy in between) after the pipeline drained.
  const bool reduce_after = model_->has_tp_partial_grads();
  if (pipeline_) {
    if (!reduce_after) data_parallel_->reduce_during_next_backward();
    auto fill = [&](int m, Tensor& inputs, Tensor& targets) {
      fill_sequences(step_sequence + first_sequence + int64_t(m) * micro, micro, inputs.data<int32_t>(),
                     targets.data<int32_t>());
    };
    auto final_from = [&](int64_t offset) { data_parallel_->grads_final_from(offset); };
    const double token_losses =
        pipeline_->train_step(micro, T / grid_.dims.cp, dloss, feed_->pipeline_filler(fill),
                              reduce_after ? std::function<void(int64_t)>() : final_from);
    loss_sum = token_losses;
    if (!data_parallel_->reduces_by_part()) pipeline_->reduce_tied_embedding(*data_parallel_);
  }
  for (int64_t first = first_sequence; !pipeline_ && first < first_sequence + share; first += micro) {
    fill_sequences(step_sequence + first, micro, feed_->inputs().data<int32_t>(), feed_->targets().data<int32_t>());
    loss_sum += feed_->forward(*model_, dloss) * double(micro * T);
    // Only the last micro-batch's backward reduces: its buckets start as they complete.
    if (!reduce_after && first + micro == first_sequence + share) data_parallel_->reduce_during_next_backward();
    model_->backward();
  }
  if (reduce_after) {
    model_->reduce_tp_partial_grads();
    data_parallel_->reduce_during_next_backward();
  }
  comm_wait_s_ = data_parallel_->finish_reduction();
  if (Fp8Scaling* fp8 = model_->fp8()) update_fp8_scales(*fp8, *grid_.world);
  // Under ZeRO 2 and 3 every micro-batch's gradients were reduced already: the tied copies sum in the shards.
  if (pipeline_ && data_parallel_->reduces_by_part()) pipeline_->reduce_tied_embedding(*data_parallel_);
  // One all-reduce carries the step's loss, how far an asynchronous checkpoint save has got, which
  // stop signals the ranks received, the pipeline's timings and the MoE statistics:
  // [loss, save landed, save failed, stop votes..., pipeline..., aux, z, kept rows..., router choices...].
  const std::array<double, 2> save = checkpoint_saver_->progress();
  const auto votes = stop_votes(stop_signals_ ? stop_signals_->received() : 0);
  std::vector<double> values{loss_sum, save[0], save[1]};
  values.insert(values.end(), votes.begin(), votes.end());
  const size_t pipeline_at = values.size();
  if (pipeline_) {
    const std::vector<double> stage = pipeline_->step_values();
    values.insert(values.end(), stage.begin(), stage.end());
  }
  const size_t moe_at = values.size();
  const bool moe = model_->config().moe.enabled();
  if (moe) {
    const RouterLosses sums = model_->moe_loss_sums();
    values.insert(values.end(), {sums.aux, sums.z});
    values.insert(values.end(), model_->expert_load().begin(), model_->expert_load().end());
    values.insert(values.end(), model_->routed_load().begin(), model_->routed_load().end());
  }
  std::vector<double> sums = sum_over_ranks(values);
  // The tp ranks agree on the rest already; checkpoint writes and stop requests count every rank.
  const size_t counted_end = 3 + votes.size();
  if (tensor_parallel_) {
    const std::vector<double> counts = sum_over(*grid_.tp, {sums.begin() + 1, sums.begin() + counted_end});
    std::copy(counts.begin(), counts.end(), sums.begin() + 1);
  }
  checkpoint_saver_->after_step(sums[1], sums[2]);
  // Every rank stops after this step when any was signalled, naming the signal most ranks received.
  stop_signal_ = stop_vote_result(sums.data() + 3);
  const ModelConfig& mc = model_->config();
  const double per_layer_sequence = double(B) * double(mc.num_layers - mc.moe.first_dense_layers);
  if (pipeline_) pipeline_step_ = pipeline_->step_metrics(sums.data() + pipeline_at, data_parallel_->replicas());
  if (moe) {
    // Each rank's counts are of its own tokens (tp ranks route the same ones and are not summed).
    const auto loads = sums.begin() + long(moe_at) + 2;
    const long per_kind = long(model_->expert_load().size());
    moe_step_ = MoeStepStats{sums[moe_at] / per_layer_sequence, sums[moe_at + 1] / per_layer_sequence,
                             std::vector<double>(loads, loads + per_kind), std::vector<double>(loads + per_kind, sums.end()),
                             expert_parallel_ ? expert_parallel_->take_traffic() : EpTraffic{}};
  }
  return float(sums[0] / double(std::max<int64_t>(trained, 1)));
}

Trainer::EvalShare Trainer::eval_share(int64_t count) const {
  const int64_t rank = data_parallel_->rank(), ranks = data_parallel_->size();
  const int64_t mine = count > rank ? (count - rank - 1) / ranks + 1 : 0;  // forwards rank, rank + ranks, ...
  const bool same_count = data_parallel_->zero_stage() == 3 || expert_parallel_;
  return {rank, ranks, count, mine, same_count ? (count + ranks - 1) / ranks : mine};
}

float Trainer::evaluate(const DataMixture& val_data) {
  // The same validation batches for any dp degree, dealt over the dp ranks.
  const int64_t batches = std::min(config_.eval_batches, val_data.batches_per_epoch());
  const EvalShare share = eval_share(batches);
  int64_t trained = 0;  // targets of the batches, over every rank: the mean is over them
  for (int64_t b = 0; b < batches; ++b) trained += val_data.count_trained(b, 0, micro_batch_);
  double sum = 0.0;  // this rank's token losses
  if (pipeline_) {
    sum = pipeline_->evaluate(
        int(share.runs), int(share.mine), micro_batch_, config_.seq_len / grid_.dims.cp,
        feed_->pipeline_filler([&](int m, Tensor& inputs, Tensor& targets) {
          val_data.fill(share.index(m), 0, micro_batch_, inputs.data<int32_t>(), targets.data<int32_t>());
        }));
  }
  for (int64_t m = 0; !pipeline_ && m < share.runs; ++m) {
    val_data.fill(share.index(m), 0, micro_batch_, feed_->inputs().data<int32_t>(), feed_->targets().data<int32_t>());
    const double loss = feed_->forward(*model_, 0.0f);
    if (m < share.mine) sum += loss * double(micro_batch_ * config_.seq_len);
  }
  return float(sum_over_ranks({sum})[0] / double(std::max<int64_t>(trained, 1)));
}

std::vector<double> Trainer::sum_over_ranks(const std::vector<double>& values) {
  const std::vector<double> over_dp = data_parallel_->sum(values);
  return pipeline_ ? sum_over(*grid_.pp, over_dp) : over_dp;
}

float Trainer::grad_norm() {
  if (!pipeline_ && !tensor_parallel_) return data_parallel_->grad_norm();
  double squared = data_parallel_->squared_grad_norm(duplicates_);
  if (tensor_parallel_) squared = sum_over(*grid_.tp, {squared})[0];
  if (pipeline_) squared = sum_over(*grid_.pp, {squared})[0];
  return float(std::sqrt(squared));
}

void Trainer::add_moe_metrics(nlohmann::json& line) const {
  line["aux_loss"] = moe_step_.aux;
  if (config_.moe_z_coef > 0) line["z_loss"] = moe_step_.z;
  add_moe_load_metrics(line, moe_step_.routed_load, moe_step_.expert_load, model_->config().moe.num_experts,
                       config_.moe_capacity_factor > 0, expert_parallel_ ? grid_.ep->size() : 1);
  if (!expert_parallel_) return;
  // Expert parallelism: this rank's all-to-all time and bytes sent.
  line["ep_all_to_all_s"] = moe_step_.ep.seconds;
  line["ep_all_to_all_bytes"] = moe_step_.ep.bytes_sent;
}

std::filesystem::path Trainer::save_checkpoint(int64_t step, bool now) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const CheckpointState state{step,
                              locate(next_sequence_).batch,
                              config_.seed,
                              run_config_json(config_),
                              loss_scaler_.enabled() ? double(loss_scaler_.scale()) : 0.0,
                              optimizer_->steps_taken(),
                              model_->fp8() ? model_->fp8()->history() : std::vector<float>{},
                              CheckpointLayout{grid_.world->size(), data_parallel_->size(), grid_.dims.tp,
                                               grid_.dims.pp, config_.zero},
                              next_sequence_,
                              data_origin_,
                              loss_scaler_.clean_steps()};
  // The stall: the previous save if it is still writing, and this one (or, async, its host copy; from
  // a GPU only the queueing: its copies run beside the next step, whose update waits for them).
  const std::filesystem::path dir = checkpoint_saver_->save(state, now);
  checkpoint_stall_s_ = std::chrono::duration<double>(Clock::now() - start).count();
  return dir;
}

void Trainer::print_sample(ProgressLine& progress) {
  if (!tokenizer_ || !model_->can_generate()) return;
  Rng rng(config_.seed, stream_id("sample"));
  SamplingOptions options{.max_new_tokens = config_.seq_len / 2, .temperature = 0.8f, .top_k = 40,
                          .stop_token = tokenizer_->eot_token(), .vocab_limit = tokenizer_->vocab_size()};
  std::vector<int32_t> tokens = generate(*model_, {tokenizer_->document_start_token()}, options, rng);
  if (!tokens.empty() && tokens.back() == tokenizer_->eot_token()) tokens.pop_back();
  progress.message("sample: " + valid_utf8(tokenizer_->decode(tokens)));  // a token may end mid-character
}

void Trainer::write_loss_plot(const std::filesystem::path& metrics_path) {
  write_file_atomic(std::filesystem::path(config_.out_dir) / "loss.svg",
                    loss_plot_svg(read_loss_curves(metrics_path), "Tessera: " + config_.out_dir));
}

std::optional<float> Trainer::update_parameters(int64_t step, float loss, float lr, ProgressLine& progress) {
  const float scale = loss_scaler_.scale();
  const float scaled_norm = grad_norm();
  // An fp16 overflow: the scaler halves the scale (or throws when it cannot) and the step is skipped.
  if (std::isfinite(loss) && loss_scaler_.update(scaled_norm) == LossScaler::Verdict::skip) {
    std::ostringstream line;
    line << "step " << step << ": fp16 gradients overflowed at loss scale " << scale
         << "; update skipped, loss scale now " << loss_scaler_.scale();
    skip_reason_ = "fp16 overflow";
    data_parallel_->step_skipped();
    if (is_reporting_rank()) progress.message(line.str());
    return std::nullopt;
  }
  const float grad_norm = scaled_norm / scale;
  // Loss and norm are global, so every rank judges the step alike.
  if (std::optional<std::string> reason = bad_steps_.judge(loss, grad_norm)) {
    skip_reason_ = *reason;
    const bool stop = bad_steps_.skipped();
    std::ostringstream line;
    line << "step " << step << ": " << *reason << " (loss " << loss << ", grad norm " << grad_norm
         << "); update skipped, " << bad_steps_.in_a_row() << " of --max-bad-steps " << bad_steps_.max_bad_steps()
         << " in a row";
    if (!stop) {
      data_parallel_->step_skipped();
      if (is_reporting_rank()) progress.message(line.str());
      return std::nullopt;
    }
    progress.finish();
    checkpoint_saver_->finish();  // the newest checkpoint is complete before it is named
    std::optional<std::filesystem::path> found = find_checkpoint(config_.out_dir);
    std::ostringstream message;
    message << line.str() << ": stopped" << (std::isfinite(loss) && std::isfinite(grad_norm) ? "" : " (not finite)")
            << ". Last good checkpoint: " << (found ? found->string() : "none")
            << "; lower --lr or raise --warmup and resume";
    if (!is_reporting_rank()) throw QuietError(message.str(), __FILE__);
    throw Error(message.str(), __FILE__);
  }
  // The optimizer sees the scaled gradients: its factor clips and divides the scale out at once.
  // Unsharded, it also refreshes the 16-bit compute copy in its pass; under ZeRO the copy follows
  // the all-gather of the other ranks' updates.
  const bool sharded = config_.zero > 0;
  checkpoint_saver_->before_update();  // an asynchronous save's copies from the GPU are read first
  optimizer_->step(data_parallel_->optimizer_params(), data_parallel_->optimizer_grads(), lr,
                   clip_scale(grad_norm, config_.grad_clip) / scale, sharded ? nullptr : model_->compute_copy());
  data_parallel_->after_update();
  if (sharded) model_->params_updated();
  model_->balance_router_biases(moe_step_.expert_load, config_.moe_bias_rate);
  bad_steps_.applied(loss, grad_norm);
  return grad_norm;
}

Validation Trainer::validate() {
  Validation v;
  for (const ValSource& source : val_sources_) {
    v.by_source.push_back(evaluate(*source.data));
    v.loss += source.source.weight * v.by_source.back();
  }
  if (!choice_examples_.empty()) v.choices = evaluate_choices();
  return v;
}

std::string Trainer::attention_note() const {
  if (device_.device != Device::cuda || compute_dtype_ == DType::f32 || grid_.dims.cp > 1) return "";
  const ModelConfig& m = model_->config();
  const AttentionKernel used = attention_kernel_for(micro_batch_, m.num_heads / grid_.dims.tp, config_.seq_len,
                                                    m.head_size(), config_.attention_mask == "document");
  return "; attention on " + std::string(attention_kernel_name(used)) +
         (config_.deterministic ? "" : ", nondeterministic");
}

std::string Trainer::validation_line(int64_t step, const Validation& v) const {
  std::ostringstream line;
  line << std::fixed << std::setprecision(4) << "step " << step << ":";
  if (!val_sources_.empty()) line << " val_loss " << v.loss;
  if (val_sources_.size() > 1) {
    for (size_t d = 0; d < val_sources_.size(); ++d)
      line << (d == 0 ? " (" : ", ") << val_sources_[d].source.glob << " " << v.by_source[d];
    line << ")";
  }
  if (v.choices)
    line << (val_sources_.empty() ? " " : "; ") << "--choices acc_norm " << v.choices->accuracy_norm() << " acc "
         << v.choices->accuracy() << " loss " << v.choices->right_loss() << " over " << v.choices->examples
         << " examples";
  return line.str();
}

TrainResult Trainer::run() {
  using Clock = std::chrono::steady_clock;
  create_folder(config_.out_dir, "--out-dir");
  std::filesystem::path metrics_path =
      config_.metrics_file.empty() ? std::filesystem::path(config_.out_dir) / "metrics.jsonl"
                                   : std::filesystem::path(config_.metrics_file);
  // Rank 0 reports (metrics, progress, plots, checkpoint files); every rank computes.
  std::optional<MetricsLog> metrics;
  if (is_reporting_rank()) metrics.emplace(metrics_path, config_.tensorboard_dir);
  ProgressLine progress(config_.steps, config_.quiet || !is_reporting_rank());
  // Saves a killed run never committed take space for nothing; none of this run's has started yet.
  if (is_reporting_rank()) {
    const RemovedSaves removed = remove_unfinished_saves(config_.out_dir);
    if (removed.folders > 0)
      progress.message("removed " + std::to_string(removed.folders) + " unfinished checkpoint save" +
                       (removed.folders == 1 ? "" : "s") + " (.ckpt-*.tmp, " + bytes_text(removed.bytes) + ") from " +
                       quoted_text(config_.out_dir));
  }
  TrainResult result;
  result.last_step = start_step_;
  result.last_checkpoint = resumed_from_;
  result.already_finished = start_step_ == config_.steps;
  if (!device_.notice.empty() && is_reporting_rank()) progress.message(device_.notice);
  if (!start_notice_.empty() && is_reporting_rank()) progress.message(start_notice_);
  if (const std::string notice = checkpoint_saver_->notice(); !notice.empty()) progress.message(notice);
  if (start_step_ > 0 && is_reporting_rank()) progress.message("resumed from step " + std::to_string(start_step_));
  if (is_reporting_rank())
    progress.message("model: " + model_summary(model_->config()) + "; " + std::string(dtype_name(compute_dtype_)) +
                     " on " + device_name(device_.device) + ", " +
                     std::to_string(config_.batch_size) + " x " + std::to_string(config_.seq_len) + " tokens a step" +
                     attention_note() +
                     (optimizer_->config().moments == DType::bf16 ? "; bf16 AdamW moments (stochastic rounding)" : ""));
  if (train_data_->sources().size() > 1 && is_reporting_rank())
    progress.message("--train-data mixes " + std::to_string(train_data_->sources().size()) + " sources:\n" +
                     train_data_->summary(config_.steps));
  else if (train_data_->has_loss_masks() && is_reporting_rank())
    progress.message("--train-data: " + train_data_->summary(config_.steps));
  if (train_data_->has_packed_records() && config_.attention_mask != "document" && is_reporting_rank())
    progress.message("--train-data holds records packed into windows (tokenize --pack-seq-len), and each token attends "
                     "to the other records of its window; --attention-mask document keeps every record to itself");

  const StopSignals stop_signals;  // SIGTERM/SIGINT: finish the step, save, stop
  stop_signals_ = &stop_signals;
  const auto start = Clock::now();
  const double tokens_per_step = double(config_.batch_size * config_.seq_len);
  for (int64_t step = start_step_ + 1; step <= config_.steps; ++step) {
    const auto step_start = Clock::now();
    const float lr = schedule_.at(step);
    const int64_t step_sequence = next_sequence_;
    float loss = accumulate_gradients(step_sequence);
    next_sequence_ += config_.batch_size;
    if (fault_hook_) fault_hook_(step, loss);
    const std::optional<float> grad_norm = update_parameters(step, loss, lr, progress);

    const auto now = Clock::now();
    const double step_s = std::chrono::duration<double>(now - step_start).count();
    const double elapsed = std::chrono::duration<double>(now - start).count();
    const double tokens_per_s = tokens_per_step / step_s;
    // Memory of the device the model computes on: host RAM on the CPU, GPU memory on a GPU.
    const AllocatorStats memory = allocator_stats(device_.device);
    if (metrics) {
      // "batch": the global batch this step read (the data position; batch k's samples depend on (seed, k) only).
      // After a resume that changed --batch-size, a step may start inside a batch: "first_sequence" says where.
      const BatchSequence read = locate(step_sequence);
      nlohmann::json line = {{"step", step}, {"batch", read.batch}, {"loss", loss}, {"lr", lr},
                             {"tokens_per_s", tokens_per_s},
                             {"elapsed_s", elapsed}, {"step_s", step_s}, {"comm_wait_s", comm_wait_s_},
                             {"mem_mb", double(memory.current_bytes) / 1e6},
                             {"peak_mem_mb", double(memory.peak_bytes) / 1e6}};
      // Model FLOPs per second per rank (llm.c's 6·N + 6·L·C·T per token), and MFU against the peak.
      const double flops_per_rank = tokens_per_s * flops_per_token_ / double(grid_.world->size());
      line["tflops_per_rank"] = flops_per_rank / 1e12;
      if (peak_flops_ > 0) line["mfu"] = flops_per_rank / peak_flops_;
      const ParamMemory params = data_parallel_->param_memory();  // fp32 weights, the gathered ones included
      line["param_mem_mb"] = double(params.persistent_bytes) / 1e6;
      line["peak_param_mem_mb"] = double(params.peak_bytes) / 1e6;
      if (grad_norm) {
        line["grad_norm"] = *grad_norm;
      } else {
        line["skipped"] = true;
        line["skip_reason"] = skip_reason_;
      }
      if (read.sequence != 0) line["first_sequence"] = step_sequence;
      if (bad_steps_.total_skipped() > 0) line["bad_steps"] = bad_steps_.total_skipped();
      if (checkpoint_stall_s_ >= 0) line["checkpoint_stall_s"] = checkpoint_stall_s_;  // the previous step's save
      checkpoint_stall_s_ = -1;
      if (step == start_step_ + 1 && start_step_ > 0) {  // the resumed checkpoint's CRC pass and read
        line["checkpoint_verify_s"] = resume_times_.verify_s;
        line["checkpoint_load_s"] = resume_times_.load_s;
      }
      if (loss_scaler_.enabled()) line["loss_scale"] = loss_scaler_.scale();
      if (model_->config().moe.enabled()) add_moe_metrics(line);
      if (pipeline_) line["pipeline"] = pipeline_step_;
      if (context_parallel_) {  // this rank's exchanges: the wait its attention did not hide, the bytes it sent
        const bool ring = config_.cp_comm == "ring";
        line[ring ? "cp_ring_wait_s" : "cp_all_to_all_s"] = context_parallel_->stats().wait_s;
        line[ring ? "cp_ring_bytes" : "cp_all_to_all_bytes"] = context_parallel_->stats().bytes_sent;
      }
      metrics->write(line);
    }
    progress.update(step, loss, lr, tokens_per_s, elapsed);
    if (step == start_step_ + 1 && config_.matmul_tuning > 1 && device_.device == Device::cuda && is_reporting_rank())
      progress.message(matmul_tuning_summary(matmul_tuning_records()));
    result.last_step = step;
    result.last_loss = loss;

    const bool last = step == config_.steps;
    if (validates() && ((config_.eval_every > 0 && step % config_.eval_every == 0) || last)) {
      const Validation v = validate();
      nlohmann::json entry = {{"step", step}};
      if (!val_sources_.empty()) entry["val_loss"] = float(v.loss);
      if (v.choices) {
        entry["choices_acc"] = v.choices->accuracy();
        entry["choices_acc_norm"] = v.choices->accuracy_norm();
        entry["choices_loss"] = v.choices->right_loss();
        entry["choices_chance"] = v.choices->chance();
      }
      if (val_sources_.size() > 1) {
        nlohmann::json& by_source = entry["val_loss_by_source"] = nlohmann::json::object();
        for (size_t d = 0; d < val_sources_.size(); ++d) by_source[val_sources_[d].source.glob] = v.by_source[d];
      }
      if (metrics) metrics->write(entry);
      progress.message(validation_line(step, v));
      if (!val_sources_.empty()) result.last_val_loss = float(v.loss);
    }
    if (config_.sample_every > 0 && step % config_.sample_every == 0 && !last && is_reporting_rank())
      print_sample(progress);
    int signal = stop_signal_;  // agreed by every rank in accumulate_gradients
    if ((config_.checkpoint_every > 0 && step % config_.checkpoint_every == 0) || last || signal != 0) {
      result.last_checkpoint = save_checkpoint(step, /*now=*/last || signal != 0);
      // A request that came while this step saved stops the run now: the checkpoint holds this step,
      // and another step would cost a step and another save within the scheduler's grace period.
      if (signal == 0 && !last) signal = stop_signal_ = agree_on_stop();
    }
    if (is_reporting_rank() && (last || signal != 0 || (config_.eval_every > 0 && step % config_.eval_every == 0)))
      write_loss_plot(metrics_path);
    if (signal != 0 && !last) {
      result.stopped_by = signal;  // every rank agreed on it; the caller says so
      break;
    }
  }
  checkpoint_saver_->finish();
  stop_signals_ = nullptr;
  progress.finish();
  return result;
}

}  // namespace tessera
