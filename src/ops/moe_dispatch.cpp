// The MoE token permutation: shape, dtype and index checks (expert ids and order entries on the CPU,
// where reading them is free), then dispatch by device. No CUDA kernel yet: the Device::cuda branches
// raise fail_no_cuda_kernel.
#include "ops/moe_dispatch.h"

#include <climits>
#include <vector>

#include "ops/cpu/moe_dispatch_cpu.h"
#include "ops/op_checks.h"

namespace tessera {
namespace {

// A tensor the host reads and writes whatever the other arguments' device: i32, on the CPU.
void check_host_i32(const char* op, const char* name, const Tensor& t, const Shape& shape) {
  TS_CHECK(t.defined(), op, ": ", name, " is undefined");
  TS_CHECK(t.dtype() == DType::i32, op, ": ", name, " must be i32, got ", dtype_name(t.dtype()));
  TS_CHECK(t.device() == Device::cpu, op, ": ", name, " must be a host (CPU) tensor, got one on the GPU");
  detail::check_shape(op, name, t, shape);
}

struct PermuteDims {
  int64_t N, C, M_rows;
};

// tokens (N,C) and rows (M_rows,C) with M <= M_rows; order (N*K) with 0 <= M <= N*K and K > 0.
PermuteDims permute_dims(const char* op, const char* tokens_name, const Tensor& tokens, const char* rows_name,
                         const Tensor& rows, const Tensor& order, int64_t M, int64_t K) {
  TS_CHECK(tokens.ndim() == 2, op, ": ", tokens_name, " must be (N,C), got ", shape_string(tokens.shape()));
  const int64_t N = tokens.size(0), C = tokens.size(1);
  TS_CHECK(rows.ndim() == 2 && rows.size(1) == C, op, ": ", rows_name, " must be (M_rows,", C, ") to match ",
           tokens_name, " ", shape_string(tokens.shape()), ", got ", shape_string(rows.shape()));
  TS_CHECK(K > 0, op, ": K = ", K, " must be positive (choices per token)");
  TS_CHECK(N * K <= INT_MAX, op, ": N*K = ", N * K, " assignments do not fit i32 order entries");
  detail::check_shape(op, "order", order, {N * K});
  TS_CHECK(M >= 0 && M <= N * K, op, ": M = ", M, " kept assignments must be in [0, N*K = ", N * K, "]");
  TS_CHECK(M <= rows.size(0), op, ": ", rows_name, " ", shape_string(rows.shape()), " has fewer than M = ", M, " rows");
  return {N, C, rows.size(0)};
}

// order[0..M) are distinct assignments in [0, N*K): the kernels index rows with them.
void check_order_values(const char* op, const Tensor& order, int64_t M) {
  const int32_t* a = order.data<int32_t>();
  const int64_t NK = order.numel();
  std::vector<char> seen(size_t(NK), 0);
  for (int64_t i = 0; i < M; i++) {
    TS_CHECK(a[i] >= 0 && a[i] < NK, op, ": order[", i, "] = ", a[i], " is outside the assignments [0, N*K = ", NK,
             "); pass the M that moe_dispatch_plan returned");
    TS_CHECK(!seen[size_t(a[i])], op, ": order[", i, "] = ", a[i],
             " appears twice; order must come from moe_dispatch_plan");
    seen[size_t(a[i])] = 1;
  }
}

}  // namespace

int64_t moe_dispatch_plan(Tensor& order, Tensor& offsets, const Tensor& experts, int64_t num_experts,
                          int64_t capacity) {
  const char* op = "moe_dispatch_plan";
  const Device device = detail::check_args(op, {{"order", order, DType::i32}, {"experts", experts, DType::i32}});
  TS_CHECK(num_experts > 0 && num_experts < INT_MAX, op, ": num_experts = ", num_experts, " must be positive");
  TS_CHECK(capacity >= 0, op, ": capacity = ", capacity, " must be >= 0 (0: dropless)");
  TS_CHECK(experts.ndim() == 2 && experts.size(1) > 0, op, ": experts must be (N,K) with K > 0, got ",
           shape_string(experts.shape()));
  const int64_t N = experts.size(0), K = experts.size(1), E = num_experts;
  TS_CHECK(K <= E, op, ": experts ", shape_string(experts.shape()), " has K = ", K,
           " choices per token, more than num_experts = ", E);
  TS_CHECK(N * K <= INT_MAX, op, ": experts ", shape_string(experts.shape()), " has N*K = ", N * K,
           " assignments, too many for i32 order entries");
  detail::check_shape(op, "order", order, {N * K});
  check_host_i32(op, "offsets", offsets, {E + 1});
  switch (device) {
    case Device::cpu: {
      const int32_t* ids = experts.data<int32_t>();
      for (int64_t a = 0; a < N * K; a++)
        TS_CHECK(ids[a] >= 0 && ids[a] < E, op, ": experts[", a / K, ",", a % K, "] = ", ids[a],
                 " is outside [0, num_experts = ", E, ")");
      return cpu::moe_dispatch_plan(order.data<int32_t>(), offsets.data<int32_t>(), ids, N * K, E, capacity);
    }
    case Device::cuda:
      detail::fail_no_cuda_kernel(op);
  }
  return 0;
}

void moe_gather(Tensor& xs, const Tensor& x, const Tensor& order, int64_t M, int64_t K) {
  const char* op = "moe_gather";
  detail::check_float_dtype(op, "x", x);
  const Device device =
      detail::check_args(op, {{"xs", xs, x.dtype()}, {"x", x, x.dtype()}, {"order", order, DType::i32}});
  const PermuteDims d = permute_dims(op, "x", x, "xs", xs, order, M, K);
  switch (device) {
    case Device::cpu:
      check_order_values(op, order, M);
      cpu::moe_gather(xs.f32(), x.f32(), order.data<int32_t>(), M, K, d.C);
      return;
    case Device::cuda:
      detail::fail_no_cuda_kernel(op);
  }
}

void moe_gather_backward(Tensor& dx, const Tensor& dxs, const Tensor& order, int64_t M, int64_t K) {
  const char* op = "moe_gather_backward";
  detail::check_float_dtype(op, "dxs", dxs);
  const Device device =
      detail::check_args(op, {{"dx", dx, dxs.dtype()}, {"dxs", dxs, dxs.dtype()}, {"order", order, DType::i32}});
  const PermuteDims d = permute_dims(op, "dx", dx, "dxs", dxs, order, M, K);
  switch (device) {
    case Device::cpu:
      check_order_values(op, order, M);
      cpu::moe_gather_backward(dx.f32(), dxs.f32(), order.data<int32_t>(), M, d.N, K, d.C);
      return;
    case Device::cuda:
      detail::fail_no_cuda_kernel(op);
  }
}

void moe_combine(Tensor& out, const Tensor& ys, const Tensor& weights, const Tensor& order, int64_t M, int64_t K) {
  const char* op = "moe_combine";
  detail::check_float_dtype(op, "ys", ys);
  const Device device = detail::check_args(
      op, {{"out", out, ys.dtype()}, {"ys", ys, ys.dtype()}, {"weights", weights}, {"order", order, DType::i32}});
  const PermuteDims d = permute_dims(op, "out", out, "ys", ys, order, M, K);
  detail::check_shape(op, "weights", weights, {d.N, K});
  switch (device) {
    case Device::cpu:
      check_order_values(op, order, M);
      cpu::moe_combine(out.f32(), ys.f32(), weights.f32(), order.data<int32_t>(), M, d.N, K, d.C);
      return;
    case Device::cuda:
      detail::fail_no_cuda_kernel(op);
  }
}

void moe_combine_backward(Tensor& dys, Tensor& dweights, const Tensor& dout, const Tensor& ys, const Tensor& weights,
                          const Tensor& order, int64_t M, int64_t K) {
  const char* op = "moe_combine_backward";
  detail::check_float_dtype(op, "ys", ys);
  const DType t = ys.dtype();
  const Device device = detail::check_args(op, {{"dys", dys, t},
                                                {"dweights", dweights},
                                                {"dout", dout, t},
                                                {"ys", ys, t},
                                                {"weights", weights},
                                                {"order", order, DType::i32}});
  const PermuteDims d = permute_dims(op, "dout", dout, "ys", ys, order, M, K);
  detail::check_shape(op, "dys", dys, ys.shape());
  detail::check_shape(op, "weights", weights, {d.N, K});
  detail::check_shape(op, "dweights", dweights, {d.N, K});
  switch (device) {
    case Device::cpu:
      check_order_values(op, order, M);
      cpu::moe_combine_backward(dys.f32(), dweights.f32(), dout.f32(), ys.f32(), weights.f32(), order.data<int32_t>(),
                                M, d.N, K, d.C);
      return;
    case Device::cuda:
      detail::fail_no_cuda_kernel(op);
  }
}

}  // namespace tessera
