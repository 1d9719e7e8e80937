// Which device a run computes on, from --device: cpu, cuda (an error naming why when no GPU is
// usable) or auto (the GPU when one is usable, else the CPU with a notice saying why); and in which
// precision, from --dtype: auto (bf16 on the GPU, fp32 on the CPU), fp32, bf16 or fp16 (the GPU's
// 16-bit types; fp16 trains with dynamic loss scaling).
#pragma once

#include <string>

#include "core/tensor.h"

namespace tessera {

struct DeviceChoice {
  Device device = Device::cpu;
  std::string notice;  // non-empty when auto fell back to the CPU
};

DeviceChoice choose_device(const std::string& flag);
// choose_device for commands without a progress line: the notice, if any, goes to stderr.
Device choose_device_noting(const std::string& flag);
// The compute dtype for --dtype on `device`; throws naming the flag when the pair is not supported.
DType choose_compute_dtype(const std::string& flag, Device device);
// The --dtype value naming a compute dtype: fp32, bf16 or fp16 (as PyTorch's benchmarks name them).
std::string compute_dtype_flag(DType dtype);

}  // namespace tessera
