// User-defined MPI operations over bf16 and f16 words.
#include "parallel/mpi_float16_ops.h"

#include <algorithm>
#include <type_traits>

#include "core/error.h"

namespace tessera {
namespace {

template <typename T>
float widen(T v) {
  return to_float(v);
}

template <typename T>
T narrow(float f) {
  if constexpr (std::is_same_v<T, bf16>)
    return to_bf16(f);
  else
    return to_f16(f);
}

// inout[i] = in[i] (op) inout[i], element by element in f32.
template <typename T, ReduceOp Op>
void combine(void* in, void* inout, int* len, MPI_Datatype*) {
  const T* a = static_cast<const T*>(in);
  T* b = static_cast<T*>(inout);
  for (int i = 0; i < *len; ++i) {
    const float x = widen(a[i]), y = widen(b[i]);
    const float r = Op == ReduceOp::sum ? x + y : Op == ReduceOp::max ? std::max(x, y) : std::min(x, y);
    b[i] = narrow<T>(r);
  }
}

template <typename T>
struct Float16Ops {
  MPI_Op sum, max, min;
  Float16Ops() {
    MPI_Op_create(&combine<T, ReduceOp::sum>, /*commute=*/1, &sum);
    MPI_Op_create(&combine<T, ReduceOp::max>, 1, &max);
    MPI_Op_create(&combine<T, ReduceOp::min>, 1, &min);
  }
  MPI_Op get(ReduceOp op) const { return op == ReduceOp::sum ? sum : op == ReduceOp::max ? max : min; }
};

}  // namespace

MPI_Op mpi_float16_op(DType dtype, ReduceOp op) {
  TS_CHECK(dtype == DType::bf16 || dtype == DType::f16, "mpi_float16_op: ", dtype_name(dtype), " is not a 16-bit float");
  // Function-local statics: created once, on first use, thread-safely.
  if (dtype == DType::bf16) {
    static const Float16Ops<bf16> ops;
    return ops.get(op);
  }
  static const Float16Ops<f16> ops;
  return ops.get(op);
}

}  // namespace tessera
