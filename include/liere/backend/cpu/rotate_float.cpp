// liere/backend/cpu/rotate_float.cpp — the explicit float instances of rotate / rotate_backward
// (backend/cpu/rotate.hpp) for every block size, in liere::compiled (double: rotate_double.cpp; two files so that
// two cores share the work).
#include <liere/backend/cpu/rotate.hpp>

namespace liere::cpu {
LIERE_CPU_ROTATE_INSTANCES(, float)
}  // namespace liere::cpu
