// A training step's micro-batches through the pipeline executor, the tied embedding's gradient
// between the end stages, and forward-only evaluation.
#include "train/pipeline_parallel.h"

#include "core/cuda/device.h"
#include "core/error.h"
#include "ops/residual.h"
#include "parallel/pp/pipeline_simulator.h"

namespace tessera {

PipelineParallel::PipelineParallel(const ProcessGrid& grid, Decoder& model, PipelineSchedule schedule)
    : pp_(grid.pp), model_(model), schedule_(std::move(schedule)) {
  TS_CHECK(int(model.stage().chunks.size()) == schedule_.virtual_stages && pp_->size() == schedule_.stages,
           "PipelineParallel: a stage of ", model.stage().chunks.size(), " chunks on pp rank ", pp_->rank(), " of ",
           pp_->size(), " for a schedule of ", schedule_.stages, " stages × ", schedule_.virtual_stages, " chunks");
  if (holds_tied_embedding_copy(model.config(), model.stage())) {
    const ParamSpec& copy = model.layout().find(decoder_names(model.config()).embed);
    duplicate_ = OffsetRange{copy.offset, copy.offset + copy.numel()};
  }
}

double PipelineParallel::train_step(int64_t micro_batch, int64_t seq_len, float dloss, const FillMicroBatch& fill,
                                    const std::function<void(int64_t)>& grads_final_from) {
  Tensor inputs = Tensor::zeros({micro_batch, seq_len}, DType::i32);
  Tensor targets = Tensor::zeros({micro_batch, seq_len}, DType::i32);
  Tensor doc_starts;
  double loss_sum = 0.0;
  // A chunk's gradients are final once all its micro-batches' backward ran; the watermark moves
  // down the flat buffer over the chunks (in its order) whose later chunks are all final too.
  const std::vector<BlockRange>& chunks = model_.stage().chunks;
  std::vector<int> backwards(chunks.size(), 0);
  int lowest_pending = int(chunks.size()) - 1;
  auto finished = [&](int chunk) {
    if (!grads_final_from) return;
    ++backwards[size_t(chunk_index(chunk))];
    for (; lowest_pending >= 0 && backwards[size_t(lowest_pending)] == schedule_.micro_batches; --lowest_pending) {
      const BlockRange r = chunks[size_t(lowest_pending)];
      grads_final_from(model_.layout().block_range(r.first, model_.config().num_layers).begin);
    }
  };
  PipelineStageWork work;
  work.forward = [&](int chunk, int micro) {
    fill(micro, inputs, targets, doc_starts);
    loss_sum += model_.forward_chunk(chunk_index(chunk), micro, inputs, targets, dloss, doc_starts);
  };
  work.backward = [&](int chunk, int micro) {
    model_.backward_chunk(chunk_index(chunk), micro);
    finished(chunk);
  };
  work.backward_input = [&](int chunk, int micro) { model_.backward_chunk_input(chunk_index(chunk), micro); };
  work.backward_weight = [&](int chunk, int micro) {
    model_.backward_chunk_weight(chunk_index(chunk), micro);
    finished(chunk);
  };
  work.release = [&](int chunk, int micro) { model_.release_chunk(chunk_index(chunk), micro); };
  work.activation_to_send = [&](int chunk, int micro) -> const Tensor& {
    return model_.chunk_output(chunk_index(chunk), micro);
  };
  work.gradient_to_send = [&](int chunk, int micro) -> const Tensor& {
    return model_.chunk_input_grad(chunk_index(chunk), micro);
  };
  work.activation_buffer = [&](int chunk, int micro) -> Tensor& {
    return model_.chunk_input(chunk_index(chunk), micro, micro_batch, seq_len);
  };
  work.gradient_buffer = [&](int chunk, int micro) -> Tensor& {
    return model_.chunk_output_grad(chunk_index(chunk), micro);
  };
  last_run_ = run_pipeline(schedule_, *pp_, work);
  return loss_sum;
}

double PipelineParallel::evaluate(int micro_batches, int counted, int64_t micro_batch, int64_t seq_len,
                                  const FillMicroBatch& fill, const TokenLosses& token_losses) {
  Tensor inputs = Tensor::zeros({micro_batch, seq_len}, DType::i32);
  Tensor targets = Tensor::zeros({micro_batch, seq_len}, DType::i32);
  Tensor doc_starts;
  const int P = schedule_.stages, rank = pp_->rank(), L = int(model_.config().num_layers);
  double loss_sum = 0.0;
  for (int micro = 0; micro < micro_batches; ++micro) {
    for (int chunk = rank; chunk < schedule_.chunks(); chunk += P) {
      const int k = chunk_index(chunk);
      const BlockRange r = model_.stage().chunks[size_t(k)];
      fill(micro, inputs, targets, doc_starts);
      if (r.first != 0) pp_->recv(model_.chunk_input(k, micro, micro_batch, seq_len), (chunk - 1) % P);
      const double losses = model_.forward_chunk(k, micro, inputs, targets, 0.0f, doc_starts);
      if (micro < counted) loss_sum += losses;
      if (micro < counted && r.end == L && token_losses) token_losses(micro, model_.chunk_losses(k, micro));
      if (r.end != L) pp_->send(model_.chunk_output(k, micro), (chunk + 1) % P);
      model_.release_chunk(k, micro);
    }
  }
  return loss_sum;
}

void PipelineParallel::reduce_tied_embedding(DataParallel& dp) {
  const ModelConfig& c = model_.config();
  const int P = pp_->size(), rank = pp_->rank();
  if (!c.tied_embeddings || P == 1 || (rank != 0 && rank != P - 1)) return;
  // Each end sends its gradient to the other and adds the one it receives: a + b on both, bit for bit.
  auto add_the_other_ends = [&](Tensor& mine) {
    Tensor theirs = Tensor::zeros(mine.shape(), mine.dtype(), mine.device());
    const int other = rank == 0 ? P - 1 : 0;
    Work sent = pp_->send_async(mine, other);
    pp_->recv(theirs, other);
    sent.wait();
    add_inplace(mine, theirs);
  };
  const std::string& name = decoder_names(c).embed;
  if (dp.reduces_by_part()) {
    const ParamSpec& spec = model_.layout().find(name);
    return dp.edit_reduced_grads(OffsetRange{spec.offset, spec.offset + spec.numel()}, add_the_other_ends);
  }
  NamedTensors& grads = model_.named_grads();
  auto it = std::find_if(grads.begin(), grads.end(), [&](const NamedTensor& t) { return t.name == name; });
  TS_CHECK(it != grads.end(), "reduce_tied_embedding: stage ", rank, " holds no '", name, "'");
  add_the_other_ends(it->tensor);
}

std::vector<double> PipelineParallel::step_values() const {
  const size_t P = size_t(schedule_.stages), stage = size_t(pp_->rank());
  std::vector<double> values(step_values_size(), 0.0);
  values[stage] = last_run_.compute_s;
  values[P + stage] = last_run_.total_s;
  values[2 * P + stage] = double(last_run_.peak_in_flight);
  values[3 * P + stage] = double(allocator_stats(model_.device()).peak_bytes) / 1e6;
  for (size_t k = 0; k < 4; ++k) {
    values[4 * P + 8 * stage + 2 * k] = last_run_.kind_s[k];
    values[4 * P + 8 * stage + 2 * k + 1] = double(last_run_.kind_count[k]);
  }
  return values;
}

nlohmann::json PipelineParallel::step_metrics(const double* sums, int dp) const {
  const size_t P = size_t(schedule_.stages);
  double compute = 0, total = 0;
  nlohmann::json peaks = nlohmann::json::array(), memory = nlohmann::json::array();
  for (size_t s = 0; s < P; ++s) {
    compute += sums[s];
    total += sums[P + s];
    peaks.push_back(sums[2 * P + s] / double(dp));
    memory.push_back(sums[3 * P + s] / double(dp));
  }
  // The simulator's costs are a whole stage's (a chunk takes 1/V of them): each stage's measured
  // means per chunk × V.
  std::vector<StepCosts> costs(P);
  for (size_t s = 0; s < P; ++s) {
    auto mean = [&](ActionKind kind) {
      const size_t at = 4 * P + 8 * s + 2 * size_t(kind);
      return sums[at + 1] > 0 ? sums[at] / sums[at + 1] * double(schedule_.virtual_stages) : 0.0;
    };
    costs[s] = StepCosts{mean(ActionKind::forward), mean(ActionKind::backward), mean(ActionKind::backward_input),
                         mean(ActionKind::backward_weight)};
  }
  const PipelineTimeline simulated = simulate_pipeline(schedule_, costs);
  return {{"bubble", total > 0 ? 1.0 - compute / total : 0.0},
          {"bubble_simulated", simulated.bubble_fraction()},
          {"peak_in_flight", peaks},
          {"peak_in_flight_simulated", simulated.peak_in_flight},
          {"peak_mem_mb", memory}};
}

}  // namespace tessera
