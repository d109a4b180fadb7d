// liere/pe/liere_forward.cpp — the explicit instances of the LieRE table forward (pe/liere.hpp), every block size,
// float and double, in liere::compiled. Both compute the exponentials in double: one file compiles them once
// (the backward, in the model's precision: liere_backward.cpp; two files so that two cores share the work).
#include <liere/pe/liere.hpp>

namespace liere {
LIERE_TABLE_FORWARD_INSTANCES(, float)
LIERE_TABLE_FORWARD_INSTANCES(, double)
}  // namespace liere
