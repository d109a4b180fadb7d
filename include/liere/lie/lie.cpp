// liere/lie/lie.cpp — the explicit instances of exp, exp_backward, exp_frechet and log for dynamic-size float
// and double matrices (lie/exp.hpp, lie/log.hpp), in liere::compiled.
#include <liere/lie/exp.hpp>
#include <liere/lie/log.hpp>

namespace liere {
LIERE_LIE_EXP_INSTANCES(, Eigen::MatrixXd)
LIERE_LIE_EXP_INSTANCES(, Eigen::MatrixXf)
LIERE_LIE_LOG_INSTANCES(, Eigen::MatrixXd)
LIERE_LIE_LOG_INSTANCES(, Eigen::MatrixXf)
}  // namespace liere
