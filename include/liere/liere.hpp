// liere/liere.hpp — umbrella header for the CPU side of liere: only #include lines.
#pragma once

#include <liere/core/config.hpp>
#include <liere/core/precision.hpp>
#include <liere/backend/precision.hpp>
#include <liere/lie/exp.hpp>
#include <liere/lie/hat.hpp>
#include <liere/lie/log.hpp>
#include <liere/lie/skew_schur.hpp>
#include <liere/attention.hpp>
#include <liere/nn/engine.hpp>
#include <liere/pe/blocks.hpp>
#include <liere/pe/config.hpp>
#include <liere/pe/encoding.hpp>
#include <liere/pe/interpolation.hpp>
#include <liere/pe/liere.hpp>
#include <liere/pe/positions.hpp>
#include <liere/pe/rotation_table.hpp>
