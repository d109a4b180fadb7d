// liere/backend/cpu/kernels.hpp — every CPU kernel of the engine: only #include lines.
#pragma once

#include <liere/backend/cpu/attention.hpp>
#include <liere/backend/cpu/common.hpp>
#include <liere/backend/cpu/cross_entropy.hpp>
#include <liere/backend/cpu/dropout.hpp>
#include <liere/backend/cpu/elementwise.hpp>
#include <liere/backend/cpu/gelu.hpp>
#include <liere/backend/cpu/gemm.hpp>
#include <liere/backend/cpu/gemm_bf16.hpp>
#include <liere/backend/cpu/layernorm.hpp>
#include <liere/backend/cpu/linear.hpp>
#include <liere/backend/cpu/optim.hpp>
#include <liere/backend/cpu/patch_embed.hpp>
#include <liere/backend/cpu/rotation_table.hpp>
#include <liere/backend/cpu/rotate.hpp>
#include <liere/backend/cpu/softmax.hpp>
#include <liere/backend/cpu/tokens.hpp>
