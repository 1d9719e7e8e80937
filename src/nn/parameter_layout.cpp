// Flat-buffer layout of named parameters.
#include "nn/parameter_layout.h"

namespace tessera {

void ParameterLayout::add(std::string name, Shape shape, ParamInit init, int64_t block, ParamSlice slice) {
  TS_CHECK(specs_.empty() || block >= specs_.back().block, "parameter '", name, "' of block ", block,
           " added after block ", specs_.back().block, "; a layout holds its blocks in order");
  ParamSpec spec{std::move(name), std::move(shape), total_, init, block, std::move(slice)};
  total_ += spec.numel();
  specs_.push_back(std::move(spec));
}

const ParamSpec& ParameterLayout::find(const std::string& name) const {
  for (const ParamSpec& s : specs_)
    if (s.name == name) return s;
  TS_FAIL("no parameter named '", name, "'");
}

const ParamSpec& ParameterLayout::spec_at(int64_t offset) const {
  auto it = std::upper_bound(specs_.begin(), specs_.end(), offset,
                             [](int64_t o, const ParamSpec& spec) { return o < spec.offset; });
  TS_CHECK(it != specs_.begin() && offset < std::prev(it)->offset + std::prev(it)->numel(), "offset ", offset,
           " lies outside the parameters");
  return *std::prev(it);
}

OffsetRange ParameterLayout::block_range(int64_t first, int64_t last) const {
  OffsetRange range{-1, -1};
  for (const ParamSpec& s : specs_) {
    if (s.block < first || s.block > last) continue;
    if (range.begin < 0) range.begin = s.offset;
    range.end = s.offset + s.numel();
  }
  return range.begin < 0 ? OffsetRange{} : range;
}

std::vector<OffsetRange> ParameterLayout::whole_parameter_ranges() const {
  std::vector<OffsetRange> ranges;
  for (const ParamSpec& s : specs_) {
    if (!s.slice.is_whole()) continue;
    if (!ranges.empty() && ranges.back().end == s.offset)
      ranges.back().end += s.numel();
    else
      ranges.push_back({s.offset, s.offset + s.numel()});
  }
  return ranges;
}

NamedTensors ParameterLayout::views(const Tensor& flat) const {
  TS_CHECK(flat.numel() == total_, "flat buffer holds ", flat.numel(), " elements, layout needs ", total_);
  NamedTensors out;
  out.reserve(specs_.size());
  for (const ParamSpec& s : specs_) out.push_back({s.name, flat.view(s.offset, s.shape)});
  return out;
}

}  // namespace tessera
