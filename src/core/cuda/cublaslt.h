// cuBLASLt, opened on first use instead of linked. Loading libcublasLt runs about 0.4 s of static
// initialisers, which every process linked to it paid at start-up, CPU-only runs and each MPI rank
// included; now only a process that runs a GPU matmul pays it, once. Only for files built with the
// CUDA backend (TESSERA_WITH_CUDA).
#pragma once

#include <cublasLt.h>

namespace tessera::cuda {

// The cuBLASLt functions Tessera calls. Each member is named after its function without the
// cublasLt prefix and has its exact type, so cublaslt().Matmul(...) reads as cublasLtMatmul(...).
#define TS_CUBLASLT_FUNCTIONS(X)                                                                        \
  X(Create) X(GetStatusName) X(GetStatusString) X(Matmul) X(MatmulAlgoCheck) X(MatmulAlgoGetHeuristic)   \
  X(MatmulDescCreate)                                                                                    \
  X(MatmulDescDestroy) X(MatmulDescSetAttribute) X(MatmulPreferenceCreate) X(MatmulPreferenceDestroy)   \
  X(MatmulPreferenceSetAttribute) X(MatrixLayoutCreate) X(MatrixLayoutDestroy)

struct CublasLt {
#define TS_CUBLASLT_MEMBER(name) decltype(&::cublasLt##name) name = nullptr;
  TS_CUBLASLT_FUNCTIONS(TS_CUBLASLT_MEMBER)
#undef TS_CUBLASLT_MEMBER
};

// Opens libcublasLt on the first call (by the soname of the CUDA major Tessera was built with,
// then from that toolkit's lib folder); throws one line naming the library and how to provide it
// when it cannot be opened or lacks a function.
const CublasLt& cublaslt();

}  // namespace tessera::cuda
