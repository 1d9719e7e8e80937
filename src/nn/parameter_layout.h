// Where each named parameter lives in one flat fp32 buffer. Parameters, gradients and optimizer
// state share this layout, so a shard of any of them is an offset range (ZeRO) and every buffer
// can be viewed as NamedTensors. Order: as added (embeddings, then layer by layer, then the final norm).
#pragma once

#include <string>
#include <vector>

#include "core/tensor.h"
#include "nn/named_tensor.h"

namespace tessera {

struct ParamSpec {
  std::string name;
  Shape shape;
  int64_t offset = 0;  // in elements, into the flat buffer
  int64_t numel() const { return shape_numel(shape); }
  // Decoupled weight decay applies to matrices and embeddings (2+ dims), not to biases or norm gains.
  bool decayed() const { return shape.size() >= 2; }
};

class ParameterLayout {
 public:
  void add(std::string name, Shape shape);
  const std::vector<ParamSpec>& specs() const { return specs_; }
  const ParamSpec& find(const std::string& name) const;
  int64_t total() const { return total_; }
  // Views of `flat` (total() elements) named by the layout.
  NamedTensors views(const Tensor& flat) const;

 private:
  std::vector<ParamSpec> specs_;
  int64_t total_ = 0;
};

}  // namespace tessera
