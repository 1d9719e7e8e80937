// Context parallelism as the decoder's layers see it: the cp group splits every sequence, and attention
// is the one place its ranks exchange tokens' keys and values (parallel/cp implements it; nn holds no
// collectives). Layout (Megatron / Llama 3 load balancing): a sequence of T tokens is cut into 2·cp
// chunks of T/(2·cp); cp rank i holds chunks i and 2·cp-1-i, concatenated, as its local (B, T/cp, ...)
// rows, so every rank gets the same share of the causal triangle. T must be a multiple of 2·cp. A query
// at true position p sees a key at true position s iff s <= p; RoPE rotates by the true positions.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace tessera {

struct CpPlace {
  int rank = 0, size = 1;
};

// Throws naming seq_len and 2·cp when T does not split into 2·cp equal chunks.
void cp_check_seq_len(int64_t T, CpPlace place);
// The true positions (T/cp), increasing, of the rank's local tokens: chunk `rank`, then chunk 2·cp-1-rank.
std::vector<int32_t> cp_positions(int64_t T, CpPlace place);
// The rank's local rows (B, T/cp, ...) of a full host tensor (B, T, ...) of any dtype, copied.
Tensor cp_local_rows(const Tensor& full, CpPlace place);
// The rank's tokens or targets (B, T/cp) i32 from the full batch (B, T) i32 on the host.
Tensor cp_local_tokens(const Tensor& full, CpPlace place);

// What a cp group's exchanges cost since the last reset: seconds this rank waited on them (the
// communication its compute did not hide) and the bytes it sent to the other ranks.
struct CpCommStats {
  double wait_s = 0;
  int64_t bytes_sent = 0;
};

// Causal attention of the rank's local tokens over the whole sequence held by the group, with the
// contracts of ops/attention.h on local tensors: qkv (B, T/cp, (NH+2NKV)*HS), out and dout
// (B, T/cp, NH*HS), lse (B, NH, T/cp); backward writes (=) dqkv, whose dk and dv sum the gradients
// from every rank's queries. cp = 1 is plain causal attention. doc_starts (B, T/cp) i32, or undefined:
// each local token's document start, a true position (document masking, ops/attention.h). softcap > 0
// caps the scores (Gemma 2's, ops/attention.h).
class ContextParallel {
 public:
  virtual ~ContextParallel() = default;
  virtual CpPlace place() const = 0;
  virtual void attention_forward(Tensor& out, Tensor& lse, const Tensor& qkv, int NH, int NKV,
                                 const Tensor& doc_starts, float softcap) = 0;
  virtual void attention_backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                                  const Tensor& lse, int NH, int NKV, const Tensor& doc_starts, float softcap) = 0;
  // Each value summed over the group: statistics of the whole sequences from every rank's share
  // (the MoE router's load-balancing counts).
  virtual std::vector<double> sum_over_group(const std::vector<double>& values) = 0;
  virtual CpCommStats stats() const = 0;
  virtual void reset_stats() = 0;
};

}  // namespace tessera
