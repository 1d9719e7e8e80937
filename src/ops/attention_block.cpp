// The attention-block op: shape, position and device checks, then the CPU kernels. There is no CUDA
// kernel yet, so a tensor on the GPU is refused with a message that says so.
#include "ops/attention_block.h"

#include <algorithm>
#include <cstring>
#include <functional>

#include "ops/attention.h"
#include "ops/cpu/attention_block_cpu.h"
#include "ops/op_checks.h"

namespace tessera {
namespace {

void check_on_cpu(const char* op, const Tensor& qkv) {
  TS_CHECK(qkv.device() == Device::cpu, op,
           ": context parallelism runs on the CPU only for now (attention blocks have no CUDA kernel yet); "
           "run with cp = 1 on the GPU, or keep the tensors on the CPU");
  detail::check_float_dtype(op, "qkv", qkv);
}

void check_positions(const char* op, const char* name, std::span<const int32_t> positions, int64_t T) {
  TS_CHECK(int64_t(positions.size()) == T, op, ": ", name, " holds ", positions.size(), " positions for ", T,
           " tokens");
  TS_CHECK(std::adjacent_find(positions.begin(), positions.end(), std::greater_equal<int32_t>()) == positions.end(),
           op, ": ", name, " positions must be strictly increasing (tokens in sequence order)");
}

// The dimensions of a (query block, kv block) pair; kv (B, Tk, 2*NKV*HS) against qkv's B, NKV and HS.
cpu::AttentionBlock block_dims(const char* op, const Tensor& qkv, const Tensor& kv, BlockPositions positions,
                               int num_heads, int num_kv_heads) {
  const detail::AttentionDims d = detail::attention_dims(op, qkv, num_heads, num_kv_heads);
  const int64_t HS = d.head_size();
  TS_CHECK(kv.ndim() == 3 && kv.size(0) == d.B && kv.size(2) == 2 * d.NKV * HS, op, ": kv has shape ",
           shape_string(kv.shape()), " but must be (", d.B, ", Tk, ", 2 * d.NKV * HS,
           "): the k and v heads of the key block's tokens (attention_block_kv)");
  check_positions(op, "positions.q", positions.q, d.T);
  check_positions(op, "positions.kv", positions.kv, kv.size(1));
  return {d.B, d.T, kv.size(1), d.NH, d.NKV, HS, positions.q.data(), positions.kv.data()};
}

// rows rows of `width` floats, from rows `from_ld` floats apart to rows `to_ld` floats apart.
void copy_rows(float* to, int64_t to_ld, const float* from, int64_t from_ld, int64_t rows, int64_t width) {
  for (int64_t r = 0; r < rows; r++) std::memcpy(to + r * to_ld, from + r * from_ld, size_t(width) * sizeof(float));
}

}  // namespace

void attention_block_forward(Tensor& out, Tensor& lse, const Tensor& qkv, const Tensor& kv,
                             BlockPositions positions, int num_heads, int num_kv_heads, bool first) {
  const char* op = "attention_block_forward";
  check_on_cpu(op, qkv);
  detail::check_args(op, {{"out", out}, {"lse", lse}, {"qkv", qkv}, {"kv", kv}});
  const cpu::AttentionBlock a = block_dims(op, qkv, kv, positions, num_heads, num_kv_heads);
  detail::check_shape(op, "out", out, {a.B, a.Tq, a.NH * a.HS});
  detail::check_shape(op, "lse", lse, {a.B, a.NH, a.Tq});
  cpu::attention_block_forward(out.f32(), lse.f32(), qkv.f32(), kv.f32(), a, first);
}

void attention_block_delta(Tensor& delta, const Tensor& dout, const Tensor& out, int num_heads) {
  const char* op = "attention_block_delta";
  check_on_cpu(op, out);
  detail::check_args(op, {{"delta", delta}, {"dout", dout}, {"out", out}});
  TS_CHECK(num_heads > 0 && out.ndim() == 3 && out.size(2) % num_heads == 0, op, ": out ",
           shape_string(out.shape()), " must be (B, T, num_heads * HS) for num_heads = ", num_heads);
  const int64_t B = out.size(0), T = out.size(1), NH = num_heads;
  detail::check_shape(op, "dout", dout, out.shape());
  detail::check_shape(op, "delta", delta, {B, NH, T});
  cpu::attention_block_delta(delta.f32(), dout.f32(), out.f32(), B, T, NH, out.size(2) / NH);
}

void attention_block_backward(Tensor& dqkv, Tensor& dkv, const Tensor& dout, const Tensor& qkv, const Tensor& kv,
                              const Tensor& lse, const Tensor& delta, BlockPositions positions, int num_heads,
                              int num_kv_heads) {
  const char* op = "attention_block_backward";
  check_on_cpu(op, qkv);
  detail::check_args(op, {{"dqkv", dqkv}, {"dkv", dkv}, {"dout", dout}, {"qkv", qkv}, {"kv", kv}, {"lse", lse},
                          {"delta", delta}});
  const cpu::AttentionBlock a = block_dims(op, qkv, kv, positions, num_heads, num_kv_heads);
  detail::check_shape(op, "dqkv", dqkv, qkv.shape());
  detail::check_shape(op, "dkv", dkv, kv.shape());
  detail::check_shape(op, "dout", dout, {a.B, a.Tq, a.NH * a.HS});
  detail::check_shape(op, "lse", lse, {a.B, a.NH, a.Tq});
  detail::check_shape(op, "delta", delta, {a.B, a.NH, a.Tq});
  cpu::attention_block_backward(dqkv.f32(), dkv.f32(), dout.f32(), qkv.f32(), kv.f32(), lse.f32(), delta.f32(), a);
}

Tensor attention_block_kv(const Tensor& qkv, int num_heads, int num_kv_heads) {
  const char* op = "attention_block_kv";
  check_on_cpu(op, qkv);
  const detail::AttentionDims d = detail::attention_dims(op, qkv, num_heads, num_kv_heads);
  Tensor kv = Tensor::zeros({d.B, d.T, 2 * d.NKV * d.head_size()});
  copy_rows(kv.f32(), kv.size(2), qkv.f32() + d.C, qkv.size(2), d.B * d.T, kv.size(2));
  return kv;
}

void attention_block_kv_to_qkv(Tensor& dqkv, const Tensor& dkv, int num_heads, int num_kv_heads) {
  const char* op = "attention_block_kv_to_qkv";
  check_on_cpu(op, dqkv);
  detail::check_args(op, {{"dqkv", dqkv}, {"dkv", dkv}});
  const detail::AttentionDims d = detail::attention_dims(op, dqkv, num_heads, num_kv_heads);
  detail::check_shape(op, "dkv", dkv, {d.B, d.T, 2 * d.NKV * d.head_size()});
  copy_rows(dqkv.f32() + d.C, dqkv.size(2), dkv.f32(), dkv.size(2), d.B * d.T, dkv.size(2));
}

}  // namespace tessera
