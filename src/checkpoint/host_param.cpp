// Named parameter lookup with the adapters' dtype, device and shape checks.
#include "checkpoint/host_param.h"

#include "core/error.h"

namespace tessera {

const Tensor& host_param(const NamedTensors& params, const std::string& name, const char* caller,
                         const std::optional<Shape>& shape) {
  for (const NamedTensor& p : params) {
    if (p.name != name) continue;
    TS_CHECK(!shape || p.tensor.shape() == *shape, caller, ": parameter '", name, "' has shape ",
             shape_string(p.tensor.shape()), ", expected ", shape_string(shape.value_or(Shape{})));
    TS_CHECK(p.tensor.dtype() == DType::f32 && p.tensor.device() == Device::cpu, caller, ": parameter '", name,
             "' must be an fp32 CPU tensor");
    return p.tensor;
  }
  TS_FAIL(caller, ": the model has no parameter '", name, "'");
}

}  // namespace tessera
