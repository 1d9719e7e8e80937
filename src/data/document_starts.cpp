// A window's document starts from its start tokens (contract in data/document_starts.h).
#include "data/document_starts.h"

#include "core/error.h"

namespace tessera {

Tensor document_starts(const Tensor& inputs, int32_t start_token) {
  TS_CHECK(inputs.ndim() == 2 && inputs.dtype() == DType::i32 && inputs.device() == Device::cpu,
           "document_starts: inputs must be (B,T) i32 on the host, got ", shape_string(inputs.shape()));
  const int64_t B = inputs.size(0), T = inputs.size(1);
  Tensor starts = Tensor::zeros({B, T}, DType::i32);
  const int32_t* in = inputs.data<int32_t>();
  int32_t* out = starts.data<int32_t>();
  for (int64_t b = 0; b < B; b++) {
    int32_t start = 0;
    for (int64_t t = 0; t < T; t++) {
      if (in[b * T + t] == start_token) start = int32_t(t);
      out[b * T + t] = start;
    }
  }
  return starts;
}

}  // namespace tessera
