// AdamW step over segments: one fused update per segment (ops/adamw), decay chosen per segment.
#include "optim/adamw_optimizer.h"

#include <algorithm>
#include <cstring>

#include "ops/adamw.h"

namespace tessera {

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

AdamW::AdamW(std::vector<OptimSegment> segments, const AdamWConfig& config)
    : segments_(std::move(segments)), config_(config) {
  int64_t size = 0;
  for (const OptimSegment& s : segments_) size = std::max(size, s.state_offset + s.length);
  m_ = Tensor::zeros({size});
  v_ = Tensor::zeros({size});
}

void AdamW::step(Tensor& params, const Tensor& grads, float lr, float grad_scale) {
  ++steps_;
  for (const OptimSegment& s : segments_) {
    Tensor p = params.view(s.param_offset, {s.length});
    Tensor g = grads.view(s.state_offset, {s.length});
    Tensor m = m_.view(s.state_offset, {s.length});
    Tensor v = v_.view(s.state_offset, {s.length});
    AdamWParams hp{lr, config_.beta1, config_.beta2, config_.eps, s.decayed ? config_.weight_decay : 0.0f,
                   grad_scale, steps_};
    adamw_update(p, g, m, v, hp);
  }
}

void AdamW::export_moments(Tensor& m_full, Tensor& v_full) const {
  for (const OptimSegment& s : segments_) {
    std::memcpy(m_full.f32() + s.param_offset, m_.f32() + s.state_offset, size_t(s.length) * sizeof(float));
    std::memcpy(v_full.f32() + s.param_offset, v_.f32() + s.state_offset, size_t(s.length) * sizeof(float));
  }
}

void AdamW::import_moments(const Tensor& m_full, const Tensor& v_full) {
  for (const OptimSegment& s : segments_) {
    std::memcpy(m_.f32() + s.state_offset, m_full.f32() + s.param_offset, size_t(s.length) * sizeof(float));
    std::memcpy(v_.f32() + s.state_offset, v_full.f32() + s.param_offset, size_t(s.length) * sizeof(float));
  }
}

}  // namespace tessera
