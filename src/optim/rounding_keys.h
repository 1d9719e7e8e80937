// The stochastic-rounding keys of optimizer segments: each element's place in the whole model (its
// offset in the single-process layout of every parameter, whole), so a tensor- or expert-parallel
// slice, a pipeline stage, a ZeRO shard, a tied copy and every rank holding a replicated parameter
// draw the same rounding bits for the same element as one process would (DESIGN.md invariant 1).
#pragma once

#include <vector>

#include "nn/parameter_layout.h"
#include "optim/adamw_optimizer.h"

namespace tessera {

// `segments` (each within one parameter of `layout`, as append_segments makes them) keyed by their
// elements' places in `whole`, the single-process layout: a segment is split where its parameter's
// slice breaks into row blocks, and a column slice's rows are keyed by stride.
std::vector<OptimSegment> with_rounding_keys(const std::vector<OptimSegment>& segments, const ParameterLayout& layout,
                                             const ParameterLayout& whole);

}  // namespace tessera
