// tests/test_attention.cpp — attention.hpp: the forward against a naive reference, every backward by central
// differences in double and by a directional (JVP vs VJP) test, layouts (packed qkv), masks, CLS skipping,
// transforms and per-sequence tables.
#include <catch2/catch.hpp>

#include <liere/attention.hpp>
#include <liere/pe/liere.hpp>
#include <numbers>
#include <omp.h>

#include "test_util.hpp"

using namespace liere::test;

namespace {

struct Problem {
  liere::AttentionShape s;
  std::int64_t ld;  // token stride of q, k, v
  std::vector<double> qkv;  // q at 0, k at kofs, v at vofs (packed or three blocks)
  std::int64_t kofs, vofs;
};

Problem make_problem(int b, int t, int h, int d, bool packed) {
  Problem p;
  p.s = {b, t, h, d};
  const std::int64_t hd = std::int64_t(h) * d, n = std::int64_t(b) * t * hd;
  if (packed) {
    p.ld = 3 * hd;
    p.kofs = hd;
    p.vofs = 2 * hd;
  } else {
    p.ld = hd;
    p.kofs = n;
    p.vofs = 2 * n;
  }
  p.qkv = random_vector(std::size_t(3 * n));
  return p;
}

// Naive attention in double: out(b, t, h) = Σ_j softmax_j(q̂·k̂_j/√D) v_j with q̂ = R P q.
std::vector<double> naive(const Problem& p, const std::vector<Eigen::MatrixXd>& rot_per_token_head /* (T·H) or empty */,
                          const std::vector<std::uint8_t>& mask) {
  const auto& s = p.s;
  const int T = s.tokens, H = s.heads, D = s.head_dim;
  std::vector<double> out(std::size_t(s.size()), 0.0);
  auto vec = [&](std::int64_t base, int b, int t, int h) {
    return Eigen::Map<const Eigen::VectorXd>(p.qkv.data() + base + b * T * p.ld + t * p.ld + h * D, D);
  };
  for (int b = 0; b < s.batch; ++b)
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < T; ++i) {
        Eigen::VectorXd qi = vec(0, b, i, h);
        if (!rot_per_token_head.empty()) qi = rot_per_token_head[i * H + h] * qi;
        std::vector<double> sc(T);
        double mx = -1e300;
        for (int j = 0; j < T; ++j) {
          Eigen::VectorXd kj = vec(p.kofs, b, j, h);
          if (!rot_per_token_head.empty()) kj = rot_per_token_head[j * H + h] * kj;
          sc[j] = qi.dot(kj) / std::sqrt(double(D));
          if (mask.empty() || mask[b * T + j]) mx = std::max(mx, sc[j]);
        }
        double z = 0;
        for (int j = 0; j < T; ++j) z += (mask.empty() || mask[b * T + j]) ? std::exp(sc[j] - mx) : 0.0;
        for (int j = 0; j < T; ++j) {
          const double w = (mask.empty() || mask[b * T + j]) ? std::exp(sc[j] - mx) / z : 0.0;
          for (int c = 0; c < D; ++c) out[((std::size_t(b) * T + i) * H + h) * D + c] += w * vec(p.vofs, b, j, h)(c);
        }
      }
  return out;
}

double loss(const Problem& p, const liere::AttentionRotations<double>& rot, const std::vector<std::uint8_t>& mask,
            const std::vector<double>& g) {
  liere::AttentionCache<double> cache;
  std::vector<double> out(static_cast<std::size_t>(p.s.size()));
  liere::attention_forward(p.s, p.qkv.data(), p.qkv.data() + p.kofs, p.qkv.data() + p.vofs, p.ld, rot, mask,
                           out.data(), cache);
  return dot(out, g);
}

// Checks d loss / d qkv (and the table and transform gradients of the rotations) by central differences in
// double, and the directional test ⟨J u, g⟩ = ⟨u, Jᵀ g⟩ along random directions.
void check_gradients(Problem p, liere::AttentionRotations<double> rot, std::vector<liere::RotationTable<double>>* tables,
                     std::vector<std::vector<double>>* transforms, const std::vector<std::uint8_t>& mask = {}) {
  const std::int64_t n = p.s.size();
  const std::vector<double> g = random_vector(std::size_t(n));
  liere::AttentionCache<double> cache;
  std::vector<double> out(static_cast<std::size_t>(n));
  liere::attention_forward(p.s, p.qkv.data(), p.qkv.data() + p.kofs, p.qkv.data() + p.vofs, p.ld, rot, mask,
                           out.data(), cache);
  std::vector<double> dqkv(p.qkv.size(), 0.0);
  std::vector<liere::RotationTable<double>> dtables;
  std::vector<std::vector<double>> dtransforms;
  std::vector<liere::HeadRotationGrad<double>> drot;
  if (rot.any()) {
    for (const auto& hr : rot.heads) {
      dtables.emplace_back(hr.table ? hr.table.tokens : 0, p.s.head_dim, hr.table ? hr.table.block : 2);
      dtransforms.emplace_back(std::size_t(p.s.head_dim) * p.s.head_dim, 0.0);
    }
    for (std::size_t h = 0; h < rot.heads.size(); ++h)
      drot.push_back({rot.heads[h].table ? dtables[h].view() : liere::RotationTableView<double>{},
                      rot.heads[h].transform ? dtransforms[h].data() : nullptr});
  }
  liere::attention_backward(p.s, p.qkv.data(), p.qkv.data() + p.kofs, p.qkv.data() + p.vofs, p.ld, rot, mask, g.data(),
                            cache, dqkv.data(), dqkv.data() + p.kofs, dqkv.data() + p.vofs, rot.any() ? &drot : nullptr);
  {
    // The backward accumulates (+=) into dq, dk and dv: started at c, they end at c + the gradient above.
    std::vector<double> acc = random_vector(p.qkv.size());
    const std::vector<double> c = acc;
    liere::attention_backward<double>(p.s, p.qkv.data(), p.qkv.data() + p.kofs, p.qkv.data() + p.vofs, p.ld, rot, mask,
                                      g.data(), cache, acc.data(), acc.data() + p.kofs, acc.data() + p.vofs, nullptr);
    double worst = 0;
    for (std::size_t i = 0; i < acc.size(); ++i) raise_error(worst, rel_err(acc[i], c[i] + dqkv[i]));
    CHECK(worst < 1e-13);
  }
  // qkv
  auto f = [&](const std::vector<double>& x) {
    Problem q = p;
    q.qkv = x;
    return loss(q, rot, mask, g);
  };
  CHECK(max_rel_err(dqkv, numeric_gradient(f, p.qkv)) < 1e-6);
  for (int probe = 0; probe < 3; ++probe) {
    const std::vector<double> u = random_vector(p.qkv.size());
    std::vector<double> xp = p.qkv, xm = p.qkv;
    for (std::size_t i = 0; i < u.size(); ++i) {
      xp[i] += 1e-6 * u[i];
      xm[i] -= 1e-6 * u[i];
    }
    const double jvp = (f(xp) - f(xm)) / 2e-6;
    CHECK(std::abs(jvp - dot(u, dqkv)) <= 1e-8 * std::max(1.0, std::abs(jvp)));
  }
  if (!tables) return;
  // tables and transforms
  for (std::size_t h = 0; h < rot.heads.size(); ++h) {
    if (rot.heads[h].table) {
      auto& tab = (*tables)[h];
      std::vector<double> x0(tab.data().begin(), tab.data().end());
      auto ft = [&](const std::vector<double>& x) {
        std::copy(x.begin(), x.end(), tab.data().begin());
        const double l = loss(p, rot, mask, g);
        std::copy(x0.begin(), x0.end(), tab.data().begin());
        return l;
      };
      const std::vector<double> dt(dtables[h].data().begin(), dtables[h].data().end());
      CHECK(max_rel_err(dt, numeric_gradient(ft, x0)) < 1e-6);
    }
    if (rot.heads[h].transform && transforms) {
      auto& tr = (*transforms)[h];
      const std::vector<double> x0 = tr;
      auto ft = [&](const std::vector<double>& x) {
        std::copy(x.begin(), x.end(), tr.begin());
        const double l = loss(p, rot, mask, g);
        std::copy(x0.begin(), x0.end(), tr.begin());
        return l;
      };
      CHECK(max_rel_err(dtransforms[h], numeric_gradient(ft, x0)) < 1e-6);
    }
  }
}

std::vector<liere::RotationTable<double>> random_rotation_tables(int heads, int rows, int d, int block, std::uint64_t seed) {
  std::vector<liere::RotationTable<double>> tables(heads);
  for (int h = 0; h < heads; ++h) {
    const liere::LieREGeometry geo{1, 2, d, block};
    std::vector<double> params(geo.num_params());
    liere::liere_init_uniform<double>(params, 2 * std::numbers::pi, seed + h);
    const std::vector<double> pos = random_vector(std::size_t(rows) * 2, 0.0, 1.0);
    liere::liere_table_forward<double>(geo, params, pos, rows, tables[h]);
  }
  return tables;
}

liere::AttentionRotations<double> rotations_of(std::vector<liere::RotationTable<double>>& tables, int first = 0) {
  liere::AttentionRotations<double> r;
  r.first_rotated = first;
  for (auto& t : tables) r.heads.push_back({t.view(), nullptr});
  return r;
}

}  // namespace

TEST_CASE("attention matches a naive implementation, with and without rotations", "[attention]") {
  for (bool packed : {false, true}) {
    CAPTURE(packed);
    Problem p = make_problem(2, 5, 2, 8, packed);
    liere::AttentionCache<double> cache;
    std::vector<double> out(static_cast<std::size_t>(p.s.size()));
    liere::attention_forward(p.s, p.qkv.data(), p.qkv.data() + p.kofs, p.qkv.data() + p.vofs, p.ld,
                             liere::AttentionRotations<double>{}, {}, out.data(), cache);
    CHECK(max_rel_err(out, naive(p, {}, {})) < 1e-13);
    auto tables = random_rotation_tables(2, 5, 8, 4, 1);
    std::vector<Eigen::MatrixXd> per;
    for (int t = 0; t < 5; ++t)
      for (int h = 0; h < 2; ++h) per.push_back(tables[h].matrix(t));
    liere::attention_forward(p.s, p.qkv.data(), p.qkv.data() + p.kofs, p.qkv.data() + p.vofs, p.ld,
                             rotations_of(tables), {}, out.data(), cache);
    CHECK(max_rel_err(out, naive(p, per, {})) < 1e-13);
    // probabilities are a distribution per query
    for (int row = 0; row < 2 * 2 * 5; ++row) {
      double z = 0;
      for (int j = 0; j < 5; ++j) z += cache.probs[std::size_t(row) * 5 + j];
      CHECK(z == Approx(1.0).epsilon(1e-14));
    }
  }
  // One table per sequence (B·T rows, the general path): each sequence against the naive attention with its rows.
  Problem p = make_problem(3, 4, 2, 8, true);
  auto tables = random_rotation_tables(2, 3 * 4, 8, 4, 2);
  liere::AttentionCache<double> cache;
  std::vector<double> out(static_cast<std::size_t>(p.s.size()));
  liere::attention_forward(p.s, p.qkv.data(), p.qkv.data() + p.kofs, p.qkv.data() + p.vofs, p.ld, rotations_of(tables),
                           {}, out.data(), cache);
  const std::int64_t seq = 4 * p.ld, oseq = 4 * 2 * 8;  // one sequence of packed qkv, of the output
  for (int b = 0; b < 3; ++b) {
    CAPTURE(b);
    Problem one = make_problem(1, 4, 2, 8, true);
    std::copy_n(p.qkv.begin() + b * seq, seq, one.qkv.begin());
    std::vector<Eigen::MatrixXd> per;
    for (int t = 0; t < 4; ++t)
      for (int h = 0; h < 2; ++h) per.push_back(tables[h].matrix(b * 4 + t));
    const std::vector<double> ob(out.begin() + b * oseq, out.begin() + (b + 1) * oseq);
    CHECK(max_rel_err(ob, naive(one, per, {})) < 1e-13);
  }
}

TEST_CASE("attention respects the key mask; a fully masked row gives zeros", "[attention]") {
  Problem p = make_problem(2, 4, 1, 4, false);
  std::vector<std::uint8_t> mask = {1, 1, 0, 1, 0, 0, 0, 0};  // sequence 1: every key is padding
  liere::AttentionCache<double> cache;
  std::vector<double> out(static_cast<std::size_t>(p.s.size()));
  liere::attention_forward(p.s, p.qkv.data(), p.qkv.data() + p.kofs, p.qkv.data() + p.vofs, p.ld,
                           liere::AttentionRotations<double>{}, mask, out.data(), cache);
  CHECK(max_rel_err(out, naive(p, {}, {1, 1, 0, 1, 1, 1, 1, 1})) > 0);  // sequence 0 uses the mask
  const std::vector<double> ref = naive(p, {}, mask);
  for (std::size_t i = 0; i < 16; ++i) CHECK(out[i] == Approx(ref[i]).epsilon(1e-13));
  for (std::size_t i = 16; i < 32; ++i) CHECK(out[i] == 0.0);
  for (int j = 0; j < 4; ++j) CHECK(cache.probs[j * 0 + 2] == 0.0);  // query 0 of sequence 0 ignores key 2
  std::vector<std::uint8_t> wrong(7, 1);
  REQUIRE_THROWS_WITH(liere::attention_forward(p.s, p.qkv.data(), p.qkv.data() + p.kofs, p.qkv.data() + p.vofs, p.ld,
                                               liere::AttentionRotations<double>{}, wrong, out.data(), cache),
                      Catch::Contains("7 entries") && Catch::Contains("B x T = 2 x 4 = 8"));
}

TEST_CASE("attention gradients: no encoding, packed and separate buffers, masks", "[attention][backward]") {
  check_gradients(make_problem(2, 4, 2, 4, false), {}, nullptr, nullptr);
  check_gradients(make_problem(2, 4, 2, 4, true), {}, nullptr, nullptr);
  check_gradients(make_problem(2, 4, 1, 4, false), {}, nullptr, nullptr, {1, 0, 1, 1, 1, 1, 0, 1});
}

TEST_CASE("attention gradients through rotation tables (q, k, v and the tables)", "[attention][backward]") {
  for (int block : {2, 4, 8}) {
    for (bool packed : {false, true}) {
      CAPTURE(block, packed);
      Problem p = make_problem(2, 4, 2, 8, packed);
      auto tables = random_rotation_tables(2, 4, 8, block, 3);
      check_gradients(p, rotations_of(tables), &tables, nullptr);
    }
  }
  // One table per sequence (different positions per sequence in one batch).
  Problem p = make_problem(2, 3, 2, 4, true);
  auto tables = random_rotation_tables(2, 6, 4, 2, 5);
  check_gradients(p, rotations_of(tables), &tables, nullptr);
  // Batch, heads, tokens and head dim all different (above B = H = 2): an index that swaps two of them is seen; a
  // dense 16 × 16 block; one table per sequence after a skipped CLS token.
  Problem q = make_problem(3, 5, 2, 16, false);
  auto dense = random_rotation_tables(2, 5, 16, 16, 9);
  check_gradients(q, rotations_of(dense), &dense, nullptr);
  Problem r = make_problem(3, 4, 3, 4, true);
  auto per_sequence = random_rotation_tables(3, 9, 4, 4, 13);  // 3 sequences × 3 rotated tokens
  check_gradients(r, rotations_of(per_sequence, 1), &per_sequence, nullptr);
}

TEST_CASE("attention gradients with a skipped CLS token and with transforms", "[attention][backward]") {
  Problem p = make_problem(2, 5, 2, 4, true);
  auto tables = random_rotation_tables(2, 4, 4, 2, 7);  // 4 rotated tokens after the CLS
  check_gradients(p, rotations_of(tables, 1), &tables, nullptr);
  // transform P then rotation (STRING's structure): arbitrary matrices, the test covers linearity too
  std::vector<std::vector<double>> transforms = {random_vector(16), random_vector(16)};
  auto rot = rotations_of(tables, 1);
  rot.heads[0].transform = transforms[0].data();
  rot.heads[1].transform = transforms[1].data();
  check_gradients(p, rot, &tables, &transforms);
}

TEST_CASE("heads that share a transform accumulate into one dP, every head's share, on any thread count",
          "[attention][backward]") {
  // STRING with --sharing layer: the heads of a layer pass the same transform and the same dP buffer. The backward
  // must add every head's dYᵀX into it; with one thread per head two threads would write it at once. Reference: each
  // head into its own buffer, summed. Large enough (rows 2400, D 32) that concurrent products would overlap.
  const int H = 8, D = 32, B = 8, T = 300;
  Problem p = make_problem(B, T, H, D, true);
  auto tables = random_rotation_tables(H, T, D, 2, 11);
  const std::vector<double> transform = random_vector(std::size_t(D) * D);
  auto rot = rotations_of(tables);
  for (auto& h : rot.heads) h.transform = transform.data();
  liere::AttentionCache<double> cache;
  cache.backward = true;
  std::vector<double> out(std::size_t(p.s.size()));
  liere::attention_forward(p.s, p.qkv.data(), p.qkv.data() + p.kofs, p.qkv.data() + p.vofs, p.ld, rot, {}, out.data(),
                           cache);
  const std::vector<double> g = random_vector(out.size());
  auto run = [&](bool shared) {
    std::vector<liere::RotationTable<double>> dtables(H);
    std::vector<std::vector<double>> dp(shared ? 1 : H, std::vector<double>(std::size_t(D) * D, 0.0));
    std::vector<liere::HeadRotationGrad<double>> drot;
    for (int h = 0; h < H; ++h) {
      dtables[h].resize(T, D, 2);
      drot.push_back({dtables[h].view(), dp[shared ? 0 : h].data()});
    }
    std::vector<double> dqkv(p.qkv.size(), 0.0);
    liere::attention_backward(p.s, p.qkv.data(), p.qkv.data() + p.kofs, p.qkv.data() + p.vofs, p.ld, rot, {}, g.data(),
                              cache, dqkv.data(), dqkv.data() + p.kofs, dqkv.data() + p.vofs, &drot);
    std::vector<double> sum(std::size_t(D) * D, 0.0);
    for (const auto& d : dp)
      for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += d[i];
    return sum;
  };
  const std::vector<double> want = run(false);
  // One thread per head (more threads than cores: preemption inside a product makes overlapping updates likelier).
  // A race shows only sometimes: with the heads run in parallel into the shared buffer (the bug this guards), 100
  // repetitions failed in 1 of 5 runs and 4 repetitions in 1 of 4 (2 cores, loaded machine). The result with a
  // shared buffer is checked on every run.
  const int threads = omp_get_max_threads();
  omp_set_num_threads(H);
  for (int rep = 0; rep < 8; ++rep) CHECK(max_rel_err(run(true), want) < 1e-12);
  omp_set_num_threads(threads);
}

TEST_CASE("a skipped CLS token equals an identity row in the table", "[attention]") {
  Problem p = make_problem(2, 5, 2, 8, false);
  auto tables = random_rotation_tables(2, 4, 8, 8, 9);
  std::vector<liere::RotationTable<double>> with_identity(2);
  for (int h = 0; h < 2; ++h) {
    with_identity[h].resize(5, 8, 8);
    with_identity[h].set_identity();
    std::copy(tables[h].data().begin(), tables[h].data().end(), with_identity[h].data().begin() + 64);
  }
  liere::AttentionCache<double> c1, c2;
  std::vector<double> o1(static_cast<std::size_t>(p.s.size())), o2(o1.size());
  liere::attention_forward(p.s, p.qkv.data(), p.qkv.data() + p.kofs, p.qkv.data() + p.vofs, p.ld, rotations_of(tables, 1),
                           {}, o1.data(), c1);
  liere::attention_forward(p.s, p.qkv.data(), p.qkv.data() + p.kofs, p.qkv.data() + p.vofs, p.ld,
                           rotations_of(with_identity, 0), {}, o2.data(), c2);
  CHECK(max_rel_err(o1, o2) < 1e-14);
}

TEST_CASE("attention rejects inconsistent arguments", "[attention][bad-input]") {
  Problem p = make_problem(1, 4, 2, 4, false);
  liere::AttentionCache<double> cache;
  std::vector<double> out(static_cast<std::size_t>(p.s.size()));
  auto tables = random_rotation_tables(1, 4, 4, 2, 1);
  REQUIRE_THROWS_WITH(liere::attention_forward(p.s, p.qkv.data(), p.qkv.data() + p.kofs, p.qkv.data() + p.vofs, p.ld,
                                               rotations_of(tables), {}, out.data(), cache),
                      Catch::Contains("1 head rotations for 2 heads"));
  REQUIRE_THROWS_WITH(liere::attention_forward(p.s, p.qkv.data(), p.qkv.data(), p.qkv.data(), 3, {}, {}, out.data(), cache),
                      Catch::Contains("token stride 3"));
  auto three = random_rotation_tables(2, 3, 4, 2, 1);
  REQUIRE_THROWS_WITH(liere::attention_forward(p.s, p.qkv.data(), p.qkv.data() + p.kofs, p.qkv.data() + p.vofs, p.ld,
                                               rotations_of(three), {}, out.data(), cache),
                      Catch::Contains("3 rows"));
}
