// Validation of the training configuration: each error names the flag and the fix.
#include "train/train_config.h"

#include <cmath>
#include <utility>

#include "core/error.h"
#include "data/data_mixture.h"
#include "parallel/dp/grad_reducer.h"
#include "parallel/pp/pipeline_schedule.h"
#include "nn/fp8_scaling.h"
#include "nn/recompute.h"
#include "ops/attention.h"
#include "ops/matmul_tuning.h"
#include "optim/adamw_optimizer.h"
#include "optim/lr_schedule.h"
#include "train/device_choice.h"

namespace tessera {

void TrainConfig::validate() const {
  // A value that overflowed float (--lr 1e40) arrives as infinity; none of these has a meaning there.
  for (auto [flag, value] : {std::pair{"--lr", double(lr)}, {"--min-lr", double(min_lr)},
                              {"--decay-fraction", double(decay_fraction)}, {"--weight-decay", double(weight_decay)},
                              {"--beta1", double(beta1)}, {"--beta2", double(beta2)}, {"--eps", double(eps)},
                              {"--grad-clip", double(grad_clip)}, {"--bucket-mb", bucket_mb},
                              {"--comm-timeout", comm_timeout}, {"--moe-aux-coef", double(moe_aux_coef)},
                              {"--moe-z-coef", double(moe_z_coef)}, {"--moe-capacity-factor", double(moe_capacity_factor)},
                              {"--moe-bias-rate", double(moe_bias_rate)}})
    TS_CHECK(std::isfinite(value), flag, " must be a finite number, got ", value);
  TS_CHECK(batch_size > 0, "--batch-size must be positive, got ", batch_size);
  TS_CHECK(micro_batch_size >= 0, "--micro-batch-size must be positive, got ", micro_batch_size);
  TS_CHECK(batch_size % micro_batch() == 0, "--batch-size ", batch_size, " is not a multiple of --micro-batch-size ",
           micro_batch(), "; choose a micro-batch that divides the global batch");
  TS_CHECK(seq_len > 0, "--seq-len must be positive, got ", seq_len);
  TS_CHECK(steps > 0, "--steps must be positive, got ", steps);
  TS_CHECK(lr > 0, "--lr must be positive, got ", lr);
  TS_CHECK(min_lr >= 0 && min_lr <= lr, "--min-lr must be between 0 and --lr, got ", min_lr);
  TS_CHECK(warmup >= 0, "--warmup must not be negative, got ", warmup);
  TS_CHECK(decay_fraction > 0 && decay_fraction <= 1, "--decay-fraction must be in (0, 1], got ", decay_fraction);
  TS_CHECK(weight_decay >= 0, "--weight-decay must not be negative, got ", weight_decay);
  TS_CHECK(beta1 >= 0 && beta1 < 1, "--beta1 must be in [0, 1), got ", beta1);
  TS_CHECK(beta2 >= 0 && beta2 < 1, "--beta2 must be in [0, 1), got ", beta2);
  TS_CHECK(eps > 0, "--eps must be positive, got ", eps);
  TS_CHECK(grad_clip >= 0, "--grad-clip must not be negative (0 turns clipping off), got ", grad_clip);
  TS_CHECK(eval_every >= 0, "--eval-every must not be negative, got ", eval_every);
  TS_CHECK(eval_batches > 0, "--eval-batches must be positive, got ", eval_batches);
  TS_CHECK(!eval_only || !val_data.empty() || !choices.empty(), "--eval-only evaluates --val-data or --choices, "
           "neither of which is given; add --val-data with the shards to evaluate");
  TS_CHECK(choices.empty() || !tokenizer.empty(),
           "--choices needs --tokenizer: its examples are text, encoded as the model reads it");
  TS_CHECK(checkpoint_every >= 0, "--checkpoint-every must not be negative, got ", checkpoint_every);
  TS_CHECK(keep_every >= 0, "--keep-every must not be negative (0 keeps no milestones), got ", keep_every);
  TS_CHECK(max_bad_steps >= 1, "--max-bad-steps must be at least 1 (1 stops at the first bad step), got ",
           max_bad_steps);
  TS_CHECK(std::isfinite(spike_zscore) && spike_zscore >= 0, "--spike-zscore must be 0 (off) or a positive number ",
           "of standard deviations, got ", spike_zscore);
  TS_CHECK(checkpoint_weights == "auto" || checkpoint_weights == "whole" || checkpoint_weights == "sharded",
           "--checkpoint-weights must be auto, whole or sharded, got '", checkpoint_weights, "'");
  TS_CHECK(keep_checkpoints >= 0, "--keep-checkpoints must not be negative (0 keeps all), got ", keep_checkpoints);
  TS_CHECK(sample_every >= 0, "--sample-every must not be negative, got ", sample_every);
  TS_CHECK(threads >= 0, "--threads must not be negative, got ", threads);
  // OpenMP's runtime crashes when asked for tens of thousands of threads; no machine has that many cores.
  TS_CHECK(threads <= kMaxThreads, "--threads ", threads, " is more than ", kMaxThreads,
           "; use at most the machine's cores (0 = all of them)");
  TS_CHECK(data_order == "sequential" || data_order == "shuffled", "--data-order must be sequential or shuffled, got '",
           data_order, "'");
  for (auto [flag, value] : {std::pair{"--layers", layers}, {"--heads", heads}, {"--channels", channels},
                              {"--vocab-size", vocab_size}, {"--context", context}})
    TS_CHECK(value >= 0, flag, " must be positive (or 0 for the preset's value), got ", value);
  parse_attention_kernel(attention_kernel);  // an unknown name throws, listing the kernels
  check_matmul_tuning(matmul_tuning);
  TS_CHECK(attention_mask == "causal" || attention_mask == "document",
           "--attention-mask must be causal or document, got '", attention_mask, "'");
  TS_CHECK(std::isfinite(peak_tflops) && peak_tflops >= 0, "--peak-tflops must be a number >= 0 (0 = the GPU's), got ",
           peak_tflops);
  choose_compute_dtype(dtype, Device::cuda);  // the name alone; whether the device computes it is checked at set-up
  TS_CHECK(loss_scaling == "auto" || loss_scaling == "dynamic" || loss_scaling == "off",
           "--loss-scaling must be auto, dynamic or off, got '", loss_scaling, "'");
  TS_CHECK(zero >= 0 && zero <= 3, "--zero must be 0, 1, 2 or 3, got ", zero);
  check_fp8_options(fp8_options());
  TS_CHECK(fp8 == "off" || dtype != "fp16", "--fp8 ", fp8,
           " scales its gradients per tensor, which fp16's loss scale would fight; use --dtype bf16 (or fp32 on the CPU) with it");
  parse_grad_reduce_dtype(grad_reduce_dtype);
  parse_optimizer_moments(optimizer_moments);
  TS_CHECK(powersgd_rank >= 0 && powersgd_rank <= kMaxPowerSgdRank, "--powersgd-rank must be in [0, ", kMaxPowerSgdRank,
           "] (0 = off), got ", powersgd_rank);
  TS_CHECK(reshard_after_forward || zero == 3, "--no-reshard-after-forward keeps ZeRO-3's gathered blocks from their ",
           "forward to their backward; with --zero ", zero, " every rank holds its whole weights already: use --zero 3 ",
           "or drop it");
  TS_CHECK(powersgd_rank == 0 || zero < 2, "--powersgd-rank compresses the bucketed gradient reduction of ZeRO 0 and 1; ",
           "ZeRO ", zero, " reduce-scatters each block instead: use --zero 1 with --powersgd-rank, or drop it");
  TS_CHECK(powersgd_rank == 0 || grad_reduce_dtype == "fp32",
           "--powersgd-rank sends its factors in fp32; drop --grad-reduce-dtype ", grad_reduce_dtype);
  TS_CHECK(powersgd_rank == 0 || dtype != "fp16", "--powersgd-rank keeps error feedback in gradient units, which fp16's ",
           "changing loss scale would break; use --dtype bf16 or fp32 with it");
  TS_CHECK(bucket_mb > 0 && bucket_mb <= kMaxBucketMb, "--bucket-mb must be in (0, ", kMaxBucketMb, "], got ",
           bucket_mb);
  TS_CHECK(comm_timeout > 0 && comm_timeout <= kMaxCommTimeout, "--comm-timeout must be in (0, ", kMaxCommTimeout,
           "] seconds, got ", comm_timeout);
  TS_CHECK(dp >= 0, "--dp must not be negative (0 = what the world leaves), got ", dp);
  for (auto [flag, value] : {std::pair{"--tp", tp}, {"--pp", pp}, {"--cp", cp}, {"--ep", ep}})
    TS_CHECK(value >= 1, flag, " must be at least 1, got ", value);
  TS_CHECK(virtual_stages >= 1, "--virtual-stages must be at least 1, got ", virtual_stages);
  TS_CHECK(cp_comm == "ring" || cp_comm == "all-to-all", "--cp-comm must be ring or all-to-all, got '", cp_comm, "'");
  TS_CHECK(cp > 1 || cp_comm == "ring", "--cp-comm ", cp_comm, " chooses how --cp ranks share attention; with --cp ",
           cp, " there are none: give --cp above 1 or drop --cp-comm");
  // Each rank times the candidates itself, so ranks could keep different algorithms; tensor-parallel
  // ranks must compute their replicated parts (the MoE router among them) to the same bits.
  TS_CHECK(matmul_tuning == 1 || tp == 1, "--matmul-tuning ", matmul_tuning,
           " times cuBLASLt's algorithms on each rank, which may then keep different ones, and the --tp ", tp,
           " ranks must compute their replicated parts alike; leave --matmul-tuning at 1 with --tp");
  // ZeRO 2 and 3 reduce a block's gradients (and ZeRO-3 frees its weights) after its backward,
  // before zero-bubble's deferred weight gradients would run.
  const ScheduleKind schedule = parse_schedule_kind(pipeline_schedule);
  TS_CHECK(zero < 2 || pp <= 1 || schedule != ScheduleKind::zero_bubble, "--zero ", zero,
           " reduces each block's gradients right after its backward, before zero-bubble's deferred weight "
           "gradients; use --pipeline-schedule 1f1b, gpipe or interleaved with --zero ", zero,
           ", or --zero 1 with zero-bubble");
  TS_CHECK(pp > 1 || (virtual_stages == 1 && pipeline_boundaries.empty()),
           "--virtual-stages and --pipeline-boundaries cut the model into pipeline stages; give --pp above 1 with them");
  for (auto [flag, value] : {std::pair{"--moe-aux-coef", moe_aux_coef}, {"--moe-z-coef", moe_z_coef},
                              {"--moe-bias-rate", moe_bias_rate}})
    TS_CHECK(value >= 0, flag, " must not be negative, got ", value);
  // Above the number of experts a capacity holds every token an expert could get: a larger factor is a
  // typo (1e18 overflowed the capacity's count). 1e4 is far above any model's expert count.
  TS_CHECK(moe_capacity_factor == 0 || (moe_capacity_factor >= 0.01f && moe_capacity_factor <= 1e4f),
           "--moe-capacity-factor must be 0 (dropless) or between 0.01 and 10000 (1.0 = an even share per expert), "
           "got ", moe_capacity_factor);
  TS_CHECK(recompute_layers >= 0, "--recompute-layers must not be negative (0 = every block), got ", recompute_layers);
  TS_CHECK(parse_recompute(recompute) != Recompute::none || recompute_layers == 0, "--recompute-layers ",
           recompute_layers, " picks the blocks that --recompute recomputes, and --recompute is none; add --recompute ",
           "selective or full, or drop --recompute-layers");
  TS_CHECK(!train_data.empty(), "--train-data is required (a glob of token shards)");
  parse_data_sources(train_data, "--train-data");
  if (!val_data.empty()) parse_data_sources(val_data, "--val-data");
  TS_CHECK(!out_dir.empty(), "--out-dir must not be empty");
  parse_lr_schedule(lr_schedule);
}

}  // namespace tessera
