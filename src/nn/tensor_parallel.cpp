// A tensor-parallel rank's layer shapes.
#include "nn/tensor_parallel.h"

#include <algorithm>

#include "core/error.h"

namespace tessera {

namespace {

bool splits_rows(const TensorParallel* tp) { return tp != nullptr && tp->sequence_parallel(); }

// x itself, or (sequence-parallel) every rank's rows of it gathered by `gather` into a new tensor.
using RowGather = void (TensorParallel::*)(const Tensor&, Tensor&);
Tensor all_rows(const Tensor& x, TensorParallel* tp, RowGather gather) {
  if (!splits_rows(tp)) return x;
  Tensor whole = all_rows_like(x, tp);
  (tp->*gather)(x, whole);
  return whole;
}

}  // namespace

Tensor all_rows_like(const Tensor& out, const TensorParallel* tp) {
  if (!splits_rows(tp)) return out;
  Shape shape = out.shape();
  shape[1] *= tp->place().size;
  return Tensor::zeros(shape, out.dtype(), out.device());
}

Tensor region_input(const Tensor& x, TensorParallel* tp) {
  return all_rows(x, tp, &TensorParallel::gather_to_region_forward);
}

void region_output(Tensor& partial, Tensor& out, TensorParallel* tp) {
  if (tp == nullptr) return;
  if (!splits_rows(tp)) return tp->reduce_from_region_forward(partial);  // partial is out
  tp->scatter_from_region_forward(partial, out);
}

Tensor region_output_grad(const Tensor& dout, TensorParallel* tp) {
  return all_rows(dout, tp, &TensorParallel::scatter_from_region_backward);
}

void region_input_grad(Tensor& partial, Tensor& dx, TensorParallel* tp) {
  if (tp == nullptr) return;
  if (!splits_rows(tp)) return tp->copy_to_region_backward(partial);  // partial is dx
  tp->gather_to_region_backward(partial, dx);
}

int64_t kv_head_replicas(const ModelConfig& c, TpPlace tp) {
  return tp.size > c.kv_heads() ? tp.size / c.kv_heads() : 1;
}

ModelConfig tp_local_config(const ModelConfig& c, TpPlace tp) {
  const int64_t p = tp.size;
  if (p == 1) return c;
  const auto divides = [&](const char* what, int64_t n) {
    TS_CHECK(n % p == 0, "--tp ", p, " does not divide the model's ", n, " ", what, "; choose a --tp that divides ", n);
  };
  divides("attention heads", c.num_heads);
  TS_CHECK(c.kv_heads() % p == 0 || p % c.kv_heads() == 0, "--tp ", p, " neither divides the model's ", c.kv_heads(),
           " key/value heads nor is a multiple of them (each kv head then sits on --tp / ", c.kv_heads(),
           " ranks); choose a --tp that divides or is a multiple of ", c.kv_heads());
  divides("MLP width", c.hidden());
  divides("padded vocabulary rows", c.padded_vocab_size());
  if (c.moe.enabled()) divides("expert width", c.moe.expert_hidden);
  ModelConfig local = c;
  local.head_dim = c.head_size();
  local.num_heads = c.num_heads / p;
  local.num_kv_heads = std::max<int64_t>(1, c.kv_heads() / p);  // 1: a kv head replicated over ranks
  local.mlp_hidden = c.hidden() / p;
  local.moe.expert_hidden = c.moe.expert_hidden / p;
  return local;
}

}  // namespace tessera
