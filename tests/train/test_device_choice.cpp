// --device-comm: which way GPU tensors travel between ranks for each flag and machine, and the
// errors naming the flag when NCCL is asked for and cannot be had.
#include <gtest/gtest.h>

#include "support/test_support.h"
#include "train/device_choice.h"

namespace tessera {
namespace {

using testing::contains;
using testing::error_of;

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
