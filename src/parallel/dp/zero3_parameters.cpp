// ZeRO-3's parameter gathers, part by part (bucket by bucket within a part), on the shard's device.
#include "parallel/dp/zero3_parameters.h"

#include <algorithm>

#include "core/cuda/device.h"

namespace tessera {

Zero3Parameters::Zero3Parameters(const PartGradReducer& parts, const ParameterValues& values) : parts_(parts) {
  params_ = Tensor::zeros({shard_size(parts.buckets())}, DType::f32, parts.device());
  for (const Bucket& b : parts.buckets()) {
    if (b.owned() == 0) continue;
    Tensor host = Tensor::zeros({b.owned()});
    values({b.owned_begin, b.owned_end}, host.f32());
    Tensor to = params_.view(b.shard_offset, {b.owned()});
    copy_tensor(to, host);
  }
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
  for (size_t i : parts_.part(index).buckets) {
    const Bucket& b = parts_.buckets()[i];
    Segment s;
    // The owned chunk itself when it is whole, else a copy padded to the chunk length.
    if (b.owned() == b.chunk) {
      s.in = params_.view(b.shard_offset, {b.chunk});
    } else {
      s.staged = true;
      s.in = Tensor::zeros({b.chunk}, DType::f32, params_.device());
      if (b.owned() > 0) place_converted(s.in, 0, params_.view(b.shard_offset, {b.owned()}));
    }
    s.out = Tensor::zeros({b.chunk * parts_.comm(b).size()}, DType::f32, params_.device());
    s.work = parts_.comm(b).all_gather_async(s.in, s.out);
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
  const PartGradReducer::Part& p = parts_.part(index);
  for (Segment& s : g.segments) s.work.wait();
  if (g.segments.size() == 1) {
    g.whole = g.segments[0].out.view(0, {p.end - p.begin});
    g.segments[0].in = Tensor();
    g.segments[0].staged = false;
  } else {  // the buckets' outputs side by side
    g.whole = Tensor::zeros({p.end - p.begin}, DType::f32, params_.device());
    for (size_t k = 0; k < p.buckets.size(); ++k) {
      const Bucket& b = parts_.buckets()[p.buckets[k]];
      place_converted(g.whole, b.begin - p.begin, g.segments[k].out.view(0, {b.size()}));
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

void Zero3Parameters::add_to_params(int64_t offset, const std::vector<float>& delta) {
  const int64_t end = offset + int64_t(delta.size());
  for (const Bucket& b : parts_.buckets()) {
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
  for (const auto& [index, p] : parts_.parts()) order.push_back(index);
  for (size_t i = 0; i < order.size(); ++i) {
    const Tensor whole = gather(order[i], i + 1 < order.size() ? order[i + 1] : kNoPart);
    if (full.defined()) {
      Tensor to = full.view(parts_.part(order[i]).begin, {whole.numel()});
      copy_tensor(to, whole);
    }
    release(order[i]);
  }
}

}  // namespace tessera
