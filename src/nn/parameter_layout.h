// Where each named parameter lives in one flat fp32 buffer. Parameters, gradients and optimizer
// state share this layout, so a shard of any of them is an offset range (ZeRO) and every buffer
// can be viewed as NamedTensors. Order: as added (embeddings, then block by block, then the final
// norm and head); each parameter records the block it belongs to, so a pipeline stage's range of
// blocks is one offset range too.
#pragma once

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

struct ParamSpec {
  std::string name;
  Shape shape;
  int64_t offset = 0;  // in elements, into the flat buffer
  ParamInit init = ParamInit::normal;
  int64_t block = kEmbeddingBlock;  // -1: embeddings; 0..L-1: a transformer block; L: final norm and head
  int64_t numel() const { return shape_numel(shape); }
  // Decoupled weight decay applies to matrices and embeddings (2+ dims), not to biases or norm gains.
  bool decayed() const { return shape.size() >= 2; }
};

struct OffsetRange {
  int64_t begin = 0, end = 0;  // [begin, end) in elements
};

class ParameterLayout {
 public:
  void add(std::string name, Shape shape, ParamInit init = ParamInit::normal, int64_t block = kEmbeddingBlock);
  const std::vector<ParamSpec>& specs() const { return specs_; }
  const ParamSpec& find(const std::string& name) const;
  int64_t total() const { return total_; }
  // The offsets of blocks [first, last] (kEmbeddingBlock .. L); empty when none of them has parameters.
  OffsetRange block_range(int64_t first, int64_t last) const;
  // Views of `flat` (total() elements) named by the layout.
  NamedTensors views(const Tensor& flat) const;

 private:
  std::vector<ParamSpec> specs_;
  int64_t total_ = 0;
};

}  // namespace tessera
