// Causal self-attention through cuDNN's fused flash-attention engines: the graphs cudnn-frontend's SDPA
// nodes lower to, written with the backend API (cudnn_graph.h) on the packed qkv in place; launchers in
// attention_cudnn_cuda.h. Every product is fp32 math; virtual tensors are fp32 except P and dS where they
// enter a product (the io type E); S = q k^T has dims [B,NH,T,T], k and v [B,NKV,...] (grouped-query
// attention broadcasts kv heads, and the backward sums dk, dv of a group with a head reduction).
//   forward:  S = Q K^T * scale; causal select (row >= col, else mask value); M = max S; E = exp(S - M);
//             Z = sum E; lse = M + log Z (the stats); P = E / Z in E; O = P V
//   backward: Dsum = rowsum(dO * O) * 1 (fp32, in memory); P = exp(causal(Q K^T * scale - lse));
//             dV = P^T dO; dS = P * (dO V^T - Dsum) * scale; dK = dS^T Q; dQ = dS K, written directly
//             (deterministic) or, when the caller allows otherwise, summed in a zeroed fp32 accumulator
// cuDNN <= 9.15 needs a padding mask (per-batch lengths, all T) in the backward when T % 128 != 0, and
// 9.0 to 9.9 a second one after it; cuDNN < 9.10 wants the float lowest, not -inf, as the mask value
// (cudnn-frontend does the same).
#include <cmath>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/cuda/device.h"
#include "ops/cuda/attention_common.cuh"
#include "ops/cuda/attention_cudnn_cuda.h"
#include "ops/cuda/cudnn_graph.h"
#include "ops/cudnn_attention_rule.h"

namespace tessera::cuda {
namespace {

using cudnn::Dims;
using cudnn::Graph;

constexpr cudnnDataType_t kF32 = CUDNN_DATA_FLOAT, kI32 = CUDNN_DATA_INT32, kBool = CUDNN_DATA_BOOLEAN;

template <typename E>
constexpr cudnnDataType_t kIoType = std::is_same_v<E, __nv_bfloat16> ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;

// Everything a plan depends on: the cache key.
struct AttentionProblem {
  cudnnDataType_t io;
  int64_t B, T, NH, NKV, HS;
  bool backward;
  bool dq_accumulated = false;  // backward only: dQ summed in an fp32 accumulator with atomics
  bool operator==(const AttentionProblem&) const = default;
};

struct AttentionProblemHash {
  size_t operator()(const AttentionProblem& p) const {
    size_t h = 0;
    for (const int64_t v : {int64_t(p.io), p.B, p.T, p.NH, p.NKV, p.HS, int64_t(p.backward), int64_t(p.dq_accumulated)})
      h ^= std::hash<int64_t>{}(v) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h;
  }
};

std::string problem_label(const AttentionProblem& p) {
  return std::string("cuDNN attention ") + (p.backward ? "backward" : "forward") + " (" +
         (p.io == CUDNN_DATA_BFLOAT16 ? "bf16" : "f16") + ", B=" + std::to_string(p.B) + " T=" + std::to_string(p.T) +
         " NH=" + std::to_string(p.NH) + " NKV=" + std::to_string(p.NKV) + " HS=" + std::to_string(p.HS) +
         (p.dq_accumulated ? ", dQ in an fp32 accumulator" : "") + ")";
}

// The tensors of the packed layout, as [batch, heads, rows, cols] dims and strides in elements.
struct Layout {
  int64_t B, T, NH, NKV, HS, W, C;  // W = (NH + 2 NKV) HS: a token's qkv row; C = NH HS: a token's out row
  explicit Layout(const AttentionProblem& p)
      : B(p.B), T(p.T), NH(p.NH), NKV(p.NKV), HS(p.HS), W((p.NH + 2 * p.NKV) * p.HS), C(p.NH * p.HS) {}
  Dims heads(int64_t H) const { return {B, H, T, HS}; }            // q, k, v (and dq, dk, dv) in qkv
  Dims heads_t(int64_t H) const { return {B, H, HS, T}; }          // k^T, v^T: the same memory
  Dims qkv_strides() const { return {T * W, HS, W, 1}; }
  Dims qkv_t_strides() const { return {T * W, HS, 1, W}; }
  Dims out_strides() const { return {T * C, HS, C, 1}; }           // out, dout
  Dims packed_strides(int64_t H) const { return {H * T * HS, T * HS, HS, 1}; }
  Dims scores() const { return {B, NH, T, T}; }
  Dims score_strides() const { return {NH * T * T, T * T, T, 1}; }
  Dims score_t_strides() const { return {NH * T * T, T * T, 1, T}; }  // [.., key, query] over the same scores
  Dims rows() const { return {B, NH, T, 1}; }                       // lse, row statistics
  Dims row_strides() const { return {NH * T, T, 1, 1}; }
};

// The uids of a graph's inputs and outputs (-1: not in this graph).
struct AttentionUids {
  int64_t q = -1, k_t = -1, v = -1, v_t = -1, out = -1, dout = -1, lse = -1;
  int64_t dq = -1, dk = -1, dv = -1, dout_sum = -1, dq_accumulator = -1;
  int64_t scale = -1, one = -1, mask_value = -1, seq_len_q = -1, seq_len_kv = -1;
};

// y = x where row >= col (causal), else the mask value; row and col index the last two dims of x.
int64_t causal_mask(Graph& g, const Layout& l, int64_t x, int64_t mask_value) {
  const int64_t row = g.virtual_tensor("row_index", kI32, l.scores(), l.score_strides());
  const int64_t col = g.virtual_tensor("col_index", kI32, l.scores(), l.score_strides());
  const int64_t keep = g.virtual_tensor("row_ge_col", kBool, l.scores(), l.score_strides());
  const int64_t y = g.virtual_tensor("causal_masked", kF32, l.scores(), l.score_strides());
  g.pointwise("gen_row_index", CUDNN_POINTWISE_GEN_INDEX, kF32, row, x, -1, -1, 2);
  g.pointwise("gen_col_index", CUDNN_POINTWISE_GEN_INDEX, kF32, col, x, -1, -1, 3);
  g.pointwise("causal_row_ge_col", CUDNN_POINTWISE_CMP_GE, kBool, keep, row, col);
  g.pointwise("causal_select", CUDNN_POINTWISE_BINARY_SELECT, kF32, y, x, mask_value, keep);
  return y;
}

// y = x where row < seq_len_q and col < seq_len_kv (every length is T: a no-op that old cuDNN needs, see
// above).
int64_t padding_mask(Graph& g, const Layout& l, int64_t x, const AttentionUids& u, const std::string& tag) {
  const int64_t row = g.virtual_tensor(tag + "row_index", kI32, l.scores(), l.score_strides());
  const int64_t col = g.virtual_tensor(tag + "col_index", kI32, l.scores(), l.score_strides());
  const int64_t row_ok = g.virtual_tensor(tag + "row_lt_len", kBool, l.scores(), l.score_strides());
  const int64_t col_ok = g.virtual_tensor(tag + "col_lt_len", kBool, l.scores(), l.score_strides());
  const int64_t keep = g.virtual_tensor(tag + "in_length", kBool, l.scores(), l.score_strides());
  const int64_t y = g.virtual_tensor(tag + "padding_masked", kF32, l.scores(), l.score_strides());
  g.pointwise(tag + "gen_row_index", CUDNN_POINTWISE_GEN_INDEX, kI32, row, x, -1, -1, 2);
  g.pointwise(tag + "gen_col_index", CUDNN_POINTWISE_GEN_INDEX, kI32, col, x, -1, -1, 3);
  g.pointwise(tag + "row_lt_len", CUDNN_POINTWISE_CMP_LT, kBool, row_ok, row, u.seq_len_q);
  g.pointwise(tag + "col_lt_len", CUDNN_POINTWISE_CMP_LT, kBool, col_ok, col, u.seq_len_kv);
  g.pointwise(tag + "and", CUDNN_POINTWISE_LOGICAL_AND, kBool, keep, row_ok, col_ok);
  g.pointwise(tag + "padding_select", CUDNN_POINTWISE_BINARY_SELECT, kF32, y, x, u.mask_value, keep);
  return y;
}

// The tensors both directions read or write: Q, K^T (the k heads viewed transposed), O, the stats (lse),
// and the scalars attn_scale and mask_value.
void add_common_tensors(Graph& g, const AttentionProblem& p, const Layout& l, AttentionUids& u) {
  u.q = g.tensor("Q", p.io, l.heads(l.NH), l.qkv_strides());
  u.k_t = g.tensor("K^T", p.io, l.heads_t(l.NKV), l.qkv_t_strides());
  u.out = g.tensor("O", p.io, l.heads(l.NH), l.out_strides());
  u.lse = g.tensor("stats", kF32, l.rows(), l.row_strides());
  u.scale = g.scalar("attn_scale", kF32);
  u.mask_value = g.scalar("mask_value", kF32);
}

Graph forward_graph(const AttentionProblem& p, AttentionUids& u) {
  const Layout l(p);
  Graph g(problem_label(p));
  add_common_tensors(g, p, l, u);
  u.v = g.tensor("V", p.io, l.heads(l.NKV), l.qkv_strides());

  const int64_t s = g.virtual_tensor("S", kF32, l.scores(), l.score_strides());
  const int64_t s_scaled = g.virtual_tensor("S_scaled", kF32, l.scores(), l.score_strides());
  g.matmul("bmm1_Q_KT", u.q, u.k_t, s);
  g.pointwise("attn_scale", CUDNN_POINTWISE_MUL, kF32, s_scaled, s, u.scale);
  const int64_t masked = causal_mask(g, l, s_scaled, u.mask_value);

  const int64_t max = g.virtual_tensor("max", kF32, l.rows(), l.row_strides());
  const int64_t shifted = g.virtual_tensor("S_minus_max", kF32, l.scores(), l.score_strides());
  const int64_t e = g.virtual_tensor("exp", kF32, l.scores(), l.score_strides());
  const int64_t z = g.virtual_tensor("sum_exp", kF32, l.rows(), l.row_strides());
  const int64_t log_z = g.virtual_tensor("log_sum_exp", kF32, l.rows(), l.row_strides());
  const int64_t prob = g.virtual_tensor("P", p.io, l.scores(), l.score_strides());
  g.reduction("softmax_max", CUDNN_REDUCE_TENSOR_MAX, masked, max);
  g.pointwise("softmax_sub_max", CUDNN_POINTWISE_SUB, kF32, shifted, masked, max);
  g.pointwise("softmax_exp", CUDNN_POINTWISE_EXP, kF32, e, shifted);
  g.reduction("softmax_sum", CUDNN_REDUCE_TENSOR_ADD, e, z);
  g.pointwise("softmax_log", CUDNN_POINTWISE_LOG, kF32, log_z, z);
  g.pointwise("softmax_stats", CUDNN_POINTWISE_ADD, kF32, u.lse, max, log_z);
  g.pointwise("softmax_div", CUDNN_POINTWISE_DIV, kF32, prob, e, z);
  g.matmul("bmm2_P_V", prob, u.v, u.out);
  return g;
}

// out = a b, or (grouped-query) the sum over each kv head's query heads of a b computed per query head.
void head_summed_matmul(Graph& g, const Layout& l, cudnnDataType_t io, const std::string& name, int64_t a, int64_t b,
                        int64_t out, int64_t m_override, int64_t k_override) {
  if (l.NKV == l.NH) return g.matmul(name, a, b, out, m_override, -1, k_override);
  const int64_t full = g.virtual_tensor(name + "_all_heads", io, l.heads(l.NH), l.packed_strides(l.NH));
  g.matmul(name, a, b, full, m_override, -1, k_override);
  g.reduction(name + "_sum_group", CUDNN_REDUCE_TENSOR_ADD, full, out);
}

Graph backward_graph(const AttentionProblem& p, AttentionUids& u) {
  const Layout l(p);
  const size_t version = cudnnGetVersion();
  const bool padded = version <= 91500 && p.T % 128 != 0;
  Graph g(problem_label(p));
  add_common_tensors(g, p, l, u);
  u.v_t = g.tensor("V^T", p.io, l.heads_t(l.NKV), l.qkv_t_strides());
  u.dout = g.tensor("dO", p.io, l.heads(l.NH), l.out_strides());
  u.dq = g.tensor("dQ", p.io, l.heads(l.NH), l.qkv_strides());
  u.dk = g.tensor("dK", p.io, l.heads(l.NKV), l.qkv_strides());
  u.dv = g.tensor("dV", p.io, l.heads(l.NKV), l.qkv_strides());
  u.dout_sum = g.tensor("softmax_sum", kF32, l.rows(), l.row_strides());
  u.one = g.scalar("one", kF32);
  if (padded) {
    u.seq_len_q = g.tensor("seq_len_q", kI32, {l.B, 1, 1, 1}, {1, 1, 1, 1});
    u.seq_len_kv = g.tensor("seq_len_kv", kI32, {l.B, 1, 1, 1}, {1, 1, 1, 1});
  }
  const int64_t len_q = u.seq_len_q, len_kv = u.seq_len_kv;  // the matmul size overrides (-1: none)

  // Dsum = rowsum(dO * O) * 1, kept in memory.
  const int64_t do_o = g.virtual_tensor("dO_times_O", kF32, l.heads(l.NH), l.packed_strides(l.NH));
  const int64_t rowsum = g.virtual_tensor("rowsum_dO_O", kF32, l.rows(), l.row_strides());
  g.pointwise("mul_dO_O", CUDNN_POINTWISE_MUL, kF32, do_o, u.dout, u.out);
  g.reduction("reduce_dO_O", CUDNN_REDUCE_TENSOR_ADD, do_o, rowsum);
  g.pointwise("softmax_sum_scale", CUDNN_POINTWISE_MUL, kF32, u.dout_sum, rowsum, u.one);

  // P = exp(causal(Q K^T * scale - lse)).
  const int64_t s = g.virtual_tensor("S", kF32, l.scores(), l.score_strides());
  const int64_t s_scaled = g.virtual_tensor("S_scaled", kF32, l.scores(), l.score_strides());
  const int64_t s_shifted = g.virtual_tensor("S_minus_stats", kF32, l.scores(), l.score_strides());
  g.matmul("bmm_Q_KT", u.q, u.k_t, s, len_q, len_kv);
  g.pointwise("attn_scale", CUDNN_POINTWISE_MUL, kF32, s_scaled, s, u.scale);
  g.pointwise("sub_stats", CUDNN_POINTWISE_SUB, kF32, s_shifted, s_scaled, u.lse);
  int64_t masked = s_shifted;
  if (padded) masked = padding_mask(g, l, masked, u, "pad_");
  if (padded && version >= 90000 && version < 91000) masked = padding_mask(g, l, masked, u, "pad2_");
  masked = causal_mask(g, l, masked, u.mask_value);
  const int64_t prob = g.virtual_tensor("P", kF32, l.scores(), l.score_strides());
  g.pointwise("exp", CUDNN_POINTWISE_EXP, kF32, prob, masked);

  // dV = P^T dO.
  const int64_t prob_t = g.virtual_tensor("P^T", p.io, l.scores(), l.score_t_strides());
  g.reshape("transpose_P", prob, prob_t);
  head_summed_matmul(g, l, p.io, "bmm_PT_dO", prob_t, u.dout, u.dv, len_kv, len_q);

  // dS = P * (dO V^T - Dsum) * scale.
  const int64_t dp = g.virtual_tensor("dP", kF32, l.scores(), l.score_strides());
  const int64_t dp_centered = g.virtual_tensor("dP_minus_sum", kF32, l.scores(), l.score_strides());
  const int64_t ds_unscaled = g.virtual_tensor("P_times_dP", kF32, l.scores(), l.score_strides());
  const int64_t ds = g.virtual_tensor("dS", kF32, l.scores(), l.score_strides());
  g.matmul("bmm_dO_VT", u.dout, u.v_t, dp, len_q, len_kv);
  g.pointwise("sub_softmax_sum", CUDNN_POINTWISE_SUB, kF32, dp_centered, dp, u.dout_sum);
  g.pointwise("mul_P", CUDNN_POINTWISE_MUL, kF32, ds_unscaled, dp_centered, prob);
  g.pointwise("dS_attn_scale", CUDNN_POINTWISE_MUL, kF32, ds, ds_unscaled, u.scale);

  // dK = dS^T Q.
  const int64_t ds_t = g.virtual_tensor("dS^T", p.io, l.scores(), l.score_t_strides());
  g.reshape("transpose_dS", ds, ds_t);
  head_summed_matmul(g, l, p.io, "bmm_dST_Q", ds_t, u.q, u.dk, len_kv, len_q);

  // dQ = dS K. Written directly, cuDNN keeps dS in its workspace and runs the product as a second kernel:
  // the same bits every run. Into a zeroed fp32 accumulator (non-virtual, F16x16-reordered, as
  // cudnn-frontend asks for it) the fused kernel adds each key block's share with atomics, faster but in
  // an order that varies; an identity then writes dQ in the io type.
  const int64_t k = g.virtual_tensor("K", kF32, l.heads(l.NKV), l.qkv_strides());
  g.reshape("transpose_KT", u.k_t, k);
  if (!p.dq_accumulated) {
    g.matmul("bmm_dS_K", ds, k, u.dq, len_q, -1, len_kv);
    return g;
  }
  u.dq_accumulator = g.tensor("dQ_accumulator", kF32, l.heads(l.NH), l.packed_strides(l.NH),
                              CUDNN_TENSOR_REORDERING_F16x16);
  g.matmul("bmm_dS_K", ds, k, u.dq_accumulator, len_q, -1, len_kv);
  g.pointwise("identity_dQ", CUDNN_POINTWISE_IDENTITY, kF32, u.dq, u.dq_accumulator);
  return g;
}

// A plan and what executing it needs beyond the caller's pointers.
struct CachedPlan {
  std::unique_ptr<cudnn::Plan> plan;
  AttentionUids uids;
  int32_t* seq_len = nullptr;  // (B) int32, all T, when the graph has a padding mask; kept for the process
};

// One handle and the plans, for the life of the process (never destroyed: cuDNN and the device may be
// gone when static destructors run). The mutex also covers execution: the handle is re-pointed at each
// caller's stream.
struct CudnnState {
  std::mutex mutex;
  cudnnHandle_t handle = nullptr;
  std::unordered_map<AttentionProblem, CachedPlan, AttentionProblemHash> plans;
};

CudnnState& state() {
  static CudnnState& s = *new CudnnState;
  return s;
}

// Checks the cuDNN release once: 9.10.0 and 9.10.1 have known fused-attention bugs (cudnn-frontend refuses them).
void check_cudnn_release(const std::string& label) {
  TS_CHECK(attention_cudnn_release_usable(), label, ": ", cudnn::version_text(),
           " has known bugs in fused attention; put another cuDNN 9 (9.10.2 or newer) first on LD_LIBRARY_PATH, or "
           "use the tessera attention kernels");
}

const CachedPlan& plan_for(CudnnState& st, const AttentionProblem& p) {
  if (st.handle == nullptr) cudnn::check(cudnnCreate(&st.handle), problem_label(p), "cudnnCreate");
  if (const auto found = st.plans.find(p); found != st.plans.end()) return found->second;
  check_cudnn_release(problem_label(p));
  CachedPlan made;
  Graph graph = p.backward ? backward_graph(p, made.uids) : forward_graph(p, made.uids);
  made.plan =
      std::make_unique<cudnn::Plan>(st.handle, std::move(graph), /*deterministic=*/p.backward && !p.dq_accumulated);
  if (made.uids.seq_len_q >= 0) {
    const std::vector<int32_t> lengths(size_t(p.B), int32_t(p.T));
    made.seq_len = static_cast<int32_t*>(device_allocate(lengths.size() * sizeof(int32_t)));
    copy_to_device(made.seq_len, lengths.data(), lengths.size() * sizeof(int32_t));
  }
  return st.plans.emplace(p, std::move(made)).first->second;
}

// The device pointers of one call (the variant pack takes void*: inputs are only read). qkv and dqkv are
// the packed (B,T,(NH + 2 NKV) HS) tensors; the q, k and v heads start at element offsets 0, NH HS and
// (NH + NKV) HS of each token's row.
struct CallPointers {
  void *qkv = nullptr, *out = nullptr, *lse = nullptr;
  void *dout = nullptr, *dqkv = nullptr, *dout_sum = nullptr;  // backward only
};

void run(const AttentionProblem& p, const CallPointers& c, cudaStream_t stream) {
  CudnnState& st = state();
  const std::lock_guard<std::mutex> lock(st.mutex);
  const CachedPlan& cached = plan_for(st, p);
  const AttentionUids& u = cached.uids;
  const int64_t k_offset = p.NH * p.HS, v_offset = (p.NH + p.NKV) * p.HS, elem = 2;  // E is 2 bytes
  auto head = [&](void* base, int64_t offset) { return static_cast<void*>(static_cast<char*>(base) + offset * elem); };
  // By-value scalars: host values read when the plan is queued.
  float scale = 1.0f / std::sqrt(float(p.HS)), one = 1.0f;
  float mask_value =
      cudnnGetVersion() < 91000 ? std::numeric_limits<float>::lowest() : -std::numeric_limits<float>::infinity();
  std::vector<std::pair<int64_t, void*>> pointers = {{u.q, head(c.qkv, 0)},     {u.k_t, head(c.qkv, k_offset)},
                                                     {u.out, c.out},            {u.lse, c.lse},
                                                     {u.scale, &scale},         {u.mask_value, &mask_value}};
  if (p.backward) {
    pointers.insert(pointers.end(), {{u.v_t, head(c.qkv, v_offset)},
                                     {u.dout, c.dout},
                                     {u.dq, head(c.dqkv, 0)},
                                     {u.dk, head(c.dqkv, k_offset)},
                                     {u.dv, head(c.dqkv, v_offset)},
                                     {u.dout_sum, c.dout_sum},
                                     {u.one, &one}});
    if (u.seq_len_q >= 0)
      pointers.insert(pointers.end(), {{u.seq_len_q, cached.seq_len}, {u.seq_len_kv, cached.seq_len}});
  } else {
    pointers.push_back({u.v, head(c.qkv, v_offset)});
  }
  // The dQ accumulator starts at zero every call (cudnn-frontend zero-fills it the same way).
  std::optional<DeviceScratch> dq_accumulator;
  if (u.dq_accumulator >= 0) {
    const size_t bytes = size_t(p.B * p.NH * p.T * p.HS) * sizeof(float);
    dq_accumulator.emplace(bytes);
    device_memset_zero(dq_accumulator->as<void>(), bytes);
    pointers.push_back({u.dq_accumulator, dq_accumulator->as<void>()});
  }
  cudnn::check(cudnnSetStream(st.handle, stream), problem_label(p), "cudnnSetStream");
  const DeviceScratch workspace(size_t(cached.plan->workspace_bytes()));
  cached.plan->execute(st.handle, pointers, workspace.as<void>());
}

void check_launch(const char* op, int64_t C, int64_t NH, std::initializer_list<const void*> pointers) {
  TS_CHECK(NH > 0 && C % NH == 0 && attention_cudnn_supported(C / NH, pointers), op, ": head size ",
           NH > 0 ? C / NH : 0, ", these pointers or this device are not covered by cuDNN's fused attention (HS a "
           "multiple of 8 up to 128, 16-byte aligned pointers, sm_80+); check attention_cudnn_supported first and "
           "use the tessera attention kernels otherwise");
}

}  // namespace

// --- launchers ---

bool attention_cudnn_supported(int64_t HS, std::initializer_list<const void*> pointers) {
  return cudnn_attention_head_size_covered(HS) && aligned16_on_sm80(pointers);
}

bool attention_cudnn_release_usable() {
  const size_t version = cudnnGetVersion();
  return version != 91000 && version != 91001;
}

template <typename E>
void attention_cudnn_forward(E* out, float* lse, const E* qkv, int64_t B, int64_t T, int64_t C, int64_t NH,
                             int64_t NKV, cudaStream_t stream) {
  check_launch("attention_cudnn_forward", C, NH, {out, lse, qkv});
  if (B == 0 || T == 0) return;
  CallPointers c;
  c.qkv = const_cast<E*>(qkv);
  c.out = out;
  c.lse = lse;
  run({kIoType<E>, B, T, NH, NKV, C / NH, /*backward=*/false}, c, stream);
}

template <typename E>
void attention_cudnn_backward(E* dqkv, const E* dout, const E* qkv, const E* out, const float* lse, int64_t B,
                              int64_t T, int64_t C, int64_t NH, int64_t NKV, bool deterministic, cudaStream_t stream) {
  check_launch("attention_cudnn_backward", C, NH, {dqkv, dout, qkv, out, lse});
  if (B == 0 || T == 0) return;
  const DeviceScratch dout_sum(size_t(B * NH * T) * sizeof(float));  // (B,NH,T): rowsum(dout * out)
  CallPointers c;
  c.qkv = const_cast<E*>(qkv);
  c.out = const_cast<E*>(out);
  c.lse = const_cast<float*>(lse);
  c.dout = const_cast<E*>(dout);
  c.dqkv = dqkv;
  c.dout_sum = dout_sum.as<void>();
  run({kIoType<E>, B, T, NH, NKV, C / NH, /*backward=*/true, /*dq_accumulated=*/!deterministic}, c, stream);
}

#define INSTANTIATE(E)                                                                                             \
  template void attention_cudnn_forward<E>(E*, float*, const E*, int64_t, int64_t, int64_t, int64_t, int64_t,     \
                                           cudaStream_t);                                                          \
  template void attention_cudnn_backward<E>(E*, const E*, const E*, const E*, const float*, int64_t, int64_t,      \
                                            int64_t, int64_t, int64_t, bool, cudaStream_t);
INSTANTIATE(__nv_bfloat16)
INSTANTIATE(__half)

}  // namespace tessera::cuda
