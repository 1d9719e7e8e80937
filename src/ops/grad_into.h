// Whether a backward op writes its input gradient or adds it to what the tensor holds: adding lets a
// residual stream's gradient take a branch's contribution in the same pass (one read of the old
// values instead of a separate add over the whole tensor).
#pragma once

namespace tessera {

enum class GradInto { write, add };

}  // namespace tessera
