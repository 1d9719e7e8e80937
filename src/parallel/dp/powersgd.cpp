// PowerSGD's two rounds per bucket, on the gradients' device (the orthonormalisation of the small
// P factors on the host).
#include "parallel/dp/powersgd.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/cuda/device.h"
#include "core/rng.h"
#include "ops/matmul.h"
#include "ops/norm.h"
#include "ops/residual.h"

namespace tessera {
namespace {

// Gram-Schmidt on P's r columns (P is rows × r, row-major), in double on the host. A column that
// vanishes (a zero gradient) stays zero rather than dividing by nothing.
void orthonormalise_columns(Tensor& p) {
  Tensor host = tensor_to(p, Device::cpu);
  const int64_t rows = host.size(0), r = host.size(1);
  float* a = host.f32();
  for (int64_t j = 0; j < r; ++j) {
    for (int64_t k = 0; k < j; ++k) {
      double dot = 0;
      for (int64_t i = 0; i < rows; ++i) dot += double(a[i * r + j]) * a[i * r + k];
      for (int64_t i = 0; i < rows; ++i) a[i * r + j] -= float(dot * a[i * r + k]);
    }
    double norm = 0;
    for (int64_t i = 0; i < rows; ++i) norm += double(a[i * r + j]) * a[i * r + j];
    norm = std::sqrt(norm);
    const float scale = norm > 1e-30 ? float(1.0 / norm) : 0.0f;
    for (int64_t i = 0; i < rows; ++i) a[i * r + j] *= scale;
  }
  copy_tensor(p, host);
}

}  // namespace

PowerSgd::PowerSgd(std::vector<GradMatrix> matrices, int rank, uint64_t seed, Device device) : rank_(rank) {
  TS_CHECK(rank >= 1, "PowerSGD: the rank must be at least 1, got ", rank);
  std::sort(matrices.begin(), matrices.end(), [](const GradMatrix& a, const GradMatrix& b) { return a.offset < b.offset; });
  for (const GradMatrix& m : matrices) {
    if (!compresses(m, rank)) continue;
    Factored f{m, Tensor::zeros({rank, m.cols}), Tensor::zeros({rank, m.cols}, DType::f32, device),
               Tensor::zeros({m.rows, m.cols}, DType::f32, device)};
    fill_normal(f.qt.f32(), f.qt.numel(), seed, "powersgd.q." + m.name, 0.0f, 1.0f);
    f.qt = tensor_to(f.qt, device);
    copy_tensor(f.qt_before, f.qt);
    factored_.push_back(std::move(f));
  }
}

int64_t PowerSgd::compressed_elements() const {
  int64_t n = 0;
  for (const Factored& f : factored_) n += f.m.rows * f.m.cols;
  return n;
}

std::vector<GradMatrix> PowerSgd::matrices() const {
  std::vector<GradMatrix> out;
  for (const Factored& f : factored_) out.push_back(f.m);
  return out;
}

void PowerSgd::add_errors_to(Tensor& flat) const {
  for (const Factored& f : factored_) {
    const Tensor error = tensor_to(f.error, Device::cpu);
    float* to = flat.f32() + f.m.offset;
    for (int64_t i = 0; i < error.numel(); ++i) to[i] += error.f32()[i];
  }
}

void PowerSgd::set_errors(const Tensor& flat) {
  for (Factored& f : factored_) copy_tensor(f.error, flat.view(f.m.offset, {f.m.rows, f.m.cols}));
}

Tensor PowerSgd::qt_of(size_t matrix) const { return tensor_to(factored_.at(matrix).qt, Device::cpu); }

void PowerSgd::set_qt(size_t matrix, const Tensor& qt) {
  Factored& f = factored_.at(matrix);
  TS_CHECK(qt.shape() == f.qt.shape(), "PowerSGD: Qᵀ of the matrix at offset ", f.m.offset, " must be ",
           shape_string(f.qt.shape()), ", got ", shape_string(qt.shape()));
  copy_tensor(f.qt, qt);
  copy_tensor(f.qt_before, qt);
}

const Tensor& PowerSgd::error_of(int64_t offset) const {
  auto it = std::find_if(factored_.begin(), factored_.end(), [&](const Factored& f) { return f.m.offset == offset; });
  TS_CHECK(it != factored_.end(), "PowerSGD: no compressed matrix starts at offset ", offset);
  return it->error;
}

void PowerSgd::step_skipped() {
  for (Factored& f : factored_) {
    zero_tensor(f.error);
    copy_tensor(f.qt, f.qt_before);
  }
}

PowerSgd::Round PowerSgd::start(Comm& comm, Tensor& grads, const Bucket& bucket) {
  Round round;
  int64_t at = bucket.begin, packed = 0;
  for (size_t i = 0; i < factored_.size(); ++i) {
    const GradMatrix& m = factored_[i].m;
    if (m.offset < bucket.begin || m.offset >= bucket.end) continue;
    if (at < m.offset) round.uncovered.push_back({at, m.offset});
    at = m.offset + m.rows * m.cols;
    round.matrices.push_back(i);
  }
  if (at < bucket.end) round.uncovered.push_back({at, bucket.end});
  for (const OffsetRange& u : round.uncovered) packed += u.end - u.begin;
  const int64_t first_p = packed;
  for (size_t i : round.matrices) packed += factored_[i].m.rows * rank_;
  round.packed = Tensor::zeros({packed}, DType::f32, grads.device());
  int64_t to = 0;
  for (const OffsetRange& u : round.uncovered) {
    Tensor slot = round.packed.view(to, {u.end - u.begin});
    copy_tensor(slot, grads.view(u.begin, {u.end - u.begin}));
    to += u.end - u.begin;
  }
  to = first_p;
  Tensor no_bias;
  for (size_t i : round.matrices) {
    Factored& f = factored_[i];
    Tensor m = grads.view(f.m.offset, {f.m.rows, f.m.cols});
    add_inplace(m, f.error);  // error feedback
    Tensor p = round.packed.view(to, {f.m.rows, rank_});
    matmul_forward(p, m, f.qt, no_bias);  // P = M Q
    to += f.m.rows * rank_;
  }
  round.work = comm.all_reduce_async(round.packed);
  return round;
}

void PowerSgd::complete(Comm& comm, Tensor& grads, Round& round) {
  round.work.wait();
  int64_t at = 0;
  for (const OffsetRange& u : round.uncovered) {
    Tensor region = grads.view(u.begin, {u.end - u.begin});
    copy_tensor(region, round.packed.view(at, {u.end - u.begin}));
    at += u.end - u.begin;
  }
  if (round.matrices.empty()) return;
  // Round 2: Qᵀ = Pᵀ M for every matrix, packed and summed.
  int64_t q_total = 0;
  for (size_t i : round.matrices) q_total += rank_ * factored_[i].m.cols;
  Tensor q_packed = Tensor::zeros({q_total}, DType::f32, grads.device());
  std::vector<Tensor> ps, qts;
  int64_t q_at = 0;
  Tensor no_dx, no_dbias;
  for (size_t i : round.matrices) {
    const Factored& f = factored_[i];
    Tensor p = round.packed.view(at, {f.m.rows, rank_});
    at += f.m.rows * rank_;
    orthonormalise_columns(p);
    Tensor qt = q_packed.view(q_at, {rank_, f.m.cols});
    q_at += rank_ * f.m.cols;
    const Tensor m = grads.view(f.m.offset, {f.m.rows, f.m.cols});
    matmul_backward(no_dx, qt, no_dbias, p, m, f.qt);  // qt += Pᵀ M (qt starts at zero)
    ps.push_back(p);
    qts.push_back(qt);
  }
  comm.all_reduce(q_packed);
  const float ranks = float(comm.size());
  Tensor no_dweight;
  for (size_t k = 0; k < round.matrices.size(); ++k) {
    Factored& f = factored_[round.matrices[k]];
    Tensor m = grads.view(f.m.offset, {f.m.rows, f.m.cols});
    // E = M − P Qᵀ / ranks, this rank's share of what the compression lost, computed as
    // (P Qᵀ − ranks·M) · (−1/ranks) so that the sum P Qᵀ lands in the gradient with no temporary.
    copy_tensor(f.error, m);
    scale_inplace(f.error, -ranks);
    matmul_backward(m, no_dweight, no_dbias, ps[k], f.error, qts[k]);  // M = P Qᵀ: the compressed sum
    add_inplace(f.error, m);
    scale_inplace(f.error, -1.0f / ranks);
    copy_tensor(f.qt_before, f.qt);
    copy_tensor(f.qt, qts[k]);  // the warm start of the next step
  }
}

}  // namespace tessera
