// LayerNorm on the GPU, fp32, eps = 1e-5. One warp per row (8 rows per block): forward takes the
// mean, then the variance around it (two passes over the row, as the CPU does), then writes out,
// mean and rstd. Backward writes dx per row the same way, then adds dweight and dbias as
// deterministic column sums (column_sums.cuh):
//   dx = rstd * (dnorm - mean(dnorm) - xhat * mean(dnorm * xhat)),  dnorm = dout * weight
//   dweight += sum_n dout * xhat;  dbias += sum_n dout.
#include "ops/cuda/column_sums.cuh"
#include "ops/cuda/cuda_common.cuh"
#include "ops/cuda/layernorm_cuda.h"

namespace tessera::cuda {
namespace {

constexpr int kRowsPerBlock = 8;
constexpr float kEps = 1e-5f;

// --- kernels ---

__global__ void layernorm_forward_kernel(float* out, float* mean, float* rstd, const float* x, const float* weight,
                                         const float* bias, int64_t N, int64_t C) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t n = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarpSize;
  if (n >= N) return;  // a whole warp leaves together
  const float* x_n = x + n * C;  // (C)
  float* out_n = out + n * C;    // (C)
  float sum = 0.0f;
  for (int64_t c = lane; c < C; c += kWarpSize) sum += x_n[c];
  const float m = warp_sum(sum) / float(C);
  float var = 0.0f;
  for (int64_t c = lane; c < C; c += kWarpSize) var += (x_n[c] - m) * (x_n[c] - m);
  const float s = rsqrtf(warp_sum(var) / float(C) + kEps);
  for (int64_t c = lane; c < C; c += kWarpSize) out_n[c] = (x_n[c] - m) * s * weight[c] + bias[c];
  if (lane == 0) {
    mean[n] = m;
    rstd[n] = s;
  }
}

__global__ void layernorm_backward_dx_kernel(float* dx, const float* dout, const float* x, const float* weight,
                                             const float* mean, const float* rstd, int64_t N, int64_t C) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t n = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarpSize;
  if (n >= N) return;
  const float* dout_n = dout + n * C;  // (C)
  const float* x_n = x + n * C;        // (C)
  float* dx_n = dx + n * C;            // (C)
  const float m = mean[n], s = rstd[n];
  float dnorm_sum = 0.0f, dnorm_xhat_sum = 0.0f;
  for (int64_t c = lane; c < C; c += kWarpSize) {
    const float dnorm = dout_n[c] * weight[c];
    dnorm_sum += dnorm;
    dnorm_xhat_sum += dnorm * (x_n[c] - m) * s;
  }
  const float dnorm_mean = warp_sum(dnorm_sum) / float(C);
  const float dnorm_xhat_mean = warp_sum(dnorm_xhat_sum) / float(C);
  for (int64_t c = lane; c < C; c += kWarpSize) {
    const float xhat = (x_n[c] - m) * s;
    dx_n[c] = s * (dout_n[c] * weight[c] - dnorm_mean - xhat * dnorm_xhat_mean);
  }
}

// (dout * xhat, dout) at (n, c): the terms of dweight and dbias.
struct LayerNormParamGradLoad {
  const float* dout;
  const float* x;
  const float* mean;
  const float* rstd;
  int64_t C;
  __device__ void operator()(int64_t n, int64_t c, float (&v)[2]) const {
    const float d = dout[n * C + c];
    v[0] = d * (x[n * C + c] - mean[n]) * rstd[n];
    v[1] = d;
  }
};

}  // namespace

// --- launchers ---

void layernorm_forward(float* out, float* mean, float* rstd, const float* x, const float* weight, const float* bias,
                       int64_t N, int64_t C, cudaStream_t stream) {
  if (N == 0) return;
  layernorm_forward_kernel<<<ceil_div(N, kRowsPerBlock), kRowsPerBlock * kWarpSize, 0, stream>>>(
      out, mean, rstd, x, weight, bias, N, C);
  CUDA_CHECK_LAUNCH();
}

void layernorm_backward(float* dx, float* dweight, float* dbias, const float* dout, const float* x,
                        const float* weight, const float* mean, const float* rstd, int64_t N, int64_t C,
                        cudaStream_t stream) {
  if (N == 0) return;
  layernorm_backward_dx_kernel<<<ceil_div(N, kRowsPerBlock), kRowsPerBlock * kWarpSize, 0, stream>>>(
      dx, dout, x, weight, mean, rstd, N, C);
  CUDA_CHECK_LAUNCH();
  column_sums_accumulate<2>(ColumnOutputs<2>{{dweight, dbias}}, N, C, LayerNormParamGradLoad{dout, x, mean, rstd, C},
                            stream);
}

}  // namespace tessera::cuda
