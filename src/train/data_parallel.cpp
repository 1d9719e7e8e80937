// Data-parallel step pieces: bucketed reduction hooked into backward, sharded update, norms.
#include "train/data_parallel.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/cuda/device.h"
#include "nn/decoder_layout.h"
#include "ops/norm.h"
#include "optim/grad_clip.h"
#include "optim/rounding_keys.h"

namespace tessera {
namespace {

bool inside(const std::vector<OffsetRange>& ranges, int64_t offset) {
  return std::any_of(ranges.begin(), ranges.end(), [&](const OffsetRange& r) { return offset >= r.begin && offset < r.end; });
}

std::vector<Bucket> model_buckets(const Decoder& model, const ProcessGrid& grid, const std::vector<OffsetRange>& experts,
                                  const DataParallelOptions& options) {
  return parameter_buckets(model.layout(), options, experts,
                           {{grid.dp_cp->rank(), grid.dp_cp->size()}, {grid.expert_dp->rank(), grid.expert_dp->size()}});
}

// PowerSGD over the model's matrices, or none.
std::unique_ptr<PowerSgd> powersgd_for(const Decoder& model, const DataParallelOptions& options, Device device) {
  if (options.powersgd_rank == 0) return nullptr;
  TS_CHECK(options.zero_stage < 2, "DataParallel: PowerSGD compresses the bucketed reduction of ZeRO 0 and 1, not the "
                                   "part-wise one of ZeRO 2 and 3");
  constexpr uint64_t kSeed = 0x5eed;  // the same Q on every rank
  return std::make_unique<PowerSgd>(gradient_matrices(model.layout()), options.powersgd_rank, kSeed, device);
}

double squared_norm_of(const Tensor& t, const std::vector<OffsetRange>& ranges) {
  double sq = 0.0;
  for (const OffsetRange& r : ranges) sq += squared_norm(t.view(r.begin, {r.end - r.begin}));
  return sq;
}

}  // namespace

std::vector<Bucket> parameter_buckets(const ParameterLayout& layout, const DataParallelOptions& options,
                                      const std::vector<OffsetRange>& experts, const std::vector<ReduceGroup>& groups) {
  const bool parts = options.zero_stage >= 2;
  const std::vector<ParamSpec>& specs = layout.specs();
  std::vector<int64_t> starts;
  std::vector<int> group_of;
  for (size_t i = 0; i < specs.size(); ++i) {
    const int group = inside(experts, specs[i].offset) ? 1 : 0;
    if (parts && i > 0 && specs[i].block == specs[i - 1].block && group == group_of.back()) continue;
    starts.push_back(specs[i].offset);
    group_of.push_back(group);
  }
  const int64_t elems = parts ? 1 : std::max<int64_t>(1, options.bucket_bytes / int64_t(sizeof(float)));
  return make_buckets(starts, group_of, layout.total(), elems, groups);
}

std::vector<GradMatrix> gradient_matrices(const ParameterLayout& layout) {
  std::vector<GradMatrix> matrices;
  for (const ParamSpec& s : layout.specs())
    if (s.shape.size() >= 2) matrices.push_back({s.offset, s.shape[0], s.numel() / s.shape[0], s.name});
  return matrices;
}

DataParallel::DataParallel(const ProcessGrid& grid, Decoder& model, const DataParallelOptions& options, Device device,
                           const ParameterValues& zero3_values)
    : dp_(grid.dp),
      replicas_(grid.dp_cp),
      ep_(grid.ep),
      model_(model),
      options_(options),
      experts_(model.ep_place().size > 1 ? model.expert_ranges() : std::vector<OffsetRange>{}),
      reducer_({grid.dp_cp.get(), grid.expert_dp.get()}, model_buckets(model, grid, experts_, options),
               options.zero_stage, options.overlap, options.reduce_dtype, powersgd_for(model, options, device)) {
  TS_CHECK(options.zero_stage >= 0 && options.zero_stage <= 3, "--zero must be 0, 1, 2 or 3, got ",
           options.zero_stage);
  if (options.zero_stage > 0) shard_ = Tensor::zeros({reducer_.shard_size()}, DType::f32, device);
  if (options.zero_stage >= 2) {
    part_grads_ = std::make_unique<PartGradReducer>(std::vector<Comm*>{replicas_.get(), grid.expert_dp.get()},
                                                    model.layout(), reducer_.buckets(), shard_, options.reduce_dtype);
    model.set_part_gradients(part_grads_.get());
  }
  if (options.zero_stage == 3) {
    zero3_ = std::make_unique<Zero3Parameters>(*part_grads_, zero3_values ? zero3_values : values_of(model.params()));
    model.set_sharded_parameters(zero3_.get(), options.reshard_after_forward);
  }
}

std::vector<OptimSegment> DataParallel::moment_segments() const {
  if (options_.zero_stage == 0) return full_segments(model_.layout());
  std::vector<OptimSegment> segments;
  for (const Bucket& b : reducer_.buckets())
    append_segments(model_.layout(), b.owned_begin, b.owned_end, b.shard_offset, segments);
  return segments;
}

std::vector<OptimSegment> DataParallel::optimizer_segments(bool rounding_keys) const {
  std::vector<OptimSegment> segments = moment_segments();
  if (rounding_keys) segments = with_rounding_keys(segments, model_.layout(), decoder_layout(model_.config()));
  if (zero3_)
    for (OptimSegment& s : segments) s.param_offset = s.state_offset;
  return segments;
}

void DataParallel::reduce_during_next_backward() {
  if (part_grads_) return;  // every backward reduces the parts it finishes (the model calls part_grads_)
  reducer_.begin(model_.grads(), shard_);
  model_.set_grad_ready_hook([this](int64_t offset) { reducer_.grads_final_from(offset); });
}

double DataParallel::finish_reduction() {
  model_.set_grad_ready_hook({});
  auto start = std::chrono::steady_clock::now();
  if (part_grads_)
    part_grads_->finish();
  else
    reducer_.finish();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void DataParallel::edit_reduced_grads(OffsetRange range, const std::function<void(Tensor&)>& edit) {
  TS_CHECK(part_grads_, "DataParallel::edit_reduced_grads: only ZeRO 2 and 3 keep their reduced gradient in part-wise shards");
  part_grads_->edit_reduced_grads(range, edit);
}

const Tensor& DataParallel::optimizer_grads() const { return options_.zero_stage == 0 ? model_.grads() : shard_; }

float DataParallel::grad_norm() {
  if (options_.zero_stage == 0 && experts_.empty()) return global_grad_norm(model_.grads());
  return float(std::sqrt(squared_grad_norm()));
}

double DataParallel::squared_grad_norm(const std::vector<OffsetRange>& excluded) {
  // The excluded elements' squares are taken out again (they are few, or none).
  auto overlap = [](const OffsetRange& x, int64_t begin, int64_t end) {
    return std::pair{std::max(begin, x.begin), std::min(end, x.end)};
  };
  if (options_.zero_stage == 0) {
    const Tensor& grads = model_.grads();
    double sq = squared_norm(grads);
    for (const OffsetRange& x : excluded) {
      const auto [begin, end] = overlap(x, 0, grads.numel());
      if (begin < end) sq -= squared_norm(grads.view(begin, {end - begin}));
    }
    if (experts_.empty()) return sq;
    // Each ep rank holds other experts: their squares are summed over the expert group.
    const double experts = squared_norm_of(grads, experts_);
    return sq - experts + sum_over(*ep_, {experts})[0];
  }
  double sq = squared_norm(shard_);
  for (const OffsetRange& x : excluded)
    for (const Bucket& b : reducer_.buckets()) {
      const auto [begin, end] = overlap(x, b.owned_begin, b.owned_end);
      if (begin < end) sq -= squared_norm(shard_.view(b.shard_offset + (begin - b.owned_begin), {end - begin}));
    }
  return sum(sq);
}

void DataParallel::after_update() {
  // ZeRO-3: the optimizer updated the shards that the next forward gathers from.
  if (options_.zero_stage > 0 && !zero3_) reducer_.all_gather(model_.params(), nullptr);
}

void DataParallel::gather_params(Tensor& full) {
  if (zero3_) return zero3_->gather_to(full);
  if (rank() == 0) copy_tensor(full, model_.params());
}

ParamMemory DataParallel::param_memory() {
  if (!zero3_) return {int64_t(model_.params().bytes()), int64_t(model_.params().bytes())};
  const int64_t shard = int64_t(zero3_->params_shard().bytes());
  const ParamMemory memory{shard, shard + zero3_->peak_gathered_bytes()};
  zero3_->reset_peak();
  return memory;
}

double DataParallel::sum(double value) { return sum(std::vector<double>{value})[0]; }

std::vector<double> DataParallel::sum(const std::vector<double>& values) { return sum_over(*replicas_, values); }

std::vector<OptimSegment> DataParallel::checkpoint_segments(const std::vector<OffsetRange>& excluded) const {
  std::vector<OptimSegment> segments;
  if (options_.zero_stage > 0) {
    segments = moment_segments();
  } else if (!experts_.empty()) {
    // Every rank holds every moment of its parameters, the expert weights' shared with their
    // expert_dp group only: the buckets' owned parts share the writing (the state is laid out like
    // the parameters).
    for (const Bucket& b : reducer_.buckets()) append_segments(model_.layout(), b.owned_begin, b.owned_end, b.owned_begin, segments);
  } else {
    const int64_t total = model_.layout().total(), r = replicas_->rank(), n = replicas_->size();
    const int64_t begin = total * r / n, end = total * (r + 1) / n;
    append_segments(model_.layout(), begin, end, begin, segments);  // the state is laid out like the parameters
  }
  // A segment keeps what lies outside every excluded range (whole parameters, or rows of one).
  for (const OffsetRange& x : excluded) {
    std::vector<OptimSegment> kept;
    for (const OptimSegment& s : segments) {
      const int64_t end = s.param_offset + s.length;
      auto piece = [&](int64_t from, int64_t to) {
        if (from < to) kept.push_back({from, s.state_offset + (from - s.param_offset), to - from, s.decayed});
      };
      piece(s.param_offset, std::min(end, x.begin));
      piece(std::max(s.param_offset, x.end), end);
    }
    segments = std::move(kept);
  }
  return segments;
}

}  // namespace tessera
