// liere/backend/cpu/rotate_double.cpp — the explicit double instances of rotate / rotate_backward
// (backend/cpu/rotate.hpp) for every block size, in liere::compiled (float: rotate_float.cpp; two files so that
// two cores share the work).
#include <liere/backend/cpu/rotate.hpp>

namespace liere::cpu {
LIERE_CPU_ROTATE_INSTANCES(, double)
}  // namespace liere::cpu
