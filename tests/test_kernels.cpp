// tests/test_kernels.cpp — the shared per-element and per-row bodies of backend/kernels/ (LIERE_HOST_DEVICE: the
// CUDA kernels run them) against the CPU kernels and plain formulas, on every machine: what the GPU computes is
// checked on the CPU even where there is no GPU. Also the CUDA backend's host code: the size check
// (cuda/blas_int.hpp) and, in builds with the backend, attention's views-to-pointers step (cuda/ops.hpp).
#include <catch2/catch.hpp>

#include <liere/backend/cpu/kernels.hpp>
#include <liere/backend/cuda/blas_int.hpp>
#include <liere/backend/kernels/adam.hpp>
#include <liere/backend/kernels/cross_entropy.hpp>
#include <liere/backend/kernels/gather.hpp>
#include <liere/backend/kernels/layernorm.hpp>
#include <liere/backend/kernels/patch.hpp>
#include <liere/backend/kernels/pointwise.hpp>
#include <liere/backend/kernels/reduce.hpp>
#include <liere/backend/kernels/rotate.hpp>
#include <liere/backend/kernels/rotate_tiles.hpp>
#include <liere/backend/kernels/softmax.hpp>
#include <liere/backend/rotate_gemms.hpp>
#include <liere/pe/rotation_table.hpp>
#ifdef LIERE_WITH_CUDA
#include <liere/backend/cuda/cudnn_attention.hpp>  // host code: cuDNN's descriptors
#include <liere/backend/cuda/memory.hpp>
#include <liere/backend/cuda/ops.hpp>  // host code: SeamOps::attention_call
#endif

#include <algorithm>
#include <array>
#include <barrier>
#include <climits>
#include <limits>
#include <cmath>
#include <random>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "skip.hpp"
#include "tensor_compare.hpp"

using namespace liere;
using liere::test::raise_error;

namespace {
std::vector<float> randn(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}
float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  float e = 0;
  for (std::size_t i = 0; i < a.size(); ++i) raise_error(e, std::abs(a[i] - b[i]));
  return e;
}

// A warp's xor-shuffle sum written out (v += shfl_xor(v, o) for o = L/2, …, 1, all lanes at once): every lane's value
// afterwards. The CUDA kernels' WarpSum; kernels::lane_tree_sum claims lane 0's bits (and, by a + b = b + a, all).
template <int L, class A>
std::array<A, L> xor_shuffle_sum(std::array<A, L> v) {
  for (int o = L / 2; o > 0; o /= 2) {
    std::array<A, L> w;
    for (int l = 0; l < L; ++l) w[std::size_t(l)] = v[std::size_t(l)] + v[std::size_t(l ^ o)];
    v = w;
  }
  return v;
}

// The GPU's warp-per-row kernels on the CPU: L threads, one per lane, each running the shared row body as that lane;
// the body's `sum` (and the softmax's `max`) is the xor-shuffle reduction done by the threads themselves (each step:
// publish, wait for all, read the partner, wait again; WarpSum and WarpMax of cuda/common.cuh). Records whether any
// lane ever ended a reduction with other bits than lane 0.
struct Plus {
  template <class A>
  A operator()(A v, A partner) const {
    return v + partner;
  }
};
struct Larger {  // WarpMax's step
  template <class A>
  A operator()(A v, A partner) const {
    return partner > v ? partner : v;
  }
};
template <int L>
struct ThreadWarp {
  std::barrier<> bar{L};
  std::array<double, L> slot{};
  std::array<int, L> mismatch{};
  template <class Op>
  struct Reduce {
    ThreadWarp* w;
    int lane;
    template <class A>
    A operator()(A v) const {
      for (int o = L / 2; o > 0; o /= 2) {
        w->slot[std::size_t(lane)] = double(v);
        w->bar.arrive_and_wait();
        const A partner = A(w->slot[std::size_t(lane ^ o)]);
        w->bar.arrive_and_wait();
        v = Op{}(v, partner);
      }
      w->slot[std::size_t(lane)] = double(v);  // every lane's total, compared with lane 0's
      w->bar.arrive_and_wait();
      if (w->slot[std::size_t(lane)] != w->slot[0]) w->mismatch[std::size_t(lane)] = 1;
      w->bar.arrive_and_wait();
      return v;
    }
  };
  using Sum = Reduce<Plus>;
  using Max = Reduce<Larger>;
  // f(lane, Sum) on L threads; f must call Sum the same number of times on every lane (as a warp must).
  template <class F>
  void run(F f) {
    std::vector<std::thread> t;
    for (int l = 0; l < L; ++l) t.emplace_back([this, f, l] { f(l, Sum{this, l}); });
    for (auto& th : t) th.join();
  }
};
}  // namespace

TEST_CASE("kernels: rotate_entry / rotate_backward_entry (one thread per element on the GPU) match cpu::rotate", "[kernels]") {
  const int block = GENERATE(2, 3, 4, 8, 16, 32, 64);
  const int D = block == 3 ? 12 : 64, B = 3, T = 5, H = 2, nb = D / block;
  INFO("block " << block);
  const std::vector<float> r = randn(std::size_t(T) * nb * block * block, 1);
  const RotationTableView<const float> table{r.data(), T, D, block};
  const std::vector<float> x = randn(std::size_t(B) * T * H * D, 2), dy = randn(x.size(), 3);
  std::vector<float> y_cpu(x.size()), dx_cpu(x.size(), 0.f), dr_cpu(r.size(), 0.f);
  cpu::rotate(table, x.data(), HeadsLayout::contiguous(T, H, D), y_cpu.data(), HeadsLayout::contiguous(T, H, D), B, T, H);
  const HeadsLayout l = HeadsLayout::contiguous(T, H, D);
  cpu::rotate_backward(table, x.data(), l, dy.data(), l, dx_cpu.data(), l, RotationTableView<float>{dr_cpu.data(), T, D, block},
                       B, T, H);
  // The GPU's decomposition: output element (b, t, h, i) from the block of token t that covers i.
  std::vector<float> y(x.size()), dx(x.size()), dr(r.size(), 0.f);
  for (std::size_t idx = 0; idx < x.size(); ++idx) {
    const int i = int(idx % D), t = int(idx / (std::size_t(D) * H) % T);
    const float* blk = table.block_data(t, i / block);
    const std::size_t base = idx - i % block;
    y[idx] = kernels::rotate_entry(blk, block, x.data() + base, i % block);
    dx[idx] = kernels::rotate_backward_entry(blk, block, dy.data() + base, i % block);
  }
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int h = 0; h < H; ++h) {
        const std::size_t o = ((std::size_t(b) * T + t) * H + h) * D;
        kernels::rotate_row_grad(dy.data() + o, x.data() + o, nb, block, dr.data() + std::size_t(t) * nb * block * block);
      }
  const float tol = 1e-5f * float(block);
  CHECK(max_abs_diff(y, y_cpu) <= tol);
  CHECK(max_abs_diff(dx, dx_cpu) <= tol);
  CHECK(max_abs_diff(dr, dr_cpu) <= tol * B * H);
}

namespace {
// cuBLAS's strided-batched GEMM as cuda::gemm calls it, written out: row-major C = op(A)·op(B) + β·C per product
// (β = 0 never reads C), the leading dimensions held to what cuBLAS accepts (it answers INVALID_VALUE otherwise),
// every element of A, B read and C written recorded, so a product that reaches outside its buffer fails.
struct Buffer {
  const float* begin;
  std::size_t size;
  bool holds(const float* p) const { return p >= begin && p < begin + size; }
};
struct RecordingGemms {
  std::vector<Buffer> inputs, outputs;
  int calls = 0;
  bool inside = true;  // every element read and written lies in its buffers
  void operator()(bool ta, bool tb, Index M, Index N, Index K, const float* A, Index lda, const float* B, Index ldb,
                  float beta, float* C, Index ldc, GemmBatch batch) {
    ++calls;
    REQUIRE((M > 0 && N > 0 && K > 0));
    REQUIRE(lda >= (ta ? M : K));  // A stored (K, M) when transposed, else (M, K)
    REQUIRE(ldb >= (tb ? K : N));
    REQUIRE(ldc >= N);
    REQUIRE(batch.count >= 1);
    for (Index i = 0; i < batch.count; ++i) {
      const float *a = A + i * batch.a, *b = B + i * batch.b;
      float* c = C + i * batch.c;
      for (Index m = 0; m < M; ++m)
        for (Index n = 0; n < N; ++n) {
          double acc = 0;
          for (Index k = 0; k < K; ++k) {
            const float* pa = ta ? a + k * lda + m : a + m * lda + k;
            const float* pb = tb ? b + n * ldb + k : b + k * ldb + n;
            if (!reads(pa) || !reads(pb)) {
              inside = false;
              continue;
            }
            acc += double(*pa) * double(*pb);
          }
          float* pc = c + m * ldc + n;
          if (!writes(pc)) {
            inside = false;
            continue;
          }
          *pc = beta == 0.f ? float(acc) : float(acc + double(beta) * double(*pc));
        }
    }
  }
  bool reads(const float* p) const {
    return std::any_of(inputs.begin(), inputs.end(), [&](const Buffer& b) { return b.holds(p); });
  }
  bool writes(const float* p) const {
    return std::any_of(outputs.begin(), outputs.end(), [&](const Buffer& b) { return b.holds(p); });
  }
};
}  // namespace

// attention.cu's gather, its backward and the tables' gradient (kernels/gather.hpp) run here a call at a time, as the
// GPU runs them a thread at a time: every index, in the value form and the block form (set_flat_kernels), against
// plain loops over (b, h, t) with rotate_row / rotate_row_backward and a double sum for the gradient. Shapes: blocks
// 2, 3, 4, 8 (and 64 left to the GEMMs: copies only), a CLS token, tables shared by the batch or one per sequence,
// heads without a table, padded keys, STRING's contiguous x̃ rows or the packed qkv rows, heads sharing a table.
namespace {
struct GatherCase {
  int B, T, H, D, block, first;
  bool shared, by_gemm, some_heads, packed;
};

template <int K>
void check_gather_case(const GatherCase& c, std::uint64_t seed) {
  INFO("B " << c.B << " T " << c.T << " H " << c.H << " D " << c.D << " block " << c.block << " first " << c.first
            << (c.shared ? " shared" : " per-sequence") << (c.by_gemm ? " by_gemm" : "")
            << (c.some_heads ? " some heads" : "") << (c.packed ? " packed rows" : " x̃ rows") << ", K " << K);
  const int B = c.B, T = c.T, H = c.H, D = c.D, TP = (T + 3) / 4 * 4, nb = D / c.block, bb = c.block * c.block;
  const int tr = T - c.first, table_tokens = c.shared ? tr : B * tr;
  const std::size_t per_table = std::size_t(table_tokens) * nb * bb;
  std::vector<std::vector<float>> tables(static_cast<std::size_t>(H));
  kernels::HeadRotations<8> r{};
  for (int h = 0; h < H && c.block > 1; ++h)  // block 1: no table at all (copies only)
    if (!c.some_heads || h % 2 == 0) {
      tables[std::size_t(h)] = randn(per_table, seed + std::uint64_t(h));
      r.tables[h] = tables[std::size_t(h)].data();
    }
  r.block = c.block, r.nb = nb, r.table_tokens = table_tokens, r.first = c.first, r.tr = tr, r.by_gemm = c.by_gemm;
  const std::int64_t ld = c.packed ? 3 * H * D + 5 : H * D, sb = std::int64_t(T) * ld, st = ld;
  const std::vector<float> src = randn(std::size_t(B) * T * ld + 3, seed + 10);
  const float *sq = src.data(), *sk = src.data() + 1, *v = src.data() + 2;
  // The table row of (b, t) and whether (h, t) is rotated by these kernels.
  auto row_of = [&](int h, int b, int t) {
    return tables[std::size_t(h)].data() + std::size_t(c.shared ? t - c.first : b * tr + t - c.first) * nb * bb;
  };
  auto rotated = [&](int h, int t) { return r.tables[h] && t >= c.first; };

  // gather
  const std::size_t nq = std::size_t(B) * H * T * D, nk = std::size_t(B) * H * TP * D;
  std::vector<float> want_q(nq, -7.f), want_k(nk, -7.f), want_v(nk, -7.f);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      for (int t = 0; t < TP; ++t) {
        float* ko = want_k.data() + ((std::size_t(b) * H + h) * TP + t) * D;
        float* vo = want_v.data() + ((std::size_t(b) * H + h) * TP + t) * D;
        if (t >= T) {
          std::fill(ko, ko + D, 0.f), std::fill(vo, vo + D, 0.f);
          continue;
        }
        float* qo = want_q.data() + ((std::size_t(b) * H + h) * T + t) * D;
        const std::size_t off = std::size_t(b) * sb + std::size_t(t) * st + std::size_t(h) * D;
        if (!rotated(h, t)) {
          std::copy(sq + off, sq + off + D, qo), std::copy(sk + off, sk + off + D, ko);
        } else if (!c.by_gemm) {
          kernels::rotate_row(row_of(h, b, t), nb, c.block, sq + off, qo);
          kernels::rotate_row(row_of(h, b, t), nb, c.block, sk + off, ko);
        }
        std::copy(v + (std::size_t(b) * T + t) * ld + std::size_t(h) * D,
                  v + (std::size_t(b) * T + t) * ld + std::size_t(h) * D + D, vo);
      }
  std::vector<float> q1(nq, -7.f), k1(nk, -7.f), v1(nk, -7.f), q2(q1), k2(k1), v2(v1);
  kernels::GatherIO g1{sq, sk, sb, st, v, ld, q1.data(), k1.data(), v1.data(), B, T, TP, H, D}, g2 = g1;
  g2.qh = q2.data(), g2.kh = k2.data(), g2.vh = v2.data();
  for (Index i = 0; i < kernels::gather_values(g1); ++i) kernels::gather_value(g1, r, i);
  for (Index i = 0; i < kernels::gather_values(g2) / K; ++i) kernels::gather_block<K>(g2, r, i);
  CHECK(max_abs_diff(q1, want_q) <= 1e-5f);
  CHECK(max_abs_diff(k1, want_k) <= 1e-5f);
  CHECK(v1 == want_v);
  CHECK(max_abs_diff(q2, q1) <= 1e-5f);
  CHECK(max_abs_diff(k2, k1) <= 1e-5f);
  CHECK(v2 == v1);

  // unrotate, accumulating into the packed rows (or overwriting x̃'s)
  const std::vector<float> dqh = randn(nq, seed + 20), dkh = randn(nk, seed + 21), dvh = randn(nk, seed + 22);
  const std::vector<float> dq0 = randn(std::size_t(B) * T * ld, seed + 23), dk0 = randn(dq0.size(), seed + 24),
                           dv0 = randn(dq0.size(), seed + 25);
  const bool overwrite = !c.packed;
  std::vector<float> want_dq = dq0, want_dk = dk0, want_dv = dv0;
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      for (int t = 0; t < T; ++t) {
        const float* gq = dqh.data() + ((std::size_t(b) * H + h) * T + t) * D;
        const float* gk = dkh.data() + ((std::size_t(b) * H + h) * TP + t) * D;
        const std::size_t off = std::size_t(b) * sb + std::size_t(t) * st + std::size_t(h) * D;
        for (int i = 0; i < D; ++i)
          want_dv[(std::size_t(b) * T + t) * ld + std::size_t(h) * D + std::size_t(i)] +=
              dvh[((std::size_t(b) * H + h) * TP + t) * D + std::size_t(i)];
        if (rotated(h, t) && c.by_gemm) continue;
        if (overwrite) {
          std::fill_n(want_dq.begin() + std::ptrdiff_t(off), D, 0.f);
          std::fill_n(want_dk.begin() + std::ptrdiff_t(off), D, 0.f);
        }
        if (rotated(h, t)) {
          kernels::rotate_row_backward(row_of(h, b, t), nb, c.block, gq, want_dq.data() + off);
          kernels::rotate_row_backward(row_of(h, b, t), nb, c.block, gk, want_dk.data() + off);
        } else {
          for (int i = 0; i < D; ++i) want_dq[off + std::size_t(i)] += gq[i], want_dk[off + std::size_t(i)] += gk[i];
        }
      }
  std::vector<float> dq1 = dq0, dk1 = dk0, dv1 = dv0, dq2 = dq0, dk2 = dk0, dv2 = dv0;
  kernels::UnrotateIO u1{dqh.data(), dkh.data(), dq1.data(), dk1.data(), sb, st, overwrite, dvh.data(),
                         dv1.data(), ld,         B,          T,          TP, H,  D},
      u2 = u1;
  u2.dq = dq2.data(), u2.dk = dk2.data(), u2.dv = dv2.data();
  for (Index i = 0; i < kernels::unrotate_values(u1); ++i) kernels::unrotate_value(u1, r, i);
  for (Index i = 0; i < kernels::unrotate_values(u2) / K; ++i) kernels::unrotate_block<K>(u2, r, i);
  CHECK(max_abs_diff(dq1, want_dq) <= 1e-5f);
  CHECK(max_abs_diff(dk1, want_dk) <= 1e-5f);
  CHECK(max_abs_diff(dv1, want_dv) <= 1e-5f);
  CHECK(max_abs_diff(dq2, dq1) <= 1e-5f);
  CHECK(max_abs_diff(dk2, dk1) <= 1e-5f);
  CHECK(dv2 == dv1);

  // the tables' gradient (rotating kernels only): heads 0 and 2 share table 0 when both have one
  if (c.by_gemm || K != c.block) return;
  kernels::TableGrads<8> d{};
  std::vector<std::vector<float>> dtab;
  std::vector<int> unique_of(std::size_t(H), -1);
  for (int h = 0; h < H; ++h) {
    if (!r.tables[h]) continue;
    const int u = h == 2 && r.tables[0] ? unique_of[0] : d.count++;
    unique_of[std::size_t(h)] = u;
    d.heads[u] |= 1ull << h;
  }
  const int chunk = c.shared ? 2 : 1, chunks = c.shared ? (B + 1) / 2 : 1;
  const Index entries = kernels::dtables_entries(r, d);
  REQUIRE(entries == Index(d.count) * Index(per_table));
  std::vector<double> want(std::size_t(entries), 0.0);
  for (int h = 0; h < H; ++h)
    for (int b = 0; b < B && unique_of[std::size_t(h)] >= 0; ++b)
      for (int t = c.first; t < T; ++t) {
        const std::size_t row = std::size_t(c.shared ? t - c.first : b * tr + t - c.first);
        double* dr = want.data() + std::size_t(unique_of[std::size_t(h)]) * per_table + row * std::size_t(nb) * bb;
        const float* gq = dqh.data() + ((std::size_t(b) * H + h) * T + t) * D;
        const float* gk = dkh.data() + ((std::size_t(b) * H + h) * TP + t) * D;
        const std::size_t off = std::size_t(b) * sb + std::size_t(t) * st + std::size_t(h) * D;
        for (int kb = 0; kb < nb; ++kb)
          for (int i = 0; i < c.block; ++i)
            for (int j = 0; j < c.block; ++j)
              dr[std::size_t(kb) * bb + std::size_t(i * c.block + j)] +=
                  double(gq[kb * c.block + i]) * sq[off + std::size_t(kb * c.block + j)] +
                  double(gk[kb * c.block + i]) * sk[off + std::size_t(kb * c.block + j)];
      }
  std::vector<float> p1(std::size_t(entries * chunks), -9.f), p2(p1);
  kernels::DTablesIO t1{dqh.data(), dkh.data(), sq, sk, sb, st, B, T, TP, H, D, chunk, chunks, p1.data()}, t2 = t1;
  t2.part = p2.data();
  for (Index i = 0; i < entries * chunks; ++i) kernels::dtables_entry(t1, r, d, i);
  for (Index i = 0; i < entries / K * chunks; ++i) kernels::dtables_line<K>(t2, r, d, i);
  CHECK(max_abs_diff(p2, p1) <= 1e-5f);
  double err = 0;
  for (Index e = 0; e < entries; ++e) {
    double s = 0;
    for (int run = 0; run < chunks; ++run) s += p1[std::size_t(run * entries + e)];
    raise_error(err, std::abs(s - want[std::size_t(e)]));
  }
  CHECK(err <= 1e-4);
}
}  // namespace

TEST_CASE("kernels: attention's gather, unrotate and tables' gradient (the GPU's bodies) a value or a block a call",
          "[kernels]") {
  std::uint64_t seed = 100;
  for (const int B : {1, 5})
    for (const int first : {0, 1})
      for (const bool shared : {true, false})
        for (const bool some : {false, true})
          for (const bool packed : {false, true}) {
            const int T = B == 1 ? 5 : 9;  // 5: TP 8, three padded keys; 9: TP 12
            check_gather_case<2>({B, T, 3, 8, 2, first, shared, false, some, packed}, seed += 50);
            check_gather_case<3>({B, T, 2, 9, 3, first, shared, false, some, packed}, seed += 50);
            check_gather_case<4>({B, T, 3, 8, 4, first, shared, false, some, packed}, seed += 50);
            check_gather_case<8>({B, T, 3, 16, 8, first, shared, false, some, packed}, seed += 50);
            check_gather_case<4>({B, T, 2, 64, 64, first, shared, true, some, packed}, seed += 50);  // the GEMMs rotate
          }
  check_gather_case<4>({3, 7, 2, 8, 1, 0, true, false, false, true}, seed += 50);  // no table: copies
}

TEST_CASE("kernels: rotate_gemms (the GPU's strided-batched products for large blocks) match the element kernels",
          "[kernels][rotate]") {
  // The attention's geometry on the GPU: q, k in a packed qkv buffer (token stride 3·H·D), the first `first`
  // tokens not rotated (the table has T − first rows), q̂ and dq̂ in (B, H, T, D) scratch; two heads sharing one
  // table and one dR. Reference: kernels::rotate_entry / rotate_backward_entry / rotate_row_grad, one element at
  // a time. Entries outside the rotated tokens of the head must stay as they were.
  const int block = GENERATE(2, 8, 16, 32, 64);
  const int first = GENERATE(0, 1);
  const int D = 64, B = 3, T = 6, H = 2, nb = D / block, tr = T - first, HD = H * D, ld = 3 * HD;
  INFO("block " << block << ", first rotated token " << first);
  const std::vector<float> r = randn(std::size_t(tr) * nb * block * block, 11);
  const RotationTableView<const float> table{r.data(), tr, D, block};
  const std::vector<float> qkv = randn(std::size_t(B) * T * ld, 12), dqh = randn(std::size_t(B) * H * T * D, 13);
  const HeadsLayout xl{std::int64_t(T) * ld, ld}, hl{std::int64_t(H) * T * D, D};
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto x_at = [&](int b, int t, int h) { return qkv.data() + b * xl.batch + t * xl.token + h * D; };
  auto g_at = [&](int b, int t, int h) { return dqh.data() + b * hl.batch + t * hl.token + h * T * D; };

  // forward: q̂ (B, H, T, D) from q, written only at rotated tokens (the rest stays NaN here)
  std::vector<float> qh(dqh.size(), nan);
  RecordingGemms g;
  g.inputs = {{qkv.data(), qkv.size()}, {r.data(), r.size()}};
  g.outputs = {{qh.data(), qh.size()}};
  for (int h = 0; h < H; ++h)
    rotate_gemms<float>(table, x_at(0, first, h), xl, qh.data() + h * T * D + first * D, hl, B, g);
  CHECK(g.calls == H * nb);
  CHECK(g.inside);
  // backward: dq (packed, accumulated: β = 1 onto random values) and dx̃ (contiguous, overwritten: β = 0 onto NaN)
  std::vector<float> dq = randn(qkv.size(), 14), dx(std::size_t(B) * T * HD, nan), dr = randn(r.size(), 15);
  const std::vector<float> dq0 = dq, dr0 = dr;
  const HeadsLayout cl{std::int64_t(T) * HD, HD};
  RecordingGemms gb;
  gb.inputs = {{dqh.data(), dqh.size()}, {r.data(), r.size()}, {qkv.data(), qkv.size()}};
  gb.outputs = {{dq.data(), dq.size()}, {dx.data(), dx.size()}, {dr.data(), dr.size()}};
  const RotationTableView<float> dtable{dr.data(), tr, D, block};
  for (int h = 0; h < H; ++h) {
    const float* gh = g_at(0, first, h);
    rotate_backward_gemms<float>(table, gh, hl, dq.data() + first * ld + h * D, xl, 1.f, B, gb);
    rotate_backward_gemms<float>(table, gh, hl, dx.data() + first * HD + h * D, cl, 0.f, B, gb);
    rotate_grad_gemms<float>(dtable, gh, hl, x_at(0, first, h), xl, B, gb);
  }

  std::vector<float> dr_ref = dr0;
  const float tol = 1e-5f * float(block);
  float ey = 0, edq = 0, edx = 0;
  bool untouched = true;
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int h = 0; h < H; ++h) {
        const float* qrow = x_at(b, t, h);
        const float* grow = g_at(b, t, h);
        for (int i = 0; i < D; ++i) {
          const std::size_t hi = std::size_t(b) * hl.batch + std::size_t(h) * T * D + std::size_t(t) * D + std::size_t(i);
          const std::size_t pi = std::size_t(b) * xl.batch + std::size_t(t) * ld + std::size_t(h) * D + std::size_t(i);
          const std::size_t ci = std::size_t(b) * cl.batch + std::size_t(t) * HD + std::size_t(h) * D + std::size_t(i);
          if (t < first) {
            untouched = untouched && std::isnan(qh[hi]) && dq[pi] == dq0[pi] && std::isnan(dx[ci]);
            continue;
          }
          const float* blk = table.block_data(t - first, i / block);
          const int base = i - i % block;
          raise_error(ey, std::abs(qh[hi] - kernels::rotate_entry(blk, block, qrow + base, i % block)));
          const float back = kernels::rotate_backward_entry(blk, block, grow + base, i % block);
          raise_error(edq, std::abs(dq[pi] - (dq0[pi] + back)));
          raise_error(edx, std::abs(dx[ci] - back));
        }
        if (t >= first) kernels::rotate_row_grad(grow, qrow, nb, block, dr_ref.data() + std::size_t(t - first) * nb * block * block);
      }
  // the packed buffer's k and v columns (beyond H·D in each token) untouched
  for (std::size_t i = 0; i < dq.size(); ++i) untouched = untouched && (i % ld < std::size_t(HD) || dq[i] == dq0[i]);
  CHECK(gb.inside);
  CHECK(untouched);
  CHECK(ey <= tol);
  CHECK(edq <= tol);
  CHECK(edx <= tol);
  CHECK(max_abs_diff(dr, dr_ref) <= tol * B * H);
}

namespace {
using Tiles4 = kernels::TileProducts<4>;
// cuda/attention.cu's k_rotate_tiles on the CPU: every thread block (row tile, product), its phases for its
// kTileThreads threads in turn, as __syncthreads orders them.
void emulate_rotate_tiles(const Tiles4& io) {
  using namespace kernels;
  std::vector<float> as(kTile * kTileLd), bs(kTile * kTileLd);
  for (int p = 0; p < io.products(); ++p)
    for (int b0 = 0; b0 < io.batch; b0 += kTile) {
      int w, h, t, kb;
      io.decode(p, w, h, t, kb);
      const float* m = io.m[h];
      if (!m) continue;
      const int rows = std::min(kTile, io.batch - b0);
      for (int th = 0; th < kTileThreads; ++th) {
        tile_stage_part(io.x[w].at(h, t, kb) + b0 * io.x[w].batch, io.x[w].batch, rows, true, as.data(), th);
        tile_stage_part(m + io.block_offset(t, kb), std::int64_t(kTile), kTile, !io.dx, bs.data(), th);
      }
      for (int th = 0; th < kTileThreads; ++th) {
        float acc[kTileRows][kTileCols] = {};
        tile_mul_part(as.data(), bs.data(), th, acc);
        tile_store_part(acc, io.out[w].at(h, t, kb) + b0 * io.out[w].batch, io.out[w].batch, rows, io.accumulate, th);
      }
    }
}
// k_rotate_tiles_grad on the CPU: a thread block per (head, token, block), each thread's sums kept across the
// chunks of 64 rows of both sides.
void emulate_rotate_tiles_grad(const Tiles4& io) {
  using namespace kernels;
  std::vector<float> as(kTile * kTileLd), bs(kTile * kTileLd);
  for (int p = 0; p < io.heads * io.tokens * io.nb; ++p) {
    int w, h, t, kb;
    io.decode(p, w, h, t, kb);
    float* dr = io.dm[h];
    if (!dr || !io.m[h]) continue;
    float sums[kTileThreads][kTileRows][kTileCols] = {};
    for (int side = 0; side < io.sides; ++side)
      for (int b0 = 0; b0 < io.batch; b0 += kTile) {
        const int rows = std::min(kTile, io.batch - b0);
        for (int th = 0; th < kTileThreads; ++th) {
          tile_stage_part(io.x[side].at(h, t, kb) + b0 * io.x[side].batch, io.x[side].batch, rows, false, as.data(), th);
          tile_stage_part(io.y[side].at(h, t, kb) + b0 * io.y[side].batch, io.y[side].batch, rows, false, bs.data(), th);
        }
        for (int th = 0; th < kTileThreads; ++th) tile_mul_part(as.data(), bs.data(), th, sums[th]);
      }
    for (int th = 0; th < kTileThreads; ++th)
      tile_store_part(sums[th], dr + io.block_offset(t, kb), std::int64_t(kTile), kTile, true, th);
  }
}
}  // namespace

TEST_CASE("kernels: the rotation products as 64 x 64 tiles (the GPU's set_rotate_tiles) match the element kernels",
          "[kernels][rotate]") {
  // The attention's geometry on the GPU, as the rotate_gemms case above: q and k in a packed qkv buffer, the first
  // token not rotated, q̂ in (B, H, T, D) and k̂ in (B, H, TP, D) scratch (padded keys), two blocks of 64 a token
  // (D = 128), a batch of 70 (a full row tile and a partial one), three heads of which the second is not rotated.
  // Reference: kernels::rotate_entry / rotate_backward_entry / rotate_row_grad. Entries the products must not
  // write (unrotated tokens and heads, padded keys, the packed buffer's v) must stay as they were.
  const int D = 128, B = 70, T = 5, TP = 8, H = 3, first = 1, tr = T - first, nb = D / 64, HD = H * D, ld = 3 * HD;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<std::vector<float>> tabs;
  for (int h = 0; h < H; ++h) tabs.push_back(randn(std::size_t(tr) * nb * 64 * 64, 21 + std::uint64_t(h)));
  const std::vector<float> qkv = randn(std::size_t(B) * T * ld, 24);
  const std::vector<float> dqh = randn(std::size_t(B) * H * T * D, 25), dkh = randn(std::size_t(B) * H * TP * D, 26);
  const std::int64_t sb = std::int64_t(T) * ld, stok = ld;
  auto base = [&](int h) { return h == 1 ? nullptr : tabs[std::size_t(h)].data(); };

  Tiles4 io;
  for (int h = 0; h < H; ++h) io.m[h] = base(h);
  io.heads = H, io.tokens = tr, io.nb = nb, io.batch = B;
  const std::int64_t from = std::int64_t(first) * stok, to = std::int64_t(first) * D;
  // forward: q̂, k̂ from q, k
  std::vector<float> qh(dqh.size(), nan), kh(dkh.size(), nan);
  io.x[0] = {qkv.data() + from, sb, stok, D};
  io.x[1] = {qkv.data() + HD + from, sb, stok, D};
  io.out[0] = {qh.data() + to, std::int64_t(H) * T * D, D, std::int64_t(T) * D};
  io.out[1] = {kh.data() + to, std::int64_t(H) * TP * D, D, std::int64_t(TP) * D};
  CHECK(io.products() == 2 * H * tr * nb);
  emulate_rotate_tiles(io);
  // dx: dq, dk (packed, accumulated onto random values)
  std::vector<float> dqkv = randn(qkv.size(), 27);
  const std::vector<float> dqkv0 = dqkv;
  Tiles4 bx = io;
  bx.dx = true, bx.accumulate = true;
  bx.x[0] = {dqh.data() + to, std::int64_t(H) * T * D, D, std::int64_t(T) * D};
  bx.x[1] = {dkh.data() + to, std::int64_t(H) * TP * D, D, std::int64_t(TP) * D};
  bx.out[0] = {dqkv.data() + from, sb, stok, D};
  bx.out[1] = {dqkv.data() + HD + from, sb, stok, D};
  emulate_rotate_tiles(bx);
  // dR of every rotated head (accumulated onto random values)
  std::vector<std::vector<float>> dr, dr_ref;
  for (int h = 0; h < H; ++h) dr.push_back(randn(tabs[0].size(), 31 + std::uint64_t(h)));
  dr_ref = dr;
  Tiles4 gx = bx;
  for (int h = 0; h < H; ++h) gx.dm[h] = dr[std::size_t(h)].data();
  gx.y[0] = io.x[0];
  gx.y[1] = io.x[1];
  emulate_rotate_tiles_grad(gx);

  float ey = 0, edx = 0, edr = 0;
  bool untouched = true;
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      for (int w = 0; w < 2; ++w) {
        const int TT = w == 0 ? T : TP;
        const float* g = (w == 0 ? dqh : dkh).data() + std::size_t(b) * H * TT * D + std::size_t(h) * TT * D;
        const std::vector<float>& y = w == 0 ? qh : kh;
        for (int t = 0; t < TT; ++t) {
          const std::size_t yi = std::size_t(b) * H * TT * D + std::size_t(h) * TT * D + std::size_t(t) * D;
          const std::size_t xi = std::size_t(b) * sb + std::size_t(t) * stok + std::size_t(w) * HD + std::size_t(h) * D;
          const bool rotated = base(h) && t >= first && t < T;
          for (int i = 0; i < D; ++i) {
            if (!rotated) {
              untouched = untouched && std::isnan(y[yi + i]) && (t >= T || dqkv[xi + i] == dqkv0[xi + i]);
              continue;
            }
            const float* blk = base(h) + (std::size_t(t - first) * nb + std::size_t(i / 64)) * 64 * 64;
            const int c0 = i - i % 64;
            raise_error(ey, std::abs(y[yi + i] - kernels::rotate_entry(blk, 64, qkv.data() + xi + c0, i % 64)));
            const float back = kernels::rotate_backward_entry(blk, 64, g + std::size_t(t) * D + c0, i % 64);
            raise_error(edx, std::abs(dqkv[xi + i] - (dqkv0[xi + i] + back)));
          }
          if (rotated)
            kernels::rotate_row_grad(g + std::size_t(t) * D, qkv.data() + xi, nb, 64,
                                     dr_ref[std::size_t(h)].data() + std::size_t(t - first) * nb * 64 * 64);
        }
      }
  for (int h = 0; h < H; ++h) raise_error(edr, max_abs_diff(dr[std::size_t(h)], dr_ref[std::size_t(h)]));
  // v's columns of the packed buffer untouched by dx
  for (std::size_t i = 0; i < dqkv.size(); ++i) untouched = untouched && (i % ld < std::size_t(2 * HD) || dqkv[i] == dqkv0[i]);
  CHECK(untouched);
  CHECK(ey <= 1e-4f);
  CHECK(edx <= 1e-4f);
  INFO("largest errors: forward " << ey << ", dx " << edx << ", dR " << edr);
  CHECK(edr <= 2e-4f);  // sums of 140 products of two N(0, 1) values (both sides), against a different order
}

TEST_CASE("kernels: softmax_row / softmax_row_backward match the CPU's vectorised rows", "[kernels]") {
  const int T = GENERATE(1, 7, 65, 197);
  INFO("T " << T);
  std::vector<float> s = randn(std::size_t(T) * T, 4), dp = randn(s.size(), 5);
  for (auto& v : s) v *= 4.f;
  std::vector<float> p_cpu = s, p = s;
  cpu::softmax_rows_forward(p_cpu.data(), T, nullptr);
  for (int i = 0; i < T; ++i) kernels::softmax_row(p.data() + std::size_t(i) * T, T, static_cast<const std::uint8_t*>(nullptr));
  CHECK(max_abs_diff(p, p_cpu) <= 1e-6f);
  std::vector<float> d_cpu = dp, d = dp;
  cpu::softmax_rows_backward(p_cpu.data(), d_cpu.data(), T, 0.125f);
  for (int i = 0; i < T; ++i) kernels::softmax_row_backward(p_cpu.data() + std::size_t(i) * T, d.data() + std::size_t(i) * T, T, 0.125f);
  CHECK(max_abs_diff(d, d_cpu) <= 1e-6f);
  // A masked key gets probability 0; every key masked gives a zero row.
  std::vector<std::uint8_t> mask(std::size_t(T), 1);
  mask[0] = 0;
  std::vector<float> row(s.begin(), s.begin() + T);
  kernels::softmax_row(row.data(), T, mask.data());
  CHECK(row[0] == 0.f);
  std::fill(mask.begin(), mask.end(), 0);
  kernels::softmax_row(row.data(), T, mask.data());
  CHECK(*std::max_element(row.begin(), row.end()) == 0.f);
}

TEST_CASE("kernels: softmax rows as the GPU's warp (32 lanes) match the one-lane rows", "[kernels]") {
  // The softmax and its backward with Lanes = 32 on 32 threads whose max and sums are the warp's shuffles, against
  // the same bodies with Lanes = 1 (the CPU's masked rows). T = 1 and 7 (fewer keys than lanes), 65 (ViT-Tiny),
  // 197 (ViT-B); rows with every key kept, with some masked and with all masked.
  const int T = GENERATE(1, 7, 65, 197);
  INFO("T " << T);
  const int rows = 3;
  std::vector<float> s = randn(std::size_t(rows) * T, 14), dp = randn(s.size(), 15);
  for (auto& x : s) x *= 5.f;
  std::vector<std::uint8_t> masks(std::size_t(rows) * T, 1);
  for (int j = 0; j < T; ++j) masks[std::size_t(T + j)] = j % 3 != 1, masks[std::size_t(2 * T + j)] = 0;
  std::vector<float> p1 = s, d1 = dp;
  for (int r = 0; r < rows; ++r) {
    kernels::softmax_row(p1.data() + r * T, T, r == 0 ? nullptr : masks.data() + r * T);
    kernels::softmax_row_backward(p1.data() + r * T, d1.data() + r * T, T, 0.125f);
  }
  std::vector<float> pw = s, dw = dp;
  ThreadWarp<32> warp;
  warp.run([&](int lane, ThreadWarp<32>::Sum sum) {
    const ThreadWarp<32>::Max max{sum.w, lane};
    for (int r = 0; r < rows; ++r)
      kernels::softmax_row<32>(pw.data() + r * T, T, r == 0 ? nullptr : masks.data() + r * T, lane, max, sum);
  });
  warp.run([&](int lane, ThreadWarp<32>::Sum sum) {  // the backward kernel
    for (int r = 0; r < rows; ++r)
      kernels::softmax_row_backward<32>(pw.data() + r * T, dw.data() + r * T, T, 0.125f, lane, sum);
  });
  for (int l = 0; l < 32; ++l) CHECK(warp.mismatch[std::size_t(l)] == 0);
  for (std::size_t k = 0; k < s.size(); ++k) {
    INFO("element " << k);
    REQUIRE(std::abs(pw[k] - p1[k]) <= 2e-6f * p1[k] + 1e-12f);
    REQUIRE(std::abs(dw[k] - d1[k]) <= 2e-6f * (1 + std::abs(d1[k])));
    if (masks[k] == 0) REQUIRE((pw[k] == 0.f && dw[k] == 0.f));
  }
}

namespace {
// The cross-entropy forward of rows of K logits (one label each) by the one-lane body (the CPU's rows: p1, l1) and by
// the 32-lane body on 32 threads with the warp's shuffles (k_ce_rows: pw, lw, every lane's loss), pw first filled with
// −7 (an entry left unwritten shows); the warp's lanes must agree on every max and sum they shared.
struct CrossEntropyRows {
  std::vector<float> p1, pw, l1, lw;
  CrossEntropyRows(const std::vector<float>& z, const std::vector<int>& labels, int K, float eps_k, float one_m_eps)
      : p1(z.size()), pw(z.size(), -7.f), l1(labels.size()), lw(labels.size() * 32) {
    const int rows = int(labels.size());
    for (int r = 0; r < rows; ++r)
      l1[std::size_t(r)] = kernels::cross_entropy_row_forward(z.data() + r * K, labels[std::size_t(r)], eps_k,
                                                              one_m_eps, p1.data() + r * K, K);
    ThreadWarp<32> warp;
    warp.run([&](int lane, ThreadWarp<32>::Sum sum) {
      const ThreadWarp<32>::Max max{sum.w, lane};
      for (int r = 0; r < rows; ++r)
        lw[std::size_t(r * 32 + lane)] = kernels::cross_entropy_row_forward<32>(
            z.data() + r * K, labels[std::size_t(r)], eps_k, one_m_eps, pw.data() + r * K, K, lane, max, sum);
    });
    for (int l = 0; l < 32; ++l) CHECK(warp.mismatch[std::size_t(l)] == 0);
  }
};
}  // namespace

TEST_CASE("kernels: cross-entropy rows as the GPU's warp (32 lanes) and entries match the one-lane rows",
          "[kernels]") {
  // The forward with Lanes = 32 on 32 threads whose max and sums are the warp's shuffles (k_ce_rows), against the
  // same body with Lanes = 1 (the CPU's rows); the backward a thread per entry (k_ce_backward) against the row. K = 1
  // and 10 (fewer classes than lanes), 100 (CIFAR-100), 1000; without and with label smoothing; one row's largest
  // logit on its label, one far from the others (exp underflows to 0 for most classes).
  const int K = GENERATE(1, 10, 100, 1000);
  const float eps = GENERATE(0.0f, 0.1f);
  INFO("K " << K << ", smoothing " << eps);
  const int rows = 3;
  std::vector<float> z = randn(std::size_t(rows) * K, 16);
  for (auto& x : z) x *= 4.f;
  const std::vector<int> labels = {0, (K - 1) / 2, K - 1};
  z[std::size_t(2 * K + K - 1)] = 120.f;
  const float eps_k = eps / float(K), one_m_eps = 1 - eps, c = 0.37f;
  const CrossEntropyRows ce(z, labels, K, eps_k, one_m_eps);
  const std::vector<float>&p1 = ce.p1, &pw = ce.pw, &l1 = ce.l1, &lw = ce.lw;
  for (int r = 0; r < rows; ++r) {
    INFO("row " << r);
    for (int lane = 0; lane < 32; ++lane) REQUIRE(lw[std::size_t(r * 32 + lane)] == lw[std::size_t(r * 32)]);
    CHECK(std::abs(lw[std::size_t(r * 32)] - l1[std::size_t(r)]) <= 2e-6f * (1 + std::abs(l1[std::size_t(r)])));
  }
  for (std::size_t k = 0; k < z.size(); ++k) {
    INFO("entry " << k);
    REQUIRE(std::abs(pw[k] - p1[k]) <= 2e-6f * p1[k] + 1e-12f);  // every entry written: no −7 left
  }
  // The backward: the row and a thread per entry (in reverse order, as threads may run), onto the same non-zero
  // gradient: the same bits.
  const std::vector<float> d0 = randn(z.size(), 17);
  std::vector<float> d1 = d0, de = d0;
  for (int r = 0; r < rows; ++r)
    kernels::cross_entropy_row_backward(p1.data() + r * K, labels[std::size_t(r)], eps_k, one_m_eps, c,
                                        d1.data() + r * K, K);
  for (std::size_t i = z.size(); i-- > 0;)
    kernels::cross_entropy_grad_entry(p1[i], Index(i) % K == labels[i / std::size_t(K)], eps_k, one_m_eps, c, de[i]);
  CHECK(de == d1);
  // and against the formula: dz_k += c · (p_k − (1 − ε)·[k = y] − ε/K)
  for (int r = 0; r < rows; ++r)
    for (int k = 0; k < K; ++k) {
      const std::size_t i = std::size_t(r * K + k);
      const double q = (k == labels[std::size_t(r)] ? double(one_m_eps) : 0.0) + double(eps_k);
      REQUIRE(std::abs(d1[i] - (double(d0[i]) + c * (double(p1[i]) - q))) <= 1e-6 * (1 + std::abs(d0[i])));
    }
}

TEST_CASE("kernels: cross-entropy rows of logits far from zero (-200 and +200), one lane and the warp, against double",
          "[kernels]") {
  // ℓ and p do not change when every logit moves by the same amount; exp(z − max) keeps them computable where
  // exp(z) underflows (z < −103) or overflows (z > 88.7) in float. K = 100 logits of 4·N(0, 1) around −200 and +200,
  // with label smoothing; the reference is the formula in double from the same float logits.
  const int K = 100, rows = 2;
  const float eps = 0.1f, eps_k = eps / float(K), one_m_eps = 1 - eps;
  std::vector<float> z = randn(std::size_t(rows) * K, 19);
  for (int k = 0; k < K; ++k)
    z[std::size_t(k)] = -200.f + 4.f * z[std::size_t(k)], z[std::size_t(K + k)] = 200.f + 4.f * z[std::size_t(K + k)];
  const std::vector<int> labels = {7, 42};
  const CrossEntropyRows ce(z, labels, K, eps_k, one_m_eps);
  const std::vector<float>&p1 = ce.p1, &pw = ce.pw, &l1 = ce.l1, &lw = ce.lw;
  float el = 0, ep = 0;
  for (int r = 0; r < rows; ++r) {
    const float* zr = z.data() + r * K;
    double mx = -INFINITY, se = 0, zs = 0;
    for (int k = 0; k < K; ++k) mx = std::max(mx, double(zr[k]));
    for (int k = 0; k < K; ++k) se += std::exp(double(zr[k]) - mx), zs += zr[k];
    const double lse = mx + std::log(se);
    const double loss = lse - double(one_m_eps) * zr[labels[std::size_t(r)]] - double(eps_k) * zs;
    raise_error(el, float(std::abs(l1[std::size_t(r)] - loss)));
    raise_error(el, float(std::abs(lw[std::size_t(r * 32)] - loss)));
    for (int k = 0; k < K; ++k) {
      const double want = std::exp(double(zr[k]) - lse);
      raise_error(ep, float(std::abs(p1[std::size_t(r * K + k)] - want) / std::max(1e-3, want)));
      raise_error(ep, float(std::abs(pw[std::size_t(r * K + k)] - want) / std::max(1e-3, want)));
    }
  }
  INFO("largest errors: loss " << el << ", p (relative) " << ep);
  // The loss adds terms of size 200 (float's ulp there: 1.5e-5) and ε/K·Σz of Σz ≈ ±2e4 (ulp 2e-3, times 1e-3).
  CHECK(el <= 1e-4f);
  CHECK(ep <= 2e-6f);
}

TEST_CASE("kernels: gelu / gelu_grad match the CPU's vectorised float GELU", "[kernels]") {
  std::vector<float> x = randn(5000, 6), dy = randn(5000, 7);
  for (auto& v : x) v *= 3.f;
  std::vector<float> y_cpu(x.size()), dx_cpu(x.size(), 0.f);
  cpu::gelu_forward(x.data(), y_cpu.data(), Index(x.size()));
  cpu::gelu_backward(x.data(), dy.data(), dx_cpu.data(), Index(x.size()), true);
  std::vector<float> y(x.size()), dx(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) y[i] = kernels::gelu(x[i]), dx[i] = dy[i] * kernels::gelu_grad(x[i]);
  CHECK(max_abs_diff(y, y_cpu) <= 2e-6f);
  CHECK(max_abs_diff(dx, dx_cpu) <= 2e-6f);
}

TEST_CASE("kernels: patch_source (the GPU's im2col) and the CPU's im2col / col2im follow the convolution's layout",
          "[kernels]") {
  PatchGeometry g;
  g.B = 2, g.C = 3;
  const bool video = GENERATE(false, true);
  g.T = video ? 4 : 1, g.tt = video ? 2 : 1;
  g.H = 8, g.W = 12, g.p = 4;
  const std::vector<float> x = randn(std::size_t(g.input_size()), 8);
  const Index rows = g.B * g.tokens(), K = g.patch_size();
  // The layout written out here, not through kernels/patch.hpp: patch (b, it, ih, iw) in (t, h, w) row-major
  // order, column ((c·tt + dt)·p + dy)·p + dx holding pixel x[b, c, it·tt + dt, ih·p + dy, iw·p + dx].
  std::vector<float> expected(std::size_t(rows * K));
  const Index nt = g.T / g.tt, nh = g.H / g.p, nw = g.W / g.p, p = g.p;
  for (Index b = 0; b < g.B; ++b)
    for (Index it = 0; it < nt; ++it)
      for (Index ih = 0; ih < nh; ++ih)
        for (Index iw = 0; iw < nw; ++iw)
          for (Index c = 0; c < g.C; ++c)
            for (Index dt = 0; dt < g.tt; ++dt)
              for (Index dy = 0; dy < p; ++dy)
                for (Index dx = 0; dx < p; ++dx) {
                  const Index row = b * nt * nh * nw + (it * nh + ih) * nw + iw, k = ((c * g.tt + dt) * p + dy) * p + dx;
                  const Index src = (((b * g.C + c) * g.T + it * g.tt + dt) * g.H + ih * p + dy) * g.W + iw * p + dx;
                  expected[std::size_t(row * K + k)] = x[std::size_t(src)];
                }
  std::vector<float> cols(std::size_t(rows * K));
  cpu::patch_im2col(x.data(), cols.data(), g);
  CHECK(cols == expected);
  std::vector<float> gathered(cols.size());
  for (Index i = 0; i < rows * K; ++i) gathered[std::size_t(i)] = x[std::size_t(kernels::patch_source(g, i / K, i % K))];
  CHECK(gathered == expected);
  // col2im scatters every value back to its pixel (the patches tile x: each pixel once), and accumulates.
  std::vector<float> back(x.size(), 0.f);
  cpu::patch_col2im_accumulate(cols.data(), back.data(), g);
  CHECK(back == x);
  cpu::patch_col2im_accumulate(cols.data(), back.data(), g);
  for (std::size_t i = 0; i < x.size(); ++i) REQUIRE(back[i] == 2 * x[i]);
}

TEST_CASE("kernels: LayerNorm's dγ, dβ chunk sums in the GPU's order give the CPU kernel's bits", "[kernels]") {
  // N not a multiple of the chunk (32 rows): a short last chunk; 1100 rows: 35 chunks, more than the finish's 32
  // lanes. dγ, dβ start non-zero: both accumulate.
  const Index N = GENERATE(Index(1), Index(64), Index(150), Index(1100)), C = 37;
  INFO("N " << N);
  const std::vector<float> x = randn(std::size_t(N * C), 11), dy = randn(x.size(), 12), gamma = randn(std::size_t(C), 13),
                           beta = randn(std::size_t(C), 14), dg0 = randn(std::size_t(C), 15), db0 = randn(std::size_t(C), 16);
  std::vector<float> y(x.size()), mean(static_cast<std::size_t>(N)), rstd(static_cast<std::size_t>(N));
  cpu::layernorm_forward(x.data(), gamma.data(), beta.data(), y.data(), mean.data(), rstd.data(), N, C);
  std::vector<float> dg = dg0, db = db0, part(std::size_t(kernels::layernorm_backward_scratch(N, C)));
  cpu::layernorm_backward(x.data(), gamma.data(), mean.data(), rstd.data(), dy.data(), nullptr, dg.data(), db.data(),
                          part.data(), N, C);
  // The CUDA kernels' decomposition: one thread per (chunk, column), then one warp per column (each lane its
  // chunks, then the xor-shuffle sum); the threads in another order than the CPU's loops (the last first), as a GPU
  // may run them.
  std::vector<float> dg_gpu = dg0, db_gpu = db0, part_gpu(part.size(), -1.f);
  const Index nch = (N + kernels::kLayerNormChunk - 1) / kernels::kLayerNormChunk;
  for (Index idx = nch * C - 1; idx >= 0; --idx)
    kernels::layernorm_params_chunk<float, 1>(x.data(), mean.data(), rstd.data(), dy.data(), part_gpu.data(), N, C,
                                              idx / C, idx % C, idx % C + 1);
  constexpr int L = kernels::kReduceLanes;
  for (Index i = 0; i < C; ++i) {
    std::array<double, L> sg, sb;
    for (int l = L - 1; l >= 0; --l)
      kernels::layernorm_params_lane(part_gpu.data(), N, C, i, l, sg[std::size_t(l)], sb[std::size_t(l)]);
    const auto tg = xor_shuffle_sum<L>(sg), tb = xor_shuffle_sum<L>(sb);
    for (int l = 1; l < L; ++l) REQUIRE((tg[std::size_t(l)] == tg[0] && tb[std::size_t(l)] == tb[0]));
    dg_gpu[std::size_t(i)] += float(tg[0]);
    db_gpu[std::size_t(i)] += float(tb[0]);
  }
  CHECK(dg_gpu == dg);
  CHECK(db_gpu == db);
  // The finish adds the chunks' sums in double (acc_t<float>), rounding once: dγ0 + float(Σ chunks), the sum taken
  // here in double in chunk order (another order moves a double sum of ≤ 35 floats by far less than half a float ulp).
  for (Index i = 0; i < C; ++i) {
    double sg = 0, sb = 0;
    for (Index ch = 0; ch < nch; ++ch)
      sg += part_gpu[std::size_t(ch * 2 * C + i)], sb += part_gpu[std::size_t(ch * 2 * C + C + i)];
    CHECK(dg_gpu[std::size_t(i)] == dg0[std::size_t(i)] + float(sg));
    CHECK(db_gpu[std::size_t(i)] == db0[std::size_t(i)] + float(sb));
  }
  // And the sums themselves, in double: dγ += Σ_n dy ⊙ x̂, dβ += Σ_n dy.
  for (Index i = 0; i < C; ++i) {
    double sg = 0, sb = 0;
    for (Index n = 0; n < N; ++n) {
      const double xh = (double(x[std::size_t(n * C + i)]) - mean[std::size_t(n)]) * rstd[std::size_t(n)];
      sg += double(dy[std::size_t(n * C + i)]) * xh;
      sb += dy[std::size_t(n * C + i)];
    }
    CHECK(std::abs(dg[std::size_t(i)] - (dg0[std::size_t(i)] + sg)) <= 1e-4 * (1 + std::abs(sg)));
    CHECK(std::abs(db[std::size_t(i)] - (db0[std::size_t(i)] + sb)) <= 1e-4 * (1 + std::abs(sb)));
  }
}

TEST_CASE("kernels: LayerNorm rows as the GPU's warp (32 lanes, float4 groups) match the CPU's rows", "[kernels]") {
  // The row bodies with Lanes = 32 on 32 threads whose `sum` is the warp's xor-shuffle sum done by hand, against
  // cpu::layernorm_forward / layernorm_backward (Lanes = 1). C = 192 (ViT-Tiny; V = 4: 48 groups, lanes with one and
  // with two; and V = 1), 8 (V = 4: fewer groups than lanes), 37 (V = 1: odd), 5 (fewer columns than lanes).
  // dx starts non-zero: it accumulates.
  const auto [C, V] = GENERATE(std::pair<Index, int>{192, 4}, std::pair<Index, int>{192, 1},
                               std::pair<Index, int>{8, 4}, std::pair<Index, int>{37, 1}, std::pair<Index, int>{5, 1});
  const Index N = 6;
  INFO("C " << C << " V " << V);
  std::vector<float> x = randn(std::size_t(N * C), 41);
  const std::vector<float> dy = randn(x.size(), 42), gamma = randn(std::size_t(C), 43), beta = randn(std::size_t(C), 44),
                           dx0 = randn(x.size(), 45);
  for (Index n = 0; n < N; ++n)  // rows of different means and scales
    for (Index i = 0; i < C; ++i) x[std::size_t(n * C + i)] = float(n - 2) + float(n + 1) * x[std::size_t(n * C + i)];
  std::vector<float> y(x.size()), mean(static_cast<std::size_t>(N)), rstd(static_cast<std::size_t>(N)), dx = dx0;
  cpu::layernorm_forward(x.data(), gamma.data(), beta.data(), y.data(), mean.data(), rstd.data(), N, C);
  cpu::layernorm_backward(x.data(), gamma.data(), mean.data(), rstd.data(), dy.data(), dx.data(), nullptr, nullptr,
                          nullptr, N, C);

  std::vector<float> yw(x.size(), -7.f), meanw(static_cast<std::size_t>(N), -7.f), rstdw(static_cast<std::size_t>(N), -7.f),
      dxw = dx0;
  const float inv_c = 1.f / float(double(C)), eps = float(kernels::kLayerNormEps);
  ThreadWarp<32> warp;
  const Index c = C;
  const int v = V;
  warp.run([&](int lane, ThreadWarp<32>::Sum sum) {
    for (Index n = 0; n < N; ++n) {  // a warp's grid-stride loop over rows: every lane takes every row
      const float* xr = x.data() + n * c;
      if (v == 4) {
        kernels::layernorm_row_forward<32, 4>(xr, gamma.data(), beta.data(), yw.data() + n * c, meanw.data() + n,
                                              rstdw.data() + n, c, inv_c, eps, lane, sum);
      } else {
        kernels::layernorm_row_forward<32, 1>(xr, gamma.data(), beta.data(), yw.data() + n * c, meanw.data() + n,
                                              rstdw.data() + n, c, inv_c, eps, lane, sum);
      }
    }
  });
  warp.run([&](int lane, ThreadWarp<32>::Sum sum) {  // a second kernel, as on the GPU: μ and r written by lane 0
    for (Index n = 0; n < N; ++n) {
      const float* xr = x.data() + n * c;
      if (v == 4) {
        kernels::layernorm_row_dx<32, 4>(xr, gamma.data(), meanw[std::size_t(n)], rstdw[std::size_t(n)],
                                         dy.data() + n * c, dxw.data() + n * c, c, inv_c, lane, sum);
      } else {
        kernels::layernorm_row_dx<32, 1>(xr, gamma.data(), meanw[std::size_t(n)], rstdw[std::size_t(n)],
                                         dy.data() + n * c, dxw.data() + n * c, c, inv_c, lane, sum);
      }
    }
  });
  for (int l = 0; l < 32; ++l) CHECK(warp.mismatch[std::size_t(l)] == 0);  // every lane's sums: lane 0's bits
  // Every element written (the −7 sentinels gone) and equal to the CPU's to float rounding: the lanes add the same
  // numbers in another order.
  for (std::size_t k = 0; k < y.size(); ++k) REQUIRE(std::abs(yw[k] - y[k]) <= 2e-6f * (1 + std::abs(y[k])));
  for (std::size_t k = 0; k < dx.size(); ++k) REQUIRE(std::abs(dxw[k] - dx[k]) <= 2e-6f * (1 + std::abs(dx[k])));
  for (Index n = 0; n < N; ++n) {
    REQUIRE(std::abs(meanw[std::size_t(n)] - mean[std::size_t(n)]) <= 2e-6f * (1 + std::abs(mean[std::size_t(n)])));
    REQUIRE(std::abs(rstdw[std::size_t(n)] - rstd[std::size_t(n)]) <= 2e-6f * rstd[std::size_t(n)]);
  }
}

TEST_CASE("kernels: LayerNorm rows far from zero (mean 1e3, sd 1) against a double reference, one lane and the warp",
          "[kernels]") {
  // σ² as the mean of (x − μ)², two passes: as E[x²] − μ² it would lose every digit here (Σ x² ≈ 2e8 in float has
  // an ulp of 16, σ² is about 1). The inputs are 1000 + k/64, |k| ≤ 128: every partial sum of up to 192 of them is a
  // float exactly, so μ is the exact mean up to its rounding (two ulps of 1000: 1/192 is rounded too), x − μ is exact
  // (Sterbenz), and r and y follow the double reference to a few float roundings. C = 192: the CPU's one lane, and
  // the GPU's warp with float4 groups.
  const Index N = 4, C = 192;
  std::mt19937_64 gen(51);
  std::uniform_int_distribution<int> k(-128, 128);
  std::vector<float> x(std::size_t(N * C));
  for (auto& v : x) v = 1000.f + float(k(gen)) / 64.f;
  const std::vector<float> gamma = randn(std::size_t(C), 52), beta = randn(std::size_t(C), 53);
  const float inv_c = 1.f / float(double(C)), eps = float(kernels::kLayerNormEps);
  std::vector<float> y1(x.size()), yw(x.size()), m1(static_cast<std::size_t>(N)), r1(m1), mw(m1), rw(m1);
  for (Index n = 0; n < N; ++n)
    kernels::layernorm_row_forward(x.data() + n * C, gamma.data(), beta.data(), y1.data() + n * C, m1.data() + n,
                                   r1.data() + n, C, inv_c, eps);
  ThreadWarp<32> warp;
  warp.run([&](int lane, ThreadWarp<32>::Sum sum) {
    for (Index n = 0; n < N; ++n)
      kernels::layernorm_row_forward<32, 4>(x.data() + n * C, gamma.data(), beta.data(), yw.data() + n * C,
                                            mw.data() + n, rw.data() + n, C, inv_c, eps, lane, sum);
  });
  float em = 0, er = 0, ey = 0;
  for (Index n = 0; n < N; ++n) {
    double mu = 0, var = 0;
    for (Index i = 0; i < C; ++i) mu += x[std::size_t(n * C + i)];
    mu /= double(C);
    for (Index i = 0; i < C; ++i) var += (x[std::size_t(n * C + i)] - mu) * (x[std::size_t(n * C + i)] - mu);
    const double r = 1 / std::sqrt(var / double(C) + kernels::kLayerNormEps);
    for (const auto* out : {&y1, &yw}) {
      const bool one = out == &y1;
      const double m = (one ? m1 : mw)[std::size_t(n)];
      raise_error(em, float(std::abs(m - mu)));
      raise_error(er, float(std::abs((one ? r1 : rw)[std::size_t(n)] - r) / r));
      for (Index i = 0; i < C; ++i) {  // y from the row's own μ (checked above) and the reference r
        const std::size_t j = std::size_t(n * C + i);
        const double y = (x[j] - m) * r * gamma[std::size_t(i)] + beta[std::size_t(i)];
        raise_error(ey, float(std::abs((*out)[j] - y) / (1 + std::abs(y))));
      }
    }
  }
  INFO("largest errors: mean " << em << ", rstd (relative) " << er << ", y (relative) " << ey);
  CHECK(em <= 2 * 6.2e-5f);  // two ulps of 1000 (2^-14 each)
  CHECK(er <= 2e-6f);
  CHECK(ey <= 2e-6f);
}

TEST_CASE("kernels: the column sums in the GPU's order give cpu::colsum_accumulate's bits", "[kernels]") {
  // Rows: one short chunk, exactly one, several with a short last (32 rows each), more chunks (35) than the
  // finish's 32 lanes; columns over two of the CPU's column blocks of 64; rows strided (lda > C); out starts
  // non-zero: the sums accumulate.
  const Index N = GENERATE(Index(5), Index(32), Index(600), Index(1100)), C = 70, lda = C + 3;
  INFO("N " << N);
  const std::vector<float> a = randn(std::size_t(N * lda), 21), out0 = randn(std::size_t(C), 22);
  std::vector<float> out = out0;
  cpu::colsum_accumulate(a.data(), N, C, lda, out.data());
  // The CUDA kernels' decomposition, threads in reverse order: one per (chunk, column), then one warp per column
  // (each lane its chunks in order, then the xor-shuffle sum).
  const Index nch = (N + kernels::kColSumChunk - 1) / kernels::kColSumChunk;
  std::vector<float> part(std::size_t(nch * C), -1.f), out_gpu = out0;
  for (Index idx = nch * C - 1; idx >= 0; --idx) {
    const Index ch = idx / C, c = idx % C;
    kernels::colsum_rows<float, 1>(a.data(), lda, ch * kernels::kColSumChunk,
                                   std::min(N, (ch + 1) * kernels::kColSumChunk), c, c + 1, part.data() + idx);
  }
  constexpr int L = kernels::kReduceLanes;
  for (Index c = C - 1; c >= 0; --c) {
    std::array<double, L> v;
    for (int l = L - 1; l >= 0; --l) v[std::size_t(l)] = kernels::colsum_lane(part.data(), nch, C, c, l);
    const auto t = xor_shuffle_sum<L>(v);
    for (int l = 1; l < L; ++l) REQUIRE(t[std::size_t(l)] == t[0]);
    out_gpu[std::size_t(c)] += float(t[0]);
  }
  // colsum_finish (lane_tree_sum, the lanes one after another) gives the same bits.
  std::vector<float> out_fin = out0;
  for (Index c = 0; c < C; ++c) kernels::colsum_finish(part.data(), nch, C, c, out_fin.data());
  CHECK(out_fin == out);
  CHECK(out_gpu == out);
  for (Index c = 0; c < C; ++c) {  // and the sums themselves, in double
    double s = out0[std::size_t(c)];
    for (Index r = 0; r < N; ++r) s += a[std::size_t(r * lda + c)];
    CHECK(std::abs(out[std::size_t(c)] - s) <= 1e-4 * (1 + std::abs(s)));
  }
}

// The dropout mask against statements that do not go through liere's code: SplitMix64 written out here (Steele, Lea,
// Flood 2014; the recipe of core/rng.hpp and backend/kernels/pointwise.hpp: element i of key k is kept iff the top
// 24 bits of splitmix64(k + i·γ), over 2²⁴, are ≥ p), anchored to the generator's published outputs; the keep rate
// within a binomial bound; kept values scaled by exactly 1/(1 − p); different keys giving independent masks.
namespace {
std::uint64_t reference_splitmix64(std::uint64_t state) {  // one step of the generator whose state was `state`
  std::uint64_t z = state + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
// Element i of key k is kept iff ⌊h / 2⁴⁰⌋ ≥ p·2²⁴ with h = splitmix64(k + i·γ), in integers (p·2²⁴ is exact).
bool reference_keep(std::uint64_t key, std::uint64_t i, float p) {
  const std::uint64_t h = reference_splitmix64(key + i * 0x9E3779B97F4A7C15ull);
  return double(h >> 40) >= double(p) * 16777216.0;
}
}  // namespace

TEST_CASE("kernels: dropout_keep and the CPU dropout against SplitMix64 written out, keep rate, scaling", "[kernels]") {
  // The reference generator is SplitMix64: its first outputs from state 0 are the published ones (Vigna's
  // splitmix64.c), and key 0's hashes are that sequence.
  const std::uint64_t published[] = {0xE220A8397B1DCDAFull, 0x6E789E6AA1B965F4ull, 0x06C45D188009454Full,
                                     0xF88BB8A8724C81ECull};
  std::uint64_t state = 0;
  for (int i = 0; i < 4; ++i, state += 0x9E3779B97F4A7C15ull) {
    CHECK(reference_splitmix64(state) == published[i]);
    CHECK(hash_u64(0, std::uint64_t(i)) == published[i]);
  }

  const Index n = 1 << 18;
  const std::vector<float> x = randn(std::size_t(n), 9);
  std::vector<float> y(x.size());
  std::vector<std::uint8_t> mask(x.size());
  for (const std::uint64_t key : {std::uint64_t(0), std::uint64_t(1234), std::uint64_t(0xD1B54A32D192ED03ull),
                                  mix_seed(20261125, 3, 7)})
    for (const double p : {0.1, 0.3, 0.5, 0.9}) {
      INFO("key " << key << " p " << p);
      cpu::dropout_forward(x.data(), p, key, y.data(), mask.data(), n);
      const float pf = float(p), scale = float(1.0 / (1.0 - p));
      std::size_t kernel_differs = 0, cpu_differs = 0, badly_scaled = 0, kept = 0;
      for (Index i = 0; i < n; ++i) {
        const auto k = std::size_t(i);
        const bool ref = reference_keep(key, k, pf);
        kernel_differs += kernels::dropout_keep(key, k, pf) != ref;
        cpu_differs += mask[k] != std::uint8_t(ref);
        badly_scaled += y[k] != (ref ? x[k] * scale : 0.0f);  // kept: x/(1 − p) in float; dropped: exactly 0
        kept += mask[k];
      }
      CHECK(kernel_differs == 0);
      CHECK(cpu_differs == 0);
      CHECK(badly_scaled == 0);
      // Binomial(n, 1 − p): the kept count lies within 5 standard deviations of n(1 − p) (fails by chance with
      // probability < 1e-6 per case, and the seeds are fixed).
      const double sd = std::sqrt(double(n) * p * (1 - p));
      CHECK(std::abs(double(kept) - double(n) * (1 - p)) <= 5 * sd);
    }

  // Keys mix in: two keys' masks agree where both keep or both drop, (1 − p)² + p² of the elements for
  // independent masks (0.58 at p = 0.3), within 5 standard deviations; so do a mask and its shift by one element.
  const float p = 0.3f;
  const double agree_p = (1 - 0.3) * (1 - 0.3) + 0.3 * 0.3, sd = std::sqrt(double(n) * agree_p * (1 - agree_p));
  for (const auto& [ka, kb, shift] : {std::tuple{std::uint64_t(1234), std::uint64_t(1235), 0},
                                      std::tuple{std::uint64_t(1234), std::uint64_t(1234) ^ (std::uint64_t(1) << 40), 0},
                                      std::tuple{std::uint64_t(1234), std::uint64_t(1234), 1}}) {
    INFO("keys " << ka << " and " << kb << ", shift " << shift);
    std::size_t agree = 0;
    for (Index i = 0; i < n; ++i)
      agree += kernels::dropout_keep(ka, std::uint64_t(i), p) == kernels::dropout_keep(kb, std::uint64_t(i + shift), p);
    CHECK(std::abs(double(agree) - double(n) * agree_p) <= 5 * sd);
  }

  // p = 0 keeps everything unchanged; p = 1 drops everything.
  cpu::dropout_forward(x.data(), 0.0, 1234u, y.data(), mask.data(), n);
  CHECK(y == x);
  CHECK(std::all_of(mask.begin(), mask.end(), [](std::uint8_t m) { return m == 1; }));
  cpu::dropout_forward(x.data(), 1.0, 1234u, y.data(), mask.data(), n);
  CHECK(std::all_of(y.begin(), y.end(), [](float v) { return v == 0.0f; }));
  CHECK(std::all_of(mask.begin(), mask.end(), [](std::uint8_t m) { return m == 0; }));
}

TEST_CASE("kernels: cross_entropy rows and adam_update against plain formulas", "[kernels]") {
  const int K = 10;
  const std::vector<float> z = randn(K, 10);
  std::vector<float> p(K), d(K, 0.f);
  const float eps = 0.1f;
  const float l = kernels::cross_entropy_row_forward(z.data(), 3, eps / K, 1 - eps, p.data(), K);
  double s = 0;
  for (float v : z) s += std::exp(double(v));
  double ref = 0;
  for (int k = 0; k < K; ++k) ref -= ((k == 3 ? 1 - eps : 0) + eps / K) * (double(z[k]) - std::log(s));
  CHECK(std::abs(l - ref) <= 1e-5);
  kernels::cross_entropy_row_backward(p.data(), 3, eps / K, 1 - eps, 0.5f, d.data(), K);
  for (int k = 0; k < K; ++k) CHECK(std::abs(d[k] - 0.5 * (std::exp(double(z[k])) / s - ((k == 3 ? 1 - eps : 0) + eps / K))) <= 1e-6);

  kernels::AdamStep<float> a{};
  a.beta1 = 0.9f, a.beta2 = 0.999f, a.one_minus_beta1 = 0.1f, a.one_minus_beta2 = 0.001f, a.eps = 1e-8f;
  a.inv_bc2_sqrt = float(1 / std::sqrt(1 - 0.999)), a.step_size = float(1e-2 / (1 - 0.9));
  a.decay = 1 - 1e-2f * 0.05f, a.decoupled = true, a.has_weight_decay = true;
  float theta = 0.7f, m = 0, v = 0;
  kernels::adam_update(theta, 0.3f, m, v, a);
  const double th = 0.7 * (1 - 1e-2 * 0.05), mm = 0.1 * 0.3, vv = 0.001 * 0.09;
  CHECK(std::abs(theta - (th - 1e-2 / 0.1 * mm / (std::sqrt(vv) / std::sqrt(0.001) + 1e-8))) <= 1e-6);
}

TEST_CASE("kernels: the masked softmax row (the key mask) against the formula", "[kernels]") {
  // p_j = exp(s_j) / Σ_{k kept} exp(s_k) for kept keys, 0 for masked ones; the backward of a masked key is 0 and
  // the kept keys' follows dS_j = scale · p_j (dP_j − Σ_k dP_k p_k). The CUDA softmax kernel runs this body.
  const int T = 37;
  const std::vector<float> s = randn(T, 11), dp = randn(T, 12);
  std::vector<std::uint8_t> mask(T);
  for (int j = 0; j < T; ++j) mask[std::size_t(j)] = j % 3 != 1;
  std::vector<float> p(s.begin(), s.end());
  for (auto& v : p) v *= 3.f;
  kernels::softmax_row(p.data(), T, mask.data());
  double z = 0;
  for (int j = 0; j < T; ++j)
    if (mask[std::size_t(j)]) z += std::exp(3.0 * s[std::size_t(j)]);
  for (int j = 0; j < T; ++j) {
    INFO("key " << j);
    const double want = mask[std::size_t(j)] ? std::exp(3.0 * s[std::size_t(j)]) / z : 0.0;
    CHECK(std::abs(p[std::size_t(j)] - want) <= 1e-6 * std::max(1e-3, want));
    if (!mask[std::size_t(j)]) CHECK(p[std::size_t(j)] == 0.f);
  }
  std::vector<float> d = dp;
  kernels::softmax_row_backward(p.data(), d.data(), T, 0.25f);
  double dot = 0;
  for (int j = 0; j < T; ++j) dot += double(p[std::size_t(j)]) * dp[std::size_t(j)];
  for (int j = 0; j < T; ++j) {
    const double want = 0.25 * p[std::size_t(j)] * (dp[std::size_t(j)] - dot);
    CHECK(std::abs(d[std::size_t(j)] - want) <= 1e-6);
    if (!mask[std::size_t(j)]) CHECK(d[std::size_t(j)] == 0.f);
  }
}

TEST_CASE("kernels: softmax rows of large scores (exp overflows float without the max shift), one lane and the warp",
          "[kernels]") {
  // Scores 100 ± 40 and −300 ± 40 (a rotated q·k of large vectors): exp(s) alone overflows (> 88.7) or underflows
  // in float, exp(s − max) does not. Against p_j = exp(s_j − max) / Σ_k exp(s_k − max) in double, with a key mask.
  const int T = 197;
  std::vector<float> s = randn(std::size_t(2 * T), 18);
  for (int j = 0; j < T; ++j)
    s[std::size_t(j)] = 100.f + 10.f * s[std::size_t(j)], s[std::size_t(T + j)] = -300.f + 10.f * s[std::size_t(T + j)];
  std::vector<std::uint8_t> mask(std::size_t(2 * T));
  for (int j = 0; j < 2 * T; ++j) mask[std::size_t(j)] = j % 5 != 2;
  std::vector<float> p1 = s, pw = s;
  for (int r = 0; r < 2; ++r) kernels::softmax_row(p1.data() + r * T, T, mask.data() + r * T);
  ThreadWarp<32> warp;
  warp.run([&](int lane, ThreadWarp<32>::Sum sum) {
    const ThreadWarp<32>::Max max{sum.w, lane};
    for (int r = 0; r < 2; ++r) kernels::softmax_row<32>(pw.data() + r * T, T, mask.data() + r * T, lane, max, sum);
  });
  float e1 = 0, ew = 0;
  for (int r = 0; r < 2; ++r) {
    double mx = -INFINITY, z = 0;
    for (int j = r * T; j < (r + 1) * T; ++j)
      if (mask[std::size_t(j)]) mx = std::max(mx, double(s[std::size_t(j)]));
    for (int j = r * T; j < (r + 1) * T; ++j)
      if (mask[std::size_t(j)]) z += std::exp(double(s[std::size_t(j)]) - mx);
    for (int j = r * T; j < (r + 1) * T; ++j) {
      const double want = mask[std::size_t(j)] ? std::exp(double(s[std::size_t(j)]) - mx) / z : 0.0;
      raise_error(e1, float(std::abs(p1[std::size_t(j)] - want) / std::max(1e-3, want)));
      raise_error(ew, float(std::abs(pw[std::size_t(j)] - want) / std::max(1e-3, want)));
    }
  }
  INFO("largest errors: one lane " << e1 << ", warp " << ew);
  CHECK(e1 <= 1e-6f);  // relative to p (or to 1e-3 for the smallest): a few float roundings
  CHECK(ew <= 1e-6f);
}

TEST_CASE("cuda::blas_int: a size outside cuBLAS's int range is an error naming the dimension", "[kernels][cuda]") {
  // Host code of the CUDA backend (backend/cuda/blas_int.hpp), checked on every machine.
  CHECK(cuda::blas_int(0, "op", "N") == 0);
  CHECK(cuda::blas_int(Index(INT_MAX), "op", "N") == INT_MAX);
  CHECK_THROWS_WITH(cuda::blas_int(Index(INT_MAX) + 1, "linear on cuda", "N (rows)"),
                    Catch::Contains("linear on cuda: N (rows) = 2147483648 is outside cuBLAS's int range") &&
                        Catch::Contains("lower the batch size"));
  CHECK_THROWS_WITH(cuda::blas_int(-1, "cuda::gemm", "lda"), Catch::Contains("cuda::gemm: lda = -1"));
}

#ifdef LIERE_WITH_CUDA
TEST_CASE("cuda::SeamOps::attention_call: the views as pointer lists, every backend's checks and the CUDA limits",
          "[kernels][cuda]") {
  // Host code of the CUDA seam (backend/cuda/ops.hpp): no device needed.
  const AttentionShape s{2, 5, 3, 8};
  const std::int64_t ld = 3 * 3 * 8;
  const std::vector<float> qkv(std::size_t(s.batch) * s.tokens * ld), t4(std::size_t(4) * 2 * 4 * 4),
      t8(std::size_t(4) * 1 * 8 * 8), p(64);
  AttentionRotations<float> rot;
  rot.first_rotated = 1;  // 4 rotated tokens, tables shared by the batch
  rot.heads = {{{t4.data(), 4, 8, 4}, nullptr}, {{}, p.data()}, {{t4.data(), 4, 8, 4}, p.data()}};
  const std::vector<std::uint8_t> mask(std::size_t(s.batch) * s.tokens, 1);
  const float* q = qkv.data();
  const cuda::AttentionCall a = cuda::SeamOps::attention_call(s, q, q + 24, q + 48, ld, rot, mask);
  CHECK(a.tables == std::vector<const float*>{t4.data(), nullptr, t4.data()});
  CHECK(a.transforms == std::vector<const float*>{nullptr, p.data(), p.data()});
  CHECK((a.block == 4 && a.table_tokens == 4 && a.first_rotated == 1 && a.ld == ld && a.key_mask == mask.data()));
  CHECK((a.q == q && a.k == q + 24 && a.v == q + 48));
  // The checks every backend makes (backend/types.hpp), with the CPU's messages.
  CHECK_THROWS_WITH(cuda::SeamOps::attention_call(s, q, q, q, 23, rot, mask), Catch::Contains("token stride 23"));
  CHECK_THROWS_WITH(cuda::SeamOps::attention_call(s, q, q, q, ld, rot, std::span(mask).first(3)),
                    Catch::Contains("the key mask has 3 entries, expected B x T = 2 x 5 = 10"));
  AttentionRotations<float> two = rot;
  two.heads.pop_back();
  CHECK_THROWS_WITH(cuda::SeamOps::attention_call(s, q, q, q, ld, two, {}),
                    Catch::Contains("2 head rotations for 3 heads"));
  // The CUDA backend's own: one block size for every table, at most kMaxHeads heads.
  AttentionRotations<float> mixed = rot;
  mixed.heads[2].table = {t8.data(), 4, 8, 8};
  CHECK_THROWS_WITH(cuda::SeamOps::attention_call(s, q, q, q, ld, mixed, {}),
                    Catch::Contains("every head's table must have the same block size"));
  const AttentionShape wide{1, 2, cuda::kMaxHeads + 1, 2};
  CHECK_THROWS_WITH(cuda::SeamOps::attention_call(wide, q, q, q, 2 * (cuda::kMaxHeads + 1), {}, {}),
                    Catch::Contains("at most 64 heads"));
}

TEST_CASE("cuda::CudnnAttention: cuDNN accepts the SDPA operations' descriptors, without a device",
          "[kernels][cuda][needs-cudnn]") {
  // cudnnBackendFinalize checks each tensor's and each operation's attributes (types, counts, the tensors an
  // operation needs) on the host; only the operation graph and the plans need a device (test_cuda).
  std::string why;
  if (!cuda::cudnn_loaded(&why)) LIERE_SKIP("cuDNN's descriptors not checked: " << why);
  CHECK(cuda::cudnn_version().rfind("9.", 0) == 0);
  using S = cuda::CudnnAttentionShape;
  for (const Precision h : {Precision::bf16, Precision::fp16})
    for (const S s : {S{128, 3, 65, 64}, S{8, 3, 1025, 64}, S{2, 12, 4097, 128}, S{1, 1, 1, 8}}) {
      INFO(to_string(h) << " B " << s.B << " H " << s.H << " T " << s.T << " D " << s.D);
      CHECK_NOTHROW(cuda::cudnn_attention_check_descriptors(s, h, true));
    }
  // liere's own checks, before cuDNN sees the shape.
  CHECK_THROWS_WITH(cuda::cudnn_attention_check_descriptors(S{2, 3, 65, 60}, Precision::bf16, false),
                    Catch::Contains("multiple of 8 in [8, 256] (got 60)"));
  CHECK_THROWS_WITH(cuda::cudnn_attention_check_descriptors(S{2, 3, 65, 264}, Precision::bf16, false),
                    Catch::Contains("(got 264)"));
  CHECK_THROWS_WITH(cuda::cudnn_attention_check_descriptors(S{2, 0, 65, 64}, Precision::fp16, true),
                    Catch::Contains("at least 1 (got B 2, H 0, T 65)"));
  CHECK_THROWS_WITH(cuda::cudnn_attention_check_descriptors(S{2, 3, 65, 64}, Precision::fp32, false),
                    Catch::Contains("the type must be bf16 or fp16 (got fp32)"));
  if (cuda::device_count() == 0)
    CHECK_THROWS_WITH(cuda::CudnnAttention(S{2, 3, 65, 64}, Precision::bf16, 0.125f),
                      Catch::Contains("cuDNN attention needs a CUDA device"));
}
#endif
