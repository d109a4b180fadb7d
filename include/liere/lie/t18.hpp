// liere/lie/t18.hpp — the constants of the Bader–Blanes–Casas degree-18 scheme for exp (BBC 2019), once for
// lie/exp.hpp (Eigen, host) and backend/kernels/matrix_exp.hpp (raw arrays, host and device). No Eigen here, so
// nvcc compiles it.
//
//   t18_coef(i, j)   b[i][j]: with P = (I, X, X², X³, X⁶) and B_i = Σ_j b[i][j] P_j,
//                    A9 = B0·B4 + B3,   T18(X) = B1 + (B2 + A9)·A9
//   t18_theta<W>()   the largest scaled norm for which T18 meets the unit roundoff of W (BBC 2019, Table 3)
//   t18_scaling      the smallest s ≥ 0 with α/2^s ≤ θ (exact: frexp, no log2 rounding)
#pragma once

#include <cmath>
#include <liere/core/config.hpp>

namespace liere {

LIERE_HOST_DEVICE inline double t18_coef(int i, int j) {
  constexpr double k[5][5] = {
      {0., -1.00365581030144618291e-01, -8.02924648241156932449e-03, -8.92138498045729985177e-04, 0.},
      {0., 3.97849749499645077844e-01, 1.36783778460411720168e+00, 4.98289622525382669416e-01,
       -6.37898194594723280150e-04},
      {-1.09676396052962061844e+01, 1.68015813878906206114e+00, 5.71779846478865511061e-02,
       -6.98210122488052056106e-03, 3.34975017086070470649e-05},
      {-9.04316832390810593223e-02, -6.76404519071381882256e-02, 6.75961301770459654925e-02,
       2.95552570429315521194e-02, -1.39180257516060693404e-05},
      {0., 0., -9.23364619367118555360e-02, -1.69364939002081722752e-02, -1.40086798182036094347e-05}};
  return k[i][j];
}

template <class W>
LIERE_HOST_DEVICE constexpr double t18_theta() {
  return sizeof(W) == 4 ? 3.010066362817634 : 1.090863719290036;
}

LIERE_HOST_DEVICE inline int t18_scaling(double alpha, double theta) {
  using std::frexp;
  if (!(alpha > theta)) return 0;
  int e = 0;
  const double m = frexp(alpha / theta, &e);  // α/θ = m·2^e, m ∈ [0.5, 1)
  return m == 0.5 ? e - 1 : e;
}

}  // namespace liere
