// The MoE token permutation: shape, dtype and index checks (expert ids and order entries on the CPU,
// where reading them is free), then dispatch by device. On the GPU the plan is made on the host (the
// offsets that size the experts' GEMMs are needed there anyway: one small copy each way), the row
// moves run as kernels.
#include "ops/moe_dispatch.h"

#include <climits>
#include <vector>

#include "core/cuda/device.h"
#include "ops/cpu/moe_dispatch_cpu.h"
#include "ops/op_checks.h"

#ifdef TESSERA_WITH_CUDA
#include "ops/cuda/moe_cuda.h"
#include "ops/cuda/storage_types.h"
#endif

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

#ifdef TESSERA_WITH_CUDA
// out[n] = sum over token n's kept assignments, in k order, of w(n,k) rows[pos(n,k)] on the GPU (w = 1
// without weights), pos built from order into a scratch.
void sum_token_rows_cuda(Tensor& out, const Tensor& rows, const float* weights, const Tensor& order, int64_t M,
                         int64_t K) {
  const int64_t N = out.size(0), C = out.size(1);
  const DeviceScratch pos_buffer(size_t(N * K) * sizeof(int32_t));
  int32_t* pos = pos_buffer.as<int32_t>();
  cuda::moe_positions(pos, order.data<int32_t>(), M, N * K, cuda_compute_stream());
  cuda::with_storage_type(rows.dtype(), [&]<typename T>(T) {
    cuda::moe_sum_token_rows(cuda::typed_data<T>(out), cuda::typed_data<T>(rows), weights, pos, N, K, C,
                             cuda_compute_stream());
  });
}
#endif

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
  // The plan is made on the host; a GPU's experts come over and its order goes back.
  const Tensor host_experts = device == Device::cpu ? experts : tensor_to(experts, Device::cpu);
  Tensor host_order = device == Device::cpu ? order : Tensor::zeros(order.shape(), DType::i32);
  const int32_t* ids = host_experts.data<int32_t>();
  for (int64_t a = 0; a < N * K; a++)
    TS_CHECK(ids[a] >= 0 && ids[a] < E, op, ": experts[", a / K, ",", a % K, "] = ", ids[a],
             " is outside [0, num_experts = ", E, ")");
  const int64_t M =
      cpu::moe_dispatch_plan(host_order.data<int32_t>(), offsets.data<int32_t>(), ids, N * K, E, capacity);
  if (device == Device::cuda) copy_tensor(order, host_order);
  return M;
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
#ifdef TESSERA_WITH_CUDA
      cuda::with_storage_type(x.dtype(), [&]<typename T>(T) {
        cuda::moe_gather(cuda::typed_data<T>(xs), cuda::typed_data<T>(x), order.data<int32_t>(), M, K, d.C,
                         cuda_compute_stream());
      });
      return;
#else
      detail::fail_no_cuda_kernel(op);
#endif
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
#ifdef TESSERA_WITH_CUDA
      sum_token_rows_cuda(dx, dxs, nullptr, order, M, K);
      return;
#else
      detail::fail_no_cuda_kernel(op);
#endif
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
#ifdef TESSERA_WITH_CUDA
      sum_token_rows_cuda(out, ys, weights.f32(), order, M, K);
      return;
#else
      detail::fail_no_cuda_kernel(op);
#endif
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
#ifdef TESSERA_WITH_CUDA
      cuda::with_storage_type(t, [&]<typename T>(T) {
        cuda::moe_combine_backward(cuda::typed_data<T>(dys), dweights.f32(), cuda::typed_data<T>(dout),
                                   cuda::typed_data<T>(ys), weights.f32(), order.data<int32_t>(), M, d.N, K, d.C,
                                   cuda_compute_stream());
      });
      return;
#else
      detail::fail_no_cuda_kernel(op);
#endif
  }
}

}  // namespace tessera
