// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011) as one
// host-and-device function: four 32-bit words that depend only on (seed, stream, index), so the CPU
// reference and a CUDA kernel draw the same bits for the same element (core/rng.h builds on it).
#pragma once

#include <stdint.h>

#include "core/host_device.h"

namespace tessera {

struct PhiloxWords {
  uint32_t w[4];
};

// The 128-bit counter (index, stream) under the 64-bit key `seed`, ten rounds.
TS_HOST_DEVICE inline PhiloxWords philox4x32(uint64_t seed, uint64_t stream, uint64_t index) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  uint32_t c0 = uint32_t(index), c1 = uint32_t(index >> 32), c2 = uint32_t(stream), c3 = uint32_t(stream >> 32);
  uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t(kMul0) * c0, p1 = uint64_t(kMul1) * c2;
    const uint32_t n0 = uint32_t(p1 >> 32) ^ c1 ^ k0, n2 = uint32_t(p0 >> 32) ^ c3 ^ k1;
    c1 = uint32_t(p1);
    c3 = uint32_t(p0);
    c0 = n0;
    c2 = n2;
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return {{c0, c1, c2, c3}};
}

}  // namespace tessera
