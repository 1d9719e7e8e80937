// Whether the GPU ops give the same bits on every run of the same inputs, process-wide. On (the
// default) every kernel sums in a fixed order. Off lets an op take a faster kernel whose floating-point
// sums land in a varying order (atomics): today that is cuDNN's attention backward, which then adds dQ
// into an fp32 accumulator instead of keeping dS for a second kernel (ops/attention.h). The CPU kernels,
// and every other GPU kernel, are deterministic either way; the layout a run uses still sets its bits.
#pragma once

namespace tessera {

void set_deterministic_kernels(bool on);
bool deterministic_kernels();

}  // namespace tessera
