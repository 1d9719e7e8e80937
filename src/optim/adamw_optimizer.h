// AdamW over a flat parameter buffer. Its state (first and second moments, fp32, or bf16 rounded
// stochastically: half the memory and traffic) covers a list of segments: runs of parameter elements
// with one weight-decay setting, laid out one after another in the state. Without sharding that is every parameter (state offset = parameter offset); under ZeRO
// it is only the elements this rank owns, and the gradient given to step() is the rank's shard.
// Weight decay applies to parameters the layout marks as decayed (2+ dims).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "nn/parameter_layout.h"
#include "ops/adamw.h"

namespace tessera {

struct AdamWConfig {
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;
  // The moments' storage: f32, or bf16 (every segment then needs rounding keys, optim/rounding_keys.h;
  // `seed` keys the rounding bits with the step).
  DType moments = DType::f32;
  uint64_t seed = 0;
};

// The moments' storage named by --optimizer-moments: "fp32" or "bf16" (throws naming the choices),
// and back: the flag's value for a storage dtype.
DType parse_optimizer_moments(const std::string& flag);
std::string optimizer_moments_flag(DType moments);

// params[param_offset, +length) is updated from grads/moments at [state_offset, +length): the
// multi-tensor AdamW op's segment.
using OptimSegment = AdamWSegment;

// One segment per parameter, state laid out like the parameters.
std::vector<OptimSegment> full_segments(const ParameterLayout& layout);
// The segments of the element range [begin, end) of the parameters, with state starting at
// state_offset: split at parameter boundaries.
void append_segments(const ParameterLayout& layout, int64_t begin, int64_t end, int64_t state_offset,
                     std::vector<OptimSegment>& out);

class AdamW {
 public:
  // The moments live on `device`, with the parameters they update.
  AdamW(std::vector<OptimSegment> segments, const AdamWConfig& config, Device device = Device::cpu);

  // One update of every segment (one multi-tensor pass); `grads` is indexed like the state;
  // grad_scale folds in clipping. compute_copy, when given (GPU, bf16 or f16, the parameters'
  // layout), receives the updated parameters of the segments rounded, in the same pass.
  void step(Tensor& params, const Tensor& grads, float lr, float grad_scale, Tensor* compute_copy = nullptr);

  int64_t steps_taken() const { return steps_; }
  void set_steps_taken(int64_t steps) { steps_ = steps; }
  int64_t state_size() const { return m_.numel(); }
  const AdamWConfig& config() const { return config_; }

  const std::vector<OptimSegment>& segments() const { return segments_; }
  // The moments, laid out as the segments' state offsets say, on the optimizer's device, in
  // config().moments.
  const Tensor& m() const { return m_; }
  const Tensor& v() const { return v_; }
  // Replaces the moments (state layout, state_size() elements, f32 or bf16, on any device): a
  // checkpoint's; fp32 moments given to bf16 state round to nearest.
  void import_state(const Tensor& m, const Tensor& v);

 private:
  std::vector<OptimSegment> segments_;
  AdamWConfig config_;
  Tensor m_, v_;
  int64_t steps_ = 0;
};

}  // namespace tessera
