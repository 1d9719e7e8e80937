// ZeRO-3's parameter gathers and gradient reduce-scatters, part by part (bucket by bucket within a
// part), on the parameters' device.
#include "parallel/dp/zero3_parameters.h"

#include <algorithm>

#include "core/cuda/device.h"
#include "ops/cast.h"
#include "ops/residual.h"

namespace tessera {
namespace {

constexpr size_t kMaxReductionsInFlight = 2;

// dst[at, +n) = src[0, +n), converted to dst's dtype.
void place(Tensor& dst, int64_t at, const Tensor& src) {
  Tensor to = dst.view(at, {src.numel()});
  cast_copy(to, src);
}

}  // namespace

Zero3Parameters::Zero3Parameters(std::vector<Comm*> groups, const ParameterLayout& layout, std::vector<Bucket> buckets,
                                 const Tensor& params, Tensor grad_shard, DType reduce_dtype)
    : groups_(std::move(groups)), buckets_(std::move(buckets)), grad_shard_(std::move(grad_shard)), reduce_dtype_(reduce_dtype) {
  TS_CHECK(reduce_dtype == DType::f32 || reduce_dtype == DType::bf16, "ZeRO-3: gradients reduce in f32 or bf16, not ",
           dtype_name(reduce_dtype));
  TS_CHECK(params.numel() == layout.total(), "ZeRO-3: ", params.numel(), " parameters for a layout of ",
           layout.total());
  const int64_t shard = shard_size(buckets_);
  TS_CHECK(grad_shard_.numel() == shard, "ZeRO-3: a gradient shard of ", grad_shard_.numel(), " elements for ", shard);
  for (size_t i = 0; i < buckets_.size(); ++i) {
    const Bucket& b = buckets_[i];
    TS_CHECK(b.group >= 0 && size_t(b.group) < groups_.size(), "ZeRO-3: a bucket of group ", b.group);
    auto spec = std::find_if(layout.specs().begin(), layout.specs().end(),
                             [&](const ParamSpec& s) { return s.offset == b.begin; });
    TS_CHECK(spec != layout.specs().end(), "ZeRO-3: no parameter starts at bucket offset ", b.begin);
    Part& p = parts_[spec->block];
    const OffsetRange range = layout.block_range(spec->block, spec->block);
    p.begin = range.begin, p.end = range.end;
    p.buckets.push_back(i);
  }
  for (auto& [index, p] : parts_) {
    std::sort(p.buckets.begin(), p.buckets.end(), [&](size_t a, size_t b) { return buckets_[a].begin < buckets_[b].begin; });
    int64_t at = p.begin;
    for (size_t i : p.buckets) {
      TS_CHECK(buckets_[i].begin == at, "ZeRO-3: part ", index, "'s buckets do not tile it at offset ", at);
      at = buckets_[i].end;
    }
    TS_CHECK(at == p.end, "ZeRO-3: part ", index, "'s buckets end at ", at, ", the part at ", p.end);
  }
  params_ = Tensor::zeros({shard}, DType::f32, grad_shard_.device());  // params may be on the host
  for (const Bucket& b : buckets_) {
    if (b.owned() == 0) continue;
    Tensor to = params_.view(b.shard_offset, {b.owned()});
    copy_tensor(to, params.view(b.owned_begin, {b.owned()}));
  }
}

const Zero3Parameters::Part& Zero3Parameters::part(int64_t index) const {
  auto it = parts_.find(index);
  TS_CHECK(it != parts_.end(), "ZeRO-3: the model has no part ", index);
  return it->second;
}

void Zero3Parameters::count_gathered() {
  gathered_bytes_ = 0;
  for (const auto& [index, g] : gathered_) {
    for (const Segment& s : g.segments) gathered_bytes_ += int64_t((s.staged ? s.in.bytes() : 0) + s.out.bytes());
    if (g.segments.empty()) gathered_bytes_ += int64_t(g.whole.bytes());  // the buckets' outputs copied together
  }
  peak_gathered_bytes_ = std::max(peak_gathered_bytes_, gathered_bytes_);
}

void Zero3Parameters::start_gather(int64_t index) {
  if (gathered_.count(index)) return;
  Gathered g;
  for (size_t i : part(index).buckets) {
    const Bucket& b = buckets_[i];
    Segment s;
    // The owned chunk itself when it is whole, else a copy padded to the chunk length.
    if (b.owned() == b.chunk) {
      s.in = params_.view(b.shard_offset, {b.chunk});
    } else {
      s.staged = true;
      s.in = Tensor::zeros({b.chunk}, DType::f32, params_.device());
      if (b.owned() > 0) place(s.in, 0, params_.view(b.shard_offset, {b.owned()}));
    }
    s.out = Tensor::zeros({b.chunk * comm(b).size()}, DType::f32, params_.device());
    s.work = comm(b).all_gather_async(s.in, s.out);
    g.segments.push_back(std::move(s));
  }
  gathered_.emplace(index, std::move(g));
  count_gathered();
}

Tensor Zero3Parameters::gather(int64_t index, int64_t next) {
  start_gather(index);
  if (next != kNoPart) start_gather(next);
  Gathered& g = gathered_.at(index);
  if (g.whole.defined()) return g.whole;
  const Part& p = part(index);
  for (Segment& s : g.segments) s.work.wait();
  if (g.segments.size() == 1) {
    g.whole = g.segments[0].out.view(0, {p.end - p.begin});
    g.segments[0].in = Tensor();
    g.segments[0].staged = false;
  } else {  // the buckets' outputs side by side
    g.whole = Tensor::zeros({p.end - p.begin}, DType::f32, params_.device());
    for (size_t k = 0; k < p.buckets.size(); ++k) {
      const Bucket& b = buckets_[p.buckets[k]];
      place(g.whole, b.begin - p.begin, g.segments[k].out.view(0, {b.size()}));
    }
    g.segments.clear();
  }
  count_gathered();
  return g.whole;
}

void Zero3Parameters::release(int64_t index) {
  auto it = gathered_.find(index);
  if (it == gathered_.end()) return;
  // Released before use: the buffers are the collectives' until they complete.
  if (!it->second.whole.defined())
    for (Segment& s : it->second.segments) s.work.wait();
  gathered_.erase(it);
  count_gathered();
}

Tensor Zero3Parameters::grads(int64_t index) {
  const Part& p = part(index);
  auto it = grads_.find(index);
  if (it == grads_.end()) {
    // One bucket: padded to its chunks, reduce-scattered from in place; several: each copied out.
    const Bucket& first = buckets_[p.buckets[0]];
    const int64_t n = p.buckets.size() == 1 ? first.chunk * comm(first).size() : p.end - p.begin;
    it = grads_.emplace(index, Tensor::zeros({n}, DType::f32, params_.device())).first;
  }
  return it->second.view(0, {p.end - p.begin});
}

void Zero3Parameters::grads_final(int64_t index) {
  auto it = grads_.find(index);
  TS_CHECK(it != grads_.end(), "ZeRO-3: part ", index, "'s gradients are final before backward wrote any");
  const Tensor buffer = std::move(it->second);
  grads_.erase(it);
  const Part& p = part(index);
  for (size_t i : p.buckets) {
    const Bucket& b = buckets_[i];
    Reduction r{i, Work(), buffer, Tensor::zeros({b.chunk}, reduce_dtype_, params_.device())};
    if (p.buckets.size() > 1 || reduce_dtype_ != DType::f32) {
      r.in = Tensor::zeros({b.chunk * comm(b).size()}, reduce_dtype_, params_.device());
      place(r.in, 0, buffer.view(b.begin - p.begin, {b.size()}));
    }
    r.work = comm(b).reduce_scatter_async(r.in, r.out);
    reductions_.push_back(std::move(r));
  }
  while (reductions_.size() > kMaxReductionsInFlight || (!reductions_.empty() && reductions_.front().work.done()))
    retire_oldest_reduction();
}

void Zero3Parameters::retire_oldest_reduction() {
  Reduction& r = reductions_.front();
  r.work.wait();
  const Bucket& b = buckets_[r.bucket];
  if (b.owned() > 0) {
    Tensor to = grad_shard_.view(b.shard_offset, {b.owned()});
    Tensor sum = r.out.view(0, {b.owned()});
    if (reduce_dtype_ != DType::f32) {
      Tensor wide = Tensor::zeros({b.owned()}, DType::f32, params_.device());
      cast_copy(wide, sum);
      sum = std::move(wide);
    }
    add_inplace(to, sum);
  }
  reductions_.pop_front();
}

void Zero3Parameters::finish() {
  while (!reductions_.empty()) retire_oldest_reduction();
}

void Zero3Parameters::edit_reduced_grads(OffsetRange range, const std::function<void(Tensor&)>& edit) {
  TS_CHECK(reductions_.empty(), "ZeRO-3: the reduced gradients are edited after finish()");
  auto it = std::find_if(buckets_.begin(), buckets_.end(),
                         [&](const Bucket& b) { return b.begin <= range.begin && range.end <= b.end; });
  TS_CHECK(it != buckets_.end() && range.begin < range.end, "ZeRO-3: [", range.begin, ", ", range.end,
           ") is not within one bucket");
  const Bucket& b = *it;
  Tensor mine = Tensor::zeros({b.chunk}, DType::f32, params_.device());
  Tensor whole = Tensor::zeros({b.chunk * comm(b).size()}, DType::f32, params_.device());
  Tensor held = grad_shard_.view(b.shard_offset, {b.owned()});
  if (b.owned() > 0) place(mine, 0, held);
  comm(b).all_gather_async(mine, whole).wait();
  Tensor edited = whole.view(range.begin - b.begin, {range.end - range.begin});
  edit(edited);
  if (b.owned() > 0) copy_tensor(held, whole.view(b.owned_begin - b.begin, {b.owned()}));
}

void Zero3Parameters::zero_grad() {
  TS_CHECK(reductions_.empty() && grads_.empty(), "ZeRO-3: zero_grad while gradients are being reduced");
  zero_tensor(grad_shard_);
}

void Zero3Parameters::add_to_params(int64_t offset, const std::vector<float>& delta) {
  const int64_t end = offset + int64_t(delta.size());
  for (const Bucket& b : buckets_) {
    const int64_t lo = std::max(offset, b.owned_begin), hi = std::min(end, b.owned_end);
    if (lo >= hi) continue;
    Tensor held = params_.view(b.shard_offset + (lo - b.owned_begin), {hi - lo});
    Tensor host = tensor_to(held, Device::cpu);
    for (int64_t i = lo; i < hi; ++i) host.f32()[i - lo] += delta[size_t(i - offset)];
    copy_tensor(held, host);
  }
}

void Zero3Parameters::gather_to(Tensor& full) {
  // Part by part, in the layout's order, each next one gathering while the last is copied out.
  std::vector<int64_t> order;
  for (const auto& [index, p] : parts_) order.push_back(index);
  for (size_t i = 0; i < order.size(); ++i) {
    const Tensor whole = gather(order[i], i + 1 < order.size() ? order[i + 1] : kNoPart);
    if (full.defined()) {
      Tensor to = full.view(part(order[i]).begin, {whole.numel()});
      copy_tensor(to, whole);
    }
    release(order[i]);
  }
}

}  // namespace tessera
