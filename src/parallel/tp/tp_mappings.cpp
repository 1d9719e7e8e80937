// The tp group's mappings.
#include "parallel/tp/tp_mappings.h"

#include "core/error.h"

namespace tessera {

TpMappings::TpMappings(std::shared_ptr<Comm> tp, bool sequence_parallel)
    : tp_(std::move(tp)), sequence_parallel_(sequence_parallel) {
  TS_CHECK(tp_ != nullptr, "TpMappings: no tp group");
}

}  // namespace tessera
