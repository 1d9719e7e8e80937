// The experts' grouped linear layers: shape, dtype and offsets checks, then dispatch by device. On the
// GPU each non-empty group is one linear layer (ops/matmul.h, cuBLASLt) on views of its rows and its
// expert's weight, its algorithm found per bucket of row counts (ops/matmul_tuning.h): the groups' sizes
// change every step.
// TODO(issue 11): one grouped cuBLASLt call instead of E launches when experts are many and small.
#include "ops/grouped_matmul.h"

#include <climits>

#include "ops/cpu/grouped_matmul_cpu.h"
#include "ops/matmul.h"
#include "ops/op_checks.h"

namespace tessera {
namespace {

struct GroupedDims {
  int64_t M_rows, C, OC, E;
};

// x (M_rows,C), weight (E,OC,C); offsets (E+1) i32 on the host, non-decreasing from 0 to at most M_rows.
GroupedDims grouped_dims(const char* op, const Tensor& x, const Tensor& weight, const Tensor& offsets) {
  TS_CHECK(x.ndim() == 2 && x.size(1) > 0, op, ": x must be (M_rows,C) with C > 0, got ", shape_string(x.shape()));
  TS_CHECK(weight.ndim() == 3 && weight.size(2) == x.size(1) && weight.size(0) > 0 && weight.size(1) > 0, op,
           ": weight must be (E,OC,", x.size(1), ") with E, OC > 0 to match x ", shape_string(x.shape()), ", got ",
           shape_string(weight.shape()));
  const GroupedDims d{x.size(0), x.size(1), weight.size(1), weight.size(0)};
  TS_CHECK(d.M_rows <= INT_MAX && d.C <= INT_MAX && d.OC <= INT_MAX, op, ": x ", shape_string(x.shape()),
           " times weight ", shape_string(weight.shape()), " has a dimension too large for 32-bit BLAS");
  TS_CHECK(offsets.defined(), op, ": offsets is undefined");
  TS_CHECK(offsets.dtype() == DType::i32, op, ": offsets must be i32, got ", dtype_name(offsets.dtype()));
  TS_CHECK(offsets.device() == Device::cpu, op, ": offsets must be a host (CPU) tensor, got one on the GPU");
  detail::check_shape(op, "offsets", offsets, {d.E + 1});
  const int32_t* o = offsets.data<int32_t>();
  TS_CHECK(o[0] == 0, op, ": offsets[0] = ", o[0], " must be 0: the groups tile rows [0, offsets[E])");
  for (int64_t e = 0; e < d.E; e++)
    TS_CHECK(o[e + 1] >= o[e], op, ": offsets[", e + 1, "] = ", o[e + 1], " is below offsets[", e, "] = ", o[e],
             "; offsets must be non-decreasing");
  TS_CHECK(o[d.E] <= d.M_rows, op, ": offsets[E] = ", o[d.E], " is past the ", d.M_rows, " rows of x ",
           shape_string(x.shape()));
  return d;
}

// Rows [offsets[e], offsets[e + 1]) of a (M_rows, width) tensor.
Tensor group_rows(const Tensor& t, const int32_t* offsets, int64_t e) {
  return t.view(offsets[e] * t.size(1), {offsets[e + 1] - offsets[e], t.size(1)});
}

// Expert e's (OC, C) matrix of an (E, OC, C) tensor.
Tensor expert_matrix(const Tensor& t, int64_t e) { return t.view(e * t.size(1) * t.size(2), {t.size(1), t.size(2)}); }

}  // namespace

void grouped_matmul_forward(Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& offsets) {
  const char* op = "grouped_matmul_forward";
  detail::check_float_dtype(op, "x", x);
  const DType t = x.dtype();
  const Device device = detail::check_args(op, {{"out", out, t}, {"x", x, t}, {"weight", weight, t}});
  const GroupedDims d = grouped_dims(op, x, weight, offsets);
  detail::check_shape(op, "out", out, {d.M_rows, d.OC});
  switch (device) {
    case Device::cpu:
      cpu::grouped_matmul_forward(out.f32(), x.f32(), weight.f32(), offsets.data<int32_t>(), d.E, d.C, d.OC);
      return;
    case Device::cuda: {
      const int32_t* o = offsets.data<int32_t>();
      const Tensor no_bias;
      for (int64_t e = 0; e < d.E; e++) {
        if (o[e + 1] == o[e]) continue;
        Tensor out_e = group_rows(out, o, e);
        matmul_forward(out_e, group_rows(x, o, e), expert_matrix(weight, e), no_bias, MatmulAlgoChoice::row_buckets);
      }
      return;
    }
  }
}

void grouped_matmul_backward(Tensor& dx, Tensor& dweight, const Tensor& dout, const Tensor& x, const Tensor& weight,
                             const Tensor& offsets) {
  const char* op = "grouped_matmul_backward";
  detail::check_float_dtype(op, "x", x);
  const DType t = x.dtype();
  const Device device = detail::check_args(op, {{"dx", dx, t, /*optional=*/true},
                                                {"dweight", dweight, DType::f32, /*optional=*/true},
                                                {"dout", dout, t},
                                                {"x", x, t},
                                                {"weight", weight, t}});
  const GroupedDims d = grouped_dims(op, x, weight, offsets);
  detail::check_shape(op, "dout", dout, {d.M_rows, d.OC});
  if (dweight.defined()) detail::check_shape(op, "dweight", dweight, weight.shape());
  if (dx.defined()) detail::check_shape(op, "dx", dx, x.shape());
  switch (device) {
    case Device::cpu:
      cpu::grouped_matmul_backward(dx.defined() ? dx.f32() : nullptr, dweight.defined() ? dweight.f32() : nullptr,
                                   dout.f32(), x.f32(), weight.f32(),
                                   offsets.data<int32_t>(), d.E, d.C, d.OC);
      return;
    case Device::cuda: {
      const int32_t* o = offsets.data<int32_t>();
      Tensor no_bias;
      for (int64_t e = 0; e < d.E; e++) {
        if (o[e + 1] == o[e]) continue;
        Tensor dx_e = dx.defined() ? group_rows(dx, o, e) : Tensor();
        Tensor dweight_e = dweight.defined() ? expert_matrix(dweight, e) : Tensor();
        matmul_backward(dx_e, dweight_e, no_bias, group_rows(dout, o, e), group_rows(x, o, e), expert_matrix(weight, e),
                        MatmulAlgoChoice::row_buckets);
      }
      return;
    }
  }
}

}  // namespace tessera
