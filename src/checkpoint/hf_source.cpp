// Our parameters from a Hugging Face folder's pieces, one whole parameter at a time (hf_source.h).
#include "checkpoint/hf_source.h"

#include <algorithm>
#include <map>
#include <memory>
#include <set>

#include "checkpoint/hf_weight_files.h"
#include "checkpoint/host_param.h"
#include "core/error.h"
#include "core/user_text.h"
#include "nn/decoder_layout.h"

namespace tessera {

void add_linear_pieces(std::vector<HfPiece>& pieces, const std::string& hf, const Shape& shape, const LinearNames& ours,
                       int64_t row0) {
  pieces.push_back({hf + ".weight", shape, ours.weight, row0 * shape.back()});
  if (!ours.bias.empty()) pieces.push_back({hf + ".bias", {shape.front()}, ours.bias, row0});
}

HfSource checked_hf_source(const std::filesystem::path& dir, std::vector<HfPiece> pieces,
                           const std::function<bool(const std::string& hf)>& skipped, const std::string& model,
                           std::function<void(const std::string& hf, float* values)> to_ours) {
  auto files = std::make_shared<const HfWeightFiles>(dir);
  std::set<std::string> expected;
  for (const HfPiece& p : pieces) expected.insert(p.hf);
  for (const std::string& name : files->names())
    TS_CHECK(expected.count(name) || skipped(name), "Hugging Face weights ", files->description(),
             ": unexpected tensor ", quoted_text(name, 80), " for ", model, " (weights of another model?)");
  for (const HfPiece& p : pieces) files->check(p.hf, p.hf_shape);
  HfSource source;
  source.pieces = std::move(pieces);
  source.read = [files, to_ours = std::move(to_ours)](const std::string& name) {
    std::vector<float> values = files->read_f32(name);
    to_ours(name, values.data());
    return values;
  };
  return source;
}

void transpose_into(const float* src, int64_t rows, int64_t cols, float* dst) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[c * rows + r] = src[r * cols + c];
}

namespace {

// The pieces of every parameter of the whole model, checked to fit it.
std::map<std::string, std::vector<HfPiece>> pieces_by_parameter(const HfSource& source, const ParameterLayout& whole,
                                                               const char* caller) {
  std::map<std::string, std::vector<HfPiece>> by_parameter;
  for (const HfPiece& p : source.pieces) {
    const ParamSpec& spec = whole.find(p.ours);
    TS_CHECK(p.offset + shape_numel(p.hf_shape) <= spec.numel(), caller, ": parameter '", p.ours,
             "' is too small for ", p.hf);
    by_parameter[p.ours].push_back(p);
  }
  TS_CHECK(by_parameter.size() == whole.specs().size(), caller, ": the model has ", whole.specs().size(),
           " parameters but the Hugging Face weights fill ", by_parameter.size(), "; some would be left unloaded");
  return by_parameter;
}

// Parameter `name` whole (numel elements) from its pieces.
std::vector<float> assemble(const HfSource& source, const std::vector<HfPiece>& pieces, int64_t numel) {
  std::vector<float> whole(size_t(numel), 0.0f);
  for (const HfPiece& p : pieces) {
    const std::vector<float> values = source.read(p.hf);
    if (p.transpose)
      transpose_into(values.data(), p.hf_shape[0], p.hf_shape[1], whole.data() + p.offset);
    else
      std::copy(values.begin(), values.end(), whole.begin() + p.offset);
  }
  return whole;
}

}  // namespace

ParameterValues hf_source_values(HfSource source, const ModelConfig& config, const ParameterLayout& layout,
                                 const char* caller) {
  struct State {
    HfSource source;
    std::map<std::string, std::vector<HfPiece>> pieces;
    ParameterLayout whole;
    std::string assembled_name;  // the last parameter assembled, kept for the next runs of it
    std::vector<float> assembled;
  };
  auto state = std::make_shared<State>();
  state->whole = decoder_layout(config);
  state->pieces = pieces_by_parameter(source, state->whole, caller);
  state->source = std::move(source);
  return values_from_whole(layout, [state](const std::string& name, int64_t begin, int64_t end, float* out) {
    if (state->assembled_name != name) {
      state->assembled = assemble(state->source, state->pieces.at(name), state->whole.find(name).numel());
      state->assembled_name = name;
    }
    std::copy(state->assembled.begin() + begin, state->assembled.begin() + end, out);
  });
}

ParameterValues values_of_named(const ParameterLayout& layout, const NamedTensors& params, const char* caller) {
  std::vector<const float*> data;
  for (const ParamSpec& spec : layout.specs()) data.push_back(host_param(params, spec.name, caller, spec.shape).f32());
  return [layout, data](OffsetRange range, float* out) {
    layout.for_each_overlap(range, [&](const ParamSpec& spec, int64_t begin, int64_t end) {
      const float* values = data[size_t(&spec - layout.specs().data())];
      std::copy(values + begin, values + end, out + (spec.offset + begin - range.begin));
    });
  };
}

void load_hf_source(HfSource source, const ModelConfig& config, NamedTensors& params, const char* caller) {
  const ParameterLayout whole = decoder_layout(config);
  TS_CHECK(params.size() == whole.specs().size(), caller, ": the model has ", params.size(), " parameters but ",
           model_family(config), " with this config has ", whole.specs().size(), "; some would be left unloaded");
  std::vector<Tensor> targets;
  for (const ParamSpec& spec : whole.specs()) targets.push_back(host_param(params, spec.name, caller, spec.shape));
  const ParameterValues values = hf_source_values(std::move(source), config, whole, caller);
  for (size_t i = 0; i < targets.size(); ++i) {
    const ParamSpec& spec = whole.specs()[i];
    values({spec.offset, spec.offset + spec.numel()}, targets[i].f32());
  }
}

}  // namespace tessera
