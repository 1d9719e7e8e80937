// The logits' soft cap: checks, then the CPU kernel.
#include "ops/logit_softcap.h"

#include "ops/cpu/logit_softcap_cpu.h"
#include "ops/op_checks.h"

namespace tessera {

void logit_softcap(Tensor& logits, float softcap) {
  const char* op = "logit_softcap";
  const Device device = detail::check_args(op, {{"logits", logits}});
  detail::check_softcap(op, softcap, device);
  TS_CHECK(softcap > 0.0f, op, ": softcap must be positive, got 0");
  cpu::logit_softcap(logits.f32(), logits.numel(), softcap);
}

}  // namespace tessera
