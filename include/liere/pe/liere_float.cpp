// liere/pe/liere_float.cpp — the explicit float instances of the LieRE table kernels (pe/liere.hpp), every
// block size, in liere::compiled (double: liere_double.cpp; two files so that two cores share the work).
#include <liere/pe/liere.hpp>

namespace liere {
LIERE_TABLE_INSTANCES(, float)
}  // namespace liere
