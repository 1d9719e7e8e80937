// fp8 training of the blocks' linear layers (attention qkv and output, MLP in and out, a MoE block's
// expert GEMMs and shared experts), with delayed per-tensor scaling: Transformer Engine's DelayedScaling recipe, its scales rounded down
// to powers of two. Each linear layer's three operands — its input, its weight and, in backward,
// its output gradient — are rounded to an fp8 format at a per-tensor scale before the GEMM:
// q(t) = fp8(t · s) / s. The GEMM then multiplies fp8 values exactly and accumulates in fp32, which
// is what a Hopper fp8 GEMM does; here the rounded operands stay in the compute dtype (fake
// quantization, exact: fp8 values are bf16 and f32 values, and s is a power of two), which is the
// reference a GPU path with fp8 storage and fp8 GEMMs is held to.
//
// The recipe: `hybrid` rounds inputs and weights to E4M3 and gradients to E5M2 (their wider
// range), `e4m3` rounds all three to E4M3. An operand's scale for a step comes from the largest
// |value| (amax) it had in the last `history` steps, over every rank and micro-batch:
// s = 2^floor(log2(fp8_max / amax)) / 2^margin, so the largest value of recent steps lands near the
// top of the format. During a step every quantization records its operand's amax; at the step's
// end the trainer takes them, reduces them with a max over all ranks, and update() moves the
// histories and scales on. Every rank then holds the same scales, fixed for the whole step, which
// is why fp8 keeps layout equivalence: quantization is element-wise at a scale no layout changes.
// An operand without history yet (the first step) has scale 1, as in Transformer Engine.
//
// The embedding, the classifier, the MoE router and the norms stay in the compute dtype. A layer's bias gradient is the column sum of the rounded output gradient.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/fp8.h"
#include "core/tensor.h"

namespace tessera {

enum class Fp8Recipe { off, hybrid, e4m3 };

// "off", "hybrid" or "e4m3" (--fp8); anything else throws, naming the choices.
Fp8Recipe parse_fp8_recipe(const std::string& flag);
std::string fp8_recipe_name(Fp8Recipe recipe);

struct Fp8Options {
  Fp8Recipe recipe = Fp8Recipe::off;
  int64_t history = 16;  // steps of amax history (--fp8-amax-history)
  int margin = 0;        // the scale's headroom in powers of two (--fp8-margin)
};
constexpr int64_t kMaxFp8AmaxHistory = 1024;
constexpr int kMaxFp8Margin = 8;
// Throws, naming the flag, on a history or margin out of range.
void check_fp8_options(const Fp8Options& options);

// The operands of a linear layer, each with a scale of its own.
enum class Fp8Role { input = 0, weight = 1, grad = 2 };
constexpr int64_t kFp8Roles = 3;

// The linear layers of a block that fp8 covers: the attention's, the dense MLP's (in a MoE block the
// shared experts'), and a MoE block's expert GEMMs (all of a rank's experts as one tensor each).
enum class BlockLinear { qkv = 0, attn_out = 1, mlp_in = 2, mlp_out = 3, experts_in = 4, experts_out = 5 };
constexpr int64_t kFp8LinearsPerBlock = 6;

class Fp8Scaling {
 public:
  // The scaling state of every block of a `layers`-layer model (whatever part of it this rank
  // holds: the state is the same on every rank), its amaxes recorded on `device`.
  Fp8Scaling(const Fp8Options& options, int64_t layers, Device device);

  const Fp8Options& options() const { return options_; }
  int64_t layers() const { return layers_; }
  // One slot per (layer, linear layer, role).
  int64_t slots() const { return layers_ * kFp8LinearsPerBlock * kFp8Roles; }
  static int64_t slot(int64_t layer, BlockLinear linear, Fp8Role role) {
    return (layer * kFp8LinearsPerBlock + int64_t(linear)) * kFp8Roles + int64_t(role);
  }
  Fp8Format format(Fp8Role role) const;
  float scale(int64_t slot) const { return scales_[size_t(slot)]; }

  // t rounded to the slot's format at its scale (a new tensor like t); t's amax is recorded.
  Tensor quantize(const Tensor& t, int64_t slot);

  // The amaxes recorded since the last call (one per slot, 0 where nothing was quantized), and
  // clears them; the trainer reduces them with a max over all ranks.
  std::vector<float> take_amaxes();
  // Forgets the amaxes recorded so far (an evaluation's), without reading them back.
  void clear_amaxes();
  // The step's amaxes, reduced over all ranks, become the newest step of the history (the oldest
  // leaves once `history` steps are kept), and the scales follow. A non-finite amax (a diverging
  // step's) enters as 0, which no scale reads.
  void update(const std::vector<float>& amaxes);

  // The history, oldest step first, slots() amaxes per step: what a checkpoint keeps.
  const std::vector<float>& history() const { return history_; }
  // Continues from a checkpoint's history (its newest `history` steps); throws, naming `source`,
  // when its length is not a whole number of steps or a value is negative or not finite.
  void restore_history(const std::vector<float>& history, const std::string& source);

 private:
  void recompute_scales();

  Fp8Options options_;
  int64_t layers_;
  Tensor amax_;                // (slots) on the device, this step's records
  std::vector<float> history_;  // (steps, slots), oldest step first
  std::vector<float> scales_;   // per slot
};

// One linear layer's place in the scaling, or none (scaling null: its operands stay as they are).
struct Fp8Linear {
  Fp8Scaling* scaling = nullptr;
  int64_t layer = 0;
  BlockLinear linear = BlockLinear::qkv;
  // The operand in `role` as the GEMM multiplies it: quantized, or t itself without scaling.
  Tensor operand(const Tensor& t, Fp8Role role) const {
    return scaling ? scaling->quantize(t, Fp8Scaling::slot(layer, linear, role)) : t;
  }
};

// A block's place in the scaling: its layer (global, so the state is layout-independent).
struct Fp8Block {
  Fp8Scaling* scaling = nullptr;
  int64_t layer = 0;
  Fp8Linear operator[](BlockLinear linear) const { return {scaling, layer, linear}; }
};

}  // namespace tessera
