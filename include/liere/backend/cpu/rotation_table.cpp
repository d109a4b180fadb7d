// liere/backend/cpu/rotation_table.cpp — the explicit instances of the rotation-table op
// (backend/cpu/rotation_table.hpp), every block size, float and double, in liere::compiled.
#include <liere/backend/cpu/rotation_table.hpp>

namespace liere::cpu {
LIERE_CPU_ROTATION_TABLE_INSTANCES(, float)
LIERE_CPU_ROTATION_TABLE_INSTANCES(, double)
}  // namespace liere::cpu
