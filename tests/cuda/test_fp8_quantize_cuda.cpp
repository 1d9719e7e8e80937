// fp8 fake-quantize on the GPU against the CPU op, bit for bit: f32, bf16 and f16 storage (the CPU op
// on the same rounded inputs, its result rounded to the dtype), both formats, exact and inexact
// scales, lengths 1 to 3M (odd: vector groups and a tail; past one grid-stride pass), aligned and
// misaligned tensors, outputs poisoned; amax equal, accumulated into its slot by the atomics; NaN and
// infinities in x; in place. And core/fp8.h run on the device beside <cuda_fp8.h>'s conversions:
// fp8_encode equals __nv_cvt_float_to_fp8(x, __NV_SATFINITE, ...) on millions of floats of every
// kind, fp8_decode equals __nv_cvt_fp8_to_halfraw on all 256 codes; and, with no device needed,
// the same against those functions' host versions.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/fp8.h"
#include "cuda/cuda_testing.h"
#include "ops/fp8_quantize.h"

#ifdef TESSERA_WITH_CUDA
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "ops/cuda/fp8_quantize_cuda.h"
#endif

namespace tessera {
namespace {

using testing::to_gpu;

constexpr Fp8Format kFormats[] = {Fp8Format::e4m3, Fp8Format::e5m2};

class Fp8QuantizeCuda : public testing::CudaTest {};

std::string hex(uint32_t v) {
  char text[16];
  std::snprintf(text, sizeof(text), "0x%x", v);
  return text;
}

// The device tensor `gpu` (any storage dtype) against the f32 CPU result rounded to that dtype: equal
// bits in every element, or NaN in both (a NaN's payload is the hardware's: GPUs give the canonical
// NaN where the CPU keeps the operand's).
void expect_same_bits(const Tensor& gpu, const Tensor& cpu_f32, const char* what) {
  const Tensor got = testing::to_f32(testing::to_cpu(gpu));
  const Tensor expected = testing::to_f32(testing::to_storage(cpu_f32, gpu.dtype()));
  ASSERT_EQ(got.numel(), expected.numel()) << what;
  int64_t wrong = 0;
  for (int64_t i = 0; i < got.numel(); i++) {
    const float g = got.f32()[i], e = expected.f32()[i];
    const bool same = std::bit_cast<uint32_t>(g) == std::bit_cast<uint32_t>(e) || (std::isnan(g) && std::isnan(e));
    if (!same && wrong++ < 5)
      ADD_FAILURE() << what << "[" << i << "] = " << g << " (" << hex(std::bit_cast<uint32_t>(g)) << ") on the GPU, "
                    << e << " (" << hex(std::bit_cast<uint32_t>(e)) << ") on the CPU";
  }
  EXPECT_EQ(wrong, 0) << what << ": elements differ";
}

// x in `dtype`'s range (f16 overflows past 2^16), over the binades around both formats' ranges.
Tensor wide_input(int64_t n, uint64_t seed, DType dtype) {
  const int hi_exp = dtype == DType::f16 ? 14 : 18;
  return testing::rounded_to(testing::random_wide_tensor({n}, seed, -24, hi_exp), dtype);
}

// Runs the op on the CPU (f32 x) and on the GPU (x in `dtype`, aligned or one element in), into
// slot 1 of an amax already holding values, and compares out and amax.
void expect_gpu_matches_cpu(const Tensor& x, DType dtype, Fp8Format format, float scale, bool aligned) {
  Tensor out = Tensor::zeros(x.shape());
  Tensor amax = testing::tensor_of({3}, {5.0f, 0.25f, 9.0f});
  Tensor amax_gpu = to_gpu(amax);
  fp8_quantize_dequantize(out, x, format, scale, amax, 1);
  Tensor nan = Tensor::zeros(x.shape());
  testing::fill(nan, testing::kNaN);
  const Tensor x_gpu = aligned ? testing::to_gpu_as(x, dtype) : testing::misaligned_gpu(x, dtype);
  Tensor out_gpu = aligned ? testing::to_gpu_as(nan, dtype) : testing::misaligned_gpu(nan, dtype);
  fp8_quantize_dequantize(out_gpu, x_gpu, format, scale, amax_gpu, 1);
  expect_same_bits(out_gpu, out, "out");
  expect_same_bits(amax_gpu, amax, "amax");
}

TEST_F(Fp8QuantizeCuda, MatchesCpuBitForBit) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  for (const DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    for (const int64_t n : {int64_t(1), int64_t(7), int64_t(4099), int64_t(3000017)}) {
      const Tensor x = wide_input(n, seed + uint64_t(n), dtype);
      for (const Fp8Format format : kFormats) {
        for (const float scale : {1.0f, 0x1p-6f, 3.0f}) {
          for (const bool aligned : {true, false}) {
            SCOPED_TRACE(std::string(dtype_name(dtype)) + " n " + std::to_string(n) + " " +
                         std::string(fp8_format_name(format)) + " scale " + std::to_string(scale) +
                         (aligned ? " aligned" : " misaligned"));
            expect_gpu_matches_cpu(x, dtype, format, scale, aligned);
          }
        }
      }
    }
  }
}

TEST_F(Fp8QuantizeCuda, NanAndInfinitiesMatchCpu) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  for (const DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor x = wide_input(100001, seed, dtype);
    x.f32()[17] = std::numeric_limits<float>::infinity();
    x.f32()[5000] = -std::numeric_limits<float>::infinity();
    Tensor x_finite = testing::copy_of(x);
    for (const Fp8Format format : kFormats) expect_gpu_matches_cpu(x_finite, dtype, format, 0.5f, true);
    x.f32()[99999] = testing::kNaN;
    for (const Fp8Format format : kFormats) expect_gpu_matches_cpu(x, dtype, format, 0.5f, true);
  }
}

TEST_F(Fp8QuantizeCuda, InPlaceEqualsOutOfPlace) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  for (const DType dtype : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor x = wide_input(54321, seed, dtype);
    Tensor x_gpu = testing::to_gpu_as(x, dtype), out_gpu = testing::poisoned_gpu(x.shape(), dtype);
    Tensor amax_gpu = Tensor::zeros({2}, DType::f32, Device::cuda);
    fp8_quantize_dequantize(out_gpu, x_gpu, Fp8Format::e4m3, 4.0f, amax_gpu, 0);
    fp8_quantize_dequantize(x_gpu, x_gpu, Fp8Format::e4m3, 4.0f, amax_gpu, 1);
    const Tensor a = testing::to_f32(testing::to_cpu(x_gpu)), b = testing::to_f32(testing::to_cpu(out_gpu));
    testing::expect_identical(a, b, "in place");
    const Tensor amax = testing::to_cpu(amax_gpu);
    EXPECT_EQ(amax.f32()[0], amax.f32()[1]);
    EXPECT_EQ(amax.f32()[0], float(testing::max_abs(x)));
  }
}

TEST_F(Fp8QuantizeCuda, RefusesAmaxOnAnotherDevice) {
  const Tensor x_gpu = Tensor::zeros({4}, DType::bf16, Device::cuda);
  Tensor out_gpu = Tensor::zeros({4}, DType::bf16, Device::cuda), amax_cpu = Tensor::zeros({1});
  const std::string message =
      testing::error_of([&] { fp8_quantize_dequantize(out_gpu, x_gpu, Fp8Format::e5m2, 1.0f, amax_cpu, 0); });
  EXPECT_TRUE(testing::contains(message, "amax lives on another device")) << message;
}

#ifdef TESSERA_WITH_CUDA

// Floats of every kind: each code's value, the midpoints between codes and the floats beside both,
// values around the largest and the smallest, random bit patterns (NaNs and infinities included) and
// random magnitudes in the formats' ranges, both signs.
std::vector<float> encoder_inputs(Fp8Format f, uint64_t seed) {
  std::vector<float> xs;
  auto with_neighbours = [&](float v) {
    xs.push_back(v);
    xs.push_back(std::nextafter(v, 0.0f));
    xs.push_back(std::nextafter(v, std::numeric_limits<float>::infinity()));
  };
  std::vector<float> values;
  for (int code = 0; code < 0x80; code++)
    if (std::isfinite(fp8_decode(uint8_t(code), f))) values.push_back(fp8_decode(uint8_t(code), f));
  for (size_t k = 0; k < values.size(); k++) {
    with_neighbours(values[k]);
    if (k + 1 < values.size()) with_neighbours(float((double(values[k]) + double(values[k + 1])) / 2));
  }
  for (const float v : {2 * fp8_max(f), 1e30f, std::numeric_limits<float>::max(), std::numeric_limits<float>::min(),
                        0x1p-149f, 0x1p-17f, 0x1p-10f, std::numeric_limits<float>::infinity()})
    with_neighbours(v);
  xs.push_back(std::numeric_limits<float>::quiet_NaN());
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<uint32_t> any_bits;
  for (int i = 0; i < (1 << 21); i++) xs.push_back(std::bit_cast<float>(any_bits(rng)));
  std::uniform_int_distribution<int> exponent(-30, 20);
  std::uniform_int_distribution<uint32_t> mantissa(0, (1u << 23) - 1);
  for (int i = 0; i < (1 << 21); i++)
    xs.push_back(std::bit_cast<float>(uint32_t(exponent(rng) + 127) << 23 | mantissa(rng)));
  const size_t n = xs.size();
  for (size_t i = 0; i < n; i++) xs.push_back(-xs[i]);
  return xs;
}

TEST_F(Fp8QuantizeCuda, EncodeEqualsCudaSatfiniteConversion) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  for (const Fp8Format f : kFormats) {
    SCOPED_TRACE(fp8_format_name(f));
    const std::vector<float> xs = encoder_inputs(f, seed);
    const int64_t n = int64_t(xs.size());
    Tensor x = Tensor::zeros({n});
    std::copy(xs.begin(), xs.end(), x.f32());
    const Tensor x_gpu = to_gpu(x);
    Tensor cuda_gpu = Tensor::zeros({n}, DType::i32, Device::cuda);
    Tensor ours_gpu = Tensor::zeros({n}, DType::i32, Device::cuda);
    cuda::fp8_encode_beside_cuda(cuda_gpu.data<int32_t>(), ours_gpu.data<int32_t>(), x_gpu.f32(), n, f,
                                 cuda_compute_stream());
    const Tensor theirs = testing::to_cpu(cuda_gpu), ours = testing::to_cpu(ours_gpu);
    int64_t wrong = 0, host_wrong = 0;
    for (int64_t i = 0; i < n; i++) {
      const int32_t c = theirs.data<int32_t>()[i], o = ours.data<int32_t>()[i];
      const uint32_t bits = std::bit_cast<uint32_t>(xs[size_t(i)]);
      if (c != o && wrong++ < 8)
        ADD_FAILURE() << "x = " << hex(bits) << ": __nv_cvt_float_to_fp8 " << hex(uint32_t(c))
                      << ", fp8_encode on the device " << hex(uint32_t(o));
      if (o != fp8_encode(xs[size_t(i)], f) && host_wrong++ < 8)
        ADD_FAILURE() << "x = " << hex(bits) << ": fp8_encode " << hex(uint32_t(o)) << " on the device, "
                      << hex(fp8_encode(xs[size_t(i)], f)) << " on the host";
    }
    EXPECT_EQ(wrong, 0) << "of " << n << " floats";
    EXPECT_EQ(host_wrong, 0) << "of " << n << " floats";
  }
}

TEST_F(Fp8QuantizeCuda, DecodeEqualsCudaConversion) {
  for (const Fp8Format f : kFormats) {
    SCOPED_TRACE(fp8_format_name(f));
    Tensor cuda_gpu = Tensor::zeros({256}, DType::f32, Device::cuda);
    Tensor ours_gpu = Tensor::zeros({256}, DType::f32, Device::cuda);
    cuda::fp8_decode_beside_cuda(cuda_gpu.f32(), ours_gpu.f32(), f, cuda_compute_stream());
    const Tensor theirs = testing::to_cpu(cuda_gpu), ours = testing::to_cpu(ours_gpu);
    for (int code = 0; code < 256; code++) {
      const float c = theirs.f32()[code], o = ours.f32()[code], host = fp8_decode(uint8_t(code), f);
      if (std::isnan(c)) {
        EXPECT_TRUE(std::isnan(o) && std::isnan(host)) << hex(uint32_t(code));
        continue;
      }
      EXPECT_EQ(std::bit_cast<uint32_t>(o), std::bit_cast<uint32_t>(c)) << hex(uint32_t(code));  // -0 included
      EXPECT_EQ(std::bit_cast<uint32_t>(host), std::bit_cast<uint32_t>(c)) << hex(uint32_t(code));
    }
  }
}

// Without a device: <cuda_fp8.h>'s host versions of the same conversions (NVIDIA's emulation of the
// instructions) against core/fp8.h on every 127th fp32 bit pattern (NaNs, infinities, subnormals
// included) and on all 256 codes.
TEST(Fp8QuantizeCudaHost, EncodeAndDecodeEqualCudaHostConversions) {
  for (const Fp8Format f : kFormats) {
    SCOPED_TRACE(fp8_format_name(f));
    const __nv_fp8_interpretation_t kind = f == Fp8Format::e4m3 ? __NV_E4M3 : __NV_E5M2;
    int64_t wrong = 0;
    for (uint64_t bits = 0; bits <= 0xffffffffu; bits += 127) {
      const float x = std::bit_cast<float>(uint32_t(bits));
      const uint8_t theirs = __nv_cvt_float_to_fp8(x, __NV_SATFINITE, kind), ours = fp8_encode(x, f);
      if (theirs != ours && wrong++ < 8)
        ADD_FAILURE() << "x = " << hex(uint32_t(bits)) << ": __nv_cvt_float_to_fp8 " << hex(theirs) << ", fp8_encode "
                      << hex(ours);
    }
    EXPECT_EQ(wrong, 0);
    for (int code = 0; code < 256; code++) {
      const float theirs = __half2float(__half(__nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t(code), kind)));
      const float ours = fp8_decode(uint8_t(code), f);
      if (std::isnan(theirs))
        EXPECT_TRUE(std::isnan(ours)) << hex(uint32_t(code));
      else
        EXPECT_EQ(std::bit_cast<uint32_t>(ours), std::bit_cast<uint32_t>(theirs)) << hex(uint32_t(code));
    }
  }
}

#endif  // TESSERA_WITH_CUDA

}  // namespace
}  // namespace tessera
