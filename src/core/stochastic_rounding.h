// fp32 -> bf16 by stochastic rounding: x rounds to one of the two bf16 values around it, up with
// probability equal to its distance from the lower one in units of their gap, so the result's
// expected value is x exactly (over the 2^16 values of the random word's low half, the mean is x).
// Small repeated updates that round-to-nearest would drop (an Adam second moment with beta2 = 0.999
// kept in bf16) survive on average. Infinities and NaN convert as round-to-nearest would.
// Host-and-device, so the CPU reference and the CUDA kernels give the same bits for the same word.
#pragma once

#include <stdint.h>
#include <string.h>

#include "core/host_device.h"

namespace tessera {

// The bf16 bits of x rounded up or down by the low 16 bits of `random`.
TS_HOST_DEVICE inline uint16_t bf16_bits_stochastic(float x, uint32_t random) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  // The magnitude's low 16 bits plus a uniform draw from [0, 2^16) carry into the kept bits with
  // probability low / 2^16; sign-magnitude makes this the same for negative x.
  const uint32_t rounded = (u + (random & 0xffffu)) >> 16;
  // An infinity stays, a NaN stays a (quiet) NaN. Selects, not branches, so CPU loops vectorise.
  const uint32_t special = (u >> 16) | ((u & 0x007fffffu) != 0 ? 0x40u : 0u);
  return uint16_t((u & 0x7f800000u) == 0x7f800000u ? special : rounded);
}

}  // namespace tessera
