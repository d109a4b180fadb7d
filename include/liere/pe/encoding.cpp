// liere/pe/encoding.cpp — the explicit instances of PositionEncoding (pe/encoding.hpp) in liere::compiled.
#include <liere/pe/encoding.hpp>

namespace liere {
template class PositionEncoding<float>;
template class PositionEncoding<double>;
}  // namespace liere
