// A parameter (or gradient, or optimizer state) with its name: the unit that checkpoints, the
// Hugging Face adapter and the initialiser address. The tensor is a view into a flat buffer.
#pragma once

#include <string>
#include <vector>

#include "core/tensor.h"

namespace tessera {

struct NamedTensor {
  std::string name;
  Tensor tensor;
};

using NamedTensors = std::vector<NamedTensor>;

}  // namespace tessera
