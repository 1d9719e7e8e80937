// The linear layer on the GPU through cuBLASLt, fp32 operands with fp32 compute (no TF32, so the
// result holds to the CPU's). Row-major (N,C) is column-major (C,N), so every product is written
// for cuBLAS's column-major view:
//   forward:  out^T (OC,N) = W^T' (OC,C) x^T (C,N) + bias   (bias fused as the BIAS epilogue)
//   dx:       dx^T  (C,N)  = W (C,OC)^col dout^T (OC,N)      beta = 0: written
//   dweight:  dW^T  (C,OC) = x^T (C,N) dout (N,OC)           beta = 1: accumulated
//   dbias:    dbias (OC)  += sum_n dout[n,:]                 deterministic column sums
// The heuristic is told each pointer's real alignment: parameter views sit at any offset.
#include <mutex>

#include "core/cuda/device.h"
#include "ops/cuda/column_sums.cuh"
#include "ops/cuda/cuda_common.cuh"
#include "ops/cuda/matmul_cuda.h"

namespace tessera::cuda {
namespace {

constexpr size_t kWorkspaceBytes = size_t(32) << 20;

struct LtContext {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
};

// One handle and one workspace per process, made on first use and kept (the workspace is only
// used on the compute stream, in order).
const LtContext& lt_context() {
  static const LtContext ctx = [] {
    LtContext c;
    CUBLAS_CHECK(cublasLtCreate(&c.handle));
    c.workspace = device_allocate(kWorkspaceBytes);
    return c;
  }();
  return ctx;
}

// The largest power of two (up to 256) dividing the address: what cuBLASLt may assume.
uint32_t alignment_of(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  uint32_t align = 256;
  while (align > 4 && address % align != 0) align /= 2;
  return align;
}

// Owns the descriptors of one call, so an error midway frees them.
struct LtCall {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~LtCall() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

// D (m,n) = op(A) op(B) + beta D (+ bias (m) broadcast over columns), column-major, fp32.
// op(A) is (m,k): A is stored (k,m) when trans_a, else (m,k); likewise op(B) (k,n).
void lt_matmul(float* D, const float* A, const float* B, const float* bias, int64_t m, int64_t n, int64_t k,
               bool trans_a, bool trans_b, int64_t lda, int64_t ldb, int64_t ldd, float beta, cudaStream_t stream) {
  const LtContext& ctx = lt_context();
  LtCall call;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&call.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(call.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(call.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
  if (bias != nullptr) {
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(call.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(call.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  }
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&call.a, CUDA_R_32F, trans_a ? k : m, trans_a ? m : k, lda));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&call.b, CUDA_R_32F, trans_b ? n : k, trans_b ? k : n, ldb));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&call.d, CUDA_R_32F, m, n, ldd));

  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&call.pref));
  const size_t workspace = kWorkspaceBytes;
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(call.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                                    sizeof(workspace)));
  const uint32_t align_a = alignment_of(A), align_b = alignment_of(B), align_d = alignment_of(D);
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(call.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a,
                                                    sizeof(align_a)));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(call.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b,
                                                    sizeof(align_b)));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(call.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_d,
                                                    sizeof(align_d)));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(call.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_d,
                                                    sizeof(align_d)));

  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(ctx.handle, call.desc, call.a, call.b, call.d, call.d, call.pref, 1,
                                              &heuristic, &found));
  TS_CHECK(found > 0, "matmul: cuBLASLt has no fp32 algorithm for m=", m, " n=", n, " k=", k,
           bias ? " with a bias epilogue" : "", " at alignments ", align_a, "/", align_b, "/", align_d, " bytes");
  const float alpha = 1.0f;
  CUBLAS_CHECK(cublasLtMatmul(ctx.handle, call.desc, &alpha, A, call.a, B, call.b, &beta, D, call.d, D, call.d,
                              &heuristic.algo, ctx.workspace, kWorkspaceBytes, stream));
}

// dout at (n, c): the term of dbias.
struct BiasGradLoad {
  const float* dout;
  int64_t OC;
  __device__ void operator()(int64_t n, int64_t c, float (&v)[1]) const { v[0] = dout[n * OC + c]; }
};

}  // namespace

// --- launchers ---

void matmul_forward(float* out, const float* x, const float* weight, const float* bias, int64_t N, int64_t C,
                    int64_t OC, cudaStream_t stream) {
  if (N == 0) return;
  // out^T (OC,N) = (weight stored (C,OC) column-major, transposed) x^T (C,N).
  lt_matmul(out, weight, x, bias, OC, N, C, /*trans_a=*/true, /*trans_b=*/false, C, C, OC, 0.0f, stream);
}

void matmul_backward(float* dx, float* dweight, float* dbias, const float* dout, const float* x,
                     const float* weight, int64_t N, int64_t C, int64_t OC, cudaStream_t stream) {
  if (N == 0) return;
  // dx^T (C,N) = weight (C,OC column-major) dout^T (OC,N).
  if (dx != nullptr) lt_matmul(dx, weight, dout, nullptr, C, N, OC, false, false, C, OC, C, 0.0f, stream);
  // dweight^T (C,OC) += x^T (C,N) (dout^T (OC,N))^T.
  lt_matmul(dweight, x, dout, nullptr, C, OC, N, false, true, C, OC, C, 1.0f, stream);
  if (dbias != nullptr) column_sums_accumulate<1>(ColumnOutputs<1>{{dbias}}, N, OC, BiasGradLoad{dout, OC}, stream);
}

}  // namespace tessera::cuda
