// liere/pe/liere_double.cpp — the explicit double instances of the LieRE table kernels (pe/liere.hpp), every
// block size, in liere::compiled.
#include <liere/pe/liere.hpp>

namespace liere {
LIERE_TABLE_INSTANCES(, double)
}  // namespace liere
