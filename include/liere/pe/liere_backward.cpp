// liere/pe/liere_backward.cpp — the explicit instances of the LieRE table backward (pe/liere.hpp), every block
// size, float and double, in liere::compiled (the forward: liere_forward.cpp).
#include <liere/pe/liere.hpp>

namespace liere {
LIERE_TABLE_BACKWARD_INSTANCES(, float)
LIERE_TABLE_BACKWARD_INSTANCES(, double)
}  // namespace liere
