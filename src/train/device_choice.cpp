// --device, --dtype and --device-comm resolution.
#include "train/device_choice.h"

#include <cstdio>
#include <optional>

#include "core/cuda/device.h"
#include "core/error.h"

namespace tessera {

namespace {

void check_device_flag(const std::string& flag) {
  TS_CHECK(flag == "auto" || flag == "cuda" || flag == "cpu", "--device must be auto, cuda or cpu, got '", flag, "'");
}

}  // namespace

DeviceChoice choose_device(const std::string& flag, const DeviceFacts& facts) {
  check_device_flag(flag);
  if (flag == "cpu") return {Device::cpu, ""};
  // The machine first: on a machine without a GPU, what the model needs does not matter.
  for (const std::string& obstacle : {facts.gpu_unusable, facts.model_cpu_only}) {
    if (obstacle.empty()) continue;
    TS_CHECK(flag == "auto", "--device cuda: ", obstacle, "; use --device cpu (or auto)");
    return {Device::cpu, "--device auto: " + obstacle + "; running on the CPU"};
  }
  return {Device::cuda, ""};
}

DeviceChoice choose_device(const std::string& flag, const ModelConfig& model) {
  check_device_flag(flag);
  if (flag == "cpu") return {Device::cpu, ""};
  return choose_device(flag, {cuda_device_count() > 0 ? "" : cuda_unavailable_reason(), gpu_unsupported(model)});
}

DeviceChoice choose_device_noting(const std::string& flag, const ModelConfig& model) {
  const DeviceChoice choice = choose_device(flag, model);
  if (!choice.notice.empty()) std::fprintf(stderr, "%s\n", choice.notice.c_str());
  return choice;
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

DType choose_compute_dtype(const std::string& flag, const DeviceChoice& choice) {
  TS_CHECK(choice.notice.empty() || (flag != "bf16" && flag != "fp16"), "--dtype ", flag,
           " computes on the GPU only, and this run is on the CPU (", choice.notice, "); use --dtype fp32");
  return choose_compute_dtype(flag, choice.device);
}

DeviceCommChoice choose_device_comm(const std::string& flag, const DeviceCommFacts& facts) {
  TS_CHECK(flag == "auto" || flag == "nccl" || flag == "host", "--device-comm must be auto, nccl or host, got '", flag,
           "'");
  TS_CHECK(flag != "nccl" || facts.device == Device::cuda, "--device-comm nccl moves GPU tensors, but this run ",
           "computes on the CPU; drop --device-comm or run with --device cuda");
  if (facts.device != Device::cuda || facts.world_size == 1 || flag == "host") return {};
  // What stands in NCCL's way, if anything: an error for nccl, a notice for auto.
  struct Obstacle {
    const char *what, *fix;
  };
  const std::optional<Obstacle> obstacle =
      !facts.nccl_built
          ? std::optional<Obstacle>({"this build has no NCCL (it was not found when Tessera was configured)",
                                     "install NCCL and rebuild"})
      : !facts.gpu_per_rank
          ? std::optional<Obstacle>({"some node runs more ranks than it has GPUs, and NCCL needs a GPU for each rank",
                                     "start at most one rank per GPU"})
          : std::nullopt;
  if (!obstacle) return {DeviceTransport::nccl, ""};
  TS_CHECK(flag != "nccl", "--device-comm nccl: ", obstacle->what, "; ", obstacle->fix, ", or use --device-comm host");
  return {DeviceTransport::host_staged, std::string("--device-comm auto: ") + obstacle->what +
                                            ", so GPU tensors travel between ranks through host memory over MPI "
                                            "(slow; " + obstacle->fix + " for the fast path)"};
}

std::string compute_dtype_flag(DType dtype) {
  if (dtype == DType::bf16) return "bf16";
  return dtype == DType::f16 ? "fp16" : "fp32";
}

}  // namespace tessera
