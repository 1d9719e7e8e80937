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
