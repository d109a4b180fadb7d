// liere/backend/cpu/attention.cpp — the explicit instances of the attention loops (backend/cpu/attention.hpp)
// in liere::compiled.
#include <liere/backend/cpu/attention.hpp>

namespace liere::cpu {
LIERE_CPU_ATTENTION_INSTANCES(, float)
LIERE_CPU_ATTENTION_INSTANCES(, double)
}  // namespace liere::cpu
