// liere/backend/cuda/blas_int.hpp — cuBLAS takes its sizes, leading dimensions and batch counts as int: blas_int
// checks that a size fits before the cast and otherwise throws a liere::Error that names the op, the dimension and
// its value. Plain host code (no CUDA header), so the CPU tests check the message on every machine.
#pragma once

#include <climits>
#include <liere/core/config.hpp>
#include <liere/core/index.hpp>

namespace liere::cuda {

// `value` as an int for cuBLAS; `op` names the call ("linear on cuda"), `what` the dimension ("N (rows = batch ×
// tokens)").
inline int blas_int(Index value, const char* op, const char* what) {
  LIERE_ENSURE(value >= 0 && value <= Index(INT_MAX),
               op << ": " << what << " = " << value << " is outside cuBLAS's int range [0, " << INT_MAX
                  << "] (lower the batch size or the model's dimensions)");
  return int(value);
}

}  // namespace liere::cuda
