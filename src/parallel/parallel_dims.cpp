// ParallelDims: resolving the layout against the world size, checking it against the model, and
// the rank order rank = ((pp_i·dp + dp_i)·cp + cp_i)·tp + tp_i (tp innermost, pp outermost).
// Every error names the flags and the numbers involved and says what to change.
#include "parallel/parallel_dims.h"

#include <cstdint>
#include <initializer_list>
#include <sstream>

#include "core/error.h"

namespace tessera {

namespace {

void check_degree(const char* flag, int degree) {
  TS_CHECK(degree >= 1, flag, " must be at least 1, got ", degree);
}

// The product of degrees ≥ 1, saturating at INT64_MAX (which no world size matches).
int64_t product_of(std::initializer_list<int> degrees) {
  int64_t product = 1;
  for (int degree : degrees)
    if (__builtin_mul_overflow(product, degree, &product)) return INT64_MAX;
  return product;
}

}  // namespace

ParallelDims ParallelDims::resolve(ParallelDims requested, int world_size) {
  TS_CHECK(world_size >= 1, "the world size must be at least 1, got ", world_size);
  ParallelDims dims = requested;
  TS_CHECK(dims.dp >= 0, "--dp must be at least 1 (or 0 to fill the world), got ", dims.dp);
  check_degree("--tp", dims.tp);
  check_degree("--pp", dims.pp);
  check_degree("--cp", dims.cp);
  check_degree("--ep", dims.ep);
  if (dims.dp == 0) {
    const int64_t rest = product_of({dims.tp, dims.pp, dims.cp});
    TS_CHECK(world_size % rest == 0, "--dp 0 fills the world, but --tp ", dims.tp, " × --pp ", dims.pp, " × --cp ",
             dims.cp, " = ", rest, " does not divide the world size ", world_size, "; start a multiple of ", rest,
             " ranks or change --tp/--pp/--cp");
    dims.dp = static_cast<int>(world_size / rest);
  }

  const int64_t product = product_of({dims.dp, dims.tp, dims.pp, dims.cp});
  if (product != world_size) {
    std::ostringstream why;
    if (world_size == 1)
      why << "but this process runs alone (world size 1); start it with mpirun -np " << product << " or srun -n "
          << product;
    else
      why << "but the launcher started " << world_size << "; choose degrees whose product is " << world_size
          << " (--dp 0 fills the world with data parallelism)";
    TS_FAIL("--dp ", dims.dp, " × --tp ", dims.tp, " × --pp ", dims.pp, " × --cp ", dims.cp, " = ", product, " ranks, ",
            why.str());
  }
  TS_CHECK(dims.dp % dims.ep == 0, "--ep ", dims.ep, " does not divide --dp ", dims.dp,
           " (expert groups are carved out of the data-parallel ranks); choose an --ep that divides ", dims.dp);
  return dims;
}

void ParallelDims::check_model(const ModelShape& model, int64_t seq_len, int64_t batch_size,
                               int64_t micro_batch) const {
  TS_CHECK(model.num_heads % tp == 0, "--tp ", tp, " does not divide the model's ", model.num_heads,
           " attention heads; choose a --tp that divides ", model.num_heads);
  TS_CHECK(model.channels % tp == 0, "--tp ", tp, " does not divide the model's ", model.channels,
           " channels; choose a --tp that divides ", model.channels);
  TS_CHECK(model.ffn_channels % tp == 0, "--tp ", tp, " does not divide the model's MLP width ", model.ffn_channels,
           "; choose a --tp that divides ", model.ffn_channels);
  TS_CHECK(pp <= model.num_layers, "--pp ", pp, " is more than the model's ", model.num_layers,
           " layers; every pipeline stage needs at least one layer, so choose --pp ≤ ", model.num_layers);
  TS_CHECK(cp == 1 || seq_len % (2 * cp) == 0, "--seq-len ", seq_len, " is not a multiple of 2 × --cp ", cp, " = ", 2 * cp,
           "; context parallelism cuts every sequence into 2·cp equal chunks (two per rank, for causal balance), so "
           "choose a --seq-len that is a multiple of ",
           2 * cp);
  if (model.num_experts == 0) {
    TS_CHECK(ep == 1, "--ep ", ep, " needs a MoE model, but this model has no experts; drop --ep or choose a MoE "
             "model (num_experts in its config)");
  } else {
    TS_CHECK(model.num_experts % ep == 0, "--ep ", ep, " does not divide the model's ", model.num_experts,
             " experts; every expert-parallel rank holds an equal share, so choose an --ep that divides ",
             model.num_experts);
  }
  TS_CHECK(micro_batch >= 1, "--micro-batch-size must be at least 1, got ", micro_batch);
  const int64_t per_step = dp * micro_batch;
  TS_CHECK(batch_size % per_step == 0, "--batch-size ", batch_size, " is not a multiple of --dp ", dp,
           " × --micro-batch-size ", micro_batch, " = ", per_step,
           "; every data-parallel rank needs a whole number of micro-batches, so choose a --batch-size that is a "
           "multiple of ",
           per_step);
}

std::string ParallelDims::to_string() const {
  std::ostringstream out;
  out << "dp=" << dp << " tp=" << tp << " pp=" << pp << " cp=" << cp << " ep=" << ep;
  return out.str();
}

GridCoord grid_coord(const ParallelDims& dims, int rank) {
  TS_CHECK(rank >= 0 && rank < dims.world_size(), "rank ", rank, " is outside the grid ", dims.to_string(), " of ",
           dims.world_size(), " ranks");
  GridCoord coord;
  coord.tp = rank % dims.tp;
  rank /= dims.tp;
  coord.cp = rank % dims.cp;
  rank /= dims.cp;
  coord.dp = rank % dims.dp;
  coord.pp = rank / dims.dp;
  return coord;
}

int grid_rank(const ParallelDims& dims, const GridCoord& coord) {
  TS_CHECK(coord.tp >= 0 && coord.tp < dims.tp && coord.cp >= 0 && coord.cp < dims.cp && coord.dp >= 0 &&
               coord.dp < dims.dp && coord.pp >= 0 && coord.pp < dims.pp,
           "grid coordinate (tp ", coord.tp, ", cp ", coord.cp, ", dp ", coord.dp, ", pp ", coord.pp,
           ") is outside the grid ", dims.to_string());
  return ((coord.pp * dims.dp + coord.dp) * dims.cp + coord.cp) * dims.tp + coord.tp;
}

}  // namespace tessera
