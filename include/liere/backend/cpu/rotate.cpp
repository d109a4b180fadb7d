// liere/backend/cpu/rotate.cpp — the explicit instances of rotate / rotate_backward (backend/cpu/rotate.hpp)
// for every block size, in liere::compiled.
#include <liere/backend/cpu/rotate.hpp>

namespace liere::cpu {
LIERE_CPU_ROTATE_INSTANCES(, float)
LIERE_CPU_ROTATE_INSTANCES(, double)
}  // namespace liere::cpu
