// tests/compile_fail/block_not_dividing.cpp — must NOT compile: LieRE with a block size (3) that does not
// divide the head dimension (64). tests/compile_fail.cmake compiles it twice with the project's compiler:
//   as is                                  must fail, and the output must hold the static_assert's message
//   -DLIERE_COMPILE_FAIL_BLOCK=8           must compile (the control: the test cannot pass for another reason)
#include <liere/pe/liere.hpp>

#ifndef LIERE_COMPILE_FAIL_BLOCK
#define LIERE_COMPILE_FAIL_BLOCK 3
#endif

int main() {
  liere::LieRE<2, 64, LIERE_COMPILE_FAIL_BLOCK, double> pe;
  return static_cast<int>(pe.params().size());
}
