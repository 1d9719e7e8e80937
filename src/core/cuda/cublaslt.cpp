// Opens libcublasLt with dlopen on first use and looks up the functions Tessera calls (cublaslt.h
// says why it is not linked).
#ifdef TESSERA_WITH_CUDA
#include "core/cuda/cublaslt.h"

#include <dlfcn.h>

#include <string>

#include "core/error.h"

namespace tessera::cuda {

namespace {

#define TS_CUBLASLT_STRING_(x) #x
#define TS_CUBLASLT_STRING(x) TS_CUBLASLT_STRING_(x)
constexpr const char* kSoname = "libcublasLt.so." TS_CUBLASLT_STRING(CUBLAS_VER_MAJOR);

void* open_library() {
  if (void* handle = dlopen(kSoname, RTLD_NOW | RTLD_LOCAL)) return handle;
  const std::string error = dlerror();
  const std::string in_toolkit = std::string(TESSERA_CUDA_LIBRARY_DIR) + "/" + kSoname;
  if (void* handle = dlopen(in_toolkit.c_str(), RTLD_NOW | RTLD_LOCAL)) return handle;
  TS_FAIL("cuBLASLt: cannot open ", kSoname, " (", error, "); install CUDA ", CUBLAS_VER_MAJOR,
          "'s cuBLAS, or add the folder that holds ", kSoname, " to LD_LIBRARY_PATH");
}

CublasLt look_up_functions(void* library) {
  CublasLt api;
#define TS_CUBLASLT_LOOK_UP(name)                                                                        \
  api.name = reinterpret_cast<decltype(api.name)>(dlsym(library, "cublasLt" #name));                     \
  TS_CHECK(api.name != nullptr, "cuBLASLt: ", kSoname, " has no cublasLt" #name "; it is older than the " \
           "CUDA ", CUBLAS_VER_MAJOR, " headers Tessera was built with");
  TS_CUBLASLT_FUNCTIONS(TS_CUBLASLT_LOOK_UP)
#undef TS_CUBLASLT_LOOK_UP
  return api;
}

}  // namespace

const CublasLt& cublaslt() {
  static const CublasLt api = look_up_functions(open_library());
  return api;
}

}  // namespace tessera::cuda
#endif
