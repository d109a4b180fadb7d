// examples/pe_diagnostics.cpp — what a position encoding's rotations are, measured. Builds any rotary encoding
// from the flags the trainers use (PEConfig) and prints, over its parameter sets:
//   * generator norms ‖A_i‖_F (one per set and position axis i),
//   * commutator norms ‖[A_i, A_j]‖_F, absolute and relative to ‖A_i‖_F·‖A_j‖_F (i < j),
//   * the relative-position deviation max over grid pairs (p, q) of ‖R(p)ᵀR(q) − R(q − p)‖_max, per set,
//   * orthogonality ‖RᵀR − I‖_max of the float32 rotation tables the model uses and of the double rotations,
//   * whether the encoding is exactly relative (deviation < 1e-9), next to what the library claims.
// Everything is computed in double from pe.generators(set): the rotations are exp(Σ_i p_i A_i) evaluated per
// connected block of the generators' sparsity pattern (the b×b blocks; one dense block for STRING once P ≠ I),
// and checked against pe.rotation(set, p). The float32 figures come from the tables prepare() builds.
//
//   pe_diagnostics --pe all                        every rotary encoding, ViT-Tiny geometry (12 layers × 3 heads)
//   pe_diagnostics --pe liere --block 64 --json liere64.jsonl
// The --json file is replaced whole (io/atomic_file.hpp) once everything is measured: a run that fails leaves the
// previous file as it was. A command line that cannot run (blocks that do not divide --head-dim, a --json folder
// that is missing) is a usage error before any work.
#include <app/flags.hpp>
#include <liere/io/atomic_file.hpp>
#include <liere/io/json.hpp>
#include <liere/lie/exp.hpp>
#include <liere/pe/encoding.hpp>

#include <liere/core/eigen.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace {

// "8x8" → {8, 8}: 1 to 3 sizes in [1, 4096] joined by 'x'.
std::vector<int> parse_grid(const std::string& v) {
  std::vector<int> g;
  std::stringstream ss(v);
  std::string part;
  while (std::getline(ss, part, 'x')) {
    const long long n = liere::app::Flags::to_int(part);
    LIERE_ENSURE(n >= 1 && n <= 4096, "expected sizes in [1, 4096], got " << n);
    g.push_back(int(n));
  }
  LIERE_ENSURE(!g.empty() && g.size() <= 3 && v.back() != 'x', "expected 1 to 3 sizes joined by 'x', e.g. 8x8");
  return g;
}

std::string grid_str(const std::vector<int>& g) {
  std::string s;
  for (int n : g) {
    if (!s.empty()) s += 'x';
    s += std::to_string(n);
  }
  return s;
}

struct Config {
  liere::PEConfig pe;
  bool all = false;
  int head_dim = 64, pos_dim = 2, layers = 12, heads = 3;
  std::vector<int> grid, train_grid;
  std::uint64_t seed = 0;
  std::string json;
  double budget_gflop = 30;
  bool full = false;
};

// ---- statistics ------------------------------------------------------------------------------------------

struct Stats {
  double min = NAN, median = NAN, max = NAN, mean = NAN;
  std::size_t count = 0;
};

Stats stats_of(std::vector<double> v) {
  Stats s;
  s.count = v.size();
  if (v.empty()) return s;
  for (double x : v)
    if (std::isnan(x)) return {NAN, NAN, NAN, NAN, v.size()};
  std::sort(v.begin(), v.end());
  s.min = v.front();
  s.max = v.back();
  const std::size_t h = v.size() / 2;
  s.median = v.size() % 2 ? v[h] : 0.5 * (v[h - 1] + v[h]);
  s.mean = std::accumulate(v.begin(), v.end(), 0.0) / double(v.size());
  return s;
}

// m = max(m, v), where a NaN anywhere wins (a NaN must never hide behind a comparison).
void take_max(double& m, double v) {
  if (std::isnan(m)) return;
  if (std::isnan(v) || v > m) m = v;
}

// ---- the relative check ------------------------------------------------------------------------------------

// Index sets of the connected blocks of a set's generators: i ~ j when some A_a(i, j) ≠ 0. exp(Σ p_a A_a) is
// block-diagonal on them (up to a permutation), so every rotation is a product of small exponentials.
std::vector<std::vector<int>> components(const std::vector<Eigen::MatrixXd>& gens) {
  const int d = int(gens.front().rows());
  std::vector<int> parent(d);
  std::iota(parent.begin(), parent.end(), 0);
  auto find = [&](int i) {
    while (parent[i] != i) i = parent[i] = parent[parent[i]];
    return i;
  };
  for (const auto& a : gens)
    for (int c = 0; c < d; ++c)
      for (int r = 0; r < c; ++r)
        if (a(r, c) != 0.0 || a(c, r) != 0.0) parent[find(r)] = find(c);
  std::map<int, std::vector<int>> groups;
  for (int i = 0; i < d; ++i) groups[find(i)].push_back(i);
  std::vector<std::vector<int>> out;
  for (auto& [root, idx] : groups) out.push_back(std::move(idx));
  return out;
}

// P position axes, D head dim, n patches (grid positions), r rotated rows (n, plus the CLS row when there is
// one), m grid-index differences.
struct Pair {
  int p, q, diff;  // rows of the rotated positions, index into the difference positions
};

// Everything one set's check needs, shared by all sets.
struct RelWork {
  int dim = 2;
  std::vector<double> rows;       // (r, P): every rotated position (CLS row included)
  std::vector<double> diffs;      // (m, P): q − p for the grid-index differences
  std::vector<char> diff_needed;  // (m)
  std::vector<Pair> pairs;        // the pairs checked
};

struct SetResult {
  double dev = 0, orth64 = 0, max_fro = 0;  // relative deviation, orthogonality, max_p ‖Σ p_a A_a‖_F
};

// The check on the components of one size, as Eigen::Matrix<double, B, B> (B = Eigen::Dynamic: any size).
template <int B>
void check_components(const std::vector<Eigen::MatrixXd>& gens, const std::vector<const std::vector<int>*>& comps,
                      const RelWork& w, SetResult& out, std::vector<double>& fro2) {
  using Mat = Eigen::Matrix<double, B, B>;
  const int dim = w.dim, nrows = int(w.rows.size() / dim), ndiff = int(w.diffs.size() / dim);
  std::vector<Mat> rr(nrows), rd(ndiff);
  for (const std::vector<int>* comp : comps) {
    const int c = int(comp->size());
    std::vector<Mat> g(dim);
    for (int a = 0; a < dim; ++a) g[a] = gens[a](*comp, *comp);
    const Mat id = Mat::Identity(c, c);
    auto generator = [&](const double* x) {
      Mat a = Mat::Zero(c, c);
      for (int i = 0; i < dim; ++i) a += x[i] * g[i];
      return a;
    };
    for (int t = 0; t < nrows; ++t) {
      const Mat a = generator(w.rows.data() + std::size_t(t) * dim);
      fro2[t] += a.squaredNorm();
      rr[t] = liere::exp(a);
      take_max(out.orth64, (rr[t].transpose() * rr[t] - id).cwiseAbs().maxCoeff());
    }
    for (int m = 0; m < ndiff; ++m)
      if (w.diff_needed[m]) rd[m] = liere::exp(generator(w.diffs.data() + std::size_t(m) * dim));
    for (const Pair& pr : w.pairs)
      take_max(out.dev, (rr[pr.p].transpose() * rr[pr.q] - rd[pr.diff]).cwiseAbs().maxCoeff());
  }
}

SetResult check_set(const std::vector<Eigen::MatrixXd>& gens, const std::vector<std::vector<int>>& comps, const RelWork& w) {
  SetResult out;
  std::map<int, std::vector<const std::vector<int>*>> by_size;
  for (const auto& c : comps)
    if (c.size() >= 2) by_size[int(c.size())].push_back(&c);  // size 1: A = 0 there, R = 1 exactly
  std::vector<double> fro2(w.rows.size() / w.dim, 0.0);
  for (const auto& [size, list] : by_size) {
    switch (size) {  // fixed sizes: registers and unrolled loops for the many small blocks
      case 2: check_components<2>(gens, list, w, out, fro2); break;
      case 3: check_components<3>(gens, list, w, out, fro2); break;
      case 4: check_components<4>(gens, list, w, out, fro2); break;
      case 8: check_components<8>(gens, list, w, out, fro2); break;
      case 16: check_components<16>(gens, list, w, out, fro2); break;
      default: check_components<Eigen::Dynamic>(gens, list, w, out, fro2); break;
    }
  }
  for (double f : fro2) take_max(out.max_fro, std::sqrt(f));
  return out;
}

// Dense R(p) from the components (for the comparison with pe.rotation).
Eigen::MatrixXd dense_rotation(const std::vector<Eigen::MatrixXd>& gens, const std::vector<std::vector<int>>& comps,
                               const double* p) {
  const int d = int(gens.front().rows());
  Eigen::MatrixXd r = Eigen::MatrixXd::Zero(d, d);
  for (const auto& comp : comps) {
    const int c = int(comp.size());
    Eigen::MatrixXd a = Eigen::MatrixXd::Zero(c, c);
    for (std::size_t i = 0; i < gens.size(); ++i) a += p[i] * gens[i](comp, comp);
    r(comp, comp) = liere::exp(a);
  }
  return r;
}

// ---- one encoding ------------------------------------------------------------------------------------------

struct Result {
  std::string name, label, describe, grid, train_grid, note;
  bool rotary = false, claimed_commuting = false, exact = false;
  int pos_dim = 0, head_dim = 0, block = 0, sets = 0, sets_checked = 0;
  std::size_t params = 0, pairs_total = 0, pairs_checked = 0;
  double max_position = 0;  // largest |coordinate| of the grid positions
  Stats gen_norm, comm_abs, comm_rel, dev, orth64, max_fro;
  double orth_f32_tables = 0, orth_f32_transform = NAN, orth_f64 = 0, check_vs_rotation = 0, seconds = 0;
};

Result diagnose(const Config& cfg, const liere::PEConfig& pc, int pos_dim, const std::vector<int>& grid,
                const std::vector<int>& train_grid) {
  const auto t0 = std::chrono::steady_clock::now();
  Result res;
  res.name = pc.info().name;
  res.label = pc.label();
  res.describe = pc.describe();
  res.rotary = pc.info().rotary;
  res.claimed_commuting = pc.info().commuting;
  res.pos_dim = pos_dim;
  res.head_dim = cfg.head_dim;
  res.block = pc.effective_block();
  res.grid = grid_str(grid);
  res.train_grid = grid_str(train_grid);

  liere::PEGeometry geo;
  geo.layers = cfg.layers;
  geo.heads = cfg.heads;
  geo.head_dim = cfg.head_dim;
  geo.pos_dim = pos_dim;
  geo.embed_dim = cfg.heads * cfg.head_dim;
  geo.train_grid = train_grid;
  geo.cls = true;  // as the trainers: token 0 is CLS, placed by --cls
  liere::PositionEncoding<double> pe(pc, geo, cfg.seed);
  pe.set_grid(grid);
  res.params = pe.num_params();
  res.sets = pe.num_sets();
  if (!res.rotary) return res;

  // Generators, norms and commutators of every set.
  const int sets = pe.num_sets(), P = pos_dim;
  std::vector<std::vector<Eigen::MatrixXd>> gens(sets);
  std::vector<double> norms, comm_abs, comm_rel;
  for (int s = 0; s < sets; ++s) {
    gens[s] = pe.generators(s);
    std::vector<double> nf(P);
    for (int i = 0; i < P; ++i) norms.push_back(nf[i] = gens[s][i].norm());
    for (int i = 0; i < P; ++i)
      for (int j = i + 1; j < P; ++j) {
        const double c = (gens[s][i] * gens[s][j] - gens[s][j] * gens[s][i]).norm();
        comm_abs.push_back(c);
        if (nf[i] > 0 && nf[j] > 0) comm_rel.push_back(c / (nf[i] * nf[j]));
      }
  }
  res.gen_norm = stats_of(norms);
  res.comm_abs = stats_of(comm_abs);
  res.comm_rel = stats_of(comm_rel);

  // Positions: the rows the model rotates (CLS row first when it has one), then the patch grid.
  RelWork w;
  w.dim = P;
  const std::vector<double>& rows = pe.rotated_positions();
  w.rows = rows;
  const int nrows = int(rows.size() / P), npatch = pe.patches(), first_patch = nrows - npatch;
  std::vector<double> step(P);
  for (int a = 0; a < P; ++a)
    step[a] = liere::grid_step(grid[a], train_grid[a], pc.position_unit(), pc.resolution);
  std::vector<std::vector<int>> index(npatch, std::vector<int>(P));  // grid index of each patch
  for (int t = 0; t < npatch; ++t) {
    int rest = t;
    for (int a = P - 1; a >= 0; --a) {
      index[t][a] = rest % grid[a];
      rest /= grid[a];
      const double x = rows[std::size_t(first_patch + t) * P + a];
      LIERE_ENSURE(x == index[t][a] * step[a], "pe_diagnostics: patch " << t << " axis " << a << " is at " << x
                                                                           << ", expected " << index[t][a] * step[a]);
      res.max_position = std::max(res.max_position, std::abs(x));
    }
  }
  // q − p for every grid-index difference δ: δ_a·step_a (the exact difference, rounded once).
  std::vector<int> stride(P);
  int ndiff = 1;
  for (int a = P - 1; a >= 0; --a) {
    stride[a] = ndiff;
    ndiff *= 2 * grid[a] - 1;
  }
  w.diffs.resize(std::size_t(ndiff) * P);
  for (int m = 0; m < ndiff; ++m)
    for (int a = 0; a < P; ++a) w.diffs[std::size_t(m) * P + a] = double((m / stride[a]) % (2 * grid[a] - 1) - (grid[a] - 1)) * step[a];
  auto diff_of = [&](int p, int q) {
    int m = 0;
    for (int a = 0; a < P; ++a) m += (index[q][a] - index[p][a] + grid[a] - 1) * stride[a];
    return m;
  };

  // Components and the cost of the check per set, in flops: exps ≈ 16 products of c×c, pairs one product.
  std::vector<std::vector<std::vector<int>>> comps(sets);
  double exp_flops = 0, pair_flops = 0;  // summed over sets, per exponential and per pair
  for (int s = 0; s < sets; ++s) {
    comps[s] = components(gens[s]);
    for (const auto& c : comps[s])
      if (c.size() >= 2) {
        const double c3 = double(c.size()) * double(c.size()) * double(c.size());
        exp_flops += 32 * c3;
        pair_flops += 4 * c3;
      }
  }
  const std::size_t all_pairs = std::size_t(npatch) * npatch;
  res.pairs_total = all_pairs;
  auto cost = [&](std::size_t pairs, int nsets) {
    return (double(nrows + std::min<std::size_t>(ndiff, pairs)) * exp_flops + double(pairs) * pair_flops) *
           double(nsets) / double(sets);
  };
  const double budget = cfg.budget_gflop * 1e9;
  std::size_t npairs = all_pairs;
  int nsets = sets;
  if (!cfg.full && cost(all_pairs, sets) > budget) {
    // Fewer sets first (each checked set keeps its exact maximum over all pairs), down to 4; then fewer
    // pairs (at least 512), which makes each set's figure a lower bound of its maximum.
    while (nsets > std::min(sets, 4) && cost(all_pairs, nsets) > budget) --nsets;
    if (cost(all_pairs, nsets) > budget) {
      std::size_t lo = std::min<std::size_t>(all_pairs, 512), hi = all_pairs;
      while (lo < hi) {
        const std::size_t mid = (lo + hi + 1) / 2;
        if (cost(mid, nsets) <= budget) lo = mid;
        else hi = mid - 1;
      }
      npairs = lo;
    }
  }
  // The pairs: all of them, or the corners against every position first (the largest |p|, |q| and the
  // most orthogonal directions, where the commutator terms of R(p)ᵀR(q) are largest), then uniform random.
  if (npairs == all_pairs) {
    for (int p = 0; p < npatch; ++p)
      for (int q = 0; q < npatch; ++q) w.pairs.push_back({first_patch + p, first_patch + q, diff_of(p, q)});
  } else {
    std::vector<char> taken(all_pairs, 0);
    auto take = [&](int p, int q) {
      if (w.pairs.size() >= npairs || taken[std::size_t(p) * npatch + q]) return;
      taken[std::size_t(p) * npatch + q] = 1;
      w.pairs.push_back({first_patch + p, first_patch + q, diff_of(p, q)});
    };
    std::vector<int> corners;
    for (int t = 0; t < npatch; ++t) {
      bool corner = true;
      for (int a = 0; a < P; ++a) corner = corner && (index[t][a] == 0 || index[t][a] == grid[a] - 1);
      if (corner) corners.push_back(t);
    }
    std::mt19937_64 rng(cfg.seed + 1);
    for (int c1 : corners)
      for (int c2 : corners) take(c1, c2);
    std::vector<std::pair<int, int>> corner_pairs;
    for (int t = 0; t < npatch; ++t)
      for (int c : corners) corner_pairs.insert(corner_pairs.end(), {{c, t}, {t, c}});
    std::shuffle(corner_pairs.begin(), corner_pairs.end(), rng);
    for (const auto& [p, q] : corner_pairs) take(p, q);
    while (w.pairs.size() < npairs) take(int(rng() % npatch), int(rng() % npatch));
  }
  res.pairs_checked = w.pairs.size();
  w.diff_needed.assign(ndiff, 0);
  for (const Pair& pr : w.pairs) w.diff_needed[pr.diff] = 1;

  // The check, for `nsets` evenly spaced sets, in parallel over the sets.
  std::vector<int> checked(nsets);
  for (int k = 0; k < nsets; ++k) checked[k] = int((std::int64_t(k) * sets) / nsets);
  res.sets_checked = nsets;
  std::vector<SetResult> per(nsets);
#pragma omp parallel for schedule(dynamic, 1)
  for (int k = 0; k < nsets; ++k) per[k] = check_set(gens[checked[k]], comps[checked[k]], w);
  std::vector<double> dev, orth, fro;
  for (const SetResult& r : per) {
    dev.push_back(r.dev);
    orth.push_back(r.orth64);
    fro.push_back(r.max_fro);
  }
  res.dev = stats_of(dev);
  res.orth64 = stats_of(orth);
  res.max_fro = stats_of(fro);
  res.orth_f64 = res.orth64.max;
  res.exact = res.dev.max < 1e-9;

  // The same rotations from pe.rotation (dense, the library's own path), for the first and last set at the
  // last grid position (the largest one).
  for (int s : {0, sets - 1}) {
    const double* p = rows.data() + std::size_t(nrows - 1) * P;
    const Eigen::MatrixXd mine = dense_rotation(gens[s], comps[s], p);
    const Eigen::MatrixXd lib = pe.rotation(s, std::span<const double>(p, P));
    take_max(res.check_vs_rotation, (mine - lib).cwiseAbs().maxCoeff());
  }

  // float32: the tables (and STRING's transforms) prepare() builds for training.
  liere::PositionEncoding<float> pf(pc, geo, cfg.seed);
  pf.set_grid(grid);
  pf.prepare();
  std::vector<char> seen(sets, 0);
  const int d = cfg.head_dim;
  for (int l = 0; l < cfg.layers; ++l) {
    const liere::AttentionRotations<float> rot = pf.rotations(l);
    for (int h = 0; h < cfg.heads; ++h) {
      const int s = pf.set_of(l, h);
      if (seen[s]) continue;
      seen[s] = 1;
      const liere::RotationTableView<const float>& t = rot.heads[h].table;
      const int b = t.block;
      for (int r = 0; r < t.tokens; ++r)
        for (int k = 0; k < t.num_blocks(); ++k) {
          const Eigen::MatrixXd m =
              Eigen::Map<const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(t.block_data(r, k), b, b)
                  .cast<double>();
          take_max(res.orth_f32_tables, (m.transpose() * m - Eigen::MatrixXd::Identity(b, b)).cwiseAbs().maxCoeff());
        }
      if (const float* tr = rot.heads[h].transform) {
        const Eigen::MatrixXd m =
            Eigen::Map<const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(tr, d, d).cast<double>();
        const double o = (m.transpose() * m - Eigen::MatrixXd::Identity(d, d)).cwiseAbs().maxCoeff();
        if (std::isnan(res.orth_f32_transform)) res.orth_f32_transform = o;
        else take_max(res.orth_f32_transform, o);
      }
    }
  }
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

// ---- output ------------------------------------------------------------------------------------------------

std::string num(double x) {
  if (std::isnan(x)) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2e", x);
  return buf;
}

void print_tables(const std::vector<Result>& results) {
  std::printf("\nGenerators (min / median / max over parameter sets; commutators over sets x axis pairs i < j)\n");
  std::printf("%-20s %5s %5s %8s | %9s %9s %9s | %9s %9s %9s | %9s\n", "encoding", "block", "sets", "params",
              "|A_i|_F", "median", "max", "|[Ai,Aj]|", "median", "max", "rel. max");
  std::printf("%s\n", std::string(126, '-').c_str());
  for (const Result& r : results)
    std::printf("%-20s %5d %5d %8zu | %9s %9s %9s | %9s %9s %9s | %9s\n", r.label.c_str(), r.block, r.sets, r.params,
                num(r.gen_norm.min).c_str(), num(r.gen_norm.median).c_str(), num(r.gen_norm.max).c_str(),
                num(r.comm_abs.min).c_str(), num(r.comm_abs.median).c_str(), num(r.comm_abs.max).c_str(),
                num(r.comm_rel.max).c_str());
  std::printf("\nRotations (relative deviation max_(p,q) |R(p)^T R(q) - R(q-p)|_max per set: min / median / max;\n"
              "orthogonality |R^T R - I|_max, max over every table row)\n");
  std::printf("%-20s %7s %6s %11s %6s | %9s %9s %9s | %9s %9s | %s\n", "encoding", "grid", "max|p|", "pairs", "sets",
              "rel.dev", "median", "max", "orth f32", "orth f64", "exactly relative (library claims)");
  std::printf("%s\n", std::string(136, '-').c_str());
  for (const Result& r : results) {
    const std::string pairs = r.pairs_checked == r.pairs_total ? std::to_string(r.pairs_total)
                                                               : std::to_string(r.pairs_checked) + "/" + std::to_string(r.pairs_total);
    std::string sets = std::to_string(r.sets_checked);
    if (r.sets_checked != r.sets) sets.append(1, '/').append(std::to_string(r.sets));
    double orth32 = r.orth_f32_tables;
    if (!std::isnan(r.orth_f32_transform)) take_max(orth32, r.orth_f32_transform);
    std::printf("%-20s %7s %6.3g %11s %6s | %9s %9s %9s | %9s %9s | %s (%s)%s\n", r.label.c_str(), r.grid.c_str(),
                r.max_position, pairs.c_str(), sets.c_str(), num(r.dev.min).c_str(), num(r.dev.median).c_str(),
                num(r.dev.max).c_str(), num(orth32).c_str(), num(r.orth_f64).c_str(), r.exact ? "yes" : "no",
                r.claimed_commuting ? "yes" : "no", r.exact == r.claimed_commuting ? "" : "  <-- differs");
  }
}

// One flat JSON object (io/json.hpp: NaN is written as null, strings fully escaped).
std::string json_line(const Result& r) {
  liere::io::json::Writer w;
  auto str = [&](const char* k, const std::string& v) { w.member(k, v); };
  auto val = [&](const char* k, double v) { w.member(k, v); };
  auto st = [&](const std::string& k, const Stats& s) {
    val((k + "_min").c_str(), s.min);
    val((k + "_median").c_str(), s.median);
    val((k + "_max").c_str(), s.max);
    val((k + "_mean").c_str(), s.mean);
  };
  w.begin_object();
  str("pe", r.name);
  str("label", r.label);
  str("config", r.describe);
  w.member("rotary", r.rotary);
  val("head_dim", r.head_dim);
  val("pos_dim", r.pos_dim);
  val("block", r.block);
  str("grid", r.grid);
  str("train_grid", r.train_grid);
  val("sets", r.sets);
  val("params", double(r.params));
  if (r.rotary) {
    val("max_position", r.max_position);
    st("generator_norm", r.gen_norm);
    st("commutator_norm", r.comm_abs);
    st("commutator_rel", r.comm_rel);
    val("pairs_total", double(r.pairs_total));
    val("pairs_checked", double(r.pairs_checked));
    val("sets_checked", r.sets_checked);
    st("relative_deviation", r.dev);
    st("max_generator_fro_over_grid", r.max_fro);
    val("orth_f32_tables", r.orth_f32_tables);
    val("orth_f32_transform", r.orth_f32_transform);
    val("orth_f64", r.orth_f64);
    w.member("exactly_relative", r.exact);
    w.member("claimed_commuting", r.claimed_commuting);
    val("check_vs_rotation", r.check_vs_rotation);
    val("seconds", r.seconds);
  }
  if (!r.note.empty()) str("note", r.note);
  w.end_object();
  return w.take();
}

// The encodings --pe names: every rotary one for --pe all, else the one given.
std::vector<liere::PEConfig> encodings(const Config& cfg) {
  std::vector<liere::PEConfig> todo;
  for (const liere::PEKindInfo& k : liere::pe_kinds())
    if (cfg.all && k.rotary) {
      liere::PEConfig c = cfg.pe;
      c.kind = k.kind;
      todo.push_back(c);
    }
  if (!cfg.all) todo.push_back(cfg.pe);
  return todo;
}

// The flags (false after --help); the geometry checked, the grids' defaults filled in.
bool parse_flags(int argc, char** argv, Config& cfg) {
  using liere::app::Range;
  liere::app::Flags f(
      "pe_diagnostics",
      "Measures the rotations of a rotary position encoding, per parameter set (one per layer x head with the\n"
      "default sharing): generator norms |A_i|_F, commutator norms |[A_i, A_j]|_F (absolute and relative to\n"
      "|A_i|_F |A_j|_F), the relative-position deviation max_(p,q) |R(p)^T R(q) - R(q-p)|_max over pairs of grid\n"
      "positions, orthogonality |R^T R - I|_max of the float32 tables and of the double rotations, and whether the\n"
      "encoding is exactly relative (deviation < 1e-9). Statistics are min / median / max over the sets.");
  f.section("Encoding (the trainers' flags)");
  f.add("pe", "KIND|all",
        "all: every rotary encoding in turn (rope-1d on the flattened grid, 1 axis); else as below, or a label as "
        "--compare's (liere8: --pe liere --block 8)",
        [&](const std::string& v) {
          cfg.all = v == "all";
          if (!cfg.all) cfg.pe.set("pe", v);  // a label with a block size (liere8) sets the block too
        },
        [&] { return cfg.all ? std::string("all") : cfg.pe.label(); });
  f.add_pe(&cfg.pe);
  f.section("Geometry");
  f.add("head-dim", &cfg.head_dim, "head dimension", Range{2, 4096});
  f.add("pos-dim", &cfg.pos_dim, "position axes, 1, 2 or 3", Range{1, 3});
  auto grid_flag = [&](const char* name, std::vector<int>& g, const char* help) {
    f.add(name, "G", help, [&g](const std::string& v) { g = parse_grid(v); }, [&g] { return grid_str(g); });
  };
  grid_flag("grid", cfg.grid, "patch grid where the rotations are measured, e.g. 8x8, 64, 4x8x8 (none: 8x8 for 2 axes, "
                              "64 for 1, 4x8x8 for 3)");
  grid_flag("train-grid", cfg.train_grid, "training grid; with --positions it decides the positions on --grid "
                                          "(none: --grid)");
  f.add("layers", &cfg.layers, "layers", Range{1, 1000});
  f.add("heads", &cfg.heads, "heads (ViT-Tiny: 12 x 3; ViT-B: 12 x 12)", Range{1, 1000});
  f.add("seed", &cfg.seed, "initialisation seed");
  f.section("Output and cost");
  f.add("json", &cfg.json, "also write one flat JSON object per encoding (JSON lines)", "PATH");
  f.add("budget", "GFLOP",
        "work allowed for the relative deviation per encoding; beyond it fewer grid pairs (the grid corners against "
        "every position, then uniform random ones), then fewer sets (evenly spaced) are checked, and the output says so",
        [&](const std::string& v) {
          const double b = liere::app::Flags::to_double(v);
          LIERE_ENSURE(b > 0, "expected a positive number of GFLOP");
          cfg.budget_gflop = b;
        },
        [&] {
          std::ostringstream o;
          o << cfg.budget_gflop;
          return o.str();
        });
  f.add_switch("full", &cfg.full, "check every pair of every set, whatever it costs");
  if (!f.parse(argc, argv)) return false;

  using liere::app::UsageError;
  if (cfg.grid.empty()) cfg.grid = cfg.pos_dim == 1 ? std::vector<int>{64} : cfg.pos_dim == 3 ? std::vector<int>{4, 8, 8}
                                                                                               : std::vector<int>{8, 8};
  if (int(cfg.grid.size()) != cfg.pos_dim)
    throw UsageError("--grid " + grid_str(cfg.grid) + " has " + std::to_string(cfg.grid.size()) + " axes but --pos-dim is " +
                     std::to_string(cfg.pos_dim));
  if (cfg.train_grid.empty()) cfg.train_grid = cfg.grid;
  if (cfg.train_grid.size() != cfg.grid.size())
    throw UsageError("--train-grid " + grid_str(cfg.train_grid) + " and --grid " + grid_str(cfg.grid) + " differ in axes");
  // Blocks that do not divide the head dim: the encoding would refuse them once the work began, naming no flag.
  for (const liere::PEConfig& pc : encodings(cfg)) {
    const int b = pc.effective_block();
    if (pc.info().rotary && cfg.head_dim % b != 0)
      throw UsageError("--pe " + (cfg.all ? "all (" + pc.label() + ")" : pc.label()) + ": blocks of " +
                       std::to_string(b) + (pc.info().fixed_block ? "" : " (--block)") + " do not divide --head-dim " +
                       std::to_string(cfg.head_dim));
  }
  liere::app::check_output_folder("--json", cfg.json);
  return true;
}

// What the run found: every encoding's result, the notes printed under the tables, and how many encodings'
// rotations disagreed with pe.rotation.
struct Report {
  std::vector<Result> results;
  std::vector<std::string> notes;
  int failures = 0;
};

// The encodings --pe names (all: every rotary one), each diagnosed; with --pe all one that fails is noted and
// skipped, a single one's error ends the program.
Report diagnose_all(const Config& cfg) {
  Report rep;
  for (const liere::PEConfig& pc : encodings(cfg)) {
    int pos_dim = cfg.pos_dim;
    std::vector<int> grid = cfg.grid, train = cfg.train_grid;
    std::string note;
    if (cfg.all && pc.kind == liere::PEKind::rope_1d && pos_dim != 1) {  // a sequence: the grid, flattened
      int n = 1, e = 1;
      for (int g : grid) n *= g;
      for (int g : train) e *= g;
      pos_dim = 1;
      grid = {n};
      train = {e};
      note = "measured on the flattened grid, " + std::to_string(n) + " tokens on 1 axis (it encodes 1D sequences)";
    }
    try {
      Result r = diagnose(cfg, pc, pos_dim, grid, train);
      r.note = note;
      if (!r.rotary) {
        std::printf("\n%s is not a rotary encoding: no rotations to measure (%zu parameters).\n", r.label.c_str(), r.params);
      } else {
        if (!note.empty()) rep.notes.push_back(r.label + ": " + note);
        if (r.pairs_checked < r.pairs_total || r.sets_checked < r.sets)
          rep.notes.push_back(r.label + ": to stay within --budget the relative deviation was checked on " +
                              std::to_string(r.sets_checked) + " of " + std::to_string(r.sets) + " sets (evenly spaced)" +
                              (r.pairs_checked < r.pairs_total
                                   ? " and " + std::to_string(r.pairs_checked) + " of " + std::to_string(r.pairs_total) +
                                         " pairs (the grid corners against every position, then uniform random ones: a "
                                         "lower bound of each set's maximum)"
                                   : ", every pair") +
                              "; --full checks everything");
        if (!(r.check_vs_rotation <= 1e-9)) {
          rep.notes.push_back(r.label + ": WARNING: rotations differ from pe.rotation by " + num(r.check_vs_rotation));
          ++rep.failures;
        }
        if (r.exact != r.claimed_commuting)
          rep.notes.push_back(r.label + ": measured " + (r.exact ? "exactly relative" : "not exactly relative") +
                              " although the library lists it as " + (r.claimed_commuting ? "commuting" : "non-commuting") +
                              (!r.exact            ? ""
                               : r.pos_dim == 1 ? " (with one position axis a single generator always commutes with itself)"
                                                : " (these generators happen to commute)"));
      }
      rep.results.push_back(std::move(r));
    } catch (const liere::Error& e) {
      if (!cfg.all) throw;
      rep.notes.push_back(pc.label() + ": skipped: " + e.what());
    }
  }
  return rep;
}

}  // namespace

int main(int argc, char** argv) {
  // Parallelism comes from the loop over parameter sets and the library's table kernels; Eigen's own
  // threading of each small dense product only adds barriers (ruinous on a busy machine).
  Eigen::setNbThreads(1);
  return liere::app::run_main("pe_diagnostics", [&] {
    Config cfg;
    if (!parse_flags(argc, argv, cfg)) return 0;

    std::printf("pe_diagnostics: head dim %d, %d position axes, grid %s (training grid %s), %d layers x %d heads, seed %llu\n",
                cfg.head_dim, cfg.pos_dim, grid_str(cfg.grid).c_str(), grid_str(cfg.train_grid).c_str(), cfg.layers,
                cfg.heads, static_cast<unsigned long long>(cfg.seed));
    std::printf("sharing %s, init %s, positions %s, cls %s; computed in double from pe.generators(set)\n",
                liere::to_string(cfg.pe.sharing), cfg.pe.init.str().c_str(), liere::to_string(cfg.pe.resolution),
                liere::to_string(cfg.pe.cls));
    const auto t0 = std::chrono::steady_clock::now();
    const Report rep = diagnose_all(cfg);
    std::vector<Result> rotary;
    for (const Result& r : rep.results)
      if (r.rotary) rotary.push_back(r);
    const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!rotary.empty()) {
      print_tables(rotary);
      std::printf("\nmax|p|: the largest position coordinate on the grid (unit 'range': the training grid spans [0, 1];\n"
                  "'integer': grid indices). pairs: ordered pairs (p, q) of grid positions checked; sets: parameter sets\n"
                  "checked for the deviation. orth f32: the float32 tables prepare() builds (and STRING's transform P);\n"
                  "orth f64: the double rotations of the checked sets. Exactly relative: deviation < 1e-9 in every set.\n");
    }
    for (const std::string& n : rep.notes) std::printf("note: %s\n", n.c_str());
    std::printf("%.2f s\n", total);

    if (!cfg.json.empty()) {  // whole, now that every encoding is measured (the reason if it cannot be written)
      std::string lines;
      for (const Result& r : rep.results) lines += json_line(r) + "\n";
      liere::io::write_file_atomic(cfg.json, lines, {"--json", {}});
    }
    return rep.failures ? 1 : 0;
  });
}
