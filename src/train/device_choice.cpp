// --device resolution.
#include "train/device_choice.h"

#include <cstdio>

#include "core/cuda/device.h"
#include "core/error.h"

namespace tessera {

DeviceChoice choose_device(const std::string& flag) {
  TS_CHECK(flag == "auto" || flag == "cuda" || flag == "cpu", "--device must be auto, cuda or cpu, got '", flag, "'");
  if (flag == "cpu") return {Device::cpu, ""};
  const bool usable = cuda_device_count() > 0;
  if (flag == "cuda") {
    TS_CHECK(usable, "--device cuda: ", cuda_unavailable_reason(), "; use --device cpu (or auto)");
    return {Device::cuda, ""};
  }
  if (usable) return {Device::cuda, ""};
  return {Device::cpu, "--device auto: " + cuda_unavailable_reason() + "; running on the CPU"};
}

Device choose_device_noting(const std::string& flag) {
  const DeviceChoice choice = choose_device(flag);
  if (!choice.notice.empty()) std::fprintf(stderr, "%s\n", choice.notice.c_str());
  return choice.device;
}

DType choose_compute_dtype(const std::string& flag, Device device) {
  TS_CHECK(flag == "auto" || flag == "fp32" || flag == "bf16" || flag == "fp16",
           "--dtype must be auto, fp32, bf16 or fp16, got '", flag, "'");
  if (flag == "auto") return device == Device::cuda ? DType::bf16 : DType::f32;
  TS_CHECK(flag == "fp32" || device == Device::cuda, "--dtype ", flag,
           " computes on the GPU only (the CPU is the fp32 reference); use --dtype fp32 or --device cuda");
  if (flag == "bf16") return DType::bf16;
  return flag == "fp16" ? DType::f16 : DType::f32;
}

std::string compute_dtype_flag(DType dtype) {
  if (dtype == DType::bf16) return "bf16";
  return dtype == DType::f16 ? "fp16" : "fp32";
}

}  // namespace tessera
