// The sigmoid row gate: shape checks, then the CPU kernels.
#include "ops/sigmoid_gate.h"

#include "ops/cpu/sigmoid_gate_cpu.h"
#include "ops/op_checks.h"

namespace tessera {
namespace {

// y (N, C) and z (N, 1) on the CPU; returns N.
int64_t gate_rows(const char* op, const Tensor& y, const Tensor& z, Device device) {
  TS_CHECK(device == Device::cpu, op, ": the sigmoid gate (Qwen2-MoE's shared_expert_gate) has no GPU kernel yet; ",
           "run this model with --device cpu");
  TS_CHECK(y.ndim() == 2, op, ": y must be (N, C), got ", shape_string(y.shape()));
  detail::check_shape(op, "z", z, {y.size(0), 1});
  return y.size(0);
}

}  // namespace

void sigmoid_gate_add(Tensor& out, const Tensor& y, const Tensor& z) {
  const char* op = "sigmoid_gate_add";
  const Device device = detail::check_args(op, {{"out", out}, {"y", y}, {"z", z}});
  const int64_t N = gate_rows(op, y, z, device);
  detail::check_shape(op, "out", out, y.shape());
  cpu::sigmoid_gate_add(out.f32(), y.f32(), z.f32(), N, y.size(1));
}

void sigmoid_gate_backward(Tensor& dy, Tensor& dz, const Tensor& dout, const Tensor& y, const Tensor& z) {
  const char* op = "sigmoid_gate_backward";
  const Device device = detail::check_args(op, {{"dy", dy}, {"dz", dz}, {"dout", dout}, {"y", y}, {"z", z}});
  const int64_t N = gate_rows(op, y, z, device);
  detail::check_shape(op, "dy", dy, y.shape());
  detail::check_shape(op, "dout", dout, y.shape());
  detail::check_shape(op, "dz", dz, z.shape());
  cpu::sigmoid_gate_backward(dy.f32(), dz.f32(), dout.f32(), y.f32(), z.f32(), N, y.size(1));
}

}  // namespace tessera
