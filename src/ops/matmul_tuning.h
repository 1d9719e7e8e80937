// The GPU matmuls' algorithm choice. cuBLASLt's heuristic ranks the algorithms for each problem
// (shape, epilogue, types, alignments); by default the first is taken untimed. With tuning set to n > 1,
// a problem's first call times the first n on its own operands and keeps the fastest for the rest of
// the process: faster where the heuristic misjudges, at the price of a slower first step and of a choice
// that may differ between runs (so may the last bits of a run's numbers). Only the process's first 64
// problems are timed (a MoE model's experts see new row counts every step). No effect on the CPU.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessera {

constexpr int kMaxMatmulTuning = 64;  // candidates timed per problem at most
// cuBLASLt's workspace, allocated once per process at the first GPU matmul: only algorithms that need
// at most this much take part (Hopper's split-K and stream-K kernels like 32 MiB or more).
constexpr int64_t kMatmulWorkspaceBytes = int64_t(32) << 20;

// How a GPU matmul finds its algorithm. exact: cuBLASLt's heuristic is asked once per problem (a dense
// model has a handful). row_buckets: once per bucket of the token-row count (matmul_row_bucket), asked
// for the bucket's largest row count; a call takes its bucket's algorithm where cuBLASLt accepts it for
// the call's exact shape (else it asks for its own). For the experts' GEMMs, whose row counts change
// every step: a heuristic query costs far more than a small GEMM. The choice is a function of the
// bucket alone, so a run gives the same bits however its row counts arrived. Not tuned (see below).
enum class MatmulAlgoChoice { exact, row_buckets };

// The largest row count of the bucket holding `rows` (> 0): eight buckets per power of two, each a
// multiple of 8 (1 to 8 -> 8, 100 -> 104, 2048 -> 2048, 2049 -> 2304).
int64_t matmul_row_bucket(int64_t rows);

struct MatmulTuningRecord {
  std::string problem;  // as cuBLASLt sees it (column-major m, n, k), with its epilogue and types
  int timed = 0;        // candidates timed
  int chosen = 0;       // the fastest's place in the heuristic's order (0: its first)
  float first_us = 0, best_us = 0;  // per call: the heuristic's first, and the fastest
};

// Throws one line naming --matmul-tuning unless 1 <= candidates <= kMaxMatmulTuning.
void check_matmul_tuning(int64_t candidates);
// 1 (the default) to kMaxMatmulTuning; checked.
void set_matmul_tuning(int candidates);
// Every problem timed so far in this process, in order (none on the CPU or without tuning).
std::vector<MatmulTuningRecord> matmul_tuning_records();
// One line: how many problems were timed, how many took another algorithm than the heuristic's first,
// and the microseconds that saves over one call of each.
std::string matmul_tuning_summary(const std::vector<MatmulTuningRecord>& records);

}  // namespace tessera
