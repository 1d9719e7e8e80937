// Looking up one of a model's parameters by name for the file adapters (Hugging Face import and
// export), which read and write host fp32 tensors.
#pragma once

#include <optional>
#include <string>

#include "core/tensor.h"
#include "nn/named_tensor.h"

namespace tessera {

// The parameter `name` of `params`, checked to be an fp32 CPU tensor (and of `shape` when given);
// `caller` prefixes the errors. A copy of the returned handle writes into the parameter.
const Tensor& host_param(const NamedTensors& params, const std::string& name, const char* caller,
                         const std::optional<Shape>& shape = std::nullopt);

}  // namespace tessera
