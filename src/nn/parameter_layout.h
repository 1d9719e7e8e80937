// Where each named parameter lives in one flat fp32 buffer. Parameters, gradients and optimizer
// state share this layout, so a shard of any of them is an offset range (ZeRO) and every buffer
// can be viewed as NamedTensors. Order: as added (embeddings, then block by block, then the final
// norm and head); each parameter records the block it belongs to, so a pipeline stage's range of
// blocks is one offset range too.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "nn/named_tensor.h"

namespace tessera {

// How init_weights fills a parameter: normal(0, 0.02), normal(0, 0.02 / sqrt(2L)) for projections
// into the residual stream, normal(0, 0.02) on the first vocab_size rows only (embeddings and head:
// padding rows stay 0), zeros (biases), ones (norm gains).
enum class ParamInit { normal, residual, vocab_rows, zeros, ones };

inline constexpr int64_t kEmbeddingBlock = -1;  // ParamSpec::block of the embeddings

// Where a rank's part of a parameter lies in the whole one (a tensor-parallel rank's slice, an
// expert-parallel rank's experts), both seen as matrices (rows: the product of the leading
// dimensions, columns: the last; a vector is one column): row blocks of the whole, in order, and a
// range of its columns. Empty `whole`: the parameter is not split (every rank holds all of it).
struct ParamSlice {
  struct Rows {
    int64_t first = 0, count = 0;  // rows of the whole
  };
  Shape whole;
  std::vector<Rows> rows;
  int64_t col_begin = 0, col_end = 0;
  bool is_whole() const { return whole.empty(); }
  int64_t whole_cols() const { return whole.size() < 2 ? 1 : whole.back(); }
  // Calls f(local_offset, whole_offset, count) for each contiguous run of elements, in local order.
  template <typename F>
  void for_each_run(F&& f) const {
    const int64_t cols = col_end - col_begin;
    int64_t local = 0;
    for (const Rows& block : rows)
      for (int64_t r = block.first; r < block.first + block.count; ++r, local += cols)
        f(local, r * whole_cols() + col_begin, cols);
  }
};

struct ParamSpec {
  std::string name;
  Shape shape;
  int64_t offset = 0;  // in elements, into the flat buffer
  ParamInit init = ParamInit::normal;
  int64_t block = kEmbeddingBlock;  // -1: embeddings; 0..L-1: a transformer block; L: final norm and head
  ParamSlice slice;             // under tensor or expert parallelism: where this rank's part lies in the whole
  int64_t numel() const { return shape_numel(shape); }
  // Decoupled weight decay applies to matrices and embeddings (2+ dims), not to biases or norm gains.
  bool decayed() const { return shape.size() >= 2; }
  // The shape of the whole parameter (this rank may hold a slice of it).
  const Shape& whole_shape() const { return slice.is_whole() ? shape : slice.whole; }
  // Elements [begin, end) of the parameter as held, in runs contiguous in the whole parameter:
  // f(held offset, whole offset, count) for each.
  template <typename F>
  void for_each_whole_run(int64_t begin, int64_t end, F&& f) const {
    if (slice.is_whole()) return f(begin, begin, end - begin);
    slice.for_each_run([&](int64_t held, int64_t whole, int64_t count) {
      const int64_t lo = std::max(held, begin), hi = std::min(held + count, end);
      if (lo < hi) f(lo, whole + (lo - held), hi - lo);
    });
  }
};

struct OffsetRange {
  int64_t begin = 0, end = 0;  // [begin, end) in elements
};

class ParameterLayout {
 public:
  void add(std::string name, Shape shape, ParamInit init = ParamInit::normal, int64_t block = kEmbeddingBlock,
           ParamSlice slice = {});
  const std::vector<ParamSpec>& specs() const { return specs_; }
  const ParamSpec& find(const std::string& name) const;
  // find()'s position in specs() (and in views() of any buffer of this layout).
  size_t index_of(const std::string& name) const { return size_t(&find(name) - specs_.data()); }
  int64_t total() const { return total_; }
  // The parameter whose elements include flat offset `offset`.
  const ParamSpec& spec_at(int64_t offset) const;
  // f(spec, begin, end) for each parameter overlapping the flat range, in order, with [begin, end) the
  // overlap in the parameter's own element offsets.
  template <typename F>
  void for_each_overlap(OffsetRange range, F&& f) const {
    for (int64_t at = range.begin; at < range.end;) {
      const ParamSpec& spec = spec_at(at);
      const int64_t end = std::min(range.end, spec.offset + spec.numel());
      f(spec, at - spec.offset, end - spec.offset);
      at = end;
    }
  }
  // The offsets of blocks [first, last] (kEmbeddingBlock .. L); empty when none of them has parameters.
  OffsetRange block_range(int64_t first, int64_t last) const;
  // Views of `flat` (total() elements) named by the layout.
  NamedTensors views(const Tensor& flat) const;
  // The offsets of the parameters not split by tensor parallelism (every tp rank holds them whole),
  // adjacent ones merged.
  std::vector<OffsetRange> whole_parameter_ranges() const;

 private:
  std::vector<ParamSpec> specs_;
  int64_t total_ = 0;
};

}  // namespace tessera
