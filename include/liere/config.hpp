// liere/config.hpp — kept for code written against earlier versions: the version, LIERE_HOST_DEVICE and
// LIERE_ENSURE now live in liere/core/config.hpp.
#pragma once

#include <liere/core/config.hpp>
