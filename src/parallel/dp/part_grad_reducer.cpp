// ZeRO 2 and 3's gradient reduce-scatters, part by part (bucket by bucket within a part), on the
// gradient shard's device.
#include "parallel/dp/part_grad_reducer.h"

#include <algorithm>

#include "core/cuda/device.h"
#include "ops/cast.h"
#include "ops/residual.h"

namespace tessera {
namespace {

constexpr size_t kMaxReductionsInFlight = 2;

}  // namespace

void place_converted(Tensor& dst, int64_t at, const Tensor& src) {
  Tensor to = dst.view(at, {src.numel()});
  cast_copy(to, src);
}

PartGradReducer::PartGradReducer(std::vector<Comm*> groups, const ParameterLayout& layout, std::vector<Bucket> buckets,
                                 Tensor grad_shard, DType reduce_dtype)
    : groups_(std::move(groups)), buckets_(std::move(buckets)), grad_shard_(std::move(grad_shard)), reduce_dtype_(reduce_dtype) {
  TS_CHECK(reduce_dtype == DType::f32 || reduce_dtype == DType::bf16, "ZeRO: gradients reduce in f32 or bf16, not ",
           dtype_name(reduce_dtype));
  const int64_t shard = shard_size(buckets_);
  TS_CHECK(grad_shard_.numel() == shard, "ZeRO: a gradient shard of ", grad_shard_.numel(), " elements for ", shard);
  for (size_t i = 0; i < buckets_.size(); ++i) {
    const Bucket& b = buckets_[i];
    TS_CHECK(b.group >= 0 && size_t(b.group) < groups_.size(), "ZeRO: a bucket of group ", b.group);
    auto spec = std::find_if(layout.specs().begin(), layout.specs().end(),
                             [&](const ParamSpec& s) { return s.offset == b.begin; });
    TS_CHECK(spec != layout.specs().end(), "ZeRO: no parameter starts at bucket offset ", b.begin);
    Part& p = parts_[spec->block];
    const OffsetRange range = layout.block_range(spec->block, spec->block);
    p.begin = range.begin, p.end = range.end;
    p.buckets.push_back(i);
  }
  for (auto& [index, p] : parts_) {
    std::sort(p.buckets.begin(), p.buckets.end(), [&](size_t a, size_t b) { return buckets_[a].begin < buckets_[b].begin; });
    int64_t at = p.begin;
    for (size_t i : p.buckets) {
      TS_CHECK(buckets_[i].begin == at, "ZeRO: part ", index, "'s buckets do not tile it at offset ", at);
      at = buckets_[i].end;
    }
    TS_CHECK(at == p.end, "ZeRO: part ", index, "'s buckets end at ", at, ", the part at ", p.end);
  }
}

const PartGradReducer::Part& PartGradReducer::part(int64_t index) const {
  auto it = parts_.find(index);
  TS_CHECK(it != parts_.end(), "ZeRO: the model has no part ", index);
  return it->second;
}

Tensor PartGradReducer::grads(int64_t index) {
  const Part& p = part(index);
  auto it = grads_.find(index);
  if (it == grads_.end()) {
    // One bucket: padded to its chunks, reduce-scattered from in place; several: each copied out.
    const Bucket& first = buckets_[p.buckets[0]];
    const int64_t n = p.buckets.size() == 1 ? first.chunk * comm(first).size() : p.end - p.begin;
    it = grads_.emplace(index, Tensor::zeros({n}, DType::f32, device())).first;
  }
  return it->second.view(0, {p.end - p.begin});
}

void PartGradReducer::grads_final(int64_t index) {
  auto it = grads_.find(index);
  TS_CHECK(it != grads_.end(), "ZeRO: part ", index, "'s gradients are final before backward wrote any");
  const Tensor buffer = std::move(it->second);
  grads_.erase(it);
  const Part& p = part(index);
  for (size_t i : p.buckets) {
    const Bucket& b = buckets_[i];
    const DType wire = wire_dtype(b);
    Reduction r{i, Work(), buffer, Tensor::zeros({b.chunk}, wire, device())};
    if (p.buckets.size() > 1 || wire != DType::f32) {
      r.in = Tensor::zeros({b.chunk * comm(b).size()}, wire, device());
      place_converted(r.in, 0, buffer.view(b.begin - p.begin, {b.size()}));
    }
    r.work = comm(b).reduce_scatter_async(r.in, r.out);
    reductions_.push_back(std::move(r));
  }
  while (reductions_.size() > kMaxReductionsInFlight || (!reductions_.empty() && reductions_.front().work.done()))
    retire_oldest_reduction();
}

void PartGradReducer::retire_oldest_reduction() {
  Reduction& r = reductions_.front();
  r.work.wait();
  const Bucket& b = buckets_[r.bucket];
  if (b.owned() > 0) {
    Tensor to = grad_shard_.view(b.shard_offset, {b.owned()});
    Tensor sum = r.out.view(0, {b.owned()});
    if (r.out.dtype() != DType::f32) {
      Tensor wide = Tensor::zeros({b.owned()}, DType::f32, device());
      cast_copy(wide, sum);
      sum = std::move(wide);
    }
    add_inplace(to, sum);
  }
  reductions_.pop_front();
}

void PartGradReducer::finish() {
  while (!reductions_.empty()) retire_oldest_reduction();
}

void PartGradReducer::edit_reduced_grads(OffsetRange range, const std::function<void(Tensor&)>& edit) {
  TS_CHECK(reductions_.empty(), "ZeRO: the reduced gradients are edited after finish()");
  auto it = std::find_if(buckets_.begin(), buckets_.end(),
                         [&](const Bucket& b) { return b.begin <= range.begin && range.end <= b.end; });
  TS_CHECK(it != buckets_.end() && range.begin < range.end, "ZeRO: [", range.begin, ", ", range.end,
           ") is not within one bucket");
  const Bucket& b = *it;
  Tensor mine = Tensor::zeros({b.chunk}, DType::f32, device());
  Tensor whole = Tensor::zeros({b.chunk * comm(b).size()}, DType::f32, device());
  Tensor held = grad_shard_.view(b.shard_offset, {b.owned()});
  if (b.owned() > 0) place_converted(mine, 0, held);
  comm(b).all_gather_async(mine, whole).wait();
  Tensor edited = whole.view(range.begin - b.begin, {range.end - range.begin});
  edit(edited);
  if (b.owned() > 0) copy_tensor(held, whole.view(b.owned_begin - b.begin, {b.owned()}));
}

void PartGradReducer::zero_grad() {
  TS_CHECK(reductions_.empty() && grads_.empty(), "ZeRO: zero_grad while gradients are being reduced");
  zero_tensor(grad_shard_);
}

}  // namespace tessera
