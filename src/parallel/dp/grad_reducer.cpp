// Bucketed gradient reduction: all-reduce (ZeRO 0) or reduce-scatter into shards (ZeRO 1), with
// buffers on the gradients' device.
#include "parallel/dp/grad_reducer.h"

#include <algorithm>

#include "core/cuda/device.h"
#include "ops/cast.h"

namespace tessera {
namespace {

// dst[dst_offset, +n) = src[src_offset, +n), on the device both live on, converted to dst's dtype.
void copy_elements(Tensor& dst, int64_t dst_offset, const Tensor& src, int64_t src_offset, int64_t n) {
  if (n <= 0) return;
  Tensor to = dst.view(dst_offset, {n});
  cast_copy(to, src.view(src_offset, {n}));
}

}  // namespace

DType parse_grad_reduce_dtype(const std::string& flag) {
  TS_CHECK(flag == "fp32" || flag == "bf16", "--grad-reduce-dtype must be fp32 or bf16 (gradients compressed to ",
           "half the bytes for the data-parallel reduction), got '", flag, "'");
  return flag == "bf16" ? DType::bf16 : DType::f32;
}

GradReducer::GradReducer(std::vector<Comm*> groups, std::vector<Bucket> buckets, int zero_stage, bool overlap,
                         DType reduce_dtype, std::unique_ptr<PowerSgd> powersgd)
    : groups_(std::move(groups)),
      buckets_(std::move(buckets)),
      zero_stage_(zero_stage),
      overlap_(overlap),
      reduce_dtype_(reduce_dtype),
      powersgd_(std::move(powersgd)) {
  TS_CHECK(reduce_dtype == DType::f32 || reduce_dtype == DType::bf16, "GradReducer: gradients reduce in f32 or bf16, not ",
           dtype_name(reduce_dtype));
  TS_CHECK(!powersgd_ || reduce_dtype == DType::f32, "GradReducer: PowerSGD's factors travel in f32");
  for (const Bucket& b : buckets_)
    TS_CHECK(b.group >= 0 && size_t(b.group) < groups_.size(), "GradReducer: a bucket of group ", b.group, " but ",
             groups_.size(), " groups");
}

int64_t GradReducer::shard_size() const { return tessera::shard_size(buckets_); }

void GradReducer::begin(Tensor& grads, Tensor& shard) {
  TS_CHECK(in_flight_.empty() && next_ == 0, "GradReducer::begin while a reduction is in flight");
  grads_ = grads;
  shard_ = shard;
}

void GradReducer::grads_final_from(int64_t offset) {
  if (!overlap_) return;
  while (next_ < buckets_.size() && buckets_[next_].begin >= offset) launch(next_++);
}

void GradReducer::launch(size_t index) {
  const Bucket& b = buckets_[index];
  Comm& comm = *groups_[size_t(b.group)];
  const int dp = comm.size();
  InFlight f;
  f.bucket = index;
  Tensor region = grads_.view(b.begin, {b.size()});
  // One rank sends nothing, so nothing is compressed: its gradients stay fp32, as without the flag.
  const DType wire = dp > 1 ? reduce_dtype_ : DType::f32;
  const bool compressed = wire != DType::f32;
  if (powersgd_) {
    f.round = powersgd_->start(comm, grads_, b);
  } else if (zero_stage_ == 0) {
    if (compressed) {  // widened back into the gradient by finish()
      f.padded_in = Tensor::zeros({b.size()}, wire, grads_.device());
      copy_elements(f.padded_in, 0, region, 0, b.size());
    }
    f.work = comm.all_reduce_async(compressed ? f.padded_in : region);
  } else {
    // Reduce-scatter needs dp equal chunks: pad the bucket when its length does not divide.
    Tensor in = region;
    if (compressed || b.size() != b.chunk * dp) {
      f.padded_in = Tensor::zeros({b.chunk * dp}, wire, grads_.device());
      copy_elements(f.padded_in, 0, region, 0, b.size());
      in = f.padded_in;
    }
    f.padded_out = Tensor::zeros({b.chunk}, wire, grads_.device());
    f.work = comm.reduce_scatter_async(in, f.padded_out);
  }
  in_flight_.push_back(std::move(f));
}

void GradReducer::finish() {
  while (next_ < buckets_.size()) launch(next_++);
  for (InFlight& f : in_flight_) {
    const Bucket& b = buckets_[f.bucket];
    if (f.round) {
      powersgd_->complete(*groups_[size_t(b.group)], grads_, *f.round);
      if (zero_stage_ > 0) copy_elements(shard_, b.shard_offset, grads_, b.owned_begin, b.owned());
      continue;
    }
    f.work.wait();
    if (zero_stage_ > 0)
      copy_elements(shard_, b.shard_offset, f.padded_out, 0, b.owned());
    else if (f.padded_in.defined())
      copy_elements(grads_, b.begin, f.padded_in, 0, b.size());
  }
  in_flight_.clear();
  next_ = 0;
  grads_ = Tensor();  // hold no buffer past the reduction (ZeRO-2 frees the gradient)
  shard_ = Tensor();
}

void GradReducer::step_skipped() {
  if (powersgd_) powersgd_->step_skipped();
}

const Bucket& GradReducer::bucket_of(int64_t offset) const {
  for (const Bucket& b : buckets_)
    if (offset >= b.begin && offset < b.end) return b;
  TS_FAIL("GradReducer: no bucket holds flat element ", offset);
}

Tensor GradReducer::powersgd_error_sum() {
  int64_t size = 0;
  for (const Bucket& b : buckets_) size = std::max(size, b.end);
  Tensor sum = Tensor::zeros({size});
  powersgd_->add_errors_to(sum);
  std::vector<bool> summed(buckets_.size(), false);
  for (const GradMatrix& m : powersgd_->matrices()) {
    const size_t index = size_t(&bucket_of(m.offset) - buckets_.data());
    if (summed[index]) continue;
    summed[index] = true;
    const Bucket& b = buckets_[index];
    Tensor range = sum.view(b.begin, {b.size()});
    groups_[size_t(b.group)]->all_reduce(range);
  }
  return sum;
}

void GradReducer::set_powersgd_errors(Tensor error_sum) {
  for (const Bucket& b : buckets_) {
    const float share = 1.0f / float(groups_[size_t(b.group)]->size());
    for (int64_t i = b.begin; i < b.end; ++i) error_sum.f32()[i] *= share;
  }
  powersgd_->set_errors(error_sum);
}

bool GradReducer::first_in_group(int64_t offset) const { return groups_[size_t(bucket_of(offset).group)]->rank() == 0; }

void GradReducer::all_gather(Tensor& full, const Tensor* shard) {
  // Two buckets in flight at most: one gathering while the previous one is copied out, so the
  // staging never holds more than two buckets (the point of ZeRO is not to hold the whole model).
  std::vector<InFlight> window;
  auto complete_oldest = [&] {
    InFlight& f = window.front();
    f.work.wait();
    const Bucket& b = buckets_[f.bucket];
    copy_elements(full, b.begin, f.padded_out, 0, b.size());
    window.erase(window.begin());
  };
  for (size_t i = 0; i < buckets_.size(); ++i) {
    const Bucket& b = buckets_[i];
    Comm& comm = *groups_[size_t(b.group)];
    InFlight f;
    f.bucket = i;
    f.padded_in = Tensor::zeros({b.chunk}, DType::f32, full.device());
    if (shard)
      copy_elements(f.padded_in, 0, *shard, b.shard_offset, b.owned());
    else
      copy_elements(f.padded_in, 0, full, b.owned_begin, b.owned());
    f.padded_out = Tensor::zeros({b.chunk * comm.size()}, DType::f32, full.device());
    f.work = comm.all_gather_async(f.padded_in, f.padded_out);
    window.push_back(std::move(f));
    if (window.size() == 2) complete_oldest();
  }
  while (!window.empty()) complete_oldest();
}

}  // namespace tessera
