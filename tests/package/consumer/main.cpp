// A program of another engine: uses liere through the installed package only.
#include <liere/liere.hpp>

#include <cmath>
#include <cstdio>

int main() {
  liere::LieRE<2, 64, 8, double> pe;  // <Dim, HeadDim, Block, Scalar>
  pe.init_uniform(2.0 * 3.14159265358979, 42);
  Eigen::Matrix<double, 2, 1> p{0.5, 1.25}, q{0.25, 0.75};
  const Eigen::Matrix<double, 64, 64> rp = pe.rotation(p);
  const double orth = (rp.transpose() * rp - Eigen::Matrix<double, 64, 64>::Identity()).cwiseAbs().maxCoeff();
  const Eigen::Matrix<double, 64, 64> rel = pe.rotation(p).transpose() * pe.rotation(q) - pe.rotation(q - p);
  std::printf("num_params=%d orthogonality=%.2e relative-identity deviation=%.3f\n", int(pe.num_params), orth,
              rel.cwiseAbs().maxCoeff());
  return orth < 1e-12 ? 0 : 1;
}
