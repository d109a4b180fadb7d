# Compile-fail tests: sources that must not compile. Each test runs the project's compiler (-fsyntax-only,
# the library's and Eigen's include directories) through compile_fail/run_compile_fail.cmake when ctest
# runs, not at configure time. It passes only when a valid variant of the same source compiles and the
# source itself fails with the expected static_assert message.
if(NOT CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang|IntelLLVM")
  message(STATUS "compile-fail tests: skipped for ${CMAKE_CXX_COMPILER_ID} (they call the compiler with -fsyntax-only)")
  return()
endif()
set(LIERE_COMPILE_FAIL_DIR ${CMAKE_CURRENT_SOURCE_DIR}/compile_fail)
set(LIERE_COMPILE_FAIL_INCLUDES
  "${PROJECT_SOURCE_DIR}/include|$<JOIN:$<TARGET_PROPERTY:Eigen3::Eigen,INTERFACE_INCLUDE_DIRECTORIES>,|>")

# LieRE<Dim, HeadDim, Block>: a Block that does not divide HeadDim (LieRE<2, 64, 3>) is rejected by the
# static_assert in include/liere/pe/liere.hpp; the control is LieRE<2, 64, 8>.
add_test(NAME compile_fail_block_not_dividing
  COMMAND ${CMAKE_COMMAND}
    -DCOMPILER=${CMAKE_CXX_COMPILER}
    "-DINCLUDES=${LIERE_COMPILE_FAIL_INCLUDES}"
    -DSOURCE=${LIERE_COMPILE_FAIL_DIR}/block_not_dividing.cpp
    "-DEXPECT=LieRE: Block must divide HeadDim"
    -DVALID_DEFINE=LIERE_COMPILE_FAIL_BLOCK=8
    -P ${LIERE_COMPILE_FAIL_DIR}/run_compile_fail.cmake)
set_tests_properties(compile_fail_block_not_dividing PROPERTIES TIMEOUT 300 LABELS compile_fail)
