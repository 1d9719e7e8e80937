// AdamW step over segments: one multi-tensor update (ops/adamw), decay chosen per segment.
#include "optim/adamw_optimizer.h"

#include <algorithm>

#include "core/cuda/device.h"
#include "core/error.h"
#include "core/rng.h"
#include "ops/cast.h"

namespace tessera {

DType parse_optimizer_moments(const std::string& flag) {
  TS_CHECK(flag == "fp32" || flag == "bf16", "--optimizer-moments must be fp32 or bf16 (AdamW's moments in half the ",
           "memory, rounded stochastically), got '", flag, "'");
  return flag == "bf16" ? DType::bf16 : DType::f32;
}

std::string optimizer_moments_flag(DType moments) { return moments == DType::bf16 ? "bf16" : "fp32"; }

std::vector<OptimSegment> full_segments(const ParameterLayout& layout) {
  std::vector<OptimSegment> segments;
  append_segments(layout, 0, layout.total(), 0, segments);
  return segments;
}

void append_segments(const ParameterLayout& layout, int64_t begin, int64_t end, int64_t state_offset,
                     std::vector<OptimSegment>& out) {
  for (const ParamSpec& spec : layout.specs()) {
    int64_t lo = std::max(begin, spec.offset), hi = std::min(end, spec.offset + spec.numel());
    if (lo >= hi) continue;
    out.push_back(OptimSegment{lo, state_offset + (lo - begin), hi - lo, spec.decayed()});
  }
}

AdamW::AdamW(std::vector<OptimSegment> segments, const AdamWConfig& config, Device device)
    : segments_(std::move(segments)), config_(config) {
  TS_CHECK(config_.moments == DType::f32 || config_.moments == DType::bf16, "AdamW: the moments are stored in f32 or ",
           "bf16, not ", dtype_name(config_.moments));
  int64_t size = 0;
  for (const OptimSegment& s : segments_) {
    size = std::max(size, s.state_offset + s.length);
    TS_CHECK(config_.moments == DType::f32 || s.rounding_key_valid(), "AdamW: bf16 moments round stochastically by each element's ",
             "place in the model; the segment at parameter offset ", s.param_offset,
             " has no valid rounding key (build the segments with with_rounding_keys)");
  }
  m_ = Tensor::zeros({size}, config_.moments, device);
  v_ = Tensor::zeros({size}, config_.moments, device);
}

void AdamW::step(Tensor& params, const Tensor& grads, float lr, float grad_scale, Tensor* compute_copy) {
  ++steps_;
  // The rounding bits get their own key, apart from the seed's other streams (initialisation, data).
  const uint64_t round_seed = config_.seed ^ stream_id("adamw.moments");
  const AdamWParams hp{lr, config_.beta1, config_.beta2, config_.eps, config_.weight_decay, grad_scale, steps_, round_seed};
  adamw_update_segments(params, grads, m_, v_, segments_, hp, compute_copy);
}

void AdamW::import_state(const Tensor& m, const Tensor& v) {
  TS_CHECK(m.numel() == m_.numel() && v.numel() == v_.numel(), "AdamW::import_state: the moments hold ", m.numel(),
           " and ", v.numel(), " elements, the optimizer's state ", m_.numel());
  cast_copy(m_, tensor_to(m, m_.device()));
  cast_copy(v_, tensor_to(v, v_.device()));
}

}  // namespace tessera
