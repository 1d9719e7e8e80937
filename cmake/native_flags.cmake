# TESSERA_NATIVE_FLAGS: the CPU tuning flags for our targets (-march=native), checked at configure
# time by running cmake/probes/vector_constants.cpp built with them. GCC 12.2 (Debian 12's) with
# AVX-512 enabled builds constant vectors such as {16.0, 16.0, 0.0, 0.0} as four 16s; where the probe
# sees that, AVX-512 is turned off (-mno-avx512f, AVX2 stays), and where that does not help either,
# the build is not tuned for this CPU at all. Every case says so in the configure output.
# What GCC emits there is a broadcast from a general register (an AVX-512 form) of half a vector,
# stored as the whole. -fno-tree-slp-vectorize also passes the probe, but turning AVX-512 off is the
# sure fix; on the demo model's CPU step it cost 4-17% here (noisy medians, 2026-11-28).
set(TESSERA_NATIVE_FLAGS "")
if(TESSERA_NATIVE AND NOT CMAKE_CROSSCOMPILING)
  foreach(candidate "-march=native" "-march=native;-mno-avx512f")
    string(MAKE_C_IDENTIFIER "${candidate}" probe_id)
    try_run(probe_run probe_built ${CMAKE_BINARY_DIR}/probes/${probe_id}
            SOURCES ${CMAKE_CURRENT_LIST_DIR}/probes/vector_constants.cpp
            COMPILE_DEFINITIONS -O3 ${candidate}
            CXX_STANDARD 20
            RUN_OUTPUT_VARIABLE probe_output)
    if(probe_built AND probe_run EQUAL 0)
      set(TESSERA_NATIVE_FLAGS ${candidate})
      break()
    endif()
    string(STRIP "${probe_output}" probe_output)
    message(STATUS "Tessera: ${CMAKE_CXX_COMPILER_ID} ${CMAKE_CXX_COMPILER_VERSION} with '${candidate}' "
                   "builds wrong vector constants (probe: ${probe_output}); not using it")
  endforeach()
  if(TESSERA_NATIVE_FLAGS)
    list(JOIN TESSERA_NATIVE_FLAGS " " flags_text)
    message(STATUS "Tessera: CPU tuning flags: ${flags_text}")
  else()
    message(WARNING "Tessera: no -march=native variant passed the vector-constant probe; building for "
                    "the generic x86-64 CPU (slower CPU kernels, correct results)")
  endif()
elseif(TESSERA_NATIVE)
  set(TESSERA_NATIVE_FLAGS -march=native)
endif()
