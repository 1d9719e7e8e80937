// --device: where a run computes for each flag, machine and model, with the notice when auto falls
// back to the CPU and the error when cuda cannot be had. --device-comm: which way GPU tensors travel
// between ranks for each flag and machine, and the errors naming the flag when NCCL is asked for and
// cannot be had.
#include <gtest/gtest.h>

#include "nn/model_presets.h"
#include "support/test_support.h"
#include "train/device_choice.h"

namespace tessera {
namespace {

using testing::contains;
using testing::error_of;

const DeviceFacts kGpuMachine{"", ""};
const DeviceFacts kNoGpu{"no CUDA device is visible", ""};

TEST(Device, AutoTakesAUsableGpuForAModelItRuns) {
  for (const char* flag : {"auto", "cuda"}) {
    const DeviceChoice choice = choose_device(flag, kGpuMachine);
    EXPECT_EQ(choice.device, Device::cuda) << flag;
    EXPECT_EQ(choice.notice, "") << flag;
  }
  EXPECT_EQ(choose_device("cpu", kGpuMachine).device, Device::cpu);
  EXPECT_EQ(choose_device("cpu", kGpuMachine).notice, "");
}

TEST(Device, WithoutAGpuAutoRunsOnTheCpuAndCudaIsRefused) {
  const DeviceChoice choice = choose_device("auto", kNoGpu);
  EXPECT_EQ(choice.device, Device::cpu);
  EXPECT_EQ(choice.notice, "--device auto: no CUDA device is visible; running on the CPU");
  EXPECT_EQ(error_of([] { choose_device("cuda", kNoGpu); }),
            "--device cuda: no CUDA device is visible; use --device cpu (or auto)");
}

// Gemma 2's soft caps and Qwen2-MoE's sigmoid gate have CPU kernels only: auto runs such a model on
// the CPU of a GPU machine, saying why, and cuda refuses it before anything is built.
TEST(Device, AutoRunsAModelNoGpuKernelServesOnTheCpu) {
  for (const char* preset : {"gemma2-tiny", "qwen2-moe-tiny"}) {
    const std::string cpu_only = gpu_unsupported(model_preset(preset));
    ASSERT_TRUE(contains(cpu_only, "which no GPU kernel does yet")) << preset << ": " << cpu_only;
    const DeviceFacts facts{"", cpu_only};
    const DeviceChoice choice = choose_device("auto", facts);
    EXPECT_EQ(choice.device, Device::cpu) << preset;
    EXPECT_EQ(choice.notice, "--device auto: " + cpu_only + "; running on the CPU");
    EXPECT_EQ(error_of([&] { choose_device("cuda", facts); }),
              "--device cuda: " + cpu_only + "; use --device cpu (or auto)");
    EXPECT_EQ(choose_device("cpu", facts).notice, "");
    // A 16-bit --dtype there says why the run is on the CPU, rather than suggesting --device cuda.
    EXPECT_EQ(choose_compute_dtype("auto", choice), DType::f32);
    EXPECT_EQ(error_of([&] { choose_compute_dtype("bf16", choice); }),
              "--dtype bf16 computes on the GPU only, and this run is on the CPU (" + choice.notice +
                  "); use --dtype fp32");
  }
  EXPECT_EQ(choose_compute_dtype("bf16", choose_device("auto", kGpuMachine)), DType::bf16);
  EXPECT_TRUE(contains(error_of([] { choose_compute_dtype("bf16", DeviceChoice{Device::cpu, ""}); }),
                       "use --dtype fp32 or --device cuda"));
  EXPECT_EQ(gpu_unsupported(model_preset("gemma2-tiny")),
            "gemma2 soft-caps its attention scores and logits, which no GPU kernel does yet");
  EXPECT_EQ(gpu_unsupported(model_preset("gemma3-tiny")), "");  // Gemma 3 has no caps
  EXPECT_EQ(gpu_unsupported(model_preset("gpt2-tiny")), "");
}

// No GPU at all says so first: the model's needs do not matter there.
TEST(Device, AMissingGpuIsNamedBeforeTheModelsNeeds) {
  const DeviceFacts both{"no CUDA device is visible", "gemma2 soft-caps its attention scores and logits"};
  EXPECT_EQ(choose_device("auto", both).notice, "--device auto: no CUDA device is visible; running on the CPU");
}

// This machine's facts: under --device cpu the GPU is not looked for; auto on a CPU-only model never
// takes the GPU, whatever the machine has.
TEST(Device, ThisMachinesChoice) {
  const ModelConfig gemma2 = model_preset("gemma2-tiny");
  EXPECT_EQ(choose_device("cpu", gemma2).device, Device::cpu);
  const DeviceChoice choice = choose_device("auto", gemma2);
  EXPECT_EQ(choice.device, Device::cpu);
  EXPECT_TRUE(contains(choice.notice, "--device auto: ")) << choice.notice;
  EXPECT_EQ(error_of([&] { choose_device("gpu", gemma2); }), "--device must be auto, cuda or cpu, got 'gpu'");
  EXPECT_EQ(error_of([] { choose_device("gpu", kGpuMachine); }), "--device must be auto, cuda or cpu, got 'gpu'");
}

constexpr DeviceCommFacts kGpus{Device::cuda, 4, true, true};  // four ranks, a GPU each, NCCL built

DeviceCommFacts with(DeviceCommFacts facts, auto change) {
  change(facts);
  return facts;
}

TEST(DeviceComm, AutoTakesNcclWhenEveryRankHasItsOwnGpu) {
  for (const char* flag : {"auto", "nccl"}) {
    const DeviceCommChoice choice = choose_device_comm(flag, kGpus);
    EXPECT_EQ(choice.transport, DeviceTransport::nccl) << flag;
    EXPECT_EQ(choice.notice, "") << flag;
  }
  EXPECT_EQ(choose_device_comm("host", kGpus).transport, DeviceTransport::host_staged);
}

TEST(DeviceComm, CpuRunsAndSingleRanksNeedNoChoice) {
  const DeviceCommFacts cpu = with(kGpus, [](DeviceCommFacts& f) { f.device = Device::cpu; });
  const DeviceCommFacts one = with(kGpus, [](DeviceCommFacts& f) { f.world_size = 1; });
  for (const DeviceCommFacts& facts : {cpu, one}) {
    const DeviceCommChoice choice = choose_device_comm("auto", facts);
    EXPECT_EQ(choice.transport, DeviceTransport::host_staged);
    EXPECT_EQ(choice.notice, "");
  }
  EXPECT_EQ(choose_device_comm("nccl", one).transport, DeviceTransport::host_staged);
  EXPECT_TRUE(contains(error_of([&] { choose_device_comm("nccl", cpu); }),
                       "--device-comm nccl moves GPU tensors, but this run computes on the CPU"));
}

TEST(DeviceComm, AutoFallsBackToHostMemoryWithANoticeSayingWhy) {
  const DeviceCommFacts shared = with(kGpus, [](DeviceCommFacts& f) { f.gpu_per_rank = false; });
  const DeviceCommFacts no_nccl = with(kGpus, [](DeviceCommFacts& f) { f.nccl_built = false; });
  const DeviceCommChoice sharing = choose_device_comm("auto", shared);
  EXPECT_EQ(sharing.transport, DeviceTransport::host_staged);
  EXPECT_TRUE(contains(sharing.notice, "more ranks than it has GPUs")) << sharing.notice;
  const DeviceCommChoice unbuilt = choose_device_comm("auto", no_nccl);
  EXPECT_EQ(unbuilt.transport, DeviceTransport::host_staged);
  EXPECT_TRUE(contains(unbuilt.notice, "this build has no NCCL")) << unbuilt.notice;

  EXPECT_TRUE(contains(error_of([&] { choose_device_comm("nccl", shared); }), "start at most one rank per GPU"));
  EXPECT_TRUE(contains(error_of([&] { choose_device_comm("nccl", no_nccl); }), "this build has no NCCL"));
  EXPECT_EQ(choose_device_comm("host", shared).notice, "");
}

TEST(DeviceComm, UnknownValueNamesTheChoices) {
  EXPECT_TRUE(contains(error_of([&] { choose_device_comm("gloo", kGpus); }),
                       "--device-comm must be auto, nccl or host, got 'gloo'"));
}

}  // namespace
}  // namespace tessera
