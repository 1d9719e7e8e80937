# Warnings are errors in our own targets; tessera_set_options() applies them plus the CPU tuning flags
# (-fno-math-errno lets GCC vectorise sqrt, e.g. in AdamW; nothing here reads errno after math calls).
function(tessera_set_options target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter -fno-math-errno>)
  # Not in the Clang fuzz build (TESSERA_FUZZ), where Clang warns about loop pragmas GCC honours.
  if(NOT TESSERA_FUZZ)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
  endif()
  if(TESSERA_NATIVE)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-march=native>)
  endif()
endfunction()
