// The linear layer on the GPU through cuBLASLt: activations and weights in T (fp32, bf16 or
// fp16), fp32
// compute (CUBLAS_COMPUTE_32F: no TF32, so fp32 holds to the CPU), parameter gradients fp32.
// Row-major (N,C) is column-major (C,N), so every product is written for cuBLAS's column-major view:
//   forward:  out^T (OC,N) = W^T' (OC,C) x^T (C,N) + bias   BIAS, or GELU_AUX_BIAS (aux = pre_gelu)
//   dx:       dx^T  (C,N)  = W (C,OC)^col dout^T (OC,N)      beta = 0: written; DGELU (aux = x_pre_gelu)
//   dweight:  dW^T  (C,OC) = x^T (C,N) dout (N,OC)           A/B in T, C/D fp32, beta = 1: accumulated
//   dbias:    dbias (OC)  += sum_n dout[n,:]                 column sums (column_sums.cuh), 16-byte loads
// Each problem's descriptors and algorithm are made once and cached (the heuristic sees each
// pointer's real alignment, which is part of the key: parameter views sit at any offset), in a hash
// map large enough for the experts' GEMMs, whose row counts change every step. The algorithm is the
// heuristic's first candidate, or with set_matmul_tuning(n > 1) the fastest of its first n, timed on
// the problem's first call (the first kMaxTunedProblems problems; later ones take the first). Calls
// with MatmulAlgoChoice::row_buckets (the experts') take the algorithm the heuristic gave their row
// bucket's largest shape, asked once per bucket, where cublasLtMatmulAlgoCheck accepts it.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "core/cuda/device.h"
#include "ops/cuda/column_sums.cuh"
#include "ops/cuda/cuda_common.cuh"
#include "ops/cuda/matmul_cuda.h"

namespace tessera::cuda {
namespace {

constexpr size_t kWorkspaceBytes = size_t(kMatmulWorkspaceBytes);
constexpr size_t kMaxPlans = 16384;                   // GPT-2 needs ~12; MoE's varying row counts many more
constexpr int64_t kGeluAuxLdMultiple = 8;              // cublasLt.h, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD
constexpr size_t kMaxTunedProblems = 64;  // MoE's experts see new row counts every step: those are not timed
constexpr int kTimedRuns = 3;             // per candidate, after one untimed run

template <typename T>
constexpr cudaDataType_t kDataType = std::is_same_v<T, float>           ? CUDA_R_32F
                                     : std::is_same_v<T, __nv_bfloat16> ? CUDA_R_16BF
                                                                        : CUDA_R_16F;

struct LtContext {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
};

// One handle and one workspace per process, made on first use and kept (the workspace is only
// used on the compute stream, in order).
const LtContext& lt_context() {
  static const LtContext ctx = [] {
    LtContext c;
    CUBLAS_CHECK(cublaslt().Create(&c.handle));
    c.workspace = device_allocate(kWorkspaceBytes);
    return c;
  }();
  return ctx;
}

// The largest power of two (2 to 256) dividing the address: what cuBLASLt may assume. Null (an
// unused bias or aux) counts as 256.
uint32_t alignment_of(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  uint32_t align = 256;
  while (align > 2 && address % align != 0) align /= 2;
  return align;
}

const char* type_name(cudaDataType_t t) { return t == CUDA_R_32F ? "f32" : t == CUDA_R_16BF ? "bf16" : "f16"; }
size_t type_bytes(cudaDataType_t t) { return t == CUDA_R_32F ? 4 : 2; }

const char* epilogue_name(cublasLtEpilogue_t e) {
  switch (e) {
    case CUBLASLT_EPILOGUE_BIAS: return "BIAS";
    case CUBLASLT_EPILOGUE_GELU_AUX: return "GELU_AUX";
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS: return "GELU_AUX_BIAS";
    case CUBLASLT_EPILOGUE_DGELU: return "DGELU";
    default: return "DEFAULT";
  }
}

// The bias pointer, read by BIAS and GELU_AUX_BIAS.
bool uses_bias(cublasLtEpilogue_t e) { return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS; }
bool uses_aux(cublasLtEpilogue_t e) {
  return e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || e == CUBLASLT_EPILOGUE_DGELU;
}

// One problem, column-major: D (m,n) = op(A) op(B) [+ beta D], op(A) (m,k) stored (k,m) when
// trans_a, op(B) (k,n) stored (n,k) when trans_b. Everything the heuristic sees: the cache key.
struct LtProblem {
  int64_t m, n, k, lda, ldb, ldd;
  bool trans_a, trans_b;
  cudaDataType_t ab_type, d_type;  // C = D (same layout and type)
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  int64_t aux_ld = 0;  // the GELU epilogues' aux matrix is (m,n) with this leading dimension
  uint32_t align_a = 0, align_b = 0, align_d = 0, align_bias = 0, align_aux = 0;
  bool operator==(const LtProblem&) const = default;
};

// A member of LtProblem: the dimension (n or k) that counts token rows.
using RowDimension = int64_t LtProblem::*;

struct LtProblemHash {
  size_t operator()(const LtProblem& p) const {
    size_t h = 0;
    auto mix = [&h](int64_t v) { h ^= std::hash<int64_t>{}(v) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2); };
    for (const int64_t v : {p.m, p.n, p.k, p.lda, p.ldb, p.ldd, p.aux_ld}) mix(v);
    for (const int64_t v : {int64_t(p.trans_a), int64_t(p.trans_b), int64_t(p.ab_type), int64_t(p.d_type),
                            int64_t(p.epilogue), int64_t(p.align_a), int64_t(p.align_b), int64_t(p.align_d),
                            int64_t(p.align_bias), int64_t(p.align_aux)})
      mix(v);
    return h;
  }
};

// The pointers of one call. bias (m) in d_type is read by the BIAS epilogues; aux is written by
// GELU_AUX (pre-GELU values) and read by DGELU.
struct LtOperands {
  void* D;
  const void* A;
  const void* B;
  const void* bias = nullptr;
  const void* aux = nullptr;
  float beta = 0.0f;
};

// A problem's descriptors and the heuristic's algorithm; only bias/aux pointers change per call.
struct LtPlan {
  LtProblem problem{};
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  LtPlan() = default;
  LtPlan(const LtPlan&) = delete;
  LtPlan& operator=(const LtPlan&) = delete;
  ~LtPlan() {
    if (d) cublaslt().MatrixLayoutDestroy(d);
    if (b) cublaslt().MatrixLayoutDestroy(b);
    if (a) cublaslt().MatrixLayoutDestroy(a);
    if (desc) cublaslt().MatmulDescDestroy(desc);
  }
};

// Plans by problem, and their problems oldest first (evicted first beyond kMaxPlans); the mutex also
// covers setting a plan's pointers and queueing its matmul, so two host threads never interleave on
// one descriptor. All matmuls run on the compute stream in order, and cublasLtMatmul reads the
// descriptor when it queues, so re-pointing a plan for the next call (or evicting it) never affects a
// queued one.
struct LtPlanCache {
  std::mutex mutex;
  std::unordered_map<LtProblem, std::unique_ptr<LtPlan>, LtProblemHash> plans;
  std::deque<LtProblem> age;
  int64_t hits = 0, misses = 0, heuristic_queries = 0;
  std::vector<MatmulTuningRecord> tuned;  // every problem timed, in order
  // The algorithm of each row bucket's problem (bucket_problem), none where the heuristic had none; a few
  // per expert weight shape.
  std::unordered_map<LtProblem, std::optional<cublasLtMatmulAlgo_t>, LtProblemHash> bucket_algos;
};

std::atomic<int> tuning_candidates{1};

// The heuristic's candidates, best first (a plain array: nvcc 13 fails on a std::vector of this type).
struct LtCandidates {
  cublasLtMatmulAlgo_t algo[kMaxMatmulTuning];
  int count = 0;
};

LtPlanCache& plan_cache() {
  static LtPlanCache cache;
  return cache;
}

void set_pointers(const LtPlan& plan, const LtOperands& ops) {
  if (uses_bias(plan.problem.epilogue))
    CUBLAS_CHECK(
        cublaslt().MatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &ops.bias, sizeof(ops.bias)));
  if (uses_aux(plan.problem.epilogue))
    CUBLAS_CHECK(cublaslt().MatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &ops.aux,
                                                   sizeof(ops.aux)));
}

void set_min_alignment(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr, uint32_t align) {
  CUBLAS_CHECK(cublaslt().MatmulPreferenceSetAttribute(pref, attr, &align, sizeof(align)));
}

std::string problem_text(const LtProblem& p) {
  return "m=" + std::to_string(p.m) + " n=" + std::to_string(p.n) + " k=" + std::to_string(p.k) + " " +
         epilogue_name(p.epilogue) + ", A/B " + type_name(p.ab_type) + ", D " + type_name(p.d_type) +
         (p.trans_a ? ", A transposed" : "") + (p.trans_b ? ", B transposed" : "");
}

// The descriptors of problem p, with no algorithm yet; `ops` supplies the bias/aux pointers.
std::unique_ptr<LtPlan> make_descriptors(const LtProblem& p, const LtOperands& ops) {
  auto plan = std::make_unique<LtPlan>();
  plan->problem = p;
  CUBLAS_CHECK(cublaslt().MatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t op_a = p.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = p.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  CUBLAS_CHECK(cublaslt().MatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
  CUBLAS_CHECK(cublaslt().MatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
  CUBLAS_CHECK(
      cublaslt().MatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &p.epilogue, sizeof(p.epilogue)));
  if (uses_aux(p.epilogue))  // aux type: D's by default, which is what we store pre_gelu in
    CUBLAS_CHECK(cublaslt().MatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &p.aux_ld,
                                                   sizeof(p.aux_ld)));
  set_pointers(*plan, ops);
  CUBLAS_CHECK(cublaslt().MatrixLayoutCreate(&plan->a, p.ab_type, p.trans_a ? p.k : p.m, p.trans_a ? p.m : p.k, p.lda));
  CUBLAS_CHECK(cublaslt().MatrixLayoutCreate(&plan->b, p.ab_type, p.trans_b ? p.n : p.k, p.trans_b ? p.k : p.n, p.ldb));
  CUBLAS_CHECK(cublaslt().MatrixLayoutCreate(&plan->d, p.d_type, p.m, p.n, p.ldd));
  return plan;
}

// Asks the heuristic once for up to `count` candidates for the plan's problem, best first (at the
// problem's alignments); returns how many it gave.
int heuristic_candidates(LtPlanCache& cache, const LtPlan& plan, int count, LtCandidates& candidates) {
  const LtProblem& p = plan.problem;
  cublasLtMatmulPreference_t pref = nullptr;
  CUBLAS_CHECK(cublaslt().MatmulPreferenceCreate(&pref));
  const std::unique_ptr<std::remove_pointer_t<cublasLtMatmulPreference_t>, decltype(cublaslt().MatmulPreferenceDestroy)>
      pref_owner(pref, cublaslt().MatmulPreferenceDestroy);
  const size_t workspace = kWorkspaceBytes;
  CUBLAS_CHECK(cublaslt().MatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                                       sizeof(workspace)));
  set_min_alignment(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, p.align_a);
  set_min_alignment(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, p.align_b);
  set_min_alignment(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, p.align_d);
  set_min_alignment(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, p.align_d);

  cublasLtMatmulHeuristicResult_t heuristic[kMaxMatmulTuning] = {};
  int found = 0;
  cache.heuristic_queries++;
  // NOT_SUPPORTED is how the heuristic may say it has nothing for this configuration: no candidates.
  const cublasStatus_t status = cublaslt().MatmulAlgoGetHeuristic(lt_context().handle, plan.desc, plan.a, plan.b,
                                                                  plan.d, plan.d, pref, count, heuristic, &found);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED) found = 0;
  else CUBLAS_CHECK(status);
  candidates.count = 0;
  for (int i = 0; i < found; i++)
    if (heuristic[i].state == CUBLAS_STATUS_SUCCESS) candidates.algo[candidates.count++] = heuristic[i].algo;
  return candidates.count;
}

// The plan's algorithm from the heuristic's first candidate (the candidates kept for tuning); an error
// naming the problem when there is none.
void choose_heuristic_algorithm(LtPlanCache& cache, LtPlan& plan, int count, LtCandidates& candidates) {
  const LtProblem& p = plan.problem;
  if (heuristic_candidates(cache, plan, count, candidates) == 0)
    TS_FAIL("matmul: cuBLASLt has no algorithm for m=", p.m, " n=", p.n, " k=", p.k, " with A/B in ",
            type_name(p.ab_type), ", D in ", type_name(p.d_type), " and the ", epilogue_name(p.epilogue),
            " epilogue at alignments A/B/D/bias/aux ", p.align_a, "/", p.align_b, "/", p.align_d, "/", p.align_bias,
            "/", p.align_aux, " bytes; align the tensors to 16 bytes");
  plan.algo = candidates.algo[0];
}

// The problem whose algorithm serves p's row bucket: its row count (the `rows` dimension, n or k)
// raised to the bucket's largest, and at most 16-byte alignments (all the fast kernels ask for), so
// groups starting at any row share it.
LtProblem bucket_problem(LtProblem p, RowDimension rows) {
  p.*rows = matmul_row_bucket(p.*rows);
  for (uint32_t* align : {&p.align_a, &p.align_b, &p.align_d, &p.align_bias, &p.align_aux})
    *align = std::min<uint32_t>(*align, 16);
  return p;
}

// Gives `plan` its row bucket's algorithm (asking the heuristic for the bucket's problem on its
// first use) when cuBLASLt accepts that algorithm for the plan's own shape within the workspace;
// false, leaving the plan alone, otherwise.
bool take_bucket_algorithm(LtPlanCache& cache, LtPlan& plan, RowDimension rows, const LtOperands& ops) {
  const LtProblem bucket = bucket_problem(plan.problem, rows);
  auto found = cache.bucket_algos.find(bucket);
  if (found == cache.bucket_algos.end()) {  // a bucket the heuristic has nothing for is asked once too
    const std::unique_ptr<LtPlan> largest = make_descriptors(bucket, ops);
    LtCandidates candidates;
    std::optional<cublasLtMatmulAlgo_t> algo;
    if (heuristic_candidates(cache, *largest, 1, candidates) > 0) algo = candidates.algo[0];
    found = cache.bucket_algos.emplace(bucket, algo).first;
  }
  if (!found->second) return false;
  cublasLtMatmulHeuristicResult_t check{};
  if (cublaslt().MatmulAlgoCheck(lt_context().handle, plan.desc, plan.a, plan.b, plan.d, plan.d, &*found->second,
                                 &check) != CUBLAS_STATUS_SUCCESS ||
      check.workspaceSize > kWorkspaceBytes)
    return false;
  plan.algo = *found->second;
  return true;
}

cublasStatus_t queue_matmul(const LtPlan& plan, const cublasLtMatmulAlgo_t& algo, const LtOperands& ops,
                            cudaStream_t stream) {
  const LtContext& ctx = lt_context();
  const float alpha = 1.0f;
  return cublaslt().Matmul(ctx.handle, plan.desc, &alpha, ops.A, plan.a, ops.B, plan.b, &ops.beta, ops.D, plan.d,
                           ops.D, plan.d, &algo, ctx.workspace, kWorkspaceBytes, stream);
}

// Microseconds per call of `algo` on the call's operands: one untimed run, then the mean of
// kTimedRuns; infinity when cuBLASLt refuses the algorithm, at any run. A refusal does not throw:
// tune_plan must get to putting an accumulating call's D back.
float time_candidate(const LtPlan& plan, const cublasLtMatmulAlgo_t& algo, const LtOperands& ops,
                     cudaStream_t stream, cudaEvent_t start, cudaEvent_t stop) {
  if (queue_matmul(plan, algo, ops, stream) != CUBLAS_STATUS_SUCCESS) return INFINITY;
  CUDA_CHECK(cudaEventRecord(start, stream));
  bool refused = false;
  for (int r = 0; r < kTimedRuns && !refused; r++)
    refused = queue_matmul(plan, algo, ops, stream) != CUBLAS_STATUS_SUCCESS;
  CUDA_CHECK(cudaEventRecord(stop, stream));
  CUDA_CHECK(cudaEventSynchronize(stop));
  if (refused) return INFINITY;
  float ms = 0.0f;
  CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  return 1000.0f * ms / float(kTimedRuns);
}

// Times the candidates on the call's own operands and gives the plan the fastest. Every output they
// write is written again by the call that follows (D, GELU's pre-activation), except D of an
// accumulating call (beta != 0), which is saved first and put back.
MatmulTuningRecord tune_plan(LtPlan& plan, const LtCandidates& candidates, const LtOperands& ops,
                             cudaStream_t stream) {
  const LtProblem& p = plan.problem;
  const size_t d_bytes = size_t((p.n - 1) * p.ldd + p.m) * type_bytes(p.d_type);
  std::unique_ptr<DeviceScratch> saved_d;
  if (ops.beta != 0.0f) {
    saved_d = std::make_unique<DeviceScratch>(d_bytes);
    CUDA_CHECK(cudaMemcpyAsync(saved_d->as<void>(), ops.D, d_bytes, cudaMemcpyDeviceToDevice, stream));
  }
  cudaEvent_t start = nullptr, stop = nullptr;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  MatmulTuningRecord record{problem_text(p), candidates.count, 0, 0.0f, INFINITY};
  for (int i = 0; i < candidates.count; i++) {
    const float us = time_candidate(plan, candidates.algo[i], ops, stream, start, stop);
    if (i == 0) record.first_us = us;
    if (us < record.best_us) {
      record.best_us = us;
      record.chosen = i;
    }
  }
  CUDA_CHECK(cudaEventDestroy(start));
  CUDA_CHECK(cudaEventDestroy(stop));
  if (saved_d) {
    CUDA_CHECK(cudaMemcpyAsync(ops.D, saved_d->as<void>(), d_bytes, cudaMemcpyDeviceToDevice, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));  // before the scratch goes back to the allocator
  }
  plan.algo = candidates.algo[record.chosen];
  return record;
}

// The dimension of a problem that counts token rows (`dimension`, n or k) when the call's algorithm comes
// from its row bucket; null (exact) otherwise.
RowDimension row_dimension(MatmulAlgoChoice choice, RowDimension dimension) {
  return choice == MatmulAlgoChoice::row_buckets ? dimension : nullptr;
}

// D = op(A) op(B) (+ epilogue) + beta D on `stream`, through the cached plan of `p`. With `rows` (the
// dimension that counts token rows, n or k), a new problem takes its row bucket's algorithm.
void lt_matmul(LtProblem p, const LtOperands& ops, cudaStream_t stream, RowDimension rows = nullptr) {
  p.align_a = alignment_of(ops.A);
  p.align_b = alignment_of(ops.B);
  p.align_d = alignment_of(ops.D);
  p.align_bias = alignment_of(ops.bias);
  p.align_aux = alignment_of(ops.aux);
  LtPlanCache& cache = plan_cache();
  const std::lock_guard<std::mutex> lock(cache.mutex);
  LtPlan* plan = nullptr;
  if (const auto found = cache.plans.find(p); found != cache.plans.end()) {
    cache.hits++;
    plan = found->second.get();
    set_pointers(*plan, ops);
  } else {
    cache.misses++;
    std::unique_ptr<LtPlan> made = make_descriptors(p, ops);
    if (rows == nullptr || !take_bucket_algorithm(cache, *made, rows, ops)) {
      const bool tune = tuning_candidates > 1 && cache.tuned.size() < kMaxTunedProblems;
      LtCandidates candidates;
      choose_heuristic_algorithm(cache, *made, tune ? tuning_candidates.load() : 1, candidates);  // throws
      if (tune && candidates.count > 1) cache.tuned.push_back(tune_plan(*made, candidates, ops, stream));
    }
    if (cache.plans.size() >= kMaxPlans) {
      cache.plans.erase(cache.age.front());
      cache.age.pop_front();
    }
    plan = made.get();
    cache.plans.emplace(p, std::move(made));
    cache.age.push_back(p);
  }
  CUBLAS_CHECK(queue_matmul(*plan, plan->algo, ops, stream));
}

// cuBLASLt's rule for the GELU epilogues' aux matrix: its leading dimension (in elements) must be
// divisible by 8 (cublasLt.h, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD).
void check_gelu_aux_ld(const char* op, const char* dim, int64_t ld, int64_t N, int64_t C, int64_t OC) {
  TS_CHECK(ld % kGeluAuxLdMultiple == 0, op, ": x (", N, ",", C, ") times weight (", OC, ",", C,
           ") cannot fuse GELU on the GPU: cuBLASLt needs the pre-GELU row length ", dim, " = ", ld,
           " to be a multiple of ", kGeluAuxLdMultiple, "; pad it, or run the matmul and GELU ops unfused");
}

// out^T (OC,N) = (weight stored (C,OC) column-major, transposed) x^T (C,N) (+ epilogue).
template <typename T>
void forward_matmul(T* out, const T* x, const T* weight, const T* bias, T* pre_gelu, int64_t N, int64_t C, int64_t OC,
                    cudaStream_t stream, MatmulAlgoChoice choice = MatmulAlgoChoice::exact) {
  LtProblem p{OC, N, C, C, C, OC, /*trans_a=*/true, /*trans_b=*/false, kDataType<T>, kDataType<T>};
  if (pre_gelu != nullptr) {
    p.epilogue = bias != nullptr ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    p.aux_ld = OC;
  } else if (bias != nullptr) {
    p.epilogue = CUBLASLT_EPILOGUE_BIAS;
  }
  lt_matmul(p, {out, weight, x, bias, pre_gelu}, stream, row_dimension(choice, &LtProblem::n));
}

// dweight^T (C,OC) += x^T (C,N) dout (N,OC) in fp32; dbias += sum_n dout[n,:] by deterministic column
// sums. (cuBLASLt's BGRADB epilogue did the sums inside the GEMM, then a kernel of its own at 1.4 to
// 2.4 TB/s, 107 us a GPT-2 124M layer at B=16 on an H200, and an add into dbias.)
template <typename T>
void parameter_grads(float* dweight, float* dbias, const T* dout, const T* x, int64_t N, int64_t C, int64_t OC,
                     cudaStream_t stream, MatmulAlgoChoice choice = MatmulAlgoChoice::exact) {
  const LtProblem p{C, OC, N, C, OC, C, false, /*trans_b=*/true, kDataType<T>, /*d_type=*/CUDA_R_32F};
  lt_matmul(p, {.D = dweight, .A = x, .B = dout, .beta = 1.0f}, stream, row_dimension(choice, &LtProblem::k));
  if (dbias != nullptr) matrix_column_sums_accumulate(dbias, dout, N, OC, stream);
}

// dx^T (C,N) = weight (C,OC column-major) dout^T (OC,N), times gelu'(x_pre_gelu) when given.
template <typename T>
void input_grad(T* dx, const T* dout, const T* weight, const T* x_pre_gelu, int64_t N, int64_t C, int64_t OC,
                cudaStream_t stream, MatmulAlgoChoice choice = MatmulAlgoChoice::exact) {
  LtProblem p{C, N, OC, C, OC, C, false, false, kDataType<T>, kDataType<T>};
  if (x_pre_gelu != nullptr) {
    p.epilogue = CUBLASLT_EPILOGUE_DGELU;
    p.aux_ld = C;
  }
  lt_matmul(p, {dx, weight, dout, nullptr, x_pre_gelu}, stream, row_dimension(choice, &LtProblem::n));
}

}  // namespace

// --- launchers ---

template <typename T>
void matmul_forward(T* out, const T* x, const T* weight, const T* bias, int64_t N, int64_t C, int64_t OC,
                    cudaStream_t stream, MatmulAlgoChoice choice) {
  if (N == 0) return;
  forward_matmul<T>(out, x, weight, bias, nullptr, N, C, OC, stream, choice);
}

template <typename T>
void matmul_backward(T* dx, float* dweight, float* dbias, const T* dout, const T* x, const T* weight, int64_t N,
                     int64_t C, int64_t OC, cudaStream_t stream, MatmulAlgoChoice choice) {
  if (N == 0) return;
  if (dx != nullptr) input_grad<T>(dx, dout, weight, nullptr, N, C, OC, stream, choice);
  if (dweight != nullptr) parameter_grads<T>(dweight, dbias, dout, x, N, C, OC, stream, choice);
}

template <typename T>
void matmul_gelu_forward(T* out, T* pre_gelu, const T* x, const T* weight, const T* bias, int64_t N, int64_t C,
                         int64_t OC, cudaStream_t stream) {
  check_gelu_aux_ld("matmul_gelu_forward", "OC", OC, N, C, OC);
  if (N == 0) return;
  forward_matmul<T>(out, x, weight, bias, pre_gelu, N, C, OC, stream);
}

template <typename T>
void matmul_backward_dgelu(T* dx, float* dweight, float* dbias, const T* dout, const T* x, const T* weight,
                           const T* x_pre_gelu, int64_t N, int64_t C, int64_t OC, cudaStream_t stream) {
  check_gelu_aux_ld("matmul_backward_dgelu", "C", C, N, C, OC);
  if (N == 0) return;
  input_grad<T>(dx, dout, weight, x_pre_gelu, N, C, OC, stream);
  if (dweight != nullptr) parameter_grads<T>(dweight, dbias, dout, x, N, C, OC, stream);
}

void set_matmul_tuning(int candidates) { tuning_candidates = candidates; }  // checked by ops/matmul.cpp

std::vector<MatmulTuningRecord> matmul_tuning_records() {
  LtPlanCache& cache = plan_cache();
  const std::lock_guard<std::mutex> lock(cache.mutex);
  return cache.tuned;
}

MatmulPlanCacheStats matmul_plan_cache_stats() {
  LtPlanCache& cache = plan_cache();
  const std::lock_guard<std::mutex> lock(cache.mutex);
  return {cache.hits, cache.misses, cache.heuristic_queries, cache.plans.size()};
}

#define TESSERA_MATMUL_INSTANTIATE(T)                                                                              \
  template void matmul_forward<T>(T*, const T*, const T*, const T*, int64_t, int64_t, int64_t, cudaStream_t,      \
                                  MatmulAlgoChoice);                                                               \
  template void matmul_backward<T>(T*, float*, float*, const T*, const T*, const T*, int64_t, int64_t, int64_t,   \
                                   cudaStream_t, MatmulAlgoChoice);                                                \
  template void matmul_gelu_forward<T>(T*, T*, const T*, const T*, const T*, int64_t, int64_t, int64_t,           \
                                       cudaStream_t);                                                              \
  template void matmul_backward_dgelu<T>(T*, float*, float*, const T*, const T*, const T*, const T*, int64_t,     \
                                         int64_t, int64_t, cudaStream_t);
TS_FOR_EACH_STORAGE_TYPE(TESSERA_MATMUL_INSTANTIATE)

}  // namespace tessera::cuda
