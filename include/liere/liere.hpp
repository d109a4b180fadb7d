// liere/liere.hpp — umbrella header for the CPU side of liere: only #include lines.
#pragma once

#include <liere/config.hpp>
#include <liere/lie/exp.hpp>
#include <liere/lie/hat.hpp>
#include <liere/lie/log.hpp>
