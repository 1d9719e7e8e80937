// Trainer::evaluate_choices: --choices scored under the run's layout. Each rank fills its micro-batch
// buffers, as wide as the widest row, with whole rows (a row's inputs, then padding with ignored
// targets), the feed gives each cp rank its share, and a row's token losses, summed over dp×cp and
// the pipeline's stages (the last holds them), are its choice's loss.
#include <algorithm>
#include <numeric>

#include "core/cuda/device.h"
#include "core/ignored_target.h"
#include "train/trainer.h"

namespace tessera {

ChoiceAccuracy Trainer::evaluate_choices() {
  MicroBatchFeed& feed = *choice_feed_;
  const int64_t rows = int64_t(choice_rows_.size()), T = feed.inputs().size(1);
  const EvalShare share = eval_share((rows + micro_batch_ - 1) / micro_batch_);
  const auto first_row = [&](int64_t m) { return share.index(m) * micro_batch_; };
  // Forward m's rows into whole-sequence buffers (B,T).
  const auto fill = [&](int64_t m, Tensor& inputs, Tensor& targets) {
    for (int64_t b = 0; b < micro_batch_; ++b) {
      int32_t* in = inputs.data<int32_t>() + b * T;
      int32_t* target = targets.data<int32_t>() + b * T;
      if (first_row(m) + b < rows) {
        fill_choice_row(choice_rows_[size_t(first_row(m) + b)], T, in, target);
      } else {
        std::fill(in, in + T, 0);
        std::fill(target, target + T, kIgnoredTarget);
      }
    }
  };
  std::vector<double> row_losses(size_t(rows), 0.0);
  // Forward m's token losses (B, this cp rank's positions) into its rows' sums.
  const auto add_losses = [&](int64_t m, const Tensor& device_losses) {
    const Tensor losses = tensor_to(device_losses, Device::cpu);
    const int64_t width = losses.size(1);
    for (int64_t b = 0; b < micro_batch_ && first_row(m) + b < rows; ++b) {
      const float* row = losses.data<float>() + b * width;
      row_losses[size_t(first_row(m) + b)] = std::accumulate(row, row + width, 0.0);
    }
  };
  if (pipeline_) {
    pipeline_->evaluate(int(share.runs), int(share.mine), micro_batch_, T / grid_.dims.cp,
                        feed.pipeline_filler([&](int m, Tensor& inputs, Tensor& targets) { fill(m, inputs, targets); }),
                        [&](int m, const Tensor& losses) { add_losses(m, losses); });
  }
  for (int64_t m = 0; !pipeline_ && m < share.runs; ++m) {
    fill(m, feed.inputs(), feed.targets());
    feed.forward(*model_, 0.0f);
    if (m < share.mine) add_losses(m, model_->losses());
  }
  return choice_accuracy(choice_examples_, losses_by_choice(choice_examples_, sum_over_ranks(row_losses)));
}

}  // namespace tessera
