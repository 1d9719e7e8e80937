// A context-parallel rank's share of a sequence: its chunks' positions and rows.
#include "nn/context_parallel.h"

#include <cstring>

#include "core/error.h"

namespace tessera {

void cp_check_seq_len(int64_t T, CpPlace place) {
  TS_CHECK(place.size >= 1 && place.rank >= 0 && place.rank < place.size, "context parallelism: rank ", place.rank,
           " is outside a cp group of ", place.size);
  TS_CHECK(T > 0 && T % (2 * place.size) == 0, "context parallelism: seq_len = ", T,
           " is not divisible by 2·cp = ", 2 * place.size,
           " (each cp rank holds two of the 2·cp equal chunks); pick seq_len a multiple of ", 2 * place.size);
}

std::vector<int32_t> cp_positions(int64_t T, CpPlace place) {
  cp_check_seq_len(T, place);
  const int64_t chunk = T / (2 * place.size);
  std::vector<int32_t> positions;
  positions.reserve(size_t(2 * chunk));
  for (int64_t c : {int64_t(place.rank), int64_t(2 * place.size - 1 - place.rank)})
    for (int64_t t = c * chunk; t < (c + 1) * chunk; t++) positions.push_back(int32_t(t));
  return positions;
}

Tensor cp_local_rows(const Tensor& full, CpPlace place) {
  TS_CHECK(full.device() == Device::cpu && full.ndim() >= 2, "cp_local_rows: the full tensor must be (B, T, ...) on ",
           "the host, got ", shape_string(full.shape()));
  const int64_t B = full.size(0), T = full.size(1);
  const std::vector<int32_t> positions = cp_positions(T, place);
  Shape shape = full.shape();
  shape[1] = int64_t(positions.size());
  Tensor local = Tensor::zeros(shape, full.dtype());
  const size_t row_bytes = size_t(shape_numel(Shape(shape.begin() + 2, shape.end()))) * dtype_size(full.dtype());
  const char* from = static_cast<const char*>(full.raw_data());
  char* to = static_cast<char*>(local.raw_data());
  for (int64_t b = 0; b < B; b++)
    for (size_t t = 0; t < positions.size(); t++)
      std::memcpy(to + (size_t(b) * positions.size() + t) * row_bytes,
                  from + size_t(b * T + positions[t]) * row_bytes, row_bytes);
  return local;
}

Tensor cp_local_tokens(const Tensor& full, CpPlace place) {
  TS_CHECK(full.dtype() == DType::i32 && full.ndim() == 2, "cp_local_tokens: tokens must be (B, T) i32, got ",
           shape_string(full.shape()), " ", dtype_name(full.dtype()));
  return cp_local_rows(full, place);
}

}  // namespace tessera
