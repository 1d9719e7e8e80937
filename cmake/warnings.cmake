# Warnings are errors in our own targets; tessera_set_options() applies them plus the CPU tuning flags
# (-fno-math-errno lets GCC vectorise sqrt, e.g. in AdamW; nothing here reads errno after math calls).
function(tessera_set_options target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Werror -Wno-unused-parameter -fno-math-errno>)
  if(TESSERA_NATIVE)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-march=native>)
  endif()
endfunction()
