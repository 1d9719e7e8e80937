// Work: the handle of a pending collective, forwarding to its backend's state.
#include "parallel/work_state.h"

namespace tessera {

void Work::wait() {
  if (state_) state_->wait();
}

bool Work::done() const { return !state_ || state_->done(); }

}  // namespace tessera
