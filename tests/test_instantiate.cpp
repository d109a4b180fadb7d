// tests/test_instantiate.cpp — explicit instantiation of the public templates for float and double, so that
// every member compiles (STYLE.md), plus the compile-time facts of docs/api.md's contract.
#include <catch2/catch.hpp>

#include <liere/config.hpp>  // the deprecated shim still compiles (nothing of liere includes it: test_layers)
#include <liere/liere.hpp>

template class liere::LieRE<2, 64, 8, double>;
template class liere::LieRE<2, 64, 8, float>;
template class liere::LieRE<2, 64, 64, double>;
template class liere::LieRE<3, 64, 2, float>;
template class liere::LieRE<1, 16, 4, double>;
template class liere::LieRE<2, 48, 3, double>;
template class liere::LieRE<2, 64, 32, float>;
template class liere::LieRE<2, 32, 16, double>;
template class liere::RotationTable<float>;
template class liere::RotationTable<double>;
// PositionEncoding, and the modules LinearT, LayerNormT, DropoutT, PatchEmbedT and MlpT, for float and double: every
// member is compiled by their explicit instances in liere::compiled (include/liere/pe/encoding.cpp,
// include/liere/nn/engine_float.cpp and engine_double.cpp), which this test links.
template class liere::TensorT<float>;
template class liere::TensorT<double>;
template class liere::GradSlot<float>;
template class liere::GradSlot<double>;
template class liere::VarT<float>;
template class liere::VarT<double>;
template class liere::ParameterT<float>;
template class liere::ParameterT<double>;
template class liere::TapeT<float>;
template class liere::TapeT<double>;
template class liere::nn::ParamsT<float>;
template class liere::nn::ParamsT<double>;
template class liere::optim::AdamT<float>;
template class liere::optim::AdamT<double>;

static_assert(liere::LieRE<2, 64, 8, double>::num_params == 2 * 8 * 28);
static_assert(liere::LieRE<2, 64, 64, float>::num_params == 2 * 2016);
static_assert(liere::liere_num_params(3, 64, 8) == 3 * 8 * 28);

TEST_CASE("the public templates instantiate for float and double", "[api]") {
  liere::LieRE<2, 64, 8, double> pe;
  std::span<double> w = pe.params();
  REQUIRE(w.size() == std::size_t(pe.num_params));
}
