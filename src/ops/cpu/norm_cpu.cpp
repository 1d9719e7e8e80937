// Sum of squares and in-place scale on the CPU. The sum is taken in fixed blocks of elements, each
// block summed in double in parallel, then the block sums added in order: the result does not
// depend on the number of threads.
#include "ops/cpu/norm_cpu.h"

#include <algorithm>
#include <vector>

#include "ops/cpu/kernel_util.h"

namespace tessera::cpu {
namespace {
constexpr int64_t kBlock = 8192;  // elements per partial sum
}  // namespace

double squared_norm(const float* x, int64_t n) {
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<double> partial(static_cast<size_t>(blocks));
#pragma omp parallel for if (n >= kMinParallelElements)
  for (int64_t blk = 0; blk < blocks; blk++) {
    const float* x_blk = x + blk * kBlock;
    const int64_t len = std::min(kBlock, n - blk * kBlock);
    double sum = 0.0;
#pragma omp simd reduction(+ : sum)
    for (int64_t i = 0; i < len; i++) sum += double(x_blk[i]) * double(x_blk[i]);
    partial[size_t(blk)] = sum;
  }
  double total = 0.0;
  for (double s : partial) total += s;
  return total;
}

void scale_inplace(float* x, int64_t n, float factor) {
#pragma omp parallel for simd if (n >= kMinParallelElements)
  for (int64_t i = 0; i < n; i++) x[i] *= factor;
}

}  // namespace tessera::cpu
