// Where a model's parameter values come from, range by range: ParameterValues fills any offset range
// of a ParameterLayout's flat buffer, so a ZeRO-3 rank can fill just the ranges it owns and never hold
// the whole model (torchtitan initialises FSDP shards the same way, from a model on the meta device).
// Sources: the initialisation below, a model's own buffer, and a checkpoint's weights
// (checkpoint/train_checkpoint.h).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "core/tensor.h"
#include "nn/model_config.h"
#include "nn/parameter_layout.h"

namespace tessera {

// Writes flat parameters [range.begin, range.end) to out[0 .. range.end - range.begin) (fp32, host).
using ParameterValues = std::function<void(OffsetRange range, float* out)>;

// The initial weights of `layout` (ParamInit says how each parameter is filled). Every element is
// keyed on seed, its parameter's name and its index in the whole parameter, so any range, any tp
// slice and any shard of it holds the values the whole model would.
ParameterValues initial_values(const ModelConfig& config, const ParameterLayout& layout, uint64_t seed);

// Reads elements [begin, end) of the whole parameter `name` (flattened) into out.
using WholeTensorReader = std::function<void(const std::string& name, int64_t begin, int64_t end, float* out)>;
// `layout`'s values (a tp rank's slices, a stage's blocks, an ep rank's experts) read from a source of
// whole parameters: each run of a range that is contiguous in the whole parameter is one read.
ParameterValues values_from_whole(const ParameterLayout& layout, WholeTensorReader read);

// The values held in `flat`, a whole flat parameter buffer (fp32, on any device; kept by reference).
ParameterValues values_of(const Tensor& flat);

}  // namespace tessera
