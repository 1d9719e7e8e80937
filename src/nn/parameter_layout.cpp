// Flat-buffer layout of named parameters.
#include "nn/parameter_layout.h"

namespace tessera {

void ParameterLayout::add(std::string name, Shape shape) {
  ParamSpec spec{std::move(name), std::move(shape), total_};
  total_ += spec.numel();
  specs_.push_back(std::move(spec));
}

const ParamSpec& ParameterLayout::find(const std::string& name) const {
  for (const ParamSpec& s : specs_)
    if (s.name == name) return s;
  TS_FAIL("no parameter named '", name, "'");
}

NamedTensors ParameterLayout::views(const Tensor& flat) const {
  TS_CHECK(flat.numel() == total_, "flat buffer holds ", flat.numel(), " elements, layout needs ", total_);
  NamedTensors out;
  out.reserve(specs_.size());
  for (const ParamSpec& s : specs_) out.push_back({s.name, flat.view(s.offset, s.shape)});
  return out;
}

}  // namespace tessera
