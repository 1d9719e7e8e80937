// Which device a run computes on, from --device: cpu, cuda (an error naming why when no GPU is
// usable or the model needs a computation no GPU kernel does yet) or auto (the GPU when one is usable
// and the model runs there, else the CPU with a notice saying why); and in which
// precision, from --dtype: auto (bf16 on the GPU, fp32 on the CPU), fp32, bf16 or fp16 (the GPU's
// 16-bit types; fp16 trains with dynamic loss scaling); and how GPU tensors travel between ranks,
// from --device-comm.
#pragma once

#include <string>

#include "core/tensor.h"
#include "nn/model_config.h"
#include "parallel/comm.h"

namespace tessera {

struct DeviceChoice {
  Device device = Device::cpu;
  std::string notice;  // non-empty when auto fell back to the CPU
};

// What decides --device besides the flag: why no GPU is usable here ("" when one is) and why the model
// cannot run on one (gpu_unsupported's line, "" when it can).
struct DeviceFacts {
  std::string gpu_unusable;
  std::string model_cpu_only;
};
DeviceChoice choose_device(const std::string& flag, const DeviceFacts& facts);
// choose_device on this machine for `model` (the GPU is not looked for under --device cpu).
DeviceChoice choose_device(const std::string& flag, const ModelConfig& model);
// choose_device for commands without a progress line: the notice, if any, goes to stderr.
DeviceChoice choose_device_noting(const std::string& flag, const ModelConfig& model);
// The compute dtype for --dtype on `device`; throws naming the flag when the pair is not supported.
DType choose_compute_dtype(const std::string& flag, Device device);
// The same for choose_device's choice: a 16-bit --dtype on a run auto put on the CPU says why it is there.
DType choose_compute_dtype(const std::string& flag, const DeviceChoice& choice);
// How GPU tensors travel between ranks, from --device-comm: nccl, host (through host memory over
// MPI) or auto (NCCL when the build has it and every rank has a GPU of its own, else host with a
// notice saying why). Runs on the CPU or a world of one need no choice (host, silently). Throws
// naming the flag when nccl is asked for and cannot be had.
struct DeviceCommFacts {
  Device device;      // where the run computes
  int world_size;
  bool nccl_built;    // the build has the NCCL backend
  bool gpu_per_rank;  // no two ranks share a GPU
};
struct DeviceCommChoice {
  DeviceTransport transport = DeviceTransport::host_staged;
  std::string notice;  // non-empty when auto chose host for a multi-rank GPU run
};
DeviceCommChoice choose_device_comm(const std::string& flag, const DeviceCommFacts& facts);
// The --dtype value naming a compute dtype: fp32, bf16 or fp16 (as PyTorch's benchmarks name them).
std::string compute_dtype_flag(DType dtype);

}  // namespace tessera
