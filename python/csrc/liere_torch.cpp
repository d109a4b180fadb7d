// python/csrc/liere_torch.cpp — liere's so(n) exponential and LieRE rotation tables as PyTorch operators.
//
//   torch.ops.liere.so_exp(X)                       X (…, b, b) skew-symmetric → exp(X) (…, b, b)
//   torch.ops.liere.rotation_tables(bases, pos)     bases (d, *S, b, b) skew, pos (*P, d)
//                                                   → R (*P, *S, b, b) = exp(Σ_i pos[…, i] · bases[i])
//   torch.ops.liere.torch_version()                 the libtorch version this library was compiled against
//   torch.ops.liere.liere_version()                 liere's version
//
// Both maps run liere's code (lie/exp.hpp): the exponential in double (closed forms for b = 2, 3, scaling and
// squaring of the degree-18 Taylor polynomial otherwise, with the skew-symmetric scaling), and the backward as
// the adjoint of the algorithm's own Fréchet derivative, L(Aᵀ, dR), in the precision of the input; for even
// b ≥ 32 the spectral path (lie/skew_schur.hpp: the real Schur form in double, kSchurLanes matrices decomposed at
// once, its Q and σ saved for a backward of four products). Nothing of torch's matrix_exp is used.
//
// The functions are maps on so(n): an input is read through its skew-symmetric part skew(X) = (X − Xᵀ)/2 (after
// a check that it is skew to a stated tolerance), so the gradient of a raw input is skew(L). For any input
// built skew-symmetric (W − Wᵀ, the official LieRE parametrisation) the chain rule gives the same parameter
// gradient as torch.matrix_exp's.
//
// rotation_tables keeps nothing for the backward but its two inputs (and Q, σ at b ≥ 32): each A(p) = Σ_i p_i B_i is formed again
// per (position, set) in the backward; the gradients are dB_i = skew(Σ_p p_i L_p) and dp_i = Σ_S ⟨L_p, B_i⟩,
// two matrix products over the adjoints L_p (one buffer of the output's size, freed at the end of the backward).
//
// Dimension letters: d position axes, S the set shape (e.g. layers × blocks), P the position shape, b the block.
//
// CPU tensors only: Debian's libtorch has no CUDA, and liere's CUDA backend has no so(n) exponential; a CUDA
// tensor gets an error that says so.
#include <liere/backend/cpu/rotation_table.hpp>
#include <liere/backend/kernels/matrix_exp.hpp>
#include <liere/backend/position_classes.hpp>
#include <liere/core/config.hpp>
#include <liere/lie/exp.hpp>
#include <liere/lie/skew_schur.hpp>

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>
#include <torch/version.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

namespace liere_torch {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Skew-symmetry tolerance: max|X + Xᵀ| ≤ tol · max(1, max|X|), tol = 1e-5 for float32, 1e-10 for float64 (about
// 100 and 5e5 units in the last place: room for a skew matrix computed in floating point, e.g. a logarithm,
// while a matrix that is not skew-symmetric is refused).
double skew_tolerance(at::ScalarType t) { return t == at::kFloat ? 1e-5 : 1e-10; }

// Compile-time sizes for the small blocks liere compiles fixed-size kernels for (registers, unrolled loops);
// every other b (5…7, 9…15, 17…64, more) runs on dynamic matrices, whose exp/exp_backward instances are
// liere::compiled's (lie/lie.cpp, compiled into this library).
template <class F>
void dispatch_size(std::int64_t b, F&& f) {
  switch (b) {
    case 2: return f(std::integral_constant<int, 2>{});
    case 3: return f(std::integral_constant<int, 3>{});
    case 4: return f(std::integral_constant<int, 4>{});
    case 8: return f(std::integral_constant<int, 8>{});
    case 16: return f(std::integral_constant<int, 16>{});
    default: return f(std::integral_constant<int, Eigen::Dynamic>{});
  }
}

// float32 precision mode (torch.ops.liere.set_float32_exp): "float" (the default) runs the engine's float kernels
// (backend/kernels/matrix_exp.hpp, the bodies of the backend's rotation-table op) where they are faster than the
// double path: T18 scaling and squaring in float with the Newton–Schulz finish (kFloatPolish steps, as the backend
// op) for b = 16, 32, 64, products by Eigen's fixed-size code at 16 and by the GEMM library (cpu/gemm.hpp: oneDNN
// where it loads, else Eigen) at 32 and 64; and the kernel's float Fréchet derivative for the backward at b = 64.
// Measured (2026-11-25, one thread): the float forward is 1.2× (b 16) to 1.8× (b 64) the double one, the kernel
// backward 1.1× liere::exp_backward at 64 and no faster below, and at b = 4, 8 the double forward is as fast.
// Orthogonality stays ≤ 4.5e-7 (docs/math.md); the values are those of a float computation (within about
// 8·u·‖A‖₂ of exp(A), as torch.matrix_exp's float32), not the rounding of the exact rotation. "double" runs every
// float32 exponential in double and rounds once (the rounding of the exact rotation; 1.8× slower at b = 64).
std::atomic<bool> g_float32_exp_double{false};

bool float_forward_kernel(std::int64_t b) {
  return (b == 16 || b == 32 || b == 64) && !g_float32_exp_double.load(std::memory_order_relaxed);
}
bool float_backward_kernel(std::int64_t b) { return b == 64; }

template <class F>
void dispatch_float_kernel(std::int64_t b, F&& f) {
  switch (b) {
    case 16: return f(std::integral_constant<int, 16>{});
    case 32: return f(std::integral_constant<int, 32>{});
    case 64: return f(std::integral_constant<int, 64>{});
    default: TORCH_CHECK(false, "liere: no float kernel for block size ", b);
  }
}
template <int N>
using FloatMul = liere::cpu::detail::TableMul<N>;
constexpr int kFloatPolish = liere::cpu::detail::kTablePolish<float>;

template <class T, int N>
using Mat = Eigen::Matrix<T, N, N>;
template <class T, int N>
using RowMap = Eigen::Map<Eigen::Matrix<T, N, N, Eigen::RowMajor>, Eigen::Unaligned>;
template <class T, int N>
using ConstRowMap = Eigen::Map<const Eigen::Matrix<T, N, N, Eigen::RowMajor>, Eigen::Unaligned>;

// Parallel chunk sizes: about 32k multiply-adds of exp work per task.
std::int64_t grain_for(std::int64_t b) { return std::max<std::int64_t>(1, 32768 / (b * b * b + 1)); }

// ---- The spectral path (lie/skew_schur.hpp), for even b from 32 to kSchurMaxN, float32 and float64 ----------------
// Forward: A in double, its real Schur form A = Q Θ Qᵀ, exp(A) = Q diag(Rot(σ)) Qᵀ rounded once to the dtype; Q (in
// the dtype) and σ (double, b/2 per matrix) are saved for the backward, which is four products in the dtype:
// L(Aᵀ, G) = Q 𝓛(Qᵀ G Q) Qᵀ (backend/cpu/rotation_table.hpp's schur_adjoint, the GEMM library). A matrix whose
// decomposition fails (non-finite input) takes liere::exp / exp_backward and is marked by σ[0] = NaN.
// LIERE_TABLE_METHOD=polynomial (liere::cpu::set_rotation_table_method) turns it off, for comparisons.
bool spectral_size(std::int64_t b) {
  return b >= 32 && b % 2 == 0 && b <= liere::kSchurMaxN &&
         liere::cpu::rotation_table_method() != liere::cpu::TableMethod::Polynomial;
}

// Per-thread buffers of kSchurLanes spectral exponentials of size b (doubles): the generators, Q, σ, R.
struct SpectralBuffers {
  static constexpr int L = liere::kSchurLanes;
  std::int64_t b;
  std::vector<double> a, q, sigma, r, work;
  explicit SpectralBuffers(std::int64_t b_)
      : b(b_), a(std::size_t(L * b * b)), q(std::size_t(L * b * b)), sigma(std::size_t(L * b)), r(std::size_t(b * b)),
        work(std::max(liere::skew_schur_batch_work(int(b)), liere::skew_schur_work(int(b)) + std::size_t(b * b))) {}
  double* generator(int j) { return a.data() + std::size_t(j) * std::size_t(b * b); }
};

// For j < count: r_j = exp(a_j) (buf.generator(j): b×b row-major double, skew), q_j (b×b, T) and sigma_j (b/2) for
// the backward. The count ≤ kSchurLanes matrices are decomposed together (skew_schur_batch; one by one with
// skew_schur under LIERE_TABLE_METHOD=spectral-single).
template <class T>
void spectral_exp_group(int count, SpectralBuffers& buf, T* const* r, T* const* q_out, double* const* sigma_out) {
  constexpr int L = SpectralBuffers::L;
  const int n = int(buf.b);
  const std::int64_t bb = buf.b * buf.b;
  const double* ap[L];
  double *qp[L], *sp[L];
  bool ok[L];
  for (int j = 0; j < L; ++j) {
    ap[j] = buf.generator(j);
    qp[j] = buf.q.data() + std::size_t(j) * std::size_t(bb);
    sp[j] = buf.sigma.data() + std::size_t(j) * std::size_t(n);
  }
  if (liere::cpu::rotation_table_method() == liere::cpu::TableMethod::SpectralSingle) {
    for (int j = 0; j < count; ++j) ok[j] = liere::skew_schur(ap[j], n, qp[j], sp[j], buf.work.data());
  } else {
    liere::skew_schur_batch(ap, count, n, qp, sp, ok, buf.work.data());
  }
  for (int j = 0; j < count; ++j) {
    if (ok[j]) {
      liere::skew_schur_exp(qp[j], sp[j], n, buf.r.data(), buf.work.data());
      for (std::int64_t e = 0; e < bb; ++e) {
        r[j][e] = T(buf.r[std::size_t(e)]);
        q_out[j][e] = T(qp[j][e]);
      }
      for (int e = 0; e < n / 2; ++e) sigma_out[j][e] = sp[j][e];
      continue;
    }
    using Dyn = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    const Dyn ad = Eigen::Map<const Dyn>(ap[j], n, n);
    const Dyn ex = liere::exp(Eigen::MatrixXd(ad));
    for (std::int64_t e = 0; e < bb; ++e) r[j][e] = T(ex.data()[e]);
    sigma_out[j][0] = std::numeric_limits<double>::quiet_NaN();
  }
}

// l = L(Aᵀ, g) from the saved Q and σ (σ[0] NaN: liere::exp_backward at a = A, given in T); all b×b row-major.
template <class T>
void spectral_adjoint(const T* q, const double* sigma, const T* a, const T* g, T* l, std::int64_t b,
                      std::vector<T>& work, std::vector<double>& half) {
  const int n = int(b);
  if (!(sigma[0] == sigma[0])) {
    using Dyn = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    Dyn lm = Dyn::Zero(n, n);
    liere::exp_backward(Dyn(Eigen::Map<const Dyn>(a, n, n)), Dyn(Eigen::Map<const Dyn>(g, n, n)), lm);
    Eigen::Map<Dyn>(l, n, n) = lm;
    return;
  }
  work.resize(std::size_t(2 * b * b));
  half.resize(std::size_t(b));
  liere::cpu::detail::schur_adjoint<T>(n, q, sigma, g, l, work.data(), half.data());
}

std::string shape_text(const at::Tensor& t) {
  std::ostringstream s;
  s << t.sizes();
  return s.str();
}

// Device, layout and dtype of one input.
void check_tensor(const at::Tensor& t, const char* op, const char* name, const char* shape_doc) {
  TORCH_CHECK(t.defined(), "liere.", op, ": ", name, " is undefined; expected a tensor of shape ", shape_doc);
  TORCH_CHECK(!t.is_cuda(), "liere.", op, ": ", name,
              " is a CUDA tensor; this liere_torch build runs on the CPU only (the libtorch it was built against "
              "has no CUDA, and liere's CUDA backend has no so(n) exponential): move it to the CPU with .cpu()");
  TORCH_CHECK(t.device().is_cpu(), "liere.", op, ": ", name, " is on device ", t.device(),
              "; expected a CPU tensor");
  TORCH_CHECK(t.layout() == at::kStrided, "liere.", op, ": ", name, " has layout ", t.layout(),
              "; expected a dense (strided) tensor");
  TORCH_CHECK(t.scalar_type() == at::kFloat || t.scalar_type() == at::kDouble, "liere.", op, ": ", name,
              " has dtype ", t.scalar_type(), "; expected float32 or float64");
}

// The skew-symmetry check on the last two dimensions, with the worst matrix's batch index in the message.
void check_skew(const at::Tensor& x, const char* op, const char* name) {
  if (x.numel() == 0) return;
  const at::Tensor asym = (x + x.transpose(-1, -2)).abs().reshape({-1, x.size(-1) * x.size(-1)}).amax(1);
  const std::int64_t worst = asym.argmax().item<std::int64_t>();
  const double dev = asym[worst].item<double>(), big = x.abs().max().item<double>();
  const double tol = skew_tolerance(x.scalar_type()), bound = tol * std::max(1.0, big);
  if (!(dev > bound)) return;  // NaN passes here and gives NaN rotations (liere's exp), as documented
  std::ostringstream where;
  if (x.dim() > 2) {
    std::int64_t rest = worst;
    std::vector<std::int64_t> idx(x.dim() - 2);
    for (std::int64_t i = x.dim() - 3; i >= 0; --i) {
      idx[i] = rest % x.size(i);
      rest /= x.size(i);
    }
    where << " (worst at index " << at::IntArrayRef(idx) << ")";
  }
  TORCH_CHECK(false, "liere.", op, ": ", name, " is not skew-symmetric: max |X + X^T| = ", dev, where.str(),
              " exceeds the tolerance ", tol, " * max(1, max|X|) = ", bound, " for ", x.scalar_type(),
              "; expected X^T = -X (build it as W - W^T; torch.matrix_exp takes general matrices)");
}

// ---- so_exp -------------------------------------------------------------------------------------------------

// R = exp(skew(X)) for each of the n matrices; X, R (n, b, b) contiguous.
template <class T>
void so_exp_forward(const T* x, T* r, std::int64_t n, std::int64_t b, T* q = nullptr, double* sigma = nullptr) {
  if (q && spectral_size(b)) {
    constexpr std::int64_t L = liere::kSchurLanes;
    at::parallel_for(0, (n + L - 1) / L, 1, [&](std::int64_t begin, std::int64_t end) {  // groups of L matrices
      SpectralBuffers buf(b);
      T *rp[L], *qp[L];
      double* sp[L];
      for (std::int64_t gi = begin; gi < end; ++gi) {
        const int count = int(std::min(L, n - gi * L));
        for (int j = 0; j < count; ++j) {
          const std::int64_t i = gi * L + j;
          const T* xi = x + i * b * b;
          double* a = buf.generator(j);
          for (std::int64_t u = 0; u < b; ++u)
            for (std::int64_t v = 0; v < b; ++v)
              a[std::size_t(u * b + v)] = 0.5 * (double(xi[u * b + v]) - double(xi[v * b + u]));
          rp[j] = r + i * b * b;
          qp[j] = q + i * b * b;
          sp[j] = sigma + i * (b / 2);
        }
        spectral_exp_group<T>(count, buf, rp, qp, sp);
      }
    });
    return;
  }
  if constexpr (std::is_same_v<T, float>) {
    if (float_forward_kernel(b)) return dispatch_float_kernel(b, [&](auto nc) {
      constexpr int N = decltype(nc)::value, NN = N * N;
      at::parallel_for(0, n, grain_for(b), [&](std::int64_t begin, std::int64_t end) {
        std::vector<float> buf(std::size_t(NN) * (liere::kernels::kExpWork + 1));
        float *a = buf.data(), *work = a + NN;
        for (std::int64_t i = begin; i < end; ++i) {
          const float* xi = x + i * NN;
          for (int u = 0; u < N; ++u)
            for (int v = 0; v < N; ++v) a[u * N + v] = 0.5f * (xi[u * N + v] - xi[v * N + u]);
          liere::kernels::expm_skew<N, float, FloatMul<N>>(a, r + i * NN, work, kFloatPolish);
        }
      });
    });
  }
  dispatch_size(b, [&](auto nc) {
    constexpr int N = decltype(nc)::value;
    at::parallel_for(0, n, grain_for(b), [&](std::int64_t begin, std::int64_t end) {
      Mat<double, N> s(b, b);
      for (std::int64_t i = begin; i < end; ++i) {
        const ConstRowMap<T, N> xi(x + i * b * b, b, b);
        s = (xi.template cast<double>() - xi.transpose().template cast<double>()) * 0.5;
        RowMap<T, N>(r + i * b * b, b, b) = liere::exp(s).template cast<T>();
      }
    });
  });
}

// dX = skew(L(skew(X)ᵀ, dR)) for each matrix, in the precision T (liere's exp_backward); all (n, b, b).
template <class T>
void so_exp_backward(const T* x, const T* dr, T* dx, std::int64_t n, std::int64_t b, const T* q = nullptr,
                     const double* sigma = nullptr) {
  if (q && spectral_size(b)) {
    at::parallel_for(0, n, grain_for(b), [&](std::int64_t begin, std::int64_t end) {
      std::vector<T> a(static_cast<std::size_t>(b * b)), l(static_cast<std::size_t>(b * b)), work;
      std::vector<double> half;
      for (std::int64_t i = begin; i < end; ++i) {
        const T* xi = x + i * b * b;
        if (!(sigma[i * (b / 2)] == sigma[i * (b / 2)]))  // no Schur form: the polynomial adjoint needs skew(X)
          for (std::int64_t u = 0; u < b; ++u)
            for (std::int64_t v = 0; v < b; ++v) a[std::size_t(u * b + v)] = T(0.5) * (xi[u * b + v] - xi[v * b + u]);
        spectral_adjoint<T>(q + i * b * b, sigma + i * (b / 2), a.data(), dr + i * b * b, l.data(), b, work, half);
        T* dxi = dx + i * b * b;
        for (std::int64_t u = 0; u < b; ++u)
          for (std::int64_t v = 0; v < b; ++v)
            dxi[u * b + v] = T(0.5) * (l[std::size_t(u * b + v)] - l[std::size_t(v * b + u)]);
      }
    });
    return;
  }
  if constexpr (std::is_same_v<T, float>) {
    if (float_backward_kernel(b)) return dispatch_float_kernel(b, [&](auto nc) {
      constexpr int N = decltype(nc)::value, NN = N * N;
      at::parallel_for(0, n, grain_for(b), [&](std::int64_t begin, std::int64_t end) {
        std::vector<float> buf(std::size_t(NN) * (liere::kernels::kFrechetWork + 3));
        float *a_t = buf.data(), *r = a_t + NN, *l = r + NN, *work = l + NN;
        for (std::int64_t i = begin; i < end; ++i) {
          const float* xi = x + i * NN;
          for (int u = 0; u < N; ++u)
            for (int v = 0; v < N; ++v) a_t[u * N + v] = 0.5f * (xi[v * N + u] - xi[u * N + v]);  // skew(X)ᵀ
          liere::kernels::expm_frechet_skew<N, float, FloatMul<N>>(a_t, dr + i * NN, r, l, work);
          float* dxi = dx + i * NN;
          for (int u = 0; u < N; ++u)
            for (int v = 0; v < N; ++v) dxi[u * N + v] = 0.5f * (l[u * N + v] - l[v * N + u]);
        }
      });
    });
  }
  dispatch_size(b, [&](auto nc) {
    constexpr int N = decltype(nc)::value;
    at::parallel_for(0, n, grain_for(b), [&](std::int64_t begin, std::int64_t end) {
      Mat<T, N> s(b, b), g(b, b), l(b, b);
      for (std::int64_t i = begin; i < end; ++i) {
        const ConstRowMap<T, N> xi(x + i * b * b, b, b);
        s = (xi - xi.transpose()) * T(0.5);
        g = ConstRowMap<T, N>(dr + i * b * b, b, b);
        l.setZero(b, b);
        liere::exp_backward(s, g, l);
        RowMap<T, N>(dx + i * b * b, b, b) = (l - l.transpose()) * T(0.5);
      }
    });
  });
}

void check_so_exp_input(const at::Tensor& x) {
  check_tensor(x, "so_exp", "X", "(..., b, b)");
  TORCH_CHECK(x.dim() >= 2, "liere.so_exp: X has shape ", shape_text(x),
              "; expected (..., b, b), at least two dimensions");
  TORCH_CHECK(x.size(-1) == x.size(-2), "liere.so_exp: X has shape ", shape_text(x),
              "; expected square matrices (..., b, b), got ", x.size(-2), " x ", x.size(-1));
  check_skew(x, "so_exp", "X");
}

class SoExp : public torch::autograd::Function<SoExp> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x_in) {
    const at::Tensor x = x_in.contiguous();
    at::Tensor r = at::empty_like(x);
    const std::int64_t b = x.size(-1), n = b == 0 ? 0 : x.numel() / (b * b);
    if (spectral_size(b)) {  // Q and σ for the backward
      at::Tensor q = at::empty_like(x), sigma = at::empty({n, b / 2}, x.options().dtype(at::kDouble));
      AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "liere.so_exp", [&] {
        so_exp_forward<scalar_t>(x.data_ptr<scalar_t>(), r.data_ptr<scalar_t>(), n, b, q.data_ptr<scalar_t>(),
                                 sigma.data_ptr<double>());
      });
      ctx->save_for_backward({x, q, sigma});
      return r;
    }
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "liere.so_exp", [&] {
      so_exp_forward<scalar_t>(x.data_ptr<scalar_t>(), r.data_ptr<scalar_t>(), n, b);
    });
    ctx->save_for_backward({x});
    return r;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    if (!grads[0].defined()) return {at::Tensor()};
    const at::Tensor dr = grads[0].to(x.scalar_type()).contiguous();
    at::Tensor dx = at::empty_like(x);
    const std::int64_t b = x.size(-1), n = b == 0 ? 0 : x.numel() / (b * b);
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "liere.so_exp backward", [&] {
      if (saved.size() == 3)
        so_exp_backward<scalar_t>(x.data_ptr<scalar_t>(), dr.data_ptr<scalar_t>(), dx.data_ptr<scalar_t>(), n, b,
                                  saved[1].data_ptr<scalar_t>(), saved[2].data_ptr<double>());
      else
        so_exp_backward<scalar_t>(x.data_ptr<scalar_t>(), dr.data_ptr<scalar_t>(), dx.data_ptr<scalar_t>(), n, b);
    });
    return {dx};
  }
};

at::Tensor so_exp(const at::Tensor& x) {
  check_so_exp_input(x);
  return SoExp::apply(x);
}

// ---- rotation_tables ----------------------------------------------------------------------------------------

// R[t, s] = exp(Σ_i p[t, i] · skew(B[i, s])).  B (d, ns, b, b), p (np, d), R (np, ns, b, b); all contiguous.
// With q, sigma (spectral sizes): the spectral path, Q (np, ns, b, b) and σ (np, ns, b/2) kept for the backward.
template <class T>
void tables_forward(const T* bases, const T* pos, T* r, std::int64_t d, std::int64_t ns, std::int64_t np,
                    std::int64_t b, T* q = nullptr, double* sigma = nullptr) {
  const std::int64_t bb = b * b;
  // skew(B) in double, once: (d, ns, b, b) row-major
  std::vector<double> s(std::size_t(d * ns * bb));
  for (std::int64_t j = 0; j < d * ns; ++j)
    for (std::int64_t u = 0; u < b; ++u)
      for (std::int64_t v = 0; v < b; ++v)
        s[j * bb + u * b + v] = 0.5 * (double(bases[j * bb + u * b + v]) - double(bases[j * bb + v * b + u]));
  if (q && spectral_size(b)) {
    // One decomposition per (class, set): positions that are exact positive multiples of one another (p_t = c·p_r)
    // share A(p_r)'s Schur form with their angles times c (backend/position_classes.hpp); every position keeps its
    // own Q, σ for the backward.
    constexpr std::int64_t L = liere::kSchurLanes;
    const liere::PositionClasses pc = liere::position_classes(pos, int(np), int(d));
    const std::int64_t nm = std::int64_t(pc.num_classes()) * ns;
    const auto form = [&](std::int64_t t, std::int64_t k, double* ad) {  // A(p_t) of set k in double
      std::fill(ad, ad + bb, 0.0);
      for (std::int64_t i = 0; i < d; ++i) {
        const double p = double(pos[t * d + i]);
        const double* si = s.data() + (i * ns + k) * bb;
        for (std::int64_t e = 0; e < bb; ++e) ad[e] += p * si[e];
      }
    };
    at::parallel_for(0, (nm + L - 1) / L, 1, [&](std::int64_t begin, std::int64_t end) {  // groups of L tables
      SpectralBuffers buf(b);
      T *rp[L], *qp[L];
      double* sp[L];
      std::vector<double> scaled(std::size_t(b / 2));
      for (std::int64_t gi = begin; gi < end; ++gi) {
        const int count = int(std::min(L, nm - gi * L));
        for (int j = 0; j < count; ++j) {
          const std::int64_t c = (gi * L + j) / ns, k = (gi * L + j) % ns, w = pc.rep[std::size_t(c)] * ns + k;
          form(pc.rep[std::size_t(c)], k, buf.generator(j));
          rp[j] = r + w * bb;
          qp[j] = q + w * bb;
          sp[j] = sigma + w * (b / 2);
        }
        spectral_exp_group<T>(count, buf, rp, qp, sp);
        for (int j = 0; j < count; ++j) {  // the other rows of each class (buf.q still holds its Q in double)
          const std::int64_t c = (gi * L + j) / ns, k = (gi * L + j) % ns;
          for (int m = pc.start[std::size_t(c)] + 1; m < pc.start[std::size_t(c) + 1]; ++m) {
            const std::int64_t t = pc.members[std::size_t(m)], w = t * ns + k;
            T* rt = r + w * bb;
            double* st = sigma + w * (b / 2);
            if (!(sp[j][0] == sp[j][0])) {  // the class's decomposition failed: each row by liere::exp, marked
              using Dyn = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
              form(t, k, buf.generator(j));
              const Dyn ex = liere::exp(Eigen::MatrixXd(Eigen::Map<const Dyn>(buf.generator(j), b, b)));
              for (std::int64_t e = 0; e < bb; ++e) rt[e] = T(ex.data()[e]);
              st[0] = std::numeric_limits<double>::quiet_NaN();
              continue;
            }
            const double ct = pc.scale[std::size_t(t)];
            for (std::int64_t e = 0; e < b / 2; ++e) st[e] = scaled[std::size_t(e)] = ct * sp[j][e];
            liere::skew_schur_exp(buf.q.data() + std::size_t(j) * std::size_t(bb), scaled.data(), int(b),
                                  buf.r.data(), buf.work.data());
            for (std::int64_t e = 0; e < bb; ++e) rt[e] = T(buf.r[std::size_t(e)]);
            std::copy(qp[j], qp[j] + bb, q + w * bb);
          }
        }
      }
    });
    return;
  }
  if constexpr (std::is_same_v<T, float>) {
    if (float_forward_kernel(b)) return dispatch_float_kernel(b, [&](auto nc) {
      constexpr int N = decltype(nc)::value, NN = N * N;
      at::parallel_for(0, np * ns, grain_for(b), [&](std::int64_t begin, std::int64_t end) {
        std::vector<float> buf(std::size_t(NN) * (liere::kernels::kExpWork + 1));
        std::vector<double> ad(static_cast<std::size_t>(NN));
        float *a = buf.data(), *work = a + NN;
        for (std::int64_t w = begin; w < end; ++w) {
          const std::int64_t t = w / ns, k = w % ns;
          std::fill(ad.begin(), ad.end(), 0.0);  // A in double, rounded once
          for (std::int64_t i = 0; i < d; ++i) {
            const double p = double(pos[t * d + i]);
            const double* si = s.data() + (i * ns + k) * bb;
            for (int q = 0; q < NN; ++q) ad[std::size_t(q)] += p * si[q];
          }
          for (int q = 0; q < NN; ++q) a[q] = float(ad[std::size_t(q)]);
          liere::kernels::expm_skew<N, float, FloatMul<N>>(a, r + w * bb, work, kFloatPolish);
        }
      });
    });
  }
  dispatch_size(b, [&](auto nc) {
    constexpr int N = decltype(nc)::value;
    at::parallel_for(0, np * ns, grain_for(b), [&](std::int64_t begin, std::int64_t end) {
      Mat<double, N> a(b, b);
      for (std::int64_t w = begin; w < end; ++w) {
        const std::int64_t t = w / ns, k = w % ns;
        a.setZero(b, b);
        for (std::int64_t i = 0; i < d; ++i)
          a += double(pos[t * d + i]) * ConstRowMap<double, N>(s.data() + (i * ns + k) * bb, b, b);
        RowMap<T, N>(r + w * bb, b, b) = liere::exp(a).template cast<T>();
      }
    });
  });
}

// L[t, s] = L(A(p_t, s)ᵀ, dR[t, s]) (the gradient with respect to A), in the precision T; S = skew(B) in T.
// With q, sigma: from the forward's Schur forms (spectral sizes).
template <class T>
void tables_adjoints(const T* skew_bases, const T* pos, const T* dr, T* l_out, std::int64_t d, std::int64_t ns,
                     std::int64_t np, std::int64_t b, const T* q = nullptr, const double* sigma = nullptr) {
  const std::int64_t bb = b * b;
  if (q && spectral_size(b)) {
    at::parallel_for(0, np * ns, 1, [&](std::int64_t begin, std::int64_t end) {
      std::vector<T> a(static_cast<std::size_t>(bb)), work;
      std::vector<double> half;
      for (std::int64_t w = begin; w < end; ++w) {
        const std::int64_t t = w / ns, k = w % ns;
        if (!(sigma[w * (b / 2)] == sigma[w * (b / 2)])) {  // no Schur form: A for the polynomial adjoint
          std::fill(a.begin(), a.end(), T(0));
          for (std::int64_t i = 0; i < d; ++i) {
            const T p = pos[t * d + i];
            const T* si = skew_bases + (i * ns + k) * bb;
            for (std::int64_t e = 0; e < bb; ++e) a[std::size_t(e)] += p * si[e];
          }
        }
        spectral_adjoint<T>(q + w * bb, sigma + w * (b / 2), a.data(), dr + w * bb, l_out + w * bb, b, work, half);
      }
    });
    return;
  }
  if constexpr (std::is_same_v<T, float>) {
    if (float_backward_kernel(b)) return dispatch_float_kernel(b, [&](auto nc) {
      constexpr int N = decltype(nc)::value, NN = N * N;
      at::parallel_for(0, np * ns, grain_for(b), [&](std::int64_t begin, std::int64_t end) {
        std::vector<float> buf(std::size_t(NN) * (liere::kernels::kFrechetWork + 2));
        float *a_t = buf.data(), *r = a_t + NN, *work = r + NN;
        for (std::int64_t w = begin; w < end; ++w) {
          const std::int64_t t = w / ns, k = w % ns;
          std::fill(a_t, a_t + NN, 0.0f);
          for (std::int64_t i = 0; i < d; ++i) {  // Aᵀ = Σ_i p_i S_iᵀ
            const float p = pos[t * d + i];
            const float* si = skew_bases + (i * ns + k) * bb;
            for (int u = 0; u < N; ++u)
              for (int v = 0; v < N; ++v) a_t[v * N + u] += p * si[u * N + v];
          }
          liere::kernels::expm_frechet_skew<N, float, FloatMul<N>>(a_t, dr + w * bb, r, l_out + w * bb, work);
        }
      });
    });
  }
  dispatch_size(b, [&](auto nc) {
    constexpr int N = decltype(nc)::value;
    at::parallel_for(0, np * ns, grain_for(b), [&](std::int64_t begin, std::int64_t end) {
      Mat<T, N> a(b, b), g(b, b), l(b, b);
      for (std::int64_t w = begin; w < end; ++w) {
        const std::int64_t t = w / ns, k = w % ns;
        a.setZero(b, b);
        for (std::int64_t i = 0; i < d; ++i)
          a += pos[t * d + i] * ConstRowMap<T, N>(skew_bases + (i * ns + k) * bb, b, b);
        g = ConstRowMap<T, N>(dr + w * bb, b, b);
        l.setZero(b, b);
        liere::exp_backward(a, g, l);
        RowMap<T, N>(l_out + w * bb, b, b) = l;
      }
    });
  });
}

struct TableShape {
  std::int64_t d, ns, np, b;
  std::vector<std::int64_t> out;  // (*P, *S, b, b)
};

TableShape check_tables_input(const at::Tensor& bases, const at::Tensor& pos) {
  check_tensor(bases, "rotation_tables", "bases", "(d, *S, b, b)");
  check_tensor(pos, "rotation_tables", "positions", "(*P, d)");
  TORCH_CHECK(bases.dim() >= 3, "liere.rotation_tables: bases has shape ", shape_text(bases),
              "; expected (d, *S, b, b), at least three dimensions");
  TORCH_CHECK(bases.size(-1) == bases.size(-2), "liere.rotation_tables: bases has shape ", shape_text(bases),
              "; expected square matrices (d, *S, b, b), got ", bases.size(-2), " x ", bases.size(-1));
  TORCH_CHECK(pos.dim() >= 1, "liere.rotation_tables: positions is a scalar; expected shape (*P, d) with d = ",
              bases.size(0));
  TORCH_CHECK(pos.size(-1) == bases.size(0), "liere.rotation_tables: positions has shape ", shape_text(pos),
              " but bases has shape ", shape_text(bases), "; expected positions (*P, d) with d = bases.size(0) = ",
              bases.size(0));
  TORCH_CHECK(pos.scalar_type() == bases.scalar_type(), "liere.rotation_tables: bases is ", bases.scalar_type(),
              " but positions is ", pos.scalar_type(), "; expected both float32 or both float64");
  check_skew(bases, "rotation_tables", "bases");
  TableShape sh;
  sh.d = bases.size(0);
  sh.b = bases.size(-1);
  sh.ns = 1;
  for (std::int64_t i = 1; i < bases.dim() - 2; ++i) sh.ns *= bases.size(i);
  sh.np = 1;
  for (std::int64_t i = 0; i < pos.dim() - 1; ++i) {
    sh.np *= pos.size(i);
    sh.out.push_back(pos.size(i));
  }
  for (std::int64_t i = 1; i < bases.dim(); ++i) sh.out.push_back(bases.size(i));
  return sh;
}

class RotationTables : public torch::autograd::Function<RotationTables> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& bases_in, const at::Tensor& pos_in) {
    const TableShape sh = check_tables_input(bases_in, pos_in);
    const at::Tensor bases = bases_in.contiguous(), pos = pos_in.contiguous();
    at::Tensor r = at::empty(sh.out, bases.options());
    if (spectral_size(sh.b)) {  // Q and σ for the backward
      at::Tensor q = at::empty(sh.out, bases.options());
      at::Tensor sigma = at::empty({sh.np * sh.ns, sh.b / 2}, bases.options().dtype(at::kDouble));
      AT_DISPATCH_FLOATING_TYPES(bases.scalar_type(), "liere.rotation_tables", [&] {
        if (r.numel() > 0)
          tables_forward<scalar_t>(bases.data_ptr<scalar_t>(), pos.data_ptr<scalar_t>(), r.data_ptr<scalar_t>(), sh.d,
                                   sh.ns, sh.np, sh.b, q.data_ptr<scalar_t>(), sigma.data_ptr<double>());
      });
      ctx->save_for_backward({bases, pos, q, sigma});
      return r;
    }
    AT_DISPATCH_FLOATING_TYPES(bases.scalar_type(), "liere.rotation_tables", [&] {
      if (r.numel() > 0)
        tables_forward<scalar_t>(bases.data_ptr<scalar_t>(), pos.data_ptr<scalar_t>(), r.data_ptr<scalar_t>(), sh.d,
                                 sh.ns, sh.np, sh.b);
    });
    ctx->save_for_backward({bases, pos});
    return r;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& bases = saved[0];
    const at::Tensor& pos = saved[1];
    const bool need_b = ctx->needs_input_grad(0), need_p = ctx->needs_input_grad(1);
    if (!grads[0].defined() || (!need_b && !need_p)) return {at::Tensor(), at::Tensor()};
    const std::int64_t d = bases.size(0), b = bases.size(-1), bb = b * b;
    const std::int64_t ns = b == 0 ? 0 : bases.numel() / (d * bb), np = pos.numel() / std::max<std::int64_t>(d, 1);
    const at::Tensor skew = ((bases - bases.transpose(-1, -2)) * 0.5).contiguous();
    const at::Tensor dr = grads[0].to(bases.scalar_type()).contiguous();
    at::Tensor l = at::empty({np, ns * bb}, bases.options());  // the adjoints L[t, s], one row per position
    AT_DISPATCH_FLOATING_TYPES(bases.scalar_type(), "liere.rotation_tables backward", [&] {
      if (l.numel() > 0 && saved.size() == 4)
        tables_adjoints<scalar_t>(skew.data_ptr<scalar_t>(), pos.data_ptr<scalar_t>(), dr.data_ptr<scalar_t>(),
                                  l.data_ptr<scalar_t>(), d, ns, np, b, saved[2].data_ptr<scalar_t>(),
                                  saved[3].data_ptr<double>());
      else if (l.numel() > 0)
        tables_adjoints<scalar_t>(skew.data_ptr<scalar_t>(), pos.data_ptr<scalar_t>(), dr.data_ptr<scalar_t>(),
                                  l.data_ptr<scalar_t>(), d, ns, np, b);
    });
    at::Tensor db, dp;
    const at::Tensor p2 = pos.reshape({np, d});
    if (need_b) {
      // dB_i = skew(Σ_t p[t, i] L[t]): (d, ns·b·b) = pᵀ · L
      at::Tensor g = at::mm(p2.t(), l).reshape(bases.sizes());
      db = (g - g.transpose(-1, -2)) * 0.5;
    }
    if (need_p) {
      // dp[t, i] = Σ_s ⟨L[t, s], skew(B[i, s])⟩: (np, d) = L · skew(B)ᵀ
      dp = at::mm(l, skew.reshape({d, ns * bb}).t()).reshape(pos.sizes());
    }
    return {db, dp};
  }
};

at::Tensor rotation_tables(const at::Tensor& bases, const at::Tensor& positions) {
  return RotationTables::apply(bases, positions);  // the inputs are checked by forward (check_tables_input)
}

std::string torch_version() { return TORCH_VERSION; }

void set_float32_exp(const std::string& mode) {
  TORCH_CHECK(mode == "float" || mode == "double", "liere.set_float32_exp: mode is '", mode,
              "'; expected 'float' (float kernels with the Newton-Schulz finish, the default) or 'double' (every "
              "float32 exponential in double, rounded once)");
  g_float32_exp_double.store(mode == "double");
}

std::string float32_exp() { return g_float32_exp_double.load() ? "double" : "float"; }

std::string liere_version() {
  return std::to_string(LIERE_VERSION_MAJOR) + "." + std::to_string(LIERE_VERSION_MINOR) + "." +
         std::to_string(LIERE_VERSION_PATCH);
}

}  // namespace
}  // namespace liere_torch

// One kernel for every dispatch key (CompositeImplicitAutograd): it checks the inputs — a CUDA tensor gets liere's
// error, not the dispatcher's — and records the autograd node itself.
TORCH_LIBRARY(liere, m) {
  m.def("so_exp(Tensor X) -> Tensor", &liere_torch::so_exp);
  m.def("rotation_tables(Tensor bases, Tensor positions) -> Tensor", &liere_torch::rotation_tables);
  m.def("torch_version() -> str", &liere_torch::torch_version);
  m.def("set_float32_exp(str mode) -> ()", &liere_torch::set_float32_exp);
  m.def("float32_exp() -> str", &liere_torch::float32_exp);
  m.def("liere_version() -> str", &liere_torch::liere_version);
}
