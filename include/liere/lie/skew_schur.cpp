// liere/lie/skew_schur.cpp — skew_schur, skew_schur_batch, skew_schur_exp and skew_schur_exp_adjoint
// (lie/skew_schur.hpp) compiled once, in liere::compiled (and the PyTorch operators' library); the header only
// declares them under LIERE_PRECOMPILED.
#define LIERE_SKEW_SCHUR_SOURCE
#include <liere/lie/skew_schur.hpp>
