// RMSNorm on the GPU, storage T = float, bf16 or fp16 for the activations and weight, fp32
// arithmetic, rstd and dweight; of whole rows, or of rows split over a group whose statistics
// (sums of squares, backward's dot products) come summed from outside, with kernels for a share.
// One warp per row (8 rows per block): forward sums x^2, then writes out = x * rstd * weight and
// rstd = 1 / sqrtf(mean(x^2) + eps) (correctly rounded sqrt and division, as the CPU's
// 1.0f / std::sqrt). Backward writes (or adds to) dx per row, then adds dweight (fp32) as a
// deterministic column sum (column_sums.cuh):
//   dx = rstd * (dnorm - xhat * mean(dnorm * xhat)),  xhat = x * rstd, dnorm = dout * weight
//   dweight += sum_n dout * xhat.
// The fused residual_rmsnorm_forward writes r = a + b (rounded to T) and normalises the rounded r
// in the same kernel: the same bits as residual_forward then rmsnorm_forward.
// Each lane takes W consecutive channels at a time: 16 bytes for bf16 and fp16 rows when C and the
// pointers allow, else 1; fp32 rows always use W = 1 (as layernorm.cu).
#include "ops/cuda/column_sums.cuh"
#include "ops/cuda/cuda_common.cuh"
#include "ops/cuda/rmsnorm_cuda.h"
#include "ops/cuda/vector_io.cuh"
#include "ops/cuda/warp_rows.cuh"

namespace tessera::cuda {
namespace {


// --- kernels ---

// Given the row's sum of squares over its `width` channels, finishes rstd, writes
// out_n = x_n * rstd * weight over its C channels here and, from lane 0, rstd[n].
template <typename T, int W>
__device__ void rmsnorm_finish_row(T* out_n, float* rstd, const T* x_n, const T* weight, int64_t n, int64_t C,
                                   float eps, float sum_sq, float width) {
  const int lane = threadIdx.x % kWarpSize;
  const float s = 1.0f / sqrtf(sum_sq / width + eps);
  for (int64_t c = lane * W; c < C; c += kWarpSize * W) {
    float v[W], w[W];
    load_f32_vec(v, x_n + c);
    load_f32_vec(w, weight + c);
#pragma unroll
    for (int k = 0; k < W; k++) v[k] = v[k] * s * w[k];
    store_f32_vec(out_n + c, v);
  }
  if (lane == 0) rstd[n] = s;
}

// `sums`: the group's sums of squares of rows of `width` channels, or null (whole rows of C).
template <typename T, int W>
__global__ void rmsnorm_forward_kernel(T* out, float* rstd, const T* x, const T* weight, int64_t N, int64_t C,
                                       float eps, const float* sums, int64_t width) {
  const int64_t n = warp_row();
  if (n >= N) return;  // a whole warp leaves together
  const T* x_n = x + n * C;  // (C)
  const float sum_sq = sums ? sums[n] : warp_sum(row_lane_sum<W>(x_n, C, [](float v) { return v * v; }));
  rmsnorm_finish_row<T, W>(out + n * C, rstd, x_n, weight, n, C, eps, sum_sq, float(sums ? width : C));
}

// A grouped row's share of its sum of squares: sums[n] = Σ x_n².
template <typename T, int W>
__global__ void rmsnorm_partial_sums_kernel(float* sums, const T* x, int64_t N, int64_t C) {
  const int64_t n = warp_row();
  if (n >= N) return;
  const float sum_sq = warp_sum(row_lane_sum<W>(x + n * C, C, [](float v) { return v * v; }));
  if (threadIdx.x % kWarpSize == 0) sums[n] = sum_sq;
}

// r = a + b rounded to T, then RMSNorm of r. Each lane reads back only the channels it wrote, so
// no barrier is needed between the passes.
template <typename T, int W>
__global__ void residual_rmsnorm_forward_kernel(T* residual_out, T* out, float* rstd, const T* a, const T* b,
                                                const T* weight, int64_t N, int64_t C, float eps) {
  const int64_t n = warp_row();
  if (n >= N) return;
  T* r_n = residual_out + n * C;  // (C)
  const float sum_sq = add_row_rounded<T, W>(r_n, a + n * C, b + n * C, C, [](float r) { return r * r; });
  rmsnorm_finish_row<T, W>(out + n * C, rstd, r_n, weight, n, C, eps, warp_sum(sum_sq), float(C));
}

// This lane's share of Σ dout·weight·xhat over the row's C channels.
template <typename T, int W>
__device__ float lane_dnorm_xhat_sum(const T* dout_n, const T* x_n, const T* weight, float s, int64_t C) {
  const int lane = threadIdx.x % kWarpSize;
  float sum = 0.0f;
  for (int64_t c = lane * W; c < C; c += kWarpSize * W) {
    float d[W], v[W], w[W];
    load_f32_vec(d, dout_n + c);
    load_f32_vec(v, x_n + c);
    load_f32_vec(w, weight + c);
#pragma unroll
    for (int k = 0; k < W; k++) sum += d[k] * w[k] * (v[k] * s);
  }
  return sum;
}

// `dots`: the group's Σ dout·weight·xhat of rows of `width` channels, or null (whole rows of C).
template <typename T, int W>
__global__ void rmsnorm_backward_dx_kernel(T* dx, const T* dout, const T* x, const T* weight, const float* rstd,
                                           int64_t N, int64_t C, bool add_to_dx, const float* dots, int64_t width) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t n = warp_row();
  if (n >= N) return;
  const T* dout_n = dout + n * C;  // (C)
  const T* x_n = x + n * C;        // (C)
  T* dx_n = dx + n * C;            // (C)
  const float s = rstd[n];
  const float dnorm_xhat_sum = dots ? dots[n] : warp_sum(lane_dnorm_xhat_sum<T, W>(dout_n, x_n, weight, s, C));
  const float dnorm_xhat_mean = dnorm_xhat_sum / float(dots ? width : C);
  for (int64_t c = lane * W; c < C; c += kWarpSize * W) {
    float d[W], v[W], w[W], old[W] = {};
    load_f32_vec(d, dout_n + c);
    load_f32_vec(v, x_n + c);
    load_f32_vec(w, weight + c);
    if (add_to_dx) load_f32_vec(old, dx_n + c);
#pragma unroll
    for (int k = 0; k < W; k++) v[k] = old[k] + s * (d[k] * w[k] - v[k] * s * dnorm_xhat_mean);
    store_f32_vec(dx_n + c, v);
  }
}

// A grouped row's share of its backward statistic: dots[n] = Σ dout·weight·xhat.
template <typename T, int W>
__global__ void rmsnorm_partial_dots_kernel(float* dots, const T* dout, const T* x, const T* weight,
                                            const float* rstd, int64_t N, int64_t C) {
  const int64_t n = warp_row();
  if (n >= N) return;
  const float sum = warp_sum(lane_dnorm_xhat_sum<T, W>(dout + n * C, x + n * C, weight, rstd[n], C));
  if (threadIdx.x % kWarpSize == 0) dots[n] = sum;
}

// dout * xhat at (n, c): the term of dweight.
template <typename T>
struct RmsNormParamGradLoad {
  const T* dout;
  const T* x;
  const float* rstd;
  int64_t C;
  __device__ void operator()(int64_t n, int64_t c, float (&v)[1]) const {
    v[0] = load_f32(dout[n * C + c]) * (load_f32(x[n * C + c]) * rstd[n]);
  }
};

}  // namespace

// --- launchers ---

template <typename T>
void rmsnorm_forward(T* out, float* rstd, const T* x, const T* weight, int64_t N, int64_t C, float eps,
                     cudaStream_t stream, const float* sums, int64_t width) {
  if (N == 0) return;
  if (vector_rows<T>(C, {out, x, weight}))
    rmsnorm_forward_kernel<T, kRowVec<T>>
        <<<row_blocks(N), kRowThreads, 0, stream>>>(out, rstd, x, weight, N, C, eps, sums, width);
  else
    rmsnorm_forward_kernel<T, 1>
        <<<row_blocks(N), kRowThreads, 0, stream>>>(out, rstd, x, weight, N, C, eps, sums, width);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void rmsnorm_partial_sums(float* sums, const T* x, int64_t N, int64_t C, cudaStream_t stream) {
  if (N == 0) return;
  if (vector_rows<T>(C, {x}))
    rmsnorm_partial_sums_kernel<T, kRowVec<T>><<<row_blocks(N), kRowThreads, 0, stream>>>(sums, x, N, C);
  else
    rmsnorm_partial_sums_kernel<T, 1><<<row_blocks(N), kRowThreads, 0, stream>>>(sums, x, N, C);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void rmsnorm_partial_dots(float* dots, const T* dout, const T* x, const T* weight, const float* rstd, int64_t N,
                          int64_t C, cudaStream_t stream) {
  if (N == 0) return;
  if (vector_rows<T>(C, {dout, x, weight}))
    rmsnorm_partial_dots_kernel<T, kRowVec<T>>
        <<<row_blocks(N), kRowThreads, 0, stream>>>(dots, dout, x, weight, rstd, N, C);
  else
    rmsnorm_partial_dots_kernel<T, 1><<<row_blocks(N), kRowThreads, 0, stream>>>(dots, dout, x, weight, rstd, N, C);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void residual_rmsnorm_forward(T* residual_out, T* out, float* rstd, const T* a, const T* b, const T* weight,
                              int64_t N, int64_t C, float eps, cudaStream_t stream) {
  if (N == 0) return;
  if (vector_rows<T>(C, {residual_out, out, a, b, weight}))
    residual_rmsnorm_forward_kernel<T, kRowVec<T>><<<row_blocks(N), kRowThreads, 0, stream>>>(
        residual_out, out, rstd, a, b, weight, N, C, eps);
  else
    residual_rmsnorm_forward_kernel<T, 1><<<row_blocks(N), kRowThreads, 0, stream>>>(residual_out, out, rstd, a, b,
                                                                                     weight, N, C, eps);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void rmsnorm_backward(T* dx, float* dweight, const T* dout, const T* x, const T* weight, const float* rstd,
                      int64_t N, int64_t C, bool add_to_dx, cudaStream_t stream, const float* dots, int64_t width) {
  if (N == 0) return;
  if (vector_rows<T>(C, {dx, dout, x, weight}))
    rmsnorm_backward_dx_kernel<T, kRowVec<T>>
        <<<row_blocks(N), kRowThreads, 0, stream>>>(dx, dout, x, weight, rstd, N, C, add_to_dx, dots, width);
  else
    rmsnorm_backward_dx_kernel<T, 1>
        <<<row_blocks(N), kRowThreads, 0, stream>>>(dx, dout, x, weight, rstd, N, C, add_to_dx, dots, width);
  CUDA_CHECK_LAUNCH();
  column_sums_accumulate<1>(ColumnOutputs<1>{{dweight}}, N, C, RmsNormParamGradLoad<T>{dout, x, rstd, C}, stream);
}

#define INSTANTIATE(T)                                                                                          \
  template void rmsnorm_forward<T>(T*, float*, const T*, const T*, int64_t, int64_t, float, cudaStream_t,       \
                                   const float*, int64_t);                                                      \
  template void residual_rmsnorm_forward<T>(T*, T*, float*, const T*, const T*, const T*, int64_t, int64_t,     \
                                            float, cudaStream_t);                                               \
  template void rmsnorm_backward<T>(T*, float*, const T*, const T*, const T*, const float*, int64_t, int64_t,   \
                                    bool, cudaStream_t, const float*, int64_t);                                 \
  template void rmsnorm_partial_sums<T>(float*, const T*, int64_t, int64_t, cudaStream_t);                      \
  template void rmsnorm_partial_dots<T>(float*, const T*, const T*, const T*, const float*, int64_t, int64_t,   \
                                        cudaStream_t);
TS_FOR_EACH_STORAGE_TYPE(INSTANTIATE)

}  // namespace tessera::cuda
