// The build's commit, from the header cmake/build_commit.cmake writes on every build.
#include "core/build_info.h"

#include "build_commit.h"

namespace tessera {

const char* build_commit() { return TESSERA_BUILD_COMMIT; }

}  // namespace tessera
