// libFuzzer: the safetensors reader on arbitrary bytes (header length, JSON header, offsets, data),
// then every tensor it accepts converted to fp32.
#include "checkpoint/safetensors.h"
#include "core/error.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    tessera::SafetensorsFile file(tessera::fuzz::write_input("model.safetensors", data, size));
    for (const tessera::SafetensorsInfo& t : file.tensors())
      if (t.type == tessera::DType::f32 || t.type == tessera::DType::bf16 || t.type == tessera::DType::f16)
        file.read_f32(t.name);
  } catch (const tessera::Error&) {
  }
  return 0;
}
