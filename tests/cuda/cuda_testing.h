// Helpers for the CUDA op tests: a fixture that skips (reported as skipped by ctest) when there is
// no CUDA device or no CUDA backend, copies between host and device, NaN-poisoned outputs (so an
// element the kernel never writes fails the comparison), and a comparison with the CPU twin by
// relative L2 error and per element.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
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

// Host conversions between f32 and bf16 (round to nearest even), for bf16 kernels checked against
// the fp32 CPU op run on the same (rounded) inputs.
inline Tensor to_bf16(const Tensor& f32) {
  Tensor t = Tensor::zeros(f32.shape(), DType::bf16);
  for (int64_t i = 0; i < f32.numel(); i++) t.data<bf16>()[i] = tessera::to_bf16(f32.f32()[i]);
  return t;
}
inline Tensor to_f32(const Tensor& host) {
  if (host.dtype() == DType::f32) return host;
  Tensor t = Tensor::zeros(host.shape());
  for (int64_t i = 0; i < host.numel(); i++) t.f32()[i] = to_float(host.data<bf16>()[i]);
  return t;
}
// f32 values rounded through bf16 and back: the inputs a bf16 kernel really sees.
inline Tensor rounded_to_bf16(const Tensor& f32) { return to_f32(to_bf16(f32)); }
// A device copy of the f32 host tensor in `dtype` (f32 or bf16).
inline Tensor to_gpu_as(const Tensor& f32, DType dtype) { return to_gpu(dtype == DType::bf16 ? to_bf16(f32) : f32); }

// The largest |element| of an f32 host tensor: the scale of absolute tolerances.
inline double max_abs(const Tensor& t) {
  double m = 0;
  for (int64_t i = 0; i < t.numel(); i++) m = std::max(m, std::fabs(double(t.f32()[i])));
  return m;
}

// Half a bf16 ulp, relative: the error of rounding an fp32 result to bf16 once.
constexpr double kBf16Rounding = 1.0 / 256;

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

// The device tensor `gpu` (f32 or bf16) against the f32 CPU result `cpu`: ||gpu - cpu|| / ||cpu||
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
