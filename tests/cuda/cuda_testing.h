// Helpers for the CUDA op tests: a fixture that skips (reported as skipped by ctest) when there is
// no CUDA device or no CUDA backend, and its twin run once per low-precision storage dtype (bf16,
// f16); host rounding to those dtypes and its size; copies between host and device, NaN-poisoned
// outputs (so an element the kernel never writes fails the comparison), and a comparison with the
// CPU twin by relative L2 error and per element.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <random>
#include <string>

#include "core/cuda/device.h"
#include "ops/op_testing.h"

namespace tessera::testing {

class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << cuda_unavailable_reason();
  }
};

// A seed drawn afresh for every run (the kernels must compute the same function on any input);
// tests put it in a SCOPED_TRACE so a failure can be replayed.
inline uint64_t fresh_seed() {
  static std::random_device device;
  return (uint64_t(device()) << 32) | device();
}

inline Tensor to_gpu(const Tensor& host) { return copy_to_device(host); }
inline Tensor to_cpu(const Tensor& device) { return copy_to_host(device); }

// Host conversions between f32 and a storage dtype: f32 as it is, bf16 and f16 rounded to nearest
// even, for kernels in that dtype checked against the fp32 CPU op run on the same (rounded) inputs.
inline Tensor to_storage(const Tensor& f32, DType dtype) {
  if (dtype == DType::f32) return f32;
  Tensor t = Tensor::zeros(f32.shape(), dtype);
  for (int64_t i = 0; i < f32.numel(); i++) {
    if (dtype == DType::bf16)
      t.data<bf16>()[i] = to_bf16(f32.f32()[i]);
    else
      t.data<f16>()[i] = to_f16(f32.f32()[i]);
  }
  return t;
}
// An f32 host tensor holding the values of an f32, bf16 or f16 one (exactly: both widen exactly).
inline Tensor to_f32(const Tensor& host) {
  if (host.dtype() == DType::f32) return host;
  Tensor t = Tensor::zeros(host.shape());
  for (int64_t i = 0; i < host.numel(); i++)
    t.f32()[i] = host.dtype() == DType::bf16 ? to_float(host.data<bf16>()[i]) : to_float(host.data<f16>()[i]);
  return t;
}
// f32 values rounded through `dtype` and back: the inputs a kernel in `dtype` really sees.
inline Tensor rounded_to(const Tensor& f32, DType dtype) { return to_f32(to_storage(f32, dtype)); }
// A device copy of the f32 host tensor in `dtype` (f32, bf16 or f16).
inline Tensor to_gpu_as(const Tensor& f32, DType dtype) { return to_gpu(to_storage(f32, dtype)); }

// The storage dtypes below f32 that every CUDA op takes (fp32 arithmetic, one rounding at each
// store), and their names for value-parameterised tests ("bf16", "f16").
inline constexpr DType kLowPrecisionDTypes[] = {DType::bf16, DType::f16};
inline std::string dtype_param_name(const ::testing::TestParamInfo<DType>& info) {
  return std::string(dtype_name(info.param));
}

// A GPU test run once for each of kLowPrecisionDTypes, GetParam() being the dtype.
class CudaLowPrecisionTest : public CudaTest, public ::testing::WithParamInterface<DType> {};

// Half an ulp, relative: the error of rounding an fp32 result to `dtype` once (bf16 keeps 8
// significant bits, f16 11, f32 is the reference). Below 2^-14 f16 is subnormal and the error is
// 2^-25 absolute instead, which every absolute tolerance of these tests covers.
constexpr double rounding_of(DType dtype) {
  return dtype == DType::bf16 ? 1.0 / 256 : dtype == DType::f16 ? 1.0 / 2048 : 0.0;
}

// A bound first set for bf16, scaled to `dtype` by the ratio of their roundings (f16: 8x tighter);
// the bf16 value itself, exactly, for bf16.
constexpr double scaled_from_bf16(double bf16_bound, DType dtype) {
  return bf16_bound * rounding_of(dtype) / rounding_of(DType::bf16);
}

// True when `message` says a tensor of `dtype` is on the CPU ("x is f16 on the CPU"), the dtype a
// whole word: "f16" inside "bf16" does not count, nor a dtype the message merely lists as allowed.
inline bool names_dtype_on_cpu(const std::string& message, DType dtype) {
  const std::string phrase = std::string(dtype_name(dtype)) + " on the CPU";
  for (size_t at = message.find(phrase); at != std::string::npos; at = message.find(phrase, at + 1))
    if (at == 0 || !std::isalnum(static_cast<unsigned char>(message[at - 1]))) return true;
  return false;
}

// The largest |element| of an f32 host tensor: the scale of absolute tolerances.
inline double max_abs(const Tensor& t) {
  double m = 0;
  for (int64_t i = 0; i < t.numel(); i++) m = std::max(m, std::fabs(double(t.f32()[i])));
  return m;
}

// A device tensor in `dtype` holding host_f32, starting one element into its storage, so it is not
// 16-byte aligned and vectorised kernels take their scalar path.
inline Tensor misaligned_gpu(const Tensor& host_f32, DType dtype) {
  Tensor t = Tensor::zeros({host_f32.numel() + 1}, dtype, Device::cuda).view(1, host_f32.shape());
  copy_tensor(t, to_gpu_as(host_f32, dtype));
  return t;
}

// A device tensor of `shape` full of NaN.
inline Tensor poisoned_gpu(const Shape& shape, DType dtype = DType::f32) {
  Tensor host = Tensor::zeros(shape);
  fill(host, std::numeric_limits<float>::quiet_NaN());
  return to_gpu_as(host, dtype);
}

// The device tensor `gpu` (f32, bf16 or f16) against the f32 CPU result `cpu`: ||gpu - cpu|| / ||cpu||
// <= rel_l2 and every element within atol + rtol |cpu|; NaN never passes.
inline void expect_matches_cpu(const Tensor& gpu, const Tensor& cpu, double rel_l2, double atol, double rtol,
                               const char* what) {
  ASSERT_EQ(gpu.device(), Device::cuda) << what;
  const Tensor got = to_f32(to_cpu(gpu));
  ASSERT_EQ(got.numel(), cpu.numel()) << what;
  double diff2 = 0.0, ref2 = 0.0;
  int64_t bad = 0;
  for (int64_t i = 0; i < got.numel(); i++) {
    const double g = got.f32()[i], r = cpu.f32()[i];
    diff2 += (g - r) * (g - r);
    ref2 += r * r;
    const bool ok = std::fabs(g - r) <= atol + rtol * std::fabs(r);  // false for NaN
    if (!ok && bad++ < 5) ADD_FAILURE() << what << "[" << i << "] = " << g << " on the GPU, " << r << " on the CPU";
  }
  EXPECT_EQ(bad, 0) << what << ": elements out of tolerance";
  const double rel = ref2 > 0.0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
  EXPECT_LE(rel, rel_l2) << what << ": relative L2 error";
}

// Token ids uniform in [0, vocab), as an i32 (B,T) host tensor; fresh for every seed.
inline Tensor random_ids(Shape shape, int64_t vocab, uint64_t seed) {
  Tensor t = Tensor::zeros(shape, DType::i32);
  const std::vector<float> u = random_floats(t.numel(), seed, 0.0f, float(vocab));
  for (int64_t i = 0; i < t.numel(); i++) t.data<int32_t>()[i] = std::min(int32_t(vocab - 1), int32_t(u[size_t(i)]));
  return t;
}

}  // namespace tessera::testing
