// All-to-all attention's exchanges. A rank's local rows of sequence b are chunk `rank` then chunk
// 2·cp-1-rank (c = T/(2·cp) tokens each); every move below is a column copy over rows (copy_columns),
// so a layout change costs a few strided copies, not one per token.
#include "parallel/cp/all_to_all_attention.h"

#include <numeric>
#include <utility>

#include "core/cuda/device.h"
#include "core/error.h"
#include "ops/attention.h"

namespace tessera {
namespace {

int64_t sum_of(const std::vector<int64_t>& v) { return std::accumulate(v.begin(), v.end(), int64_t(0)); }

// Rank r's two chunks of c tokens (w elements a token) in each of `rows` sequences: from its local
// rows (rows, 2·c·w) to their places in the whole sequences (rows, 2·n·c·w), and back.
void place_chunks(Tensor& whole, const Tensor& local, int r, int n, int64_t c, int64_t w, int64_t rows) {
  copy_columns(whole, r * c * w, local, 0, rows, c * w);
  copy_columns(whole, (2 * n - 1 - r) * c * w, local, c * w, rows, c * w);
}
void take_chunks(Tensor& local, const Tensor& whole, int r, int n, int64_t c, int64_t w, int64_t rows) {
  copy_columns(local, 0, whole, r * c * w, rows, c * w);
  copy_columns(local, c * w, whole, (2 * n - 1 - r) * c * w, rows, c * w);
}

}  // namespace

void AllToAllAttention::check_heads(int NH, int NKV) const {
  const int n = cp_->size();
  TS_CHECK(NH % n == 0 && NKV % n == 0, "all-to-all context parallelism gives each of the --cp ", n,
           " ranks an equal share of the attention heads; ", NH, " query and ", NKV,
           " key/value heads do not split that way: use --cp-comm ring, or a --cp that divides both");
}

void AllToAllAttention::exchange(const Tensor& send, Tensor& received) {
  Work work = cp_->all_to_all_async(send, received);
  timed_wait(work);
  stats_.bytes_sent += int64_t(send.bytes()) / cp_->size() * (cp_->size() - 1);  // all but its own share
}

Tensor AllToAllAttention::to_heads(const Tensor& local, const Heads& heads) {
  const int n = cp_->size();
  const int64_t B = local.size(0), local_T = local.size(1), T = local_T * n, c = local_T / 2;
  const int64_t width = sum_of(heads.sections) * heads.head_size, group_width = width / n, rows = B * local_T;
  const Device device = local.device();
  // Block j of `send`: this rank's tokens, head group j's columns of each section side by side.
  Tensor send = Tensor::zeros({n, rows, group_width}, local.dtype(), device);
  Tensor received = Tensor::zeros(send.shape(), local.dtype(), device);
  for (int j = 0; j < n; ++j) {
    Tensor block = send.view(j * rows * group_width, {rows, group_width});
    int64_t from = 0, to = 0;
    for (int64_t section : heads.sections) {
      const int64_t cols = section / n * heads.head_size;
      copy_columns(block, to, local, from + j * cols, rows, cols);
      from += section * heads.head_size;
      to += cols;
    }
  }
  exchange(send, received);
  // Block r holds rank r's tokens: its two chunks go to their places in each sequence.
  Tensor grouped = Tensor::zeros({B, T, group_width}, local.dtype(), device);
  for (int r = 0; r < n; ++r) {
    place_chunks(grouped, received.view(r * rows * group_width, {B, local_T * group_width}), r, n, c, group_width, B);
  }
  return grouped;
}

void AllToAllAttention::to_tokens(Tensor& local, const Tensor& grouped, const Heads& heads) {
  const int n = cp_->size();
  const int64_t B = local.size(0), local_T = local.size(1), c = local_T / 2;
  const int64_t width = sum_of(heads.sections) * heads.head_size, group_width = width / n, rows = B * local_T;
  const Device device = local.device();
  // Block r of `send`: rank r's tokens of this rank's head group.
  Tensor send = Tensor::zeros({n, rows, group_width}, local.dtype(), device);
  Tensor received = Tensor::zeros(send.shape(), local.dtype(), device);
  for (int r = 0; r < n; ++r) {
    Tensor block = send.view(r * rows * group_width, {B, local_T * group_width});
    take_chunks(block, grouped, r, n, c, group_width, B);
  }
  exchange(send, received);
  // Block j holds this rank's tokens of head group j: its columns back into each section.
  for (int j = 0; j < n; ++j) {
    const Tensor block = received.view(j * rows * group_width, {rows, group_width});
    int64_t to = 0, from = 0;
    for (int64_t section : heads.sections) {
      const int64_t cols = section / n * heads.head_size;
      copy_columns(local, to + j * cols, block, from, rows, cols);
      to += section * heads.head_size;
      from += cols;
    }
  }
}

Tensor AllToAllAttention::lse_to_heads(const Tensor& lse) {
  const int n = cp_->size();
  const int64_t B = lse.size(0), NH = lse.size(1), local_T = lse.size(2), h = NH / n, c = local_T / 2;
  Tensor send = Tensor::zeros({n, B, h * local_T}, DType::f32, lse.device());
  Tensor received = Tensor::zeros(send.shape(), DType::f32, lse.device());
  for (int j = 0; j < n; ++j) {
    Tensor block = send.view(j * B * h * local_T, {B, h * local_T});
    copy_columns(block, 0, lse, j * h * local_T, B, h * local_T);
  }
  exchange(send, received);
  Tensor grouped = Tensor::zeros({B, h, local_T * n}, DType::f32, lse.device());
  for (int r = 0; r < n; ++r) {
    place_chunks(grouped, received.view(r * B * h * local_T, {B * h, local_T}), r, n, c, 1, B * h);
  }
  return grouped;
}

void AllToAllAttention::lse_to_tokens(Tensor& lse, const Tensor& grouped) {
  const int n = cp_->size();
  const int64_t B = lse.size(0), NH = lse.size(1), local_T = lse.size(2), h = NH / n, c = local_T / 2;
  Tensor send = Tensor::zeros({n, B * h, local_T}, DType::f32, lse.device());
  Tensor received = Tensor::zeros(send.shape(), DType::f32, lse.device());
  for (int r = 0; r < n; ++r) {
    Tensor block = send.view(r * B * h * local_T, {B * h, local_T});
    take_chunks(block, grouped, r, n, c, 1, B * h);
  }
  exchange(send, received);
  for (int j = 0; j < n; ++j) {
    const Tensor block = received.view(j * B * h * local_T, {B, h * local_T});
    copy_columns(lse, j * h * local_T, block, 0, B, h * local_T);
  }
}

Tensor AllToAllAttention::whole_doc_starts(const Tensor& doc_starts) {
  if (!doc_starts.defined()) return {};
  const int n = cp_->size();
  const int64_t B = doc_starts.size(0), local_T = doc_starts.size(1), c = local_T / 2;
  Tensor gathered = Tensor::zeros({n, B, local_T}, DType::i32, doc_starts.device());
  Work work = cp_->all_gather_async(doc_starts, gathered);
  timed_wait(work);
  stats_.bytes_sent += int64_t(doc_starts.bytes()) * (n - 1);
  Tensor whole = Tensor::zeros({B, local_T * n}, DType::i32, doc_starts.device());
  for (int r = 0; r < n; ++r) {
    place_chunks(whole, gathered.view(r * B * local_T, {B, local_T}), r, n, c, 1, B);
  }
  return whole;
}

void AllToAllAttention::attention_forward(Tensor& out, Tensor& lse, const Tensor& qkv, int NH, int NKV,
                                          const Tensor& doc_starts, float softcap) {
  const int n = cp_->size();
  check_heads(NH, NKV);
  cp_check_seq_len(qkv.size(1) * n, place());
  const int64_t HS = qkv.size(2) / (NH + 2 * NKV), B = qkv.size(0), T = qkv.size(1) * n;
  const Tensor whole_starts = whole_doc_starts(doc_starts);
  const Tensor grouped_qkv = to_heads(qkv, {{NH, NKV, NKV}, HS});
  Tensor grouped_out = Tensor::zeros({B, T, NH / n * HS}, out.dtype(), out.device());
  Tensor grouped_lse = Tensor::zeros({B, NH / n, T}, DType::f32, lse.device());
  tessera::attention_forward(grouped_out, grouped_lse, grouped_qkv, NH / n, NKV / n, whole_starts, softcap);
  to_tokens(out, grouped_out, {{NH}, HS});
  lse_to_tokens(lse, grouped_lse);
}

void AllToAllAttention::attention_backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                                           const Tensor& lse, int NH, int NKV, const Tensor& doc_starts,
                                           float softcap) {
  const int n = cp_->size();
  check_heads(NH, NKV);
  cp_check_seq_len(qkv.size(1) * n, place());
  const int64_t HS = qkv.size(2) / (NH + 2 * NKV);
  const Tensor whole_starts = whole_doc_starts(doc_starts);
  const Tensor grouped_qkv = to_heads(qkv, {{NH, NKV, NKV}, HS});
  const Tensor grouped_out = to_heads(out, {{NH}, HS}), grouped_dout = to_heads(dout, {{NH}, HS});
  const Tensor grouped_lse = lse_to_heads(lse);
  Tensor grouped_dqkv = Tensor::zeros(grouped_qkv.shape(), dqkv.dtype(), dqkv.device());
  tessera::attention_backward(grouped_dqkv, grouped_dout, grouped_qkv, grouped_out, grouped_lse, NH / n, NKV / n,
                              whole_starts, softcap);
  to_tokens(dqkv, grouped_dqkv, {{NH, NKV, NKV}, HS});
}

}  // namespace tessera
