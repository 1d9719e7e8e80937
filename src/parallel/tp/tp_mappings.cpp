// The tp group's mappings.
#include "parallel/tp/tp_mappings.h"

#include "core/error.h"

namespace tessera {

TpMappings::TpMappings(std::shared_ptr<Comm> tp) : tp_(std::move(tp)) {
  TS_CHECK(tp_ != nullptr, "TpMappings: no tp group");
}

}  // namespace tessera
