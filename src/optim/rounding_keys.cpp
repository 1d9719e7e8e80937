// Rounding keys of optimizer segments, parameter slice by slice (see rounding_keys.h).
#include "optim/rounding_keys.h"

#include <algorithm>

#include "core/error.h"

namespace tessera {
namespace {

// The part [lo, hi) (held offsets of `spec`) of segment s, with s's rounding key fields (set by the caller).
OptimSegment part_of(const OptimSegment& s, const ParamSpec& spec, int64_t lo, int64_t hi) {
  OptimSegment part = s;
  const int64_t first = s.param_offset - spec.offset;
  part.param_offset = spec.offset + lo;
  part.state_offset = s.state_offset + (lo - first);
  part.length = hi - lo;
  return part;
}

}  // namespace

std::vector<OptimSegment> with_rounding_keys(const std::vector<OptimSegment>& segments, const ParameterLayout& layout,
                                             const ParameterLayout& whole) {
  std::vector<OptimSegment> keyed;
  for (const OptimSegment& s : segments) {
    if (s.length == 0) continue;
    const ParamSpec& spec = layout.spec_at(s.param_offset);
    const int64_t begin = s.param_offset - spec.offset, end = begin + s.length;
    TS_CHECK(end <= spec.numel(), "with_rounding_keys: the segment at ", s.param_offset, " (", s.length,
             " elements) runs past parameter '", spec.name, "'");
    const ParamSpec& home = whole.find(spec.name);
    TS_CHECK(home.numel() == shape_numel(spec.whole_shape()), "with_rounding_keys: parameter '", spec.name, "' is ",
             shape_string(spec.whole_shape()), " whole here, ", shape_string(home.shape), " in the whole model");
    if (spec.slice.is_whole()) {
      OptimSegment part = part_of(s, spec, begin, end);
      part.key_offset = home.offset + begin;
      keyed.push_back(part);
      continue;
    }
    // Row blocks of the slice, each cols wide, in held order.
    const ParamSlice& slice = spec.slice;
    const int64_t cols = slice.col_end - slice.col_begin, whole_cols = slice.whole_cols();
    int64_t held = 0;
    for (const ParamSlice::Rows& rows : slice.rows) {
      const int64_t block_end = held + rows.count * cols;
      const int64_t lo = std::max(begin, held), hi = std::min(end, block_end);
      if (lo < hi) {
        OptimSegment part = part_of(s, spec, lo, hi);
        const int64_t row = (lo - held) / cols, col = (lo - held) % cols;
        part.key_offset = home.offset + (rows.first + row) * whole_cols + slice.col_begin;
        if (cols == whole_cols) {
          part.key_offset += col;  // whole rows: one contiguous run
        } else {
          part.key_col = col;
          part.key_cols = cols;
          part.key_stride = whole_cols;
        }
        keyed.push_back(part);
      }
      held = block_end;
    }
  }
  return keyed;
}

}  // namespace tessera
