# Third-party libraries, all from Debian packages installed by scripts/setup.sh.
find_package(OpenMP REQUIRED COMPONENTS CXX)
find_package(PkgConfig REQUIRED)
# OpenBLAS built with OpenMP threading (Debian's libopenblas-openmp-dev): a GEMM called inside one of
# our OpenMP parallel regions then runs on the calling thread instead of fighting for a pthread pool.
find_library(OPENBLAS_LIBRARY openblas PATHS /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-openmp
             NO_DEFAULT_PATH REQUIRED)
find_path(CBLAS_INCLUDE_DIR cblas.h PATHS /usr/include/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-openmp
          NO_DEFAULT_PATH REQUIRED)
set(BLAS_LIBRARIES ${OPENBLAS_LIBRARY})
include_directories(SYSTEM ${CBLAS_INCLUDE_DIR})
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(tomlplusplus REQUIRED)
find_package(CLI11 REQUIRED)
find_package(GTest REQUIRED)
find_package(benchmark REQUIRED)
find_package(Threads REQUIRED)
find_package(MPI REQUIRED COMPONENTS CXX)
find_package(ZLIB REQUIRED)  # CRC-32 of checkpoint files, gzip-compressed corpus files

if(TESSERA_CUDA STREQUAL "AUTO")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(TESSERA_WITH_CUDA ON)
  else()
    set(TESSERA_WITH_CUDA OFF)
  endif()
elseif(TESSERA_CUDA)
  set(TESSERA_WITH_CUDA ON)
else()
  set(TESSERA_WITH_CUDA OFF)
endif()
message(STATUS "Tessera CUDA backend: ${TESSERA_WITH_CUDA}")

# NCCL ships with the CUDA toolkit here (/usr/local/cuda); the NCCL backend builds when both are found.
if(TESSERA_WITH_CUDA)
  find_package(CUDAToolkit REQUIRED)
  find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR})
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
  # cuDNN 9 (its backend graph API) for the cuDNN attention kernels; optional, found beside the toolkit.
  find_path(CUDNN_INCLUDE_DIR cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
  find_library(CUDNN_LIBRARY cudnn HINTS ${CUDAToolkit_LIBRARY_DIR})
endif()
