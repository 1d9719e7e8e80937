// RoPE on the GPU, in place on the q and k heads of qkv (B, T, (NH+2NKV)*HS), storage S = float,
// bf16 or fp16, fp32 arithmetic. One thread per (b, t, W frequencies i): it takes cos and sin of
// a = positions[t] * inv_freq[i] in double and rounds each once to fp32, as the CPU's table does
// (fp64 sincos here, glibc there: both within 2 double ulp, so the fp32 values agree but for
// ties closer than that), then rotates the pairs (x[i], x[i + HS/2]) of its token's NH + NKV
// heads (of each head's last R channels: R = HS but for DeepSeek's latent attention, which rotates a
// tail), one load and one store per element; cos and sin are multiplied by `rotated` and the q heads'
// outputs by `query` (ops/rope.h's RopeScales), a q head's channels before its tail by a second kernel. Backward rotates by -a (sin negated, exact).
// Computing the angles in the kernel needs no host copy of the positions (they live on the GPU)
// and no table; the fp64 cost is one sincos per W pairs per token, shared by NH + NKV heads.
// W = kVec<S> (16 bytes) when R/2 and HS - R are multiples of it and qkv is 16-byte aligned, else 1; the
// result of an element does not depend on W. Positions are not checked here (the CPU path
// refuses negative ones); a negative one simply rotates by a negative angle.
#include "ops/cuda/cuda_common.cuh"
#include "ops/cuda/rope_cuda.h"
#include "ops/cuda/vector_io.cuh"

namespace tessera::cuda {
namespace {

constexpr int kBlock = 256;

// --- kernels ---

// sign +1 rotates by +a (forward), -1 by -a (backward). Thread index = (b*T + t) * (R/2/W) + i/W.
template <typename S, int W>
__global__ void rope_rotate_kernel(S* qkv, const int32_t* positions, const float* inv_freq, int64_t B, int64_t T,
                                   int64_t NH, int64_t NKV, int64_t HS, int64_t R, float rotated, float query,
                                   double sign) {
  const int64_t half = R / 2, groups = half / W;
  const int64_t g = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (g >= B * T * groups) return;
  const int64_t token = g / groups, i = (g % groups) * W, t = token % T;
  float c[W], s[W];
#pragma unroll
  for (int k = 0; k < W; k++) {
    double sin_a, cos_a;
    sincos(double(positions[t]) * double(inv_freq[i + k]), &sin_a, &cos_a);
    c[k] = float(cos_a) * rotated;
    s[k] = float(sign * sin_a) * rotated;
  }
  S* x = qkv + token * (NH + 2 * NKV) * HS + (HS - R) + i;  // channel i of the token's first head's tail
  for (int64_t h = 0; h < NH + NKV; h++) {  // q then k: the first NH + NKV heads of the row
    const float scale = h < NH ? query : 1.0f;
    S* lo = x + h * HS;  // (W)
    S* hi = lo + half;   // (W)
    float a[W], b[W], out_lo[W], out_hi[W];
    load_f32_vec(a, lo);
    load_f32_vec(b, hi);
#pragma unroll
    for (int k = 0; k < W; k++) {
      out_lo[k] = (a[k] * c[k] - b[k] * s[k]) * scale;
      out_hi[k] = (b[k] * c[k] + a[k] * s[k]) * scale;
    }
    store_f32_vec(lo, out_lo);
    store_f32_vec(hi, out_hi);
  }
}

// The q heads' channels before their rotated tails times `query`: one thread per (token, q head, channel).
template <typename S>
__global__ void scale_query_heads_kernel(S* qkv, int64_t tokens, int64_t NH, int64_t NKV, int64_t HS, int64_t R,
                                         float query) {
  const int64_t lead = HS - R, g = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (g >= tokens * NH * lead) return;
  const int64_t token = g / (NH * lead), h = g / lead % NH, c = g % lead;
  S* x = qkv + token * (NH + 2 * NKV) * HS + h * HS + c;
  float v[1];
  load_f32_vec(v, x);
  v[0] *= query;
  store_f32_vec(x, v);
}

template <typename S>
void rope_rotate(S* qkv, const int32_t* positions, const float* inv_freq, int64_t B, int64_t T, int64_t NH,
                 int64_t NKV, int64_t HS, int64_t R, float rotated, float query, double sign,
                 cudaStream_t stream) {
  if (B * T == 0) return;
  const int64_t half = R / 2;
  if (half % kVec<S> == 0 && (HS - R) % kVec<S> == 0 && is_aligned16(qkv)) {
    const unsigned blocks = unsigned(ceil_div(B * T * (half / kVec<S>), kBlock));
    rope_rotate_kernel<S, kVec<S>>
        <<<blocks, kBlock, 0, stream>>>(qkv, positions, inv_freq, B, T, NH, NKV, HS, R, rotated, query, sign);
  } else {
    const unsigned blocks = unsigned(ceil_div(B * T * half, kBlock));
    rope_rotate_kernel<S, 1>
        <<<blocks, kBlock, 0, stream>>>(qkv, positions, inv_freq, B, T, NH, NKV, HS, R, rotated, query, sign);
  }
  CUDA_CHECK_LAUNCH();
  if (query == 1.0f || R == HS) return;
  const unsigned blocks = unsigned(ceil_div(B * T * NH * (HS - R), kBlock));
  scale_query_heads_kernel<S><<<blocks, kBlock, 0, stream>>>(qkv, B * T, NH, NKV, HS, R, query);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

// --- launchers ---

template <typename S>
void rope_forward(S* qkv, const int32_t* positions, const float* inv_freq, int64_t B, int64_t T, int64_t NH,
                  int64_t NKV, int64_t HS, int64_t R, float rotated, float query, cudaStream_t stream) {
  rope_rotate(qkv, positions, inv_freq, B, T, NH, NKV, HS, R, rotated, query, 1.0, stream);
}

template <typename S>
void rope_backward(S* dqkv, const int32_t* positions, const float* inv_freq, int64_t B, int64_t T, int64_t NH,
                   int64_t NKV, int64_t HS, int64_t R, float rotated, float query, cudaStream_t stream) {
  rope_rotate(dqkv, positions, inv_freq, B, T, NH, NKV, HS, R, rotated, query, -1.0, stream);
}

#define INSTANTIATE(S)                                                                                        \
  template void rope_forward<S>(S*, const int32_t*, const float*, int64_t, int64_t, int64_t, int64_t, int64_t, \
                                int64_t, float, float, cudaStream_t);                                         \
  template void rope_backward<S>(S*, const int32_t*, const float*, int64_t, int64_t, int64_t, int64_t, int64_t, \
                                 int64_t, float, float, cudaStream_t);
TS_FOR_EACH_STORAGE_TYPE(INSTANTIATE)

}  // namespace tessera::cuda
