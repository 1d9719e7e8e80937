// Token + position embedding: shape, dtype and token-range checks, then dispatch by device and, on
// the GPU, by the activation dtype (f32, bf16, f16).
#include "ops/encoder.h"

#include "ops/cpu/encoder_cpu.h"
#include "ops/op_checks.h"

#ifdef TESSERA_WITH_CUDA
#include "core/cuda/device.h"
#include "ops/cuda/encoder_cuda.h"
#include "ops/cuda/storage_types.h"
#endif

namespace tessera {
namespace {

struct EncoderDims {
  int64_t B, T, C, Vp;  // Vp: the rows of the slice wte holds
};

// The slice [first_row, first_row + rows) of a table of vocab_rows rows (0: the slice is the table).
int64_t table_rows(const char* op, const char* name, int64_t first_row, int64_t rows, int64_t vocab_rows) {
  if (vocab_rows == 0) vocab_rows = rows;
  TS_CHECK(first_row >= 0 && first_row + rows <= vocab_rows, op, ": rows [", first_row, ", ", first_row + rows,
           ") of ", name, " lie outside the table's ", vocab_rows);
  return vocab_rows;
}

// tokens (B,T); the embedding tables (or their gradients) (Vp,C) and (maxT,C) with T <= maxT.
EncoderDims encoder_dims(const char* op, const Tensor& tokens, const detail::Arg& wte, const detail::Arg& wpe) {
  TS_CHECK(tokens.ndim() == 2, op, ": tokens must be (B,T), got ", shape_string(tokens.shape()));
  TS_CHECK(wte.tensor.ndim() == 2, op, ": ", wte.name, " must be (Vp,C), got ", shape_string(wte.tensor.shape()));
  const int64_t Vp = wte.tensor.size(0), C = wte.tensor.size(1);
  if (!wpe.tensor.defined()) return {tokens.size(0), tokens.size(1), C, Vp};  // no position table
  TS_CHECK(wpe.tensor.ndim() == 2 && wpe.tensor.size(1) == C, op, ": ", wpe.name, " must be (maxT,", C, "), got ",
           shape_string(wpe.tensor.shape()));
  TS_CHECK(tokens.size(1) <= wpe.tensor.size(0), op, ": sequence length ", tokens.size(1), " exceeds the ",
           wpe.tensor.size(0), " positions of ", wpe.name);
  return {tokens.size(0), tokens.size(1), C, Vp};
}

// Token ids index rows of wte: one out of range would read or write outside it.
void check_token_range(const char* op, const Tensor& tokens, int64_t Vp) {
  const int32_t* ids = tokens.data<int32_t>();
  for (int64_t i = 0; i < tokens.numel(); i++)
    TS_CHECK(ids[i] >= 0 && ids[i] < Vp, op, ": token id ", ids[i], " at position ", i, " is outside [0, ", Vp,
             ")");
}

}  // namespace

void encoder_forward(Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe, int64_t first_row,
                     int64_t vocab_rows) {
  const char* op = "encoder_forward";
  detail::check_float_dtype(op, "out", out);
  const DType dtype = out.dtype();
  const Device device = detail::check_args(
      op, {{"out", out, dtype}, {"tokens", tokens, DType::i32}, {"wte", wte, dtype}, {"wpe", wpe, dtype, true}});
  const EncoderDims d = encoder_dims(op, tokens, {"wte", wte}, {"wpe", wpe});
  detail::check_shape(op, "out", out, {d.B, d.T, d.C});
  const int64_t table = table_rows(op, "wte", first_row, d.Vp, vocab_rows);
  switch (device) {
    case Device::cpu:
      check_token_range(op, tokens, table);
      cpu::encoder_forward(out.f32(), tokens.data<int32_t>(), wte.f32(), wpe.defined() ? wpe.f32() : nullptr, d.B, d.T,
                           d.C, first_row, d.Vp);
      return;
    case Device::cuda:
#ifdef TESSERA_WITH_CUDA
      check_token_range(op, copy_to_host(tokens), table);  // one synchronising copy of B*T ids
      cuda::with_storage_type(dtype, [&]<typename S>(S) {
        cuda::encoder_forward(cuda::typed_data<S>(out), tokens.data<int32_t>(), cuda::typed_data<S>(wte),
                              wpe.defined() ? cuda::typed_data<S>(wpe) : nullptr, d.B, d.T, d.C, first_row, d.Vp,
                              cuda_compute_stream());
      });
      return;
#else
      detail::fail_no_cuda_kernel(op);
#endif
  }
}

void encoder_backward(Tensor& dwte, Tensor& dwpe, const Tensor& dout, const Tensor& tokens, int64_t first_row,
                      int64_t vocab_rows) {
  const char* op = "encoder_backward";
  detail::check_float_dtype(op, "dout", dout);
  const DType dtype = dout.dtype();  // parameter gradients are f32 whatever the activations are
  const Device device = detail::check_args(
      op, {{"dwte", dwte}, {"dwpe", dwpe, DType::f32, true}, {"dout", dout, dtype}, {"tokens", tokens, DType::i32}});
  const EncoderDims d = encoder_dims(op, tokens, {"dwte", dwte}, {"dwpe", dwpe});
  detail::check_shape(op, "dout", dout, {d.B, d.T, d.C});
  const int64_t table = table_rows(op, "dwte", first_row, d.Vp, vocab_rows);
  switch (device) {
    case Device::cpu:
      check_token_range(op, tokens, table);
      cpu::encoder_backward(dwte.f32(), dwpe.defined() ? dwpe.f32() : nullptr, dout.f32(), tokens.data<int32_t>(), d.B,
                            d.T, d.C, first_row, d.Vp);
      return;
    case Device::cuda:
#ifdef TESSERA_WITH_CUDA
      // The ids are not checked again (encoder_forward did, on the same tokens): one outside the table
      // adds nothing, and the step need not wait for a copy of them.
      cuda::with_storage_type(dtype, [&]<typename S>(S) {
        cuda::encoder_backward(dwte.f32(), dwpe.defined() ? dwpe.f32() : nullptr, cuda::typed_data<S>(dout),
                               tokens.data<int32_t>(), d.B, d.T, d.C, first_row, d.Vp, cuda_compute_stream());
      });
      return;
#else
      detail::fail_no_cuda_kernel(op);
#endif
  }
}

}  // namespace tessera
