// ZeRO-3's parameter gathers and gradient reduce-scatters, part by part, on the parameters' device.
#include "parallel/dp/zero3_parameters.h"

#include <algorithm>

#include "core/cuda/device.h"
#include "ops/cast.h"
#include "ops/residual.h"

namespace tessera {
namespace {

constexpr size_t kMaxReductionsInFlight = 2;

}  // namespace

Zero3Parameters::Zero3Parameters(Comm& dp, const ParameterLayout& layout, std::vector<Bucket> parts,
                                 const Tensor& params, Tensor grad_shard, DType reduce_dtype)
    : comm_(dp), parts_(std::move(parts)), grad_shard_(std::move(grad_shard)), reduce_dtype_(reduce_dtype) {
  TS_CHECK(reduce_dtype == DType::f32 || reduce_dtype == DType::bf16, "ZeRO-3: gradients reduce in f32 or bf16, not ",
           dtype_name(reduce_dtype));
  TS_CHECK(params.numel() == layout.total(), "ZeRO-3: ", params.numel(), " parameters for a layout of ",
           layout.total());
  const int64_t shard = shard_size(parts_);
  TS_CHECK(grad_shard_.numel() == shard, "ZeRO-3: a gradient shard of ", grad_shard_.numel(), " elements for ", shard);
  for (size_t i = 0; i < parts_.size(); ++i) {
    const Bucket& b = parts_[i];
    auto spec = std::find_if(layout.specs().begin(), layout.specs().end(),
                             [&](const ParamSpec& s) { return s.offset == b.begin; });
    TS_CHECK(spec != layout.specs().end(), "ZeRO-3: no parameter starts at bucket offset ", b.begin);
    const OffsetRange range = layout.block_range(spec->block, spec->block);
    TS_CHECK(range.begin == b.begin && range.end == b.end, "ZeRO-3: bucket [", b.begin, ", ", b.end,
             ") is not the whole of part ", spec->block);
    index_[spec->block] = i;
  }
  params_ = Tensor::zeros({shard}, DType::f32, params.device());
  for (const Bucket& b : parts_) {
    if (b.owned() == 0) continue;
    Tensor to = params_.view(b.shard_offset, {b.owned()});
    copy_tensor(to, params.view(b.owned_begin, {b.owned()}));
  }
}

const Bucket& Zero3Parameters::bucket(int64_t part) const {
  auto it = index_.find(part);
  TS_CHECK(it != index_.end(), "ZeRO-3: the model has no part ", part);
  return parts_[it->second];
}

void Zero3Parameters::count_gathered() {
  gathered_bytes_ = 0;
  for (const auto& [part, g] : gathered_) gathered_bytes_ += int64_t((g.staged ? g.in.bytes() : 0) + g.out.bytes());
  peak_gathered_bytes_ = std::max(peak_gathered_bytes_, gathered_bytes_);
}

void Zero3Parameters::start_gather(int64_t part) {
  if (gathered_.count(part)) return;
  const Bucket& b = bucket(part);
  Gathered g;
  // The owned chunk itself when it is whole, else a copy padded to the chunk length.
  if (b.owned() == b.chunk) {
    g.in = params_.view(b.shard_offset, {b.chunk});
  } else {
    g.staged = true;
    g.in = Tensor::zeros({b.chunk}, DType::f32, params_.device());
    if (b.owned() > 0) {
      Tensor to = g.in.view(0, {b.owned()});
      copy_tensor(to, params_.view(b.shard_offset, {b.owned()}));
    }
  }
  g.out = Tensor::zeros({b.chunk * comm_.size()}, DType::f32, params_.device());
  g.work = comm_.all_gather_async(g.in, g.out);
  gathered_.emplace(part, std::move(g));
  count_gathered();
}

Tensor Zero3Parameters::gather(int64_t part, int64_t next) {
  start_gather(part);
  if (next != kNoPart) start_gather(next);
  Gathered& g = gathered_.at(part);
  if (g.in.defined()) {
    g.work.wait();
    g.in = Tensor();
    g.staged = false;
    count_gathered();
  }
  return g.out.view(0, {bucket(part).size()});
}

void Zero3Parameters::release(int64_t part) {
  auto it = gathered_.find(part);
  if (it == gathered_.end()) return;
  if (it->second.in.defined()) it->second.work.wait();  // released before use: its buffers are MPI's until then
  gathered_.erase(it);
  count_gathered();
}

Tensor Zero3Parameters::grads(int64_t part) {
  const Bucket& b = bucket(part);
  auto it = grads_.find(part);
  if (it == grads_.end())
    it = grads_.emplace(part, Tensor::zeros({b.chunk * comm_.size()}, DType::f32, params_.device())).first;
  return it->second.view(0, {b.size()});
}

void Zero3Parameters::grads_final(int64_t part) {
  auto it = grads_.find(part);
  TS_CHECK(it != grads_.end(), "ZeRO-3: part ", part, "'s gradients are final before backward wrote any");
  Reduction r{part, Work(), std::move(it->second), Tensor::zeros({bucket(part).chunk}, reduce_dtype_, params_.device())};
  grads_.erase(it);
  if (reduce_dtype_ != DType::f32) {
    Tensor compressed = Tensor::zeros(r.in.shape(), reduce_dtype_, params_.device());
    cast_copy(compressed, r.in);
    r.in = std::move(compressed);
  }
  r.work = comm_.reduce_scatter_async(r.in, r.out);
  reductions_.push_back(std::move(r));
  while (reductions_.size() > kMaxReductionsInFlight || (!reductions_.empty() && reductions_.front().work.done()))
    retire_oldest_reduction();
}

void Zero3Parameters::retire_oldest_reduction() {
  Reduction& r = reductions_.front();
  r.work.wait();
  const Bucket& b = bucket(r.part);
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
  auto it = std::find_if(parts_.begin(), parts_.end(),
                         [&](const Bucket& b) { return b.begin <= range.begin && range.end <= b.end; });
  TS_CHECK(it != parts_.end() && range.begin < range.end, "ZeRO-3: [", range.begin, ", ", range.end,
           ") is not within one part");
  const Bucket& b = *it;
  Tensor mine = Tensor::zeros({b.chunk}, DType::f32, params_.device());
  Tensor whole = Tensor::zeros({b.chunk * comm_.size()}, DType::f32, params_.device());
  Tensor held = grad_shard_.view(b.shard_offset, {b.owned()});
  if (b.owned() > 0) {
    Tensor to = mine.view(0, {b.owned()});
    copy_tensor(to, held);
  }
  comm_.all_gather_async(mine, whole).wait();
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
  for (const Bucket& b : parts_) {
    const int64_t lo = std::max(offset, b.owned_begin), hi = std::min(end, b.owned_end);
    if (lo >= hi) continue;
    Tensor held = params_.view(b.shard_offset + (lo - b.owned_begin), {hi - lo});
    Tensor host = tensor_to(held, Device::cpu);
    for (int64_t i = lo; i < hi; ++i) host.f32()[i - lo] += delta[size_t(i - offset)];
    copy_tensor(held, host);
  }
}

void Zero3Parameters::gather_to(Tensor& full, int root) {
  // Part by part, in the layout's order, each next one gathering while the last is copied out.
  std::vector<int64_t> order;
  for (const auto& [part, index] : index_) order.push_back(part);
  for (size_t i = 0; i < order.size(); ++i) {
    const Tensor whole = gather(order[i], i + 1 < order.size() ? order[i + 1] : kNoPart);
    if (comm_.rank() == root) {
      Tensor to = full.view(bucket(order[i]).begin, {whole.numel()});
      copy_tensor(to, whole);
    }
    release(order[i]);
  }
}

}  // namespace tessera
