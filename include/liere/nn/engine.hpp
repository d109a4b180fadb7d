// liere/nn/engine.hpp — the whole minimal engine (tensors, tape, ops, modules, optimizers, checkpoints):
// only #include lines. docs/engine.md describes it.
#pragma once

#include <liere/autodiff/ops.hpp>
#include <liere/autodiff/tape.hpp>
#include <liere/backend/cpu/kernels.hpp>
#include <liere/nn/attention.hpp>
#include <liere/nn/checkpoint.hpp>
#include <liere/nn/dropout.hpp>
#include <liere/nn/layernorm.hpp>
#include <liere/nn/linear.hpp>
#include <liere/nn/mlp.hpp>
#include <liere/nn/module.hpp>
#include <liere/nn/patch_embed.hpp>
#include <liere/nn/position_encoding.hpp>
#include <liere/nn/vit.hpp>
#include <liere/optim/adam.hpp>
#include <liere/optim/clip.hpp>
#include <liere/optim/loss_scale.hpp>
#include <liere/optim/schedule.hpp>
#include <liere/tensor/pool.hpp>
#include <liere/tensor/random.hpp>
#include <liere/tensor/tensor.hpp>
