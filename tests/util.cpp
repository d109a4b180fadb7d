// tests/util.cpp — the dense decompositions of tests/test_util.hpp, compiled once for every test
// (liere_test_util in tests/CMakeLists.txt): each one instantiated in a test costs seconds of its compile.
#include "test_util.hpp"

namespace liere::test {

double spectral_norm(const Eigen::MatrixXd& a) { return Eigen::JacobiSVD<Eigen::MatrixXd>(a).singularValues()(0); }

Eigen::MatrixXd orthogonal_factor(const Eigen::MatrixXd& x) {
  return Eigen::JacobiSVD<Eigen::MatrixXd>(x, Eigen::ComputeFullU).matrixU();
}

double determinant(const Eigen::MatrixXd& a) { return a.determinant(); }

Eigen::MatrixXd inverse(const Eigen::MatrixXd& a) { return a.partialPivLu().inverse(); }

void real_schur(const Eigen::MatrixXd& a, Eigen::MatrixXd& u, Eigen::MatrixXd& t) {
  const Eigen::RealSchur<Eigen::MatrixXd> schur(a);
  u = schur.matrixU();
  t = schur.matrixT();
}

}  // namespace liere::test
