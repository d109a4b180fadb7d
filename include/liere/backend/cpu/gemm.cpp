// liere/backend/cpu/gemm.cpp — the explicit instances of gemm() (backend/cpu/gemm.hpp) in liere::compiled.
#include <liere/backend/cpu/gemm.hpp>

namespace liere::cpu {
LIERE_CPU_GEMM_INSTANCES(, float)
LIERE_CPU_GEMM_INSTANCES(, double)
}  // namespace liere::cpu
