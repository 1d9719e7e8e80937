// What a binary was built from, for the results it prints (bench train's JSON).
#pragma once

namespace tessera {

// The checkout's short commit at build time, with "+" when tracked files differed from it; "unknown"
// for a build outside git.
const char* build_commit();

}  // namespace tessera
