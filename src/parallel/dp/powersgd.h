// PowerSGD gradient compression (Vogels et al., 2019) for the data-parallel reduction: each large
// gradient matrix M (n × m) travels as two rank-r factors instead of n·m values.
//   round 1   M += E (this rank's error from the last step);  P = M Q;  all-reduce every P (and,
//             packed beside them, the bucket's elements no factor covers: vectors and small matrices)
//   round 2   P ← orthonormal columns of P;  Qᵀ = Pᵀ M;  all-reduce every Q
//   result    M_sum ≈ P Qᵀ (the sum over ranks projected on P's columns), written over the gradient;
//             E = M − P Qᵀ / ranks, what this rank's share of the sum lost, added back next step
// Q is kept between steps (warm start) and starts from the same seeded normal values on every rank
// (keyed on the matrix's name, so a layout that holds the same matrix at another offset starts alike);
// P's orthonormalisation is the same on every rank (it runs on the all-reduced P). A matrix is
// compressed only when its factors are at most half its size. The error buffers hold one fp32 copy
// of the compressed matrices. A checkpoint keeps Q and the sum of E over the ranks (grad_reducer.h):
// the compression depends on the ranks' matrices only through their sum, so a resumed run that
// shares that sum out again continues it, under any number of ranks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "nn/parameter_layout.h"
#include "parallel/comm.h"
#include "parallel/dp/buckets.h"

namespace tessera {

// A gradient of the flat buffer seen as a matrix: [offset, offset + rows·cols), row-major. `name`
// keys its Q's initial values: a parameter's name, the same in every layout (the offset is not).
struct GradMatrix {
  int64_t offset = 0, rows = 0, cols = 0;
  std::string name;
};

class PowerSgd {
 public:
  // One bucket's reduction between start() and complete().
  struct Round {
    Work work;
    Tensor packed;                      // round 1's buffer: the uncovered elements, then every P
    std::vector<size_t> matrices;       // indices into the compressed matrices, in the bucket
    std::vector<OffsetRange> uncovered;  // the bucket's other elements (flat offsets)
  };

  // Whether a matrix travels factored at rank r: its factors are at most half its size.
  static bool compresses(const GradMatrix& m, int rank) { return int64_t(rank) * (m.rows + m.cols) * 2 <= m.rows * m.cols; }
  // matrices: the flat buffer's 2-D (and higher, as rows × the rest) gradients; rank: r.
  PowerSgd(std::vector<GradMatrix> matrices, int rank, uint64_t seed, Device device);

  // Round 1 of `bucket` of `grads` (the full flat gradient) over `comm`.
  Round start(Comm& comm, Tensor& grads, const Bucket& bucket);
  // Waits for round 1, runs round 2, and leaves the bucket's compressed sum in `grads`.
  void complete(Comm& comm, Tensor& grads, Round& round);
  // Forgets a skipped step (one whose gradients may not be finite): the accumulated errors go, and
  // every Q returns to the one the step started from, so a NaN step cannot poison the later ones.
  void step_skipped();

  int64_t compressed_elements() const;  // of the flat buffer, in factored form on the wire
  // The compressed matrices, by offset; `matrix` below indexes this list.
  std::vector<GradMatrix> matrices() const;
  // Adds every compressed matrix's error to its range of `flat` (a host f32 tensor over the whole
  // flat buffer).
  void add_errors_to(Tensor& flat) const;
  // Sets every compressed matrix's error to its range of `flat` (host).
  void set_errors(const Tensor& flat);
  // Qᵀ of `matrix` (r × cols) on the host, and setting it from a host tensor of that shape.
  Tensor qt_of(size_t matrix) const;
  void set_qt(size_t matrix, const Tensor& qt);
  // The error buffer of the compressed matrix at flat `offset` (rows × cols); throws for another offset.
  const Tensor& error_of(int64_t offset) const;
  int rank() const { return rank_; }

 private:
  struct Factored {
    GradMatrix m;
    Tensor qt;     // (r, cols): Qᵀ, kept between steps
    Tensor qt_before;  // (r, cols): the Qᵀ the last step started from, restored if it is skipped
    Tensor error;  // (rows, cols)
  };
  std::vector<Factored> factored_;  // by offset
  int rank_;
};

}  // namespace tessera
