// Checkpoints: safetensors byte layout, bit-exact round trips of parameters and optimizer state, clear errors
// for truncated/corrupt files and mismatched models, and the atomic write.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <liere/autodiff/ops.hpp>
#include <liere/nn/checkpoint.hpp>
#include <liere/nn/linear.hpp>
#include <liere/nn/mlp.hpp>
#include <liere/nn/patch_embed.hpp>
#include <liere/optim/adam.hpp>
#include <string>
#include <vector>

#include "skip.hpp"
#include "temp_dir.hpp"

using namespace liere;
namespace fs = std::filesystem;

namespace {

// Every test's files live in one scratch directory.
struct TempDir : test::TempDir {
  TempDir() : test::TempDir("liere_test_checkpoint") {}
};
using test::read_bytes;
using test::write_bytes;

template <class S>
struct Model {
  Rng rng;
  nn::ParamsT<S> params;
  nn::PatchEmbedT<S> patch;
  ParameterT<S> cls;
  nn::MlpT<S> mlp;
  nn::LinearT<S> head;
  Model(std::uint64_t seed, Index dim = 6, Index classes = 3)
      : rng(seed),
        patch(params, "patch_embed", 2, dim, 2, rng),
        cls(params.add("cls_token", Shape{1, 1, dim})),
        mlp(params, "blocks.0.mlp", dim, 2 * dim, dim, rng),
        head(params, "head", dim, classes, rng) {
    for (const auto& p : params) fill_uniform(p.value(), rng, -1, 1);
  }
  // A couple of optimizer steps so that m and v are not zero.
  void train(optim::AdamT<S>& opt, int steps) {
    TapeT<S> tape(1);
    TensorT<S> img(Shape{2, 2, 4, 4});
    fill_uniform(img, rng, -1, 1);
    const std::vector<int> labels = {1, 2};
    for (int i = 0; i < steps; ++i) {
      VarT<S> x = ops::prepend_token(tape, patch(tape, VarT<S>(img)), cls);
      x = ops::add(tape, x, mlp(tape, x));
      tape.backward(ops::cross_entropy<S>(tape, head(tape, ops::mean_tokens(tape, x)), labels));
      opt.step();
      opt.zero_grad();
    }
  }
};

// A model trained two steps with AdamW (m and v not zero), saved at construction to `path` with {"epoch", "1"}.
struct TrainedCheckpoint {
  Model<float> model{1};
  optim::Adam opt{model.params.all(), optim::adamw_config(3e-3, 0.05)};
  explicit TrainedCheckpoint(const std::string& path) {
    model.train(opt, 2);
    nn::save_checkpoint(path, model.params, &opt, {{"epoch", "1"}});
  }
};

template <class S>
bool same_bytes(const TensorT<S>& a, const TensorT<S>& b) {
  return a.shape() == b.shape() && std::memcmp(a.data(), b.data(), std::size_t(a.numel()) * sizeof(S)) == 0;
}

}  // namespace

TEST_CASE("checkpoint: save then load round-trips parameters, optimizer state and metadata bit-exactly",
          "[checkpoint]") {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  Model<float> a(1);
  optim::Adam opt_a(a.params.all(), optim::adamw_config(3e-3, 0.05));
  a.train(opt_a, 3);
  Rng run_rng(42);
  run_rng.normal();
  nn::save_checkpoint(path, a.params, &opt_a,
                      {{"encoding", "liere8"}, {"epoch", "7"}, {"rng", run_rng.state()}, {"config", "dim=6 \"quoted\"\n"}});
  CHECK_FALSE(fs::exists(path + ".tmp"));

  Model<float> b(2);  // different values everywhere
  optim::Adam opt_b(b.params.all(), optim::adamw_config(1.0, 0.05));
  const nn::Metadata meta = nn::load_checkpoint(path, b.params, &opt_b, {{{"encoding", "liere8"}}});
  for (std::size_t i = 0; i < a.params.size(); ++i) {
    INFO(a.params.all()[i].name());
    CHECK(same_bytes(a.params.all()[i].value(), b.params.all()[i].value()));
    CHECK(same_bytes(opt_a.states()[i].m, opt_b.states()[i].m));
    CHECK(same_bytes(opt_a.states()[i].v, opt_b.states()[i].v));
  }
  CHECK(opt_b.steps() == 3);
  CHECK(opt_b.lr() == 3e-3);

  // A learning rate that needs all 17 significant digits (one a schedule gives) comes back bit for bit.
  const double lr = 1.0 / 3.0 * 1e-3;
  opt_a.set_lr(lr);
  nn::save_checkpoint(path, a.params, &opt_a);
  nn::load_checkpoint(path, b.params, &opt_b);
  CHECK(opt_b.lr() == lr);
  CHECK(meta.at("epoch") == "7");
  CHECK(meta.at("config") == "dim=6 \"quoted\"\n");
  CHECK(meta.at("format") == nn::kCheckpointFormat);
  Rng restored(0);
  restored.set_state(meta.at("rng"));
  CHECK(restored.normal() == run_rng.normal());
}

TEST_CASE("checkpoint: resuming gives the same run as not stopping", "[checkpoint]") {
  TempDir dir;
  const std::string path = dir.file("resume.safetensors");
  Model<float> a(3);
  optim::Adam opt_a(a.params.all(), optim::adamw_config(1e-2, 0.05));
  a.train(opt_a, 2);
  nn::save_checkpoint(path, a.params, &opt_a, {{"rng", a.rng.state()}});
  a.train(opt_a, 2);  // uninterrupted

  Model<float> b(4);
  optim::Adam opt_b(b.params.all(), optim::adamw_config(1e-2, 0.05));
  const auto meta = nn::load_checkpoint(path, b.params, &opt_b);
  b.rng.set_state(meta.at("rng"));
  b.train(opt_b, 2);  // resumed
  for (std::size_t i = 0; i < a.params.size(); ++i) CHECK(same_bytes(a.params.all()[i].value(), b.params.all()[i].value()));
}

TEST_CASE("checkpoint: the byte layout is safetensors", "[checkpoint]") {
  TempDir dir;
  const std::string path = dir.file("layout.safetensors");
  Model<float> m(5);
  nn::save_checkpoint(path, m.params, nullptr, {{"epoch", "1"}});
  const std::string bytes = read_bytes(path);
  REQUIRE(bytes.size() > 8);
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | std::uint8_t(bytes[std::size_t(i)]);  // little-endian
  REQUIRE(8 + n <= bytes.size());
  CHECK((8 + n) % 8 == 0);  // data section 8-byte aligned
  const std::string header = bytes.substr(8, n);
  CHECK(header.front() == '{');
  CHECK(header.substr(0, header.find_last_not_of(' ') + 1).back() == '}');  // padding is spaces only

  // The exact entry of one tensor, as Python's safetensors writes it.
  const auto& w = m.params["head.weight"];
  const std::string key = "\"head.weight\":{\"dtype\":\"F32\",\"shape\":[3,6],\"data_offsets\":[";
  const auto at = header.find(key);
  REQUIRE(at != std::string::npos);
  std::size_t begin = 0, end = 0;
  REQUIRE(std::sscanf(header.c_str() + at + key.size(), "%zu,%zu", &begin, &end) == 2);
  CHECK(end - begin == 3 * 6 * sizeof(float));
  CHECK(std::memcmp(bytes.data() + 8 + n + begin, w.data(), end - begin) == 0);
  CHECK(header.find("\"__metadata__\":{") != std::string::npos);
  CHECK(header.find("\"epoch\":\"1\"") != std::string::npos);

  // Parsed: every parameter with its shape, offsets contiguous in order and covering the data to EOF.
  const nn::SafetensorsFile f = nn::load_safetensors(path);
  REQUIRE(f.entries.size() == m.params.size());
  std::size_t pos = 0;
  for (std::size_t i = 0; i < f.entries.size(); ++i) {
    const auto& e = f.entries[i];
    const auto& p = m.params.all()[i];
    CHECK(e.name == p.name());
    CHECK(e.dtype == "F32");
    CHECK(nn::SafetensorsFile::shape_of(e) == p.shape());
    CHECK(e.begin == pos);
    pos = e.end;
    CHECK(std::memcmp(bytes.data() + 8 + n + e.begin, p.data(), e.end - e.begin) == 0);
  }
  CHECK(8 + n + pos == bytes.size());
}

TEST_CASE("checkpoint: reads a file written by another safetensors writer", "[checkpoint]") {
  // Header order differs from data order, no metadata, pretty-printed JSON, an escaped name.
  TempDir dir;
  const std::string path = dir.file("foreign.safetensors");
  std::string header = "{\n  \"b\\u00e9ta\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [4, 12]},\n"
                       "  \"a\": {\"dtype\": \"F32\", \"shape\": [], \"data_offsets\": [0, 4]}\n}";
  while ((8 + header.size()) % 8) header += ' ';
  std::string bytes(8, '\0');
  const std::uint64_t n = header.size();
  std::memcpy(bytes.data(), &n, 8);
  bytes += header;
  const float vals[3] = {1.5f, -2.0f, 3.25f};
  bytes.append(reinterpret_cast<const char*>(vals), sizeof vals);
  write_bytes(path, bytes);
  const auto f = nn::load_safetensors(path);
  CHECK(f.metadata.empty());
  const Tensor a = f.tensor<float>("a"), b = f.tensor<float>("b\xC3\xA9ta");
  CHECK(a.shape() == Shape{});
  CHECK(a.data()[0] == 1.5f);
  CHECK(b(1) == 3.25f);
  CHECK_THROWS_WITH(f.tensor<double>("a"), Catch::Contains("dtype F32, expected F64"));
}

TEST_CASE("checkpoint: truncated and corrupt files give errors naming the file", "[checkpoint]") {
  TempDir dir;
  const std::string path = dir.file("good.safetensors"), bad = dir.file("bad.safetensors");
  Model<float> m(6);
  nn::save_checkpoint(path, m.params, nullptr);
  const std::string bytes = read_bytes(path);
  std::uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  for (std::size_t cut : {std::size_t(0), std::size_t(5), std::size_t(8 + n / 2), std::size_t(8 + n - 1),
                          std::size_t(8 + n), std::size_t(8 + n + 10), bytes.size() - 1}) {
    INFO("cut at " << cut << " of " << bytes.size());
    write_bytes(bad, bytes.substr(0, cut));
    CHECK_THROWS_WITH(nn::load_safetensors(bad), Catch::Contains(bad) && Catch::Contains("truncated"));
    CHECK_THROWS_AS(nn::load_checkpoint(bad, m.params), liere::Error);
    CHECK_THROWS_AS(nn::parse_safetensors(std::span<const char>(bytes.data(), cut), bad), liere::Error);
  }
  // Cut inside the data: the error says how long the header says the file is and how long it is.
  write_bytes(bad, bytes.substr(0, 8 + n + 10));
  CHECK_THROWS_WITH(nn::load_safetensors(bad), Catch::Contains("truncated: expected " + std::to_string(bytes.size()) +
                                                               " bytes") &&
                                                   Catch::Contains("found " + std::to_string(8 + n + 10)));
  // Trailing garbage after the data.
  write_bytes(bad, bytes + "xyz");
  CHECK_THROWS_WITH(nn::load_safetensors(bad), Catch::Contains("trailing bytes"));
  // A header that is not JSON.
  std::string corrupt = bytes;
  corrupt[corrupt.find(':', 8)] = '#';  // "name"#{...}
  write_bytes(bad, corrupt);
  CHECK_THROWS_WITH(nn::load_safetensors(bad), Catch::Contains(bad) && Catch::Contains("bad JSON header"));
  // Not a safetensors file at all.
  write_bytes(bad, "hello, this is a text file and not a checkpoint");
  CHECK_THROWS_WITH(nn::load_safetensors(bad), Catch::Contains(bad) && Catch::Contains("not a safetensors file"));
  CHECK_THROWS_WITH(nn::load_safetensors(dir.file("missing.safetensors")), Catch::Contains("cannot open"));
}

TEST_CASE("checkpoint: a mismatched model or config is refused with a clear error, leaving the model untouched",
          "[checkpoint]") {
  TempDir dir;
  const std::string path = dir.file("small.safetensors");
  Model<float> small(7);
  nn::save_checkpoint(path, small.params, nullptr, {{"encoding", "liere8"}});

  Model<float> wide(8, 8);
  std::vector<std::vector<float>> before;
  for (const auto& p : wide.params) before.push_back(p.value().to_vector());
  CHECK_THROWS_WITH(nn::load_checkpoint(path, wide.params),
                    Catch::Contains("patch_embed.proj.weight: checkpoint (6, 2, 2, 2) != model (8, 2, 2, 2)"));
  std::size_t i = 0;
  for (const auto& p : wide.params) CHECK(p.value().to_vector() == before[i++]);  // nothing was copied

  Model<float> same(9);
  CHECK_THROWS_WITH(nn::load_checkpoint(path, same.params, nullptr, {{{"encoding", "rope-mixed"}}}),
                    Catch::Contains("checkpoint encoding 'liere8' != model encoding 'rope-mixed'"));
  CHECK_THROWS_WITH(nn::load_checkpoint(path, same.params, nullptr, {{{"config", "x"}}}),
                    Catch::Contains("has no config"));
  // Extra model parameter / extra checkpoint tensor.
  same.params.add("extra", Shape{2});
  CHECK_THROWS_WITH(nn::load_checkpoint(path, same.params), Catch::Contains("has no tensor 'extra' (model (2))"));
  nn::Params fewer;
  Rng rng(1);
  nn::Linear head(fewer, "head", 6, 3, rng);
  CHECK_THROWS_WITH(nn::load_checkpoint(path, fewer), Catch::Contains("has tensor 'patch_embed.proj.weight' (6, 2, 2, 2) that the model does not have"));
  nn::LoadOptions lax;
  lax.strict = false;
  CHECK_NOTHROW(nn::load_checkpoint(path, fewer, nullptr, lax));
  CHECK(head.weight().value().to_vector() == small.params["head.weight"].value().to_vector());
  // Optimizer state asked for but not saved.
  optim::Adam opt(small.params.all(), optim::adam_config(1e-3));
  CHECK_THROWS_WITH(nn::load_checkpoint(path, small.params, &opt), Catch::Contains("has no optimizer state"));
  // Wrong dtype: a double model reading a float checkpoint.
  Model<double> dbl(10);
  CHECK_THROWS_WITH(nn::load_checkpoint(path, dbl.params), Catch::Contains("checkpoint dtype F32 != model dtype F64"));
}

TEST_CASE("checkpoint: bad optimizer metadata is a clear error before anything is copied", "[checkpoint]") {
  // Found while writing tests/fuzz/fuzz_safetensors: optim.step was read with std::stoll after the tensors had
  // been copied, so "seven" threw std::invalid_argument ("stoll") and left a half-loaded model behind.
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  const TrainedCheckpoint saved(path);
  const nn::SafetensorsFile good = nn::load_safetensors(path);

  for (const auto& [key, value] : std::vector<std::pair<std::string, std::string>>{
           {"optim.step", "seven"}, {"optim.step", "7x"}, {"optim.step", "-1"}, {"optim.step", ""},
           {"optim.step", "99999999999999999999"}, {"optim.lr", "abc"}, {"optim.lr", "-0.1"}, {"optim.lr", "inf"}}) {
    INFO(key << " = '" << value << "'");
    nn::SafetensorsFile bad = good;
    bad.metadata[key] = value;
    Model<float> b(2);
    optim::Adam opt_b(b.params.all(), optim::adamw_config(1.0, 0.05));
    std::vector<std::vector<float>> before;
    for (const auto& p : b.params) before.push_back(p.value().to_vector());
    CHECK_THROWS_AS(nn::load_checkpoint(bad, b.params, &opt_b), liere::Error);
    CHECK_THROWS_WITH(nn::load_checkpoint(bad, b.params, &opt_b),
                      Catch::Contains("checkpoint '" + path + "': metadata " + key + " '" + value + "'"));
    std::size_t i = 0;
    for (const auto& p : b.params) CHECK(p.value().to_vector() == before[i++]);  // nothing was copied
    CHECK(opt_b.steps() == 0);
    CHECK(opt_b.lr() == 1.0);
  }
  // The helpers on their own: the range and the missing key.
  CHECK(nn::metadata_integer(good.metadata, "epoch", path) == 1);
  CHECK_THROWS_WITH(nn::metadata_integer(good.metadata, "epoch", path, 2, 5),
                    Catch::Contains("metadata epoch '1' is not an integer in [2, 5]"));
  CHECK_THROWS_WITH(nn::metadata_integer(good.metadata, "absent", path), Catch::Contains("has no metadata 'absent'"));
}

TEST_CASE("checkpoint: NaN, an infinity or a negative second moment is neither written nor read", "[checkpoint]") {
  // A run with --clip 0 does not look at its gradients: a non-finite one reaches Adam, and its epoch's checkpoint
  // would have replaced the last good one with a diverged model.
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  TrainedCheckpoint saved(path);
  Model<float>& a = saved.model;
  optim::Adam& opt_a = saved.opt;
  const std::string good = read_bytes(path);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();

  SECTION("saving: the tensor and element are named, and the file keeps the last good checkpoint") {
    float* w = a.params["head.weight"].value().data();
    const float keep = w[3];
    w[3] = nan;
    CHECK_THROWS_WITH(nn::save_checkpoint(path, a.params, &opt_a),
                      Catch::Contains("checkpoint '" + path + "' not written: tensor 'head.weight' (3, 6) holds NaN "
                                      "at element 3 (flat index)"));
    w[3] = keep;
    auto& st = opt_a.states()[1];
    st.m.data()[0] = -inf;
    CHECK_THROWS_WITH(nn::save_checkpoint(path, a.params, &opt_a),
                      Catch::Contains("tensor 'optim." + st.param.name() + ".m'") &&
                          Catch::Contains("holds an infinity at element 0"));
    st.m.data()[0] = 0;
    st.v.data()[1] = -1e-12f;
    CHECK_THROWS_WITH(nn::save_checkpoint(path, a.params, &opt_a),
                      Catch::Contains("tensor 'optim." + st.param.name() + ".v'") &&
                          Catch::Contains("a negative value at element 1 (flat index), where Adam's second moments "
                                          "are >= 0"));
    CHECK(read_bytes(path) == good);
    st.v.data()[1] = 0;
    CHECK_NOTHROW(nn::save_checkpoint(path, a.params, &opt_a, {{"epoch", "1"}}));  // zeros are fine
  }

  SECTION("loading: refused before anything is copied, unless LoadOptions::finite is off") {
    const nn::SafetensorsFile file = nn::load_safetensors(path);
    auto poisoned = [&](const std::string& name, std::size_t i, float v) {
      nn::SafetensorsFile f = file;
      const auto* e = f.find(name);
      REQUIRE(e);
      std::memcpy(f.data.data() + e->begin + i * sizeof(float), &v, sizeof(float));
      return f;
    };
    Model<float> b(2);
    optim::Adam opt_b(b.params.all(), optim::adamw_config(3e-3, 0.05));
    std::vector<std::vector<float>> before;
    for (const auto& p : b.params) before.push_back(p.value().to_vector());
    const std::string v_name = "optim." + opt_b.states()[2].param.name() + ".v";
    CHECK_THROWS_WITH(nn::load_checkpoint(poisoned("blocks.0.mlp.fc1.bias", 5, nan), b.params, &opt_b),
                      Catch::Contains("checkpoint '" + path + "': tensor 'blocks.0.mlp.fc1.bias' (12) holds NaN at "
                                      "element 5 (flat index): the file is damaged"));
    CHECK_THROWS_WITH(nn::load_checkpoint(poisoned("cls_token", 0, inf), b.params, &opt_b),
                      Catch::Contains("tensor 'cls_token' (1, 1, 6) holds an infinity at element 0"));
    CHECK_THROWS_WITH(nn::load_checkpoint(poisoned(v_name, 2, -0.5f), b.params, &opt_b),
                      Catch::Contains("tensor '" + v_name + "'") && Catch::Contains("a negative value at element 2"));
    std::size_t i = 0;
    for (const auto& p : b.params) CHECK(p.value().to_vector() == before[i++]);  // nothing was copied
    CHECK(opt_b.steps() == 0);
    // Not asked for the optimizer: its tensors are not looked at.
    CHECK_NOTHROW(nn::load_checkpoint(poisoned(v_name, 2, -0.5f), b.params));
    nn::LoadOptions as_is;
    as_is.finite = false;
    nn::load_checkpoint(poisoned("blocks.0.mlp.fc1.bias", 5, nan), b.params, &opt_b, as_is);
    CHECK(std::isnan(b.params["blocks.0.mlp.fc1.bias"].value().to_vector()[5]));
  }
}

TEST_CASE("checkpoint: parse_safetensors reads bytes in memory as load_safetensors reads the file", "[checkpoint]") {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  Model<float> a(1);
  nn::save_checkpoint(path, a.params, nullptr, {{"epoch", "3"}});
  const std::string bytes = read_bytes(path);
  const std::span<const char> mem(bytes.data(), bytes.size());
  const nn::SafetensorsFile f = nn::load_safetensors(path), g = nn::parse_safetensors(mem, "in-memory");
  CHECK(g.path == "in-memory");
  CHECK(g.metadata == f.metadata);
  CHECK(g.data == f.data);
  REQUIRE(g.entries.size() == f.entries.size());
  for (std::size_t i = 0; i < f.entries.size(); ++i) {
    CHECK(g.entries[i].name == f.entries[i].name);
    CHECK(g.entries[i].shape == f.entries[i].shape);
    CHECK(g.entries[i].begin == f.entries[i].begin);
  }
  CHECK_THROWS_WITH(nn::parse_safetensors(mem.first(mem.size() - 1), "in-memory"),
                    Catch::Contains("checkpoint 'in-memory'") && Catch::Contains("truncated"));
  CHECK_THROWS_WITH(nn::parse_safetensors(mem.first(5), "in-memory"), Catch::Contains("truncated: 5 bytes"));
}

TEST_CASE("checkpoint: double parameters round-trip as F64", "[checkpoint]") {
  TempDir dir;
  const std::string path = dir.file("double.safetensors");
  Model<double> a(11), b(12);
  optim::AdamT<double> oa(a.params.all(), optim::adam_config(1e-2)), ob(b.params.all(), optim::adam_config(1e-2));
  a.train(oa, 2);
  nn::save_checkpoint(path, a.params, &oa);
  nn::load_checkpoint(path, b.params, &ob);
  for (std::size_t i = 0; i < a.params.size(); ++i) CHECK(same_bytes(a.params.all()[i].value(), b.params.all()[i].value()));
  CHECK(read_bytes(path).find("\"dtype\":\"F64\"") != std::string::npos);
}

TEST_CASE("checkpoint: a failed write leaves the previous checkpoint intact", "[checkpoint]") {
  TempDir dir;
  const std::string path = dir.file("atomic.safetensors");
  Model<float> m(13);
  nn::save_checkpoint(path, m.params, nullptr, {{"epoch", "1"}});
  const std::string old = read_bytes(path);

  // 1. Failure in the middle of writing the data (injected after ~100 bytes).
  for (const auto& p : m.params) p.value().fill(0.5f);
  nn::SaveOptions fail_midway;
  fail_midway.on_write = [](std::size_t written, std::size_t total) {
    if (written >= 100 && written < total) throw std::runtime_error("disk full (simulated)");
  };
  CHECK_THROWS_WITH(nn::save_checkpoint(path, m.params, nullptr, {{"epoch", "2"}}, fail_midway),
                    Catch::Contains("disk full"));
  CHECK(read_bytes(path) == old);
  CHECK_FALSE(fs::exists(path + ".tmp"));

  // 2. The temporary file cannot be created (its path is a directory).
  fs::create_directory(path + ".tmp");
  CHECK_THROWS_WITH(nn::save_checkpoint(path, m.params, nullptr, {{"epoch", "2"}}),
                    Catch::Contains("cannot create '" + path + ".tmp'"));
  CHECK(read_bytes(path) == old);
  fs::remove(path + ".tmp");

  // 3. A successful write replaces it.
  nn::save_checkpoint(path, m.params, nullptr, {{"epoch", "2"}});
  CHECK(nn::load_safetensors(path).metadata.at("epoch") == "2");
}

TEST_CASE("checkpoint: Python with NumPy reads it as safetensors does", "[checkpoint][needs-numpy]") {
  if (!test::python_has("numpy"))
    LIERE_SKIP(test::python() << " cannot import numpy (Debian: python3-numpy; or set LIERE_TEST_PYTHON)");
  TempDir dir;
  const std::string path = dir.file("py.safetensors"), script = dir.file("check.py");
  Model<float> m(14);
  optim::Adam opt(m.params.all(), optim::adamw_config(1e-3));
  m.train(opt, 1);
  nn::save_checkpoint(path, m.params, &opt, {{"encoding", "liere8"}});
  // The checks of safetensors' own validation (header size, UTF-8 JSON starting with '{', string metadata,
  // offsets contiguous from 0 to EOF, sizes matching dtype × shape); safetensors.numpy.load_file too if installed.
  write_bytes(script, R"PY(
import json, struct, sys
import numpy as np
b = open(sys.argv[1], 'rb').read()
n, = struct.unpack('<Q', b[:8])
assert 0 < n <= 100_000_000
h = b[8:8 + n].decode('utf-8')
assert h.startswith('{')
d = json.loads(h)
meta = d.pop('__metadata__', {})
assert all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items())
assert meta['encoding'] == 'liere8' and meta['optim.step'] == '1'
buf = b[8 + n:]
pos = 0
for k, e in sorted(d.items(), key=lambda kv: kv[1]['data_offsets']):
    s, t = e['data_offsets']
    assert e['dtype'] == 'F32' and s == pos, k
    assert t - s == 4 * int(np.prod(e['shape'], dtype=np.int64)), k
    pos = t
assert pos == len(buf)
s, t = d['head.weight']['data_offsets']
w = np.frombuffer(buf[s:t], dtype='<f4').reshape(d['head.weight']['shape'])
print(repr(float(w[1, 2])))
try:
    from safetensors.numpy import load_file
    assert np.array_equal(load_file(sys.argv[1])['head.weight'], w)
except ImportError:
    pass
)PY");
  const std::string out = dir.file("out.txt");
  REQUIRE(std::system(("'" + test::python() + "' " + script + " " + path + " > " + out).c_str()) == 0);
  CHECK(std::stod(read_bytes(out)) == double(m.params["head.weight"].value()(1, 2)));
}
