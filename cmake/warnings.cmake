# Warnings are errors in our own targets; tessera_set_options() applies them plus the CPU tuning flags
# (TESSERA_NATIVE_FLAGS, checked by native_flags.cmake; -fno-math-errno lets GCC vectorise sqrt, e.g. in
# AdamW; nothing here reads errno after math calls).
function(tessera_set_options target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter -fno-math-errno>)
  # Not in the Clang fuzz build (TESSERA_FUZZ), where Clang warns about loop pragmas GCC honours.
  if(NOT TESSERA_FUZZ)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
  endif()
  foreach(flag IN LISTS TESSERA_NATIVE_FLAGS)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${flag}>)
  endforeach()
endfunction()
