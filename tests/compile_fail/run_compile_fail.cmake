# cmake -P script behind the compile-fail tests (tests/compile_fail.cmake). Compiles SOURCE twice with
# -fsyntax-only:
#   1. with -D${VALID_DEFINE}: must compile (the control);
#   2. as is: must fail, and the compiler output must contain EXPECT and report a static assertion.
# Variables: COMPILER, SOURCE, INCLUDES (directories joined by '|'), EXPECT, VALID_DEFINE.
foreach(var COMPILER SOURCE INCLUDES EXPECT VALID_DEFINE)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "run_compile_fail.cmake: -D${var}=... is required")
  endif()
endforeach()

string(REPLACE "|" ";" include_dirs "${INCLUDES}")
set(args -std=c++20 -fsyntax-only)
foreach(dir IN LISTS include_dirs)
  if(NOT dir STREQUAL "")
    list(APPEND args "-I${dir}")
  endif()
endforeach()

# 1. The control: the same source with a valid instantiation compiles.
execute_process(COMMAND ${COMPILER} ${args} -D${VALID_DEFINE} ${SOURCE}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "control: ${SOURCE} with -D${VALID_DEFINE} must compile, but the compiler failed "
                      "(exit ${rc}); the compile-fail check below would prove nothing:\n${out}${err}")
endif()
message(STATUS "control: compiles with -D${VALID_DEFINE}")

# 2. The case: it must not compile, and say why.
execute_process(COMMAND ${COMPILER} ${args} ${SOURCE}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
set(log "${out}${err}")
if(rc EQUAL 0)
  message(FATAL_ERROR "${SOURCE} compiled, but it must be rejected with \"${EXPECT}\"")
endif()
string(FIND "${log}" "${EXPECT}" where)
if(where EQUAL -1)
  message(FATAL_ERROR "${SOURCE} failed to compile (as it should), but the output does not contain "
                      "\"${EXPECT}\":\n${log}")
endif()
if(NOT log MATCHES "static[_ ]assert")
  message(FATAL_ERROR "${SOURCE}: the message \"${EXPECT}\" appears, but not from a static assertion:\n${log}")
endif()
message(STATUS "rejected with \"${EXPECT}\" (static assertion), as expected")
