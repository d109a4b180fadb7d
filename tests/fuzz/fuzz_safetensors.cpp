// tests/fuzz/fuzz_safetensors.cpp — the safetensors reader (liere/io/safetensors.hpp) and the checkpoint loader on
// top of it (liere/nn/checkpoint.hpp) on arbitrary bytes.
//
// Each input is parsed as a whole file; a file that validates is read tensor by tensor into engine tensors, then
// loaded as a checkpoint (parameters and Adam state, strict and not) into a small fixed model: a parameter "w"
// (2, 3) and "b" (3), the names the seed corpus (make_corpus.py) uses.
#include <liere/nn/checkpoint.hpp>

#include <cstring>

#include "fuzz_common.hpp"

using namespace liere;

namespace {

struct Model {
  nn::Params params;
  ParameterT<float> w = params.add("w", Shape{2, 3});
  ParameterT<float> b = params.add("b", Shape{3});
  optim::Adam opt{params.all(), optim::adamw_config(1e-3, 0.05)};
};

void check(const io::SafetensorsFile& f) {
  for (const auto& e : f.entries) {
    FUZZ_CHECK(e.begin <= e.end && e.end <= f.data.size());
    std::uint64_t numel = 0;
    FUZZ_CHECK(io::shape_numel(e.shape, numel));
    FUZZ_CHECK(numel * io::safetensors_dtype_size(e.dtype) == e.end - e.begin);
    FUZZ_CHECK(f.bytes(e).size() == e.end - e.begin);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static Model model;
  const std::span<const char> bytes(reinterpret_cast<const char*>(data), size);
  expect_result_or_error([&] {
    const nn::SafetensorsFile f = nn::parse_safetensors(bytes, "fuzz.safetensors");
    check(f);
    for (const auto& e : f.entries) {
      expect_result_or_error([&] {
        if (e.dtype == "F32") {
          const Tensor t = f.tensor<float>(e.name);
          FUZZ_CHECK(std::size_t(t.numel()) * 4 == e.end - e.begin);
          if (t.numel()) FUZZ_CHECK(std::memcmp(t.data(), f.bytes(e).data(), e.end - e.begin) == 0);
        } else if (e.dtype == "F64") {
          const TensorT<double> t = f.tensor<double>(e.name);
          FUZZ_CHECK(std::size_t(t.numel()) * 8 == e.end - e.begin);
        } else {
          (void)f.tensor<float>(e.name);  // must refuse the dtype
          FUZZ_CHECK(false);
        }
      });
    }
    for (const bool strict : {true, false}) {
      expect_result_or_error([&] {
        nn::LoadOptions lo;
        lo.strict = strict;
        nn::load_checkpoint(f, model.params, &model.opt, lo);
      });
    }
  });
  return 0;
}
