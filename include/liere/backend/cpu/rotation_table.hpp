// liere/backend/cpu/rotation_table.hpp — the rotation tables of a LieRE-type encoding and their backward, as an
// engine op (dispatched like every other: LIERE_DISPATCH(S, dev, rotation_table_forward, …)).
//
// Shape (backend/types.hpp, RotationTableShape): generators w (sets, dim, D/b, b(b−1)/2), positions p (rows, dim)
// shared by the sets, table (sets·rows, D/b, b, b). For every set s, row t and block k:
//   A = Σ_i p_{t,i} · hat(w_{s,i,k}),   table[s·rows + t, k] = exp(A)
// and the backward, given dtable = d loss / d table:
//   dw_{s,i,k} += Σ_t p_{t,i} · hat*( L(Aᵀ, dtable[s·rows + t, k]) )
// with L the Fréchet derivative of exp and hat* hat's adjoint (dw(r, c) += dA(r, c) − dA(c, r)).
// The per-block maths is backend/kernels/matrix_exp.hpp, the body the CUDA kernels run too.
//
// Blocks of 32 and 64 take the spectral path (below, and docs/math.md "The spectral path"): the real Schur form of
// each generator in double (kSchurLanes generators at once, skew_schur_batch), exp through it, and a backward of
// four products with the forward's Q and σ, which the forward keeps in a cache; forward + backward 2.2–2.7× cheaper
// than scaling and squaring at 64 (bench/README.md, "Rotation tables: spectral against polynomial"). Rows whose
// positions are exact positive multiples of one another (backend/position_classes.hpp: a grid's directions) share
// one decomposition, A(c·p) = Q (c·Θ) Qᵀ, and in the backward one pair of outer products. The rest of this
// paragraph is the polynomial path, which blocks 4 to 16 take (and 32, 64 under TableMethod::Polynomial).
// Precision (measured, docs/math.md "Rotation tables in single precision"): blocks 2 and 3 use their closed forms (the
// angle summed and evaluated in double). Larger blocks run scaling and squaring in double on the CPU, also for float
// tables (TableForwardWork below: float is orthogonal with its Newton–Schulz finish, but not accurate enough for the
// float step to stay near the double one). The shared float body with the finish — max|RᵀR − I| ≤ 4e-7 for every block
// size up to generator norm 1e4, where float scaling and squaring alone drifts to 5e-4 — is what the CUDA kernels run.
// The backward runs in the precision of S and sums the positions' contributions in double. Blocks of 32 and 64 multiply
// through the GEMM library (cpu/gemm.hpp), smaller ones with fixed-size loops.
// Threads: one loop over sets × rows × blocks, round-robin (the cost grows with |p|; the spectral path hands out
// groups of kSchurLanes consecutive blocks); the backward keeps
// per-thread sums in double, reduced in thread order: deterministic for a fixed thread count.
// Non-finite generators or positions give NaN tables and NaN gradients (never a hang); rotation_table_nonfinite
// finds the first non-finite generator coordinate, for the caller's error message.
#pragma once

#include <cstdint>
#include <liere/backend/cpu/common.hpp>
#include <liere/backend/cpu/gemm.hpp>
#include <liere/backend/kernels/matrix_exp.hpp>
#include <liere/backend/position_classes.hpp>
#include <liere/pe/blocks.hpp>
#include <liere/backend/types.hpp>
#include <liere/core/config.hpp>
#include <liere/core/eigen.hpp>
#include <liere/core/parallel.hpp>
#include <liere/lie/skew_schur.hpp>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <mutex>
#include <type_traits>
#include <vector>

namespace liere::cpu {

// How the op computes blocks of 32 and 64 (smaller blocks always take the closed forms or the polynomial):
//   Auto            the spectral path (the default), kSchurLanes matrices decomposed at once (skew_schur_batch)
//   SpectralSingle  the spectral path with one matrix at a time (skew_schur; the same results to rounding: for
//                   comparisons and benches)
//   Polynomial      scaling and squaring and its Fréchet derivative, as the CUDA kernels (for comparisons and benches)
// set_rotation_table_method, or the environment variable LIERE_TABLE_METHOD=spectral|spectral-single|polynomial
// (read once, at the first use; another value stops with an error that names the three).
enum class TableMethod { Auto, Polynomial, SpectralSingle };
namespace detail {
inline std::atomic<TableMethod>& table_method_ref() {
  static std::atomic<TableMethod> m{[] {
    const char* env = std::getenv("LIERE_TABLE_METHOD");
    if (!env || !*env) return TableMethod::Auto;
    const std::string v(env);
    LIERE_ENSURE(v == "spectral" || v == "spectral-single" || v == "polynomial",
                 "LIERE_TABLE_METHOD is '" << v
                                           << "'; expected 'spectral' (the default), 'spectral-single' or 'polynomial'");
    return v == "polynomial" ? TableMethod::Polynomial
                             : v == "spectral-single" ? TableMethod::SpectralSingle : TableMethod::Auto;
  }()};
  return m;
}
}  // namespace detail
inline void set_rotation_table_method(TableMethod m) { detail::table_method_ref().store(m); }
inline TableMethod rotation_table_method() { return detail::table_method_ref().load(); }

namespace detail {

// The product for large blocks: the GEMM library, on the calling thread.
struct GemmMul : kernels::SerialLoops {
  template <int N, class W>
  static void mul(const W* a, const W* b, W* c, bool accumulate) {
    gemm<W>(false, false, N, N, N, W(1), a, b, accumulate ? W(1) : W(0), c);
  }
};
// Small blocks: Eigen's fixed-size coefficient-based product (unrolled, in registers; lie/exp.hpp measured it
// several times faster than a GEMM call at 8×8).
struct SmallMul : kernels::SerialLoops {
  template <int N, class W>
  static void mul(const W* a, const W* b, W* c, bool accumulate) {
    using M = Eigen::Matrix<W, N, N, Eigen::RowMajor>;
    Eigen::Map<M> cm(c);
    if (accumulate) cm.noalias() += Eigen::Map<const M>(a).lazyProduct(Eigen::Map<const M>(b));
    else cm.noalias() = Eigen::Map<const M>(a).lazyProduct(Eigen::Map<const M>(b));
  }
};
template <int N>
using TableMul = std::conditional_t<(N >= 32), GemmMul, SmallMul>;

// Newton–Schulz steps after scaling and squaring: float needs them, double does not (lie/exp.hpp, docs/math.md).
template <class W>
inline constexpr int kTablePolish = std::is_same_v<W, float> ? 2 : 0;

// dw[j] += Σ over the threads' partial sums (in double, in thread order: deterministic for a fixed thread count).
template <class S>
void add_partials(const std::vector<std::vector<double>>& partial, S* dw, std::int64_t ng) {
#pragma omp parallel for schedule(static) if (ng > kGrain)
  for (std::int64_t j = 0; j < ng; ++j) {
    double total = 0;
    for (const auto& part : partial)
      if (!part.empty()) total += part[std::size_t(j)];
    dw[j] += S(total);
  }
}

inline void check_table_shape(const RotationTableShape& s, const char* who) {
  LIERE_ENSURE(s.sets >= 1 && s.dim >= 1 && s.rows >= 0 && s.block >= 2 && s.head_dim % s.block == 0,
               who << ": bad shape (sets " << s.sets << ", dim " << s.dim << ", rows " << s.rows << ", head dim "
                   << s.head_dim << ", block " << s.block << ")");
}

// ---- The spectral path (blocks ≥ kSpectralMin): lie/skew_schur.hpp ---------------------------------------------
// Forward: A in double, its real Schur form A = Q Θ Qᵀ (double), exp(A) = Q diag(Rot(σ)) Qᵀ rounded once to S.
// Backward: dA = Q 𝓛(Qᵀ G Q) Qᵀ, four products in the precision of S with Q rounded to S. Rows of one class
// (position_classes: p_t = c_t·p_r, exactly) decompose A(p_r) once and use the angles c_t·σ; their backward sums
// c_t·𝓛_t in double, then one Q (Σ) Qᵀ weighted by p_r. The forward keeps Q (in S) and σ of every (set, class,
// block) in a cache (SchurCache) keyed by the shape and by the generators' and positions' values, bit for bit; a
// backward whose inputs match takes them from there, any other decomposes again in double (the same numbers:
// cache or not, the backward's result is the same). A class whose decomposition fails (non-finite input, or no
// convergence) takes the polynomial path, row by row, in both directions.
template <int N>
inline constexpr bool kSpectralBlock = N >= 32;

// The cache: what the last spectral forward of scalar S computed (one per scalar type and process, guarded by its
// mutex for the whole of an op). Not kept when it would exceed kSchurCacheBytes (the backward then decomposes).
inline constexpr std::size_t kSchurCacheBytes = std::size_t(1) << 30;
template <class S>
struct SchurCache {
  std::mutex mu;
  bool valid = false;
  RotationTableShape shape{};
  std::vector<S> generators, positions;  // the inputs the forms belong to
  std::vector<S> q;                      // (matrices, b, b) row-major, Q rounded to S
  std::vector<double> sigma;             // (matrices, b/2)
  std::vector<unsigned char> spectral;   // (matrices): 1 when Q, σ are there, 0 for a polynomial block

  static bool same_shape(const RotationTableShape& a, const RotationTableShape& b) {
    return a.sets == b.sets && a.dim == b.dim && a.rows == b.rows && a.head_dim == b.head_dim && a.block == b.block;
  }
  static std::size_t num_positions(const RotationTableShape& sh) { return std::size_t(sh.rows) * std::size_t(sh.dim); }
  bool matches(const S* w, const S* pos, const RotationTableShape& sh) const {
    return valid && same_shape(shape, sh) && generators.size() == std::size_t(sh.num_generators()) &&
           std::memcmp(generators.data(), w, generators.size() * sizeof(S)) == 0 &&
           std::memcmp(positions.data(), pos, positions.size() * sizeof(S)) == 0;
  }
};
template <class S>
SchurCache<S>& schur_cache() {
  static SchurCache<S> cache;
  return cache;
}

// A group of kSchurLanes blocks' Schur forms in double, the unit the spectral forward and backward decompose: the
// lanes' inputs a[j] (N×N), outputs q[j] (N×N) and sigma[j] (N/2) laid out back to back from the given buffers.
// decompose(count): skew_schur_batch, or skew_schur one by one under TableMethod::SpectralSingle; ok[j] false: block
// j takes the polynomial path.
template <int N>
struct SchurGroup {
  const double* a[kSchurLanes];
  double* q[kSchurLanes];
  double* sigma[kSchurLanes];
  bool ok[kSchurLanes];
  std::vector<double> work;

  SchurGroup(double* as, double* qs, double* sigmas) {
    for (int j = 0; j < kSchurLanes; ++j) {
      a[j] = as + std::ptrdiff_t(j) * N * N;
      q[j] = qs + std::ptrdiff_t(j) * N * N;
      sigma[j] = sigmas + std::ptrdiff_t(j) * N;
    }
  }
  void decompose(int count) {
    if (rotation_table_method() == TableMethod::SpectralSingle) {
      work.resize(skew_schur_work(N));
      for (int j = 0; j < count; ++j) ok[j] = skew_schur(a[j], N, q[j], sigma[j], work.data());
      return;
    }
    work.resize(skew_schur_batch_work(N));
    skew_schur_batch(a, count, N, q, sigma, ok, work.data());
  }
};
inline bool spectral_method(TableMethod m) { return m == TableMethod::Auto || m == TableMethod::SpectralSingle; }

// The spectral path's unit of work: a (set, class of rows, block) triple, classes by position_classes (rows whose
// positions are exact positive multiples of one another share one decomposition: A(c·p) = Q (c·Θ) Qᵀ). Item
// d = (set·classes + class)·blocks + block.
struct SpectralItems {
  const RotationTableShape& sh;
  const PositionClasses& pc;
  int nc, nb;
  SpectralItems(const RotationTableShape& s, const PositionClasses& p)
      : sh(s), pc(p), nc(p.num_classes()), nb(s.num_blocks()) {}
  std::int64_t count() const { return std::int64_t(sh.sets) * nc * nb; }
  int set(std::int64_t d) const { return int(d / (std::int64_t(nc) * nb)); }
  int cls(std::int64_t d) const { return int((d / nb) % nc); }
  int block(std::int64_t d) const { return int(d % nb); }
  // where the item's block coordinates start in the generators (axis 0), as RotationTableShape::generator_offset
  std::int64_t generator_offset(std::int64_t d) const {
    return (std::int64_t(set(d)) * sh.dim * nb + block(d)) * sh.coords_per_block();
  }
  // the table matrix of row t for the item's set and block
  std::int64_t matrix(std::int64_t d, int t) const { return (std::int64_t(set(d)) * sh.rows + t) * nb + block(d); }
  const int* members_begin(std::int64_t d) const { return pc.members.data() + pc.start[std::size_t(cls(d))]; }
  const int* members_end(std::int64_t d) const { return pc.members.data() + pc.start[std::size_t(cls(d)) + 1]; }
  int rep(std::int64_t d) const { return pc.rep[std::size_t(cls(d))]; }
};

// σ_t = c·σ (m angles).
inline void scale_angles(const double* sigma, int m, double c, double* out) {
  for (int j = 0; j < m; ++j) out[j] = c * sigma[j];
}

template <int N, class S>
void table_forward_spectral(const S* w, const S* pos, S* table, const RotationTableShape& sh) {
  constexpr int NN = N * N, ppb = N * (N - 1) / 2, L = kSchurLanes;
  const int dim = sh.dim;
  const PositionClasses pc = position_classes(pos, sh.rows, dim);
  const SpectralItems it(sh, pc);
  const std::int64_t items = it.count(), groups = (items + L - 1) / L;
  const long axis_stride = long(it.nb) * ppb;
  SchurCache<S>& cache = schur_cache<S>();
  std::lock_guard<std::mutex> lock(cache.mu);
  const bool keep = std::size_t(items) * (NN * sizeof(S) + N / 2 * sizeof(double) + 1) <= kSchurCacheBytes;
  cache.valid = false;
  if (keep) {
    cache.shape = sh;
    cache.generators.assign(w, w + sh.num_generators());
    cache.positions.assign(pos, pos + SchurCache<S>::num_positions(sh));
    cache.q.resize(std::size_t(items) * NN);
    cache.sigma.resize(std::size_t(items) * (N / 2));
    cache.spectral.assign(std::size_t(items), 0);
  }
  // Groups of kSchurLanes consecutive items, decomposed together, round-robin over the threads; each item's rows
  // then take exp through its form with their angles scaled.
#pragma omp parallel if (groups > 1)
  {
    std::vector<double> buf(std::size_t(NN) * (kernels::kExpWork + 2 + 2 * L) + std::size_t(N) * (L + 1));
    double *r = buf.data(), *a1 = r + NN, *scratch = a1 + NN, *as = scratch + NN * kernels::kExpWork, *qs = as + NN * L,
           *sigs = qs + NN * L, *sig_t = sigs + N * L;
    SchurGroup<N> grp(as, qs, sigs);
#pragma omp for schedule(static, 1)
    for (std::int64_t gi = 0; gi < groups; ++gi) {
      const std::int64_t d0 = gi * L;
      const int count = int(std::min<std::int64_t>(L, items - d0));
      for (int j = 0; j < count; ++j) {
        const std::int64_t d = d0 + j;
        kernels::block_generator<N>(w + it.generator_offset(d), axis_stride, pos + std::int64_t(it.rep(d)) * dim, dim,
                                    as + std::ptrdiff_t(j) * NN);
      }
      grp.decompose(count);
      for (int j = 0; j < count; ++j) {
        const std::int64_t d = d0 + j;
        if (grp.ok[j] && keep) {
          S* qc = cache.q.data() + d * NN;
          for (int e = 0; e < NN; ++e) qc[e] = S(grp.q[j][e]);
          for (int e = 0; e < N / 2; ++e) cache.sigma[std::size_t(d) * (N / 2) + std::size_t(e)] = grp.sigma[j][e];
          cache.spectral[std::size_t(d)] = 1;
        }
        for (const int* m = it.members_begin(d); m != it.members_end(d); ++m) {
          const int t = *m;
          if (grp.ok[j]) {
            scale_angles(grp.sigma[j], N / 2, pc.scale[std::size_t(t)], sig_t);
            skew_schur_exp(grp.q[j], sig_t, N, r, scratch);
          } else {  // the row's own generator by scaling and squaring
            kernels::block_generator<N>(w + it.generator_offset(d), axis_stride, pos + std::int64_t(t) * dim, dim, a1);
            kernels::expm_skew<N, double, TableMul<N>>(a1, r, scratch, 0);
          }
          S* out = table + it.matrix(d, t) * NN;
          for (int e = 0; e < NN; ++e) out[e] = S(r[e]);
        }
      }
    }
  }
  cache.valid = keep;
}

// The adjoint through the Schur form in two halves (docs/math.md "The spectral path"), the products by the GEMM
// library in S on the calling thread:
//   schur_adjoint_inner   mm = 𝓛_σ(Qᵀ G Q)          work: n² values of S, half: n doubles
//   schur_adjoint_outer   l = Q mm Qᵀ                 work: n² values of S
// so that rows sharing Q sum their 𝓛 (each with its own angles) before one outer product.
template <class S>
void schur_adjoint_inner(int n, const S* q, const double* sigma, const S* g, S* mm, S* work, double* half) {
  gemm<S>(true, false, n, n, n, S(1), q, g, S(0), work);    // Qᵀ G
  gemm<S>(false, false, n, n, n, S(1), work, q, S(0), mm);  // (Qᵀ G) Q
  skew_schur_half_angles(sigma, n / 2, half, half + n / 2);
  skew_schur_divided(mm, n, sigma, half, half + n / 2);
}
template <class S>
void schur_adjoint_outer(int n, const S* q, const S* mm, S* l, S* work) {
  gemm<S>(false, false, n, n, n, S(1), q, mm, S(0), work);  // Q 𝓛
  gemm<S>(false, true, n, n, n, S(1), work, q, S(0), l);    // (Q 𝓛) Qᵀ
}
// l = L(Aᵀ, g) from Q (n×n, rounded to S) and σ (n/2); work: 2·n² values of S, half: n doubles. (Also the torch
// operators' backward, python/csrc.)
template <class S>
void schur_adjoint(int n, const S* q, const double* sigma, const S* g, S* l, S* work, double* half) {
  S* mm = work + std::ptrdiff_t(n) * n;
  schur_adjoint_inner<S>(n, q, sigma, g, mm, work, half);
  schur_adjoint_outer<S>(n, q, mm, l, work);
}

template <int N, class S>
void table_backward_spectral(const S* w, const S* pos, const S* dtable, S* dw, const RotationTableShape& sh) {
  constexpr int NN = N * N, ppb = N * (N - 1) / 2, L = kSchurLanes;
  const int dim = sh.dim;
  const PositionClasses pc = position_classes(pos, sh.rows, dim);
  const SpectralItems it(sh, pc);
  const std::int64_t items = it.count(), ng = sh.num_generators(), groups = (items + L - 1) / L;
  const long axis_stride = long(it.nb) * ppb;
  SchurCache<S>& cache = schur_cache<S>();
  std::lock_guard<std::mutex> lock(cache.mu);
  const bool hit = cache.matches(w, pos, sh);
  const std::size_t threads = std::size_t(max_threads());
  std::vector<std::vector<double>> partial(threads);
#pragma omp parallel if (groups > 1)
  {
    std::vector<double>& acc = partial[std::size_t(thread_id())];
    acc.assign(std::size_t(ng), 0.0);
    // Groups of kSchurLanes consecutive items as in the forward: a group the cache lacks is decomposed again
    // together (each lane's numbers depend on its own matrix only, so they are the forward's).
    std::vector<double> dbuf(std::size_t(NN) * (2 * L + 1) + std::size_t(N) * (L + 2));
    double *ads = dbuf.data(), *qds = ads + NN * L, *msum = qds + NN * L, *sigs = msum + NN, *half = sigs + N * L,
           *sig_t = half + N;
    SchurGroup<N> grp(ads, qds, sigs);
    std::vector<S> buf(std::size_t(NN) * (kernels::kFrechetWork + 6));
    S *a = buf.data(), *g = a + NN, *r = g + NN, *l = r + NN, *qs = l + NN, *mm = qs + NN, *scratch = mm + NN;
#pragma omp for schedule(static, 1)
    for (std::int64_t gi = 0; gi < groups; ++gi) {
      const std::int64_t d0 = gi * L;
      const int count = int(std::min<std::int64_t>(L, items - d0));
      if (!hit) {
        for (int j = 0; j < count; ++j) {
          const std::int64_t d = d0 + j;
          kernels::block_generator<N>(w + it.generator_offset(d), axis_stride, pos + std::int64_t(it.rep(d)) * dim, dim,
                                      ads + std::ptrdiff_t(j) * NN);
        }
        grp.decompose(count);
      }
      for (int j = 0; j < count; ++j) {
        const std::int64_t d = d0 + j, base = it.generator_offset(d);
        const S* q = nullptr;
        const double* sigma = nullptr;
        if (hit) {
          if (cache.spectral[std::size_t(d)]) {
            q = cache.q.data() + d * NN;
            sigma = cache.sigma.data() + std::size_t(d) * (N / 2);
          }
        } else if (grp.ok[j]) {
          for (int e = 0; e < NN; ++e) qs[e] = S(grp.q[j][e]);
          q = qs;
          sigma = grp.sigma[j];
        }
        if (q) {
          // Σ_t p_t·L_t = p_rep·Q (Σ_t c_t 𝓛_t) Qᵀ over the class's rows t (p_t = c_t·p_rep): the 𝓛 summed in
          // double, one outer product.
          const int* m0 = it.members_begin(d);
          const int* m1 = it.members_end(d);
          for (const int* m = m0; m != m1; ++m) {
            const double c = pc.scale[std::size_t(*m)];
            scale_angles(sigma, N / 2, c, sig_t);
            schur_adjoint_inner<S>(N, q, sig_t, dtable + it.matrix(d, *m) * NN, mm, scratch, half);
            if (m == m0)
              for (int e = 0; e < NN; ++e) msum[e] = c * double(mm[e]);
            else
              for (int e = 0; e < NN; ++e) msum[e] += c * double(mm[e]);
          }
          if (m1 - m0 > 1)
            for (int e = 0; e < NN; ++e) mm[e] = S(msum[e]);
          schur_adjoint_outer<S>(N, q, mm, l, scratch);
          const S* p = pos + std::int64_t(it.rep(d)) * dim;
          for (int ax = 0; ax < dim; ++ax)
            kernels::skew_adjoint_add<N>(l, double(p[ax]), acc.data() + base + std::int64_t(ax) * axis_stride);
          continue;
        }
        for (const int* m = it.members_begin(d); m != it.members_end(d); ++m) {  // each row by scaling and squaring
          const S* p = pos + std::int64_t(*m) * dim;
          const S* gt = dtable + it.matrix(d, *m) * NN;
          kernels::block_generator<N>(w + base, axis_stride, p, dim, a);
          for (int e = 0; e < NN; ++e) g[e] = gt[e];
          kernels::detail::transpose<N>(a, r);  // Aᵀ
          kernels::expm_frechet_skew<N, S, TableMul<N>>(r, g, a, l, scratch);
          for (int ax = 0; ax < dim; ++ax)
            kernels::skew_adjoint_add<N>(l, double(p[ax]), acc.data() + base + std::int64_t(ax) * axis_stride);
        }
      }
    }
  }
  add_partials(partial, dw, ng);
}

// The precision of the forward: the generator A = Σ p_i·hat(w_i) and its exponential. Float tables are computed in
// double for every block: float scaling and squaring keeps them orthogonal (with the Newton–Schulz finish) but not
// accurate — its error grows as u·‖A‖ through the squarings, and a float ViT step with LieRE-64 then moved 7.2e-5
// (relative, MLP weight gradients) from the double step, against 7.1e-6 with double tables
// (tests/test_compare.cpp); and blocks 2 and 3, whose closed forms take cos and sin in double, summed their angle in
// float before 2026-12-06 (night), off from the double tables by u·|angle|: 2.4e-5 at an angle of 600. So a float
// table is the double op's table on the same inputs, rounded once. The backward stays in S.
template <int N, class S>
using TableForwardWork = std::conditional_t<std::is_same_v<S, float>, double, S>;

template <int N, class S>
void table_forward_impl(const S* w, const S* pos, S* table, const RotationTableShape& sh) {
  if constexpr (kSpectralBlock<N>)
    if (spectral_method(rotation_table_method())) return table_forward_spectral<N, S>(w, pos, table, sh);
  using W = TableForwardWork<N, S>;
  constexpr int NN = N * N, ppb = N * (N - 1) / 2;
  const int nb = sh.num_blocks(), dim = sh.dim;
  const std::int64_t work = sh.num_matrices();
  const long axis_stride = long(nb) * ppb;
#pragma omp parallel if (work > 1)
  {
    std::vector<W> buf(std::size_t(NN) * (kernels::kExpWork + 2));
    W* a = buf.data();
    W* r = a + NN;
    W* scratch = r + NN;
#pragma omp for schedule(static, 1)
    for (std::int64_t i = 0; i < work; ++i) {
      const S* ws = w + sh.generator_offset(i);

      const int t = sh.position_row(i);
      kernels::block_generator<N>(ws, axis_stride, pos + std::int64_t(t) * dim, dim, a);
      S* out = table + i * NN;
      if constexpr (N == 2) {
        kernels::exp2_skew(a, out);
      } else if constexpr (N == 3) {
        kernels::exp3_skew(a, out);
      } else {
        kernels::expm_skew<N, W, TableMul<N>>(a, r, scratch, kTablePolish<W>);
        for (int q = 0; q < NN; ++q) out[q] = S(r[q]);
      }
    }
  }
}

template <int N, class S>
void table_backward_impl(const S* w, const S* pos, const S* dtable, S* dw, const RotationTableShape& sh) {
  if constexpr (kSpectralBlock<N>)
    if (spectral_method(rotation_table_method())) return table_backward_spectral<N, S>(w, pos, dtable, dw, sh);
  using W = S;
  constexpr int NN = N * N, ppb = N * (N - 1) / 2;
  const int nb = sh.num_blocks(), dim = sh.dim;
  const std::int64_t work = sh.num_matrices(), ng = sh.num_generators();
  const long axis_stride = long(nb) * ppb;
  const std::size_t threads = std::size_t(max_threads());
  std::vector<std::vector<double>> partial(threads);
#pragma omp parallel if (work > 1)
  {
    std::vector<double>& acc = partial[std::size_t(thread_id())];
    acc.assign(std::size_t(ng), 0.0);
    std::vector<W> buf(std::size_t(NN) * (kernels::kFrechetWork + 4));
    W *a = buf.data(), *g = a + NN, *r = g + NN, *l = r + NN, *scratch = l + NN;
#pragma omp for schedule(static, 1)
    for (std::int64_t i = 0; i < work; ++i) {
      const std::int64_t base = sh.generator_offset(i);

      const int t = sh.position_row(i);
      const S* p = pos + std::int64_t(t) * dim;
      kernels::block_generator<N>(w + base, axis_stride, p, dim, a);
      for (int q = 0; q < NN; ++q) g[q] = W(dtable[i * NN + q]);
      if constexpr (N == 2) {
        for (int q = 0; q < NN; ++q) l[q] = W(0);
        kernels::exp2_adjoint(a, g, l);
      } else {
        kernels::detail::transpose<N>(a, r);  // Aᵀ, skew too
        kernels::expm_frechet_skew<N, W, TableMul<N>>(r, g, a, l, scratch);
      }
      for (int ax = 0; ax < dim; ++ax)
        kernels::skew_adjoint_add<N>(l, double(p[ax]), acc.data() + base + std::int64_t(ax) * axis_stride);
    }
  }
  add_partials(partial, dw, ng);
}

}  // namespace detail

// table (sets·rows, D/b, b, b) = exp(Σ_i p_i · hat(w_i)) for every set, row and block.
template <class S>
void rotation_table_forward(const S* generators, const S* positions, S* table, RotationTableShape shape) {
  detail::check_table_shape(shape, "rotation_table_forward");
  const auto run = [&](auto b) { detail::table_forward_impl<decltype(b)::value, S>(generators, positions, table, shape); };
  dispatch_block(shape.block, run, "rotation tables");
}

// dgenerators += d loss / d generators given dtable = d loss / d table (same layouts as the forward).
template <class S>
void rotation_table_backward(const S* generators, const S* positions, const S* dtable, S* dgenerators,
                             RotationTableShape shape) {
  detail::check_table_shape(shape, "rotation_table_backward");
  const auto run = [&](auto b) {
    detail::table_backward_impl<decltype(b)::value, S>(generators, positions, dtable, dgenerators, shape);
  };
  dispatch_block(shape.block, run, "rotation tables");
}

// The index of the first generator coordinate that is NaN or ±Inf, or −1 (host memory).
template <class S>
std::int64_t rotation_table_nonfinite(const S* generators, RotationTableShape shape) {
  const std::int64_t n = shape.num_generators();
  for (std::int64_t i = 0; i < n; ++i)
    if (!(generators[i] - generators[i] == S(0))) return i;
  return -1;
}

// Explicit instances (backend/cpu/rotation_table.cpp) for programs that link liere::compiled: every block size is
// compiled once there instead of in each file that builds tables (the engine's position-encoding module, tests).
#define LIERE_CPU_ROTATION_TABLE_INSTANCES(EXTERN, S)                                                       \
  EXTERN template void rotation_table_forward<S>(const S*, const S*, S*, RotationTableShape);               \
  EXTERN template void rotation_table_backward<S>(const S*, const S*, const S*, S*, RotationTableShape);
#ifdef LIERE_PRECOMPILED
LIERE_CPU_ROTATION_TABLE_INSTANCES(extern, float)
LIERE_CPU_ROTATION_TABLE_INSTANCES(extern, double)
#endif

}  // namespace liere::cpu
