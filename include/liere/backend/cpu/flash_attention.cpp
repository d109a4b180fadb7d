// liere/backend/cpu/flash_attention.cpp — the explicit instances of the fused rotary flash attention
// (backend/cpu/flash_attention.hpp) in liere::compiled.
#include <liere/backend/cpu/flash_attention.hpp>

namespace liere::cpu {
LIERE_CPU_FLASH_ATTENTION_INSTANCES(, float)
LIERE_CPU_FLASH_ATTENTION_INSTANCES(, double)
}  // namespace liere::cpu
