// liere/backend/cuda/elementwise.cu — the CUDA kernels of the engine's elementwise, token, loss, optimizer and
// layer-norm ops. The per-element and per-row bodies are the shared LIERE_HOST_DEVICE functions of
// backend/kernels/ (the CPU kernels and the CPU tests run the same ones); reductions use fixed chunks added in a
// fixed order, so results do not depend on timing.
#include <liere/backend/cuda/api.hpp>
#include <liere/backend/cuda/common.cuh>
#include <liere/backend/kernels/adam.hpp>
#include <liere/backend/kernels/cross_entropy.hpp>
#include <liere/backend/kernels/layernorm.hpp>
#include <liere/backend/kernels/pointwise.hpp>
#include <liere/backend/kernels/reduce.hpp>

#include <atomic>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>

namespace liere::cuda {

namespace {

__global__ void k_fill(float* p, Index n, float v) {
  LIERE_CUDA_LOOP(i, n) p[i] = v;
}
__global__ void k_accumulate(const float* s, float* d, Index n) {
  LIERE_CUDA_LOOP(i, n) d[i] += s[i];
}
__global__ void k_add(const float* a, const float* b, float* y, Index n) {
  LIERE_CUDA_LOOP(i, n) y[i] = a[i] + b[i];
}
__global__ void k_add_backward(const float* dy, float* da, float* db, Index n, bool fa, bool fb) {
  LIERE_CUDA_LOOP(i, n) {
    if (da) da[i] = (fa ? 0.f : da[i]) + dy[i];
    if (db) db[i] = (fb ? 0.f : db[i]) + dy[i];
  }
}
__global__ void k_add_broadcast(const float* x, const float* p, float* y, Index R, Index M) {
  LIERE_CUDA_LOOP(i, R * M) y[i] = x[i] + p[i % M];
}
__global__ void k_mul(const float* a, const float* b, float* y, Index n) {
  LIERE_CUDA_LOOP(i, n) y[i] = a[i] * b[i];
}
__global__ void k_mul_backward(const float* a, const float* b, const float* dy, float* da, float* db, Index n) {
  LIERE_CUDA_LOOP(i, n) {
    if (da) da[i] += dy[i] * b[i];
    if (db) db[i] += dy[i] * a[i];
  }
}
__global__ void k_scale(const float* x, float s, float* y, Index n) {
  LIERE_CUDA_LOOP(i, n) y[i] = s * x[i];
}
__global__ void k_scale_acc(float s, const float* dy, float* dx, Index n) {
  LIERE_CUDA_LOOP(i, n) dx[i] += s * dy[i];
}
__global__ void k_add_scalar(const float* dy, float* dx, Index n) {
  const float d = dy[0];
  LIERE_CUDA_LOOP(i, n) dx[i] += d;
}


__global__ void k_sum(const float* x, float* y, Index n) {
  float a = 0.f;
  for (Index i = threadIdx.x; i < n; i += kThreads) a += x[i];
  const float t = block_sum(a);
  if (threadIdx.x == 0) y[0] = t;
}


// The warp-per-row and warp-per-column kernels below: kWarp, WarpSum and the launch shape in common.cuh.
static_assert(kernels::kReduceLanes == kWarp, "the finishes' lanes are a warp");

// colsum (kernels/reduce.hpp): the chunks' sums, one thread per (chunk, column) (adjacent threads, adjacent
// columns), then one warp per column: lane l sums chunks l, l + 32, … in order, the warp's shuffle sum adds the
// lanes: the CPU kernel's sums.
using kernels::kColSumChunk;
__global__ void k_colsum_part(const float* a, Index N, Index C, Index lda, float* part) {
  const Index nch = (N + kColSumChunk - 1) / kColSumChunk;
  LIERE_CUDA_LOOP(idx, nch * C) {
    const Index ch = idx / C, c = idx % C;
    const Index r1 = (ch + 1) * kColSumChunk < N ? (ch + 1) * kColSumChunk : N;
    kernels::colsum_rows<float, 1>(a, lda, ch * kColSumChunk, r1, c, c + 1, part + idx);  // summed in a register
  }
}
__global__ void k_colsum_finish(const float* part, Index nch, Index C, float* out) {
  LIERE_CUDA_LOOP(t, C * kWarp) {
    const Index c = t / kWarp;
    const int lane = int(t % kWarp);
    const double s = WarpSum{}(kernels::colsum_lane(part, nch, C, c, lane));
    if (lane == 0) out[c] += float(s);
  }
}

std::atomic<bool> g_flat_kernels{[] {
  const char* v = std::getenv("LIERE_CUDA_FLAT_KERNELS");
  return v && std::strcmp(v, "1") == 0;
}()};

// GELU four values a thread under set_flat_kernels (float4 loads and stores: every pointer 16-byte aligned, as the
// pool's blocks are), the last n % 4 one by one; else (quads false) an element a thread. One element a thread ran at
// 1.7 TB/s on the H200 (30 µs for ViT-Tiny's 6.4 M activations at B 128, 2026-11-26), the residual add at 2.3.
__global__ void k_gelu(const float* x, float* y, Index n, bool quads) {
  const Index nq = quads ? n / 4 : 0;
  LIERE_CUDA_LOOP(q, nq) {
    const float4 v = reinterpret_cast<const float4*>(x)[q];
    reinterpret_cast<float4*>(y)[q] =
        make_float4(kernels::gelu(v.x), kernels::gelu(v.y), kernels::gelu(v.z), kernels::gelu(v.w));
  }
  LIERE_CUDA_LOOP(j, n - nq * 4) y[nq * 4 + j] = kernels::gelu(x[nq * 4 + j]);
}
// dx + dy·GELU'(x): dx the gradient so far (0 for a fresh buffer: overwrite).
__device__ inline float gelu_step(float x, float dy, float dx) { return dx + dy * kernels::gelu_grad(x); }
__global__ void k_gelu_backward(const float* x, const float* dy, float* dx, Index n, bool overwrite, bool quads) {
  const Index nq = quads ? n / 4 : 0;
  LIERE_CUDA_LOOP(q, nq) {
    const float4 v = reinterpret_cast<const float4*>(x)[q], g = reinterpret_cast<const float4*>(dy)[q];
    float4 d = overwrite ? make_float4(0.f, 0.f, 0.f, 0.f) : reinterpret_cast<const float4*>(dx)[q];
    d = make_float4(gelu_step(v.x, g.x, d.x), gelu_step(v.y, g.y, d.y), gelu_step(v.z, g.z, d.z),
                    gelu_step(v.w, g.w, d.w));
    reinterpret_cast<float4*>(dx)[q] = d;
  }
  LIERE_CUDA_LOOP(j, n - nq * 4) {
    const Index i = nq * 4 + j;
    dx[i] = gelu_step(x[i], dy[i], overwrite ? 0.f : dx[i]);
  }
}
__global__ void k_dropout(const float* x, float p, bool all, std::uint64_t key, float scale, float* y,
                          std::uint8_t* mask, Index n) {
  LIERE_CUDA_LOOP(i, n) {
    const std::uint8_t keep = !all && kernels::dropout_keep(key, std::uint64_t(i), p);
    mask[i] = keep;
    y[i] = keep ? x[i] * scale : 0.f;
  }
}
__global__ void k_dropout_backward(const std::uint8_t* mask, float scale, const float* dy, float* dx, Index n,
                                   bool overwrite) {
  LIERE_CUDA_LOOP(i, n) {
    if (overwrite) dx[i] = mask[i] ? dy[i] * scale : 0.f;
    else if (mask[i]) dx[i] += dy[i] * scale;
  }
}

__global__ void k_prepend(const float* x, const float* tok, float* y, Index B, Index N, Index D) {
  LIERE_CUDA_LOOP(i, B * (N + 1) * D) {
    const Index d = i % D, t = (i / D) % (N + 1), b = i / (D * (N + 1));
    y[i] = t == 0 ? tok[d] : x[(b * N + t - 1) * D + d];
  }
}
__global__ void k_prepend_backward(const float* dy, float* dx, Index B, Index N, Index D) {
  LIERE_CUDA_LOOP(i, B * N * D) {
    const Index d = i % D, n = (i / D) % N, b = i / (D * N);
    dx[i] += dy[(b * (N + 1) + n + 1) * D + d];
  }
}
__global__ void k_select(const float* x, float* y, Index B, Index T, Index D, Index t) {
  LIERE_CUDA_LOOP(i, B * D) y[i] = x[((i / D) * T + t) * D + i % D];
}
__global__ void k_select_backward(const float* dy, float* dx, Index B, Index T, Index D, Index t) {
  LIERE_CUDA_LOOP(i, B * D) dx[((i / D) * T + t) * D + i % D] += dy[i];
}
__global__ void k_mean_tokens(const float* x, float* y, Index B, Index T, Index D, Index t0) {
  LIERE_CUDA_LOOP(i, B * D) {
    const Index b = i / D, d = i % D;
    float s = 0.f;
    for (Index t = t0; t < T; ++t) s += x[(b * T + t) * D + d];
    y[i] = s * (1.f / float(T - t0));
  }
}
__global__ void k_mean_tokens_backward(const float* dy, float* dx, Index B, Index T, Index D, Index t0) {
  const float inv = 1.f / float(T - t0);
  LIERE_CUDA_LOOP(i, B * T * D) {
    const Index d = i % D, t = (i / D) % T, b = i / (D * T);
    if (t >= t0) dx[i] += dy[b * D + d] * inv;
  }
}

// A warp per row (the classes strided over its lanes, the max and sums by shuffles); lane 0 writes ℓ.
__global__ void k_ce_rows(const float* z, const int* labels, float eps_k, float one_m_eps, float* probs, float* rows,
                          Index B, Index K) {
  LIERE_CUDA_LOOP(t, B * kWarp) {
    const Index b = t / kWarp;
    const int lane = int(t % kWarp);
    const float l = kernels::cross_entropy_row_forward<kWarp>(z + b * K, labels[b], eps_k, one_m_eps, probs + b * K, K,
                                                              lane, WarpMax{}, WarpSum{});
    if (lane == 0) rows[b] = l;
  }
}
__global__ void k_mean_in_order(const float* rows, Index B, float* loss) {
  float s = 0.f;
  for (Index b = 0; b < B; ++b) s += rows[b];
  loss[0] = B > 0 ? s / float(double(B)) : 0.f;
}
__global__ void k_ce_backward(const float* probs, const int* labels, float eps_k, float one_m_eps, const float* dloss,
                              float* dz, Index B, Index K) {
  const float c = dloss[0] / float(double(B));
  LIERE_CUDA_LOOP(i, B * K) {  // a thread per entry
    kernels::cross_entropy_grad_entry(probs[i], i % K == labels[i / K], eps_k, one_m_eps, c, dz[i]);
  }
}


// LayerNorm rows: one warp per row (kernels/layernorm.hpp with Lanes = 32 and the warp's shuffle sum), V = 4
// (float4 loads and stores) when every row and γ, β are 16-byte aligned, else V = 1.
template <int V>
__global__ void k_layernorm(const float* x, const float* g, const float* b, float* y, float* mean, float* rstd, Index N,
                            Index C, float inv_c, float eps) {
  LIERE_CUDA_LOOP(t, N * kWarp) {
    const Index n = t / kWarp;
    kernels::layernorm_row_forward<kWarp, V>(x + n * C, g, b, y + n * C, mean + n, rstd + n, C, inv_c, eps,
                                             int(t % kWarp), WarpSum{});
  }
}
template <int V>
__global__ void k_layernorm_dx(const float* x, const float* g, const float* mean, const float* rstd, const float* dy,
                               float* dx, Index N, Index C, float inv_c) {
  LIERE_CUDA_LOOP(t, N * kWarp) {
    const Index n = t / kWarp;
    kernels::layernorm_row_dx<kWarp, V>(x + n * C, g, mean[n], rstd[n], dy + n * C, dx + n * C, C, inv_c,
                                        int(t % kWarp), WarpSum{});
  }
}
// Whether the rows of width C at these pointers can be read as float4 (C % 4 == 0, every base 16-byte aligned).
bool rows_float4(Index C, std::initializer_list<const float*> ps) {
  if (C % 4 != 0) return false;
  for (const float* p : ps)
    if (!aligned(p, 16)) return false;
  return true;
}
// dγ, dβ: the chunk sums (kernels::layernorm_params_chunk), one thread per (chunk, column), then one warp per column
// (kernels::layernorm_params_lane, then the shuffle sum): the CPU kernel's sums.
__global__ void k_layernorm_params_part(const float* x, const float* mean, const float* rstd, const float* dy, Index N,
                                        Index C, float* part) {
  const Index nch = (N + kernels::kLayerNormChunk - 1) / kernels::kLayerNormChunk;
  LIERE_CUDA_LOOP(idx, nch * C) {
    kernels::layernorm_params_chunk<float, 1>(x, mean, rstd, dy, part, N, C, idx / C, idx % C, idx % C + 1);
  }
}
__global__ void k_layernorm_params_finish(const float* part, Index N, Index C, float* dg, float* db) {
  LIERE_CUDA_LOOP(t, C * kWarp) {
    const Index i = t / kWarp;
    const int lane = int(t % kWarp);
    double sg, sb;
    kernels::layernorm_params_lane(part, N, C, i, lane, sg, sb);
    sg = WarpSum{}(sg);
    sb = WarpSum{}(sb);
    if (lane == 0) {
      if (dg) dg[i] += float(sg);
      if (db) db[i] += float(sb);
    }
  }
}

}  // namespace

void Ops::fill(float* p, Index n, float v) { LIERE_CUDA_LAUNCH(k_fill, n, p, n, v); }
void Ops::accumulate(const float* s, float* d, Index n) { LIERE_CUDA_LAUNCH(k_accumulate, n, s, d, n); }
void Ops::add_forward(const float* a, const float* b, float* y, Index n) { LIERE_CUDA_LAUNCH(k_add, n, a, b, y, n); }
void Ops::add_backward(const float* dy, float* da, float* db, Index n, bool fa, bool fb) {
  if (da || db) LIERE_CUDA_LAUNCH(k_add_backward, n, dy, da, db, n, fa, fb);
}
void Ops::add_broadcast_forward(const float* x, const float* p, float* y, Index R, Index M) {
  LIERE_CUDA_LAUNCH(k_add_broadcast, R * M, x, p, y, R, M);
}
void Ops::add_broadcast_backward(const float* dy, float* dx, float* dp, Index R, Index M) {
  if (dx) accumulate(dy, dx, R * M);
  if (dp) colsum_accumulate(dy, R, M, M, dp);
}
void Ops::mul_forward(const float* a, const float* b, float* y, Index n) { LIERE_CUDA_LAUNCH(k_mul, n, a, b, y, n); }
void Ops::mul_backward(const float* a, const float* b, const float* dy, float* da, float* db, Index n) {
  if (da || db) LIERE_CUDA_LAUNCH(k_mul_backward, n, a, b, dy, da, db, n);
}
void Ops::scale_forward(const float* x, float s, float* y, Index n) { LIERE_CUDA_LAUNCH(k_scale, n, x, s, y, n); }
void Ops::scale_backward(float s, const float* dy, float* dx, Index n) {
  if (dx) LIERE_CUDA_LAUNCH(k_scale_acc, n, s, dy, dx, n);
}
void Ops::sum_forward(const float* x, float* y, Index n) { LIERE_CUDA_LAUNCH_AS("k_sum", k_sum, 1, kThreads, x, y, n); }
void Ops::sum_backward(const float* dy, float* dx, Index n) { LIERE_CUDA_LAUNCH(k_add_scalar, n, dy, dx, n); }

void colsum_accumulate(const float* a, Index N, Index C, Index lda, float* out) {
  if (N <= 0 || C <= 0) return;
  const Index nch = (N + kColSumChunk - 1) / kColSumChunk;
  const DeviceBlock part(std::size_t(nch * C) * sizeof(float));
  LIERE_CUDA_LAUNCH(k_colsum_part, nch * C, a, N, C, lda, part.get<float>());
  LIERE_CUDA_LAUNCH(k_colsum_finish, C * kWarp, part.get<float>(), nch, C, out);
}

void set_flat_kernels(bool on) { g_flat_kernels = on; }
bool flat_kernels_on() { return g_flat_kernels; }

void Ops::gelu_forward(const float* x, float* y, Index n) {
  const bool quads = g_flat_kernels && aligned(x, 16) && aligned(y, 16);
  LIERE_CUDA_LAUNCH(k_gelu, quads ? (n + 3) / 4 : n, x, y, n, quads);
}
void Ops::gelu_backward(const float* x, const float* dy, float* dx, Index n, bool overwrite) {
  const bool quads = g_flat_kernels && aligned(x, 16) && aligned(dy, 16) && aligned(dx, 16);
  LIERE_CUDA_LAUNCH(k_gelu_backward, quads ? (n + 3) / 4 : n, x, dy, dx, n, overwrite, quads);
}
void Ops::dropout_forward(const float* x, double p, std::uint64_t key, float* y, std::uint8_t* mask, Index n) {
  const float scale = p < 1 ? float(1.0 / (1.0 - p)) : 0.f;
  LIERE_CUDA_LAUNCH(k_dropout, n, x, float(p), !(p < 1), key, scale, y, mask, n);
}
void Ops::dropout_backward(const std::uint8_t* mask, double p, const float* dy, float* dx, Index n, bool overwrite) {
  const float scale = p < 1 ? float(1.0 / (1.0 - p)) : 0.f;
  LIERE_CUDA_LAUNCH(k_dropout_backward, n, mask, scale, dy, dx, n, overwrite);
}

void Ops::prepend_token_forward(const float* x, const float* tok, float* y, Index B, Index N, Index D) {
  LIERE_CUDA_LAUNCH(k_prepend, B * (N + 1) * D, x, tok, y, B, N, D);
}
void Ops::prepend_token_backward(const float* dy, float* dx, float* dtok, Index B, Index N, Index D) {
  if (dx) LIERE_CUDA_LAUNCH(k_prepend_backward, B * N * D, dy, dx, B, N, D);
  if (dtok) colsum_accumulate(dy, B, D, (N + 1) * D, dtok);
}
void Ops::select_token_forward(const float* x, float* y, Index B, Index T, Index D, Index t) {
  LIERE_CUDA_LAUNCH(k_select, B * D, x, y, B, T, D, t);
}
void Ops::select_token_backward(const float* dy, float* dx, Index B, Index T, Index D, Index t) {
  LIERE_CUDA_LAUNCH(k_select_backward, B * D, dy, dx, B, T, D, t);
}
void Ops::mean_tokens_forward(const float* x, float* y, Index B, Index T, Index D, Index t0) {
  LIERE_CUDA_LAUNCH(k_mean_tokens, B * D, x, y, B, T, D, t0);
}
void Ops::mean_tokens_backward(const float* dy, float* dx, Index B, Index T, Index D, Index t0) {
  LIERE_CUDA_LAUNCH(k_mean_tokens_backward, B * T * D, dy, dx, B, T, D, t0);
}

void Ops::softmax_cross_entropy_forward(const float* logits, const int* labels, double smoothing, float* probs,
                                        float* row_loss, float* loss, Index B, Index K) {
  DeviceBlock own;
  if (!row_loss) own = DeviceBlock(std::size_t(B > 0 ? B : 1) * sizeof(float));
  float* rows = row_loss ? row_loss : own.get<float>();
  const float eps_k = float(smoothing / double(K)), one_m_eps = float(1.0 - smoothing);
  LIERE_CUDA_LAUNCH(k_ce_rows, B * kWarp, logits, labels, eps_k, one_m_eps, probs, rows, B, K);
  LIERE_CUDA_LAUNCH_AS("k_mean_in_order", k_mean_in_order, 1, 1, rows, B, loss);
}
void Ops::softmax_cross_entropy_backward(const float* probs, const int* labels, double smoothing, const float* dloss,
                                         float* dlogits, Index B, Index K) {
  const float eps_k = float(smoothing / double(K)), one_m_eps = float(1.0 - smoothing);
  LIERE_CUDA_LAUNCH(k_ce_backward, B * K, probs, labels, eps_k, one_m_eps, dloss, dlogits, B, K);
}

void Ops::layernorm_forward(const float* x, const float* g, const float* b, float* y, float* mean, float* rstd, Index N,
                            Index C, double eps) {
  const float inv_c = 1.f / float(double(C));
  if (rows_float4(C, {x, g, b, y}))
    LIERE_CUDA_LAUNCH(k_layernorm<4>, N * kWarp, x, g, b, y, mean, rstd, N, C, inv_c, float(eps));
  else
    LIERE_CUDA_LAUNCH(k_layernorm<1>, N * kWarp, x, g, b, y, mean, rstd, N, C, inv_c, float(eps));
}
void Ops::layernorm_backward(const float* x, const float* g, const float* mean, const float* rstd, const float* dy,
                             float* dx, float* dg, float* db, float* scratch_buf, Index N, Index C) {
  const float inv_c = 1.f / float(double(C));
  if (dx && rows_float4(C, {x, g, dy, dx}))
    LIERE_CUDA_LAUNCH(k_layernorm_dx<4>, N * kWarp, x, g, mean, rstd, dy, dx, N, C, inv_c);
  else if (dx)
    LIERE_CUDA_LAUNCH(k_layernorm_dx<1>, N * kWarp, x, g, mean, rstd, dy, dx, N, C, inv_c);
  if (dg || db) {
    const Index nch = (N + kernels::kLayerNormChunk - 1) / kernels::kLayerNormChunk;
    LIERE_CUDA_LAUNCH(k_layernorm_params_part, nch * C, x, mean, rstd, dy, N, C, scratch_buf);
    LIERE_CUDA_LAUNCH(k_layernorm_params_finish, C * kWarp, scratch_buf, N, C, dg, db);
  }
}

}  // namespace liere::cuda
