// A checked Hugging Face folder as the source of our parameters: each of ours is made of HF tensors
// (pieces) placed at element offsets, transposed first where HF stores the transpose (GPT-2's
// Conv1D), zero where no piece lands (padding rows). The family files (hf_gpt2, hf_llama) check a
// folder against a config and list the pieces; this file turns them into parameter values for any
// layout, so a tp rank, a pipeline stage or a ZeRO-3 shard loads only what it holds, assembling one
// whole parameter at a time.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "nn/decoder_layout.h"
#include "nn/model_config.h"
#include "nn/named_tensor.h"
#include "nn/parameter_values.h"

namespace tessera {

// One HF tensor: its name and shape, and where it lives in ours: parameter `ours`, from element
// `offset`; `transpose`: HF's (rows, cols) lands as (cols, rows).
struct HfPiece {
  std::string hf;
  Shape hf_shape;
  std::string ours;
  int64_t offset = 0;
  bool transpose = false;
};

// HF tensor `hf`.weight of `shape` and, where ours has a bias, `hf`.bias: pieces of `ours` from its row `row0` (q,
// k and v into a packed projection).
void add_linear_pieces(std::vector<HfPiece>& pieces, const std::string& hf, const Shape& shape, const LinearNames& ours,
                       int64_t row0 = 0);

struct HfSource {
  std::vector<HfPiece> pieces;  // checked against the files: present, shaped, loadable dtypes
  std::function<std::vector<float>(const std::string& hf)> read;  // an HF tensor as fp32
};

// dir's weights (one file or sharded) as the source of `pieces`: every stored tensor one of theirs or `skipped`
// (buffers older exports keep, a tied head's copy), else refused naming it and `model` ("a phi with 2 layers");
// each piece present, shaped and of a loadable dtype; each read through `to_ours` (the family's row order, in
// place) on its way in.
HfSource checked_hf_source(const std::filesystem::path& dir, std::vector<HfPiece> pieces,
                           const std::function<bool(const std::string& hf)>& skipped, const std::string& model,
                           std::function<void(const std::string& hf, float* values)> to_ours);

// src (rows, cols) row-major into dst as (cols, rows) row-major.
void transpose_into(const float* src, int64_t rows, int64_t cols, float* dst);

// `layout`'s values (any slices of the model of `config`) from the folder's pieces; every parameter
// of the whole model must get pieces that fit it (checked here, before any value is read).
ParameterValues hf_source_values(HfSource source, const ModelConfig& config, const ParameterLayout& layout,
                                 const char* caller);
// The values of `params`, the whole model's parameters by name (fp32, CPU; kept by reference), over
// `layout`; each is checked to be there with its shape, `caller` naming the errors.
ParameterValues values_of_named(const ParameterLayout& layout, const NamedTensors& params, const char* caller);
// Fills `params`, the whole model's parameters (our names, fp32, CPU), in place; `caller` prefixes
// the errors. The files' checks come first; `source.read`'s (hf_weight_files: no NaN or infinity) as
// each parameter is assembled, so after such an error the parameters before it are filled.
void load_hf_source(HfSource source, const ModelConfig& config, NamedTensors& params, const char* caller);

}  // namespace tessera
