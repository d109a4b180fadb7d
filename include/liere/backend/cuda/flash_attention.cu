// liere/backend/cuda/flash_attention.cu — the fused rotary flash attention on the GPU: the tile bodies of
// backend/kernels/flash_attention.hpp (the CPU tests run them: tests/test_flash_attention.cpp, "the tile bodies as
// one device thread per row runs them"), one thread per row, tiles in shared memory, no (T, T) matrix.
//
// B batch, T tokens, H heads, D head dim (≤ kFlashMaxHeadDim); kRows query rows and kCols key rows per tile.
//   k_flash_forward        block (query tile, b·H + h), a thread per query row: q̂ = R·P·q rotated as it is loaded
//                          (kernels::rotate_load_row) into registers; per key tile the threads load k̂ (rotated)
//                          and v into shared memory, then each runs kernels::flash_forward_row_tile (scores, online
//                          softmax, P·V); out = acc / l and the log-sum-exp (kernels::finalize_row).
//   k_flash_di             D_i = dO_i · O_i, a thread per row
//   k_flash_backward_kv    block (key tile, b·H + h), a thread per key row: k̂_j, v_j in registers; per query tile
//                          q̂ (rotated on load), dO, lse, D in shared memory; kernels::flash_backward_key_row_tile
//                          gives dk̂_j, dv_j (dv accumulated in place: each row has one owner)
//   k_flash_backward_q     block (query tile, b·H + h), a thread per query row: kernels::flash_backward_query_row_tile
//                          over the key tiles gives dq̂_i (two kernels instead of atomics: deterministic)
//   k_flash_dtables        the tables' gradient, a thread per table entry, heads sharing a table and (shared
//                          tables) the batch summed in order by that thread
//   k_flash_unrotate       dq += Pᵀ Rᵀ dq̂, dk likewise (kernels::rotate_load_row_backward), a thread per (b, t, h);
//                          with transforms dq̂ becomes Rᵀ dq̂ in place, and dP += Σ (Rᵀ dq̂) qᵀ is one GEMM per head
// Compiled by the build with nvcc (LIERE_WITH_CUDA); tests/test_cuda.cpp compares it with the CPU op where there is a
// device.
#include <liere/backend/cuda/api.hpp>
#include <liere/backend/cuda/common.cuh>
#include <liere/backend/cuda/flash_attention_api.hpp>
#include <liere/backend/cuda/memory.hpp>
#include <liere/backend/kernels/flash_attention.hpp>

#include <cmath>
#include <limits>
#include <vector>

namespace liere::cuda {

namespace {

constexpr int kRows = 64;  // query rows per tile (threads of the query kernels)
constexpr int kCols = 32;  // key rows per tile (threads of the key kernel)
constexpr int kMaxD = kFlashMaxHeadDim;

struct FlashState {
  DeviceBlock out, lse, mask;  // (B, T, H, D), (B, H, T), (B, T) bytes
  AttentionShape s;
};

FlashState& flash_state(AttentionState& st) {
  if (!st) st = std::make_shared<FlashState>();
  return *static_cast<FlashState*>(st.get());
}

// Every head's rotation by value (kernel argument).
struct FlashRot {
  const float* tables[kMaxHeads];
  const float* transforms[kMaxHeads];
  int block, first, table_rows;
  __host__ __device__ kernels::RowRotation<float> head(int h) const {
    kernels::RowRotation<float> r;
    r.table = tables[h];
    r.block = block;
    r.first_rotated = first;
    r.table_rows = table_rows;
    r.transform = transforms[h];
    return r;
  }
};

FlashRot flash_rot(const AttentionCall& a) {
  FlashRot r{};
  for (int h = 0; h < a.s.heads; ++h) {
    r.tables[h] = a.tables.empty() ? nullptr : a.tables[std::size_t(h)];
    r.transforms[h] = a.transforms.empty() ? nullptr : a.transforms[std::size_t(h)];
  }
  r.block = a.block > 0 ? a.block : 1;
  r.first = a.first_rotated;
  r.table_rows = a.table_tokens;
  return r;
}

__global__ void k_flash_forward(const float* q, const float* k, const float* v, std::int64_t ld, FlashRot rot,
                                const std::uint8_t* mask, float* out, float* out_copy, float* lse, int T, int H, int D,
                                float scale) {
  __shared__ float sk[kCols * kMaxD], sv[kCols * kMaxD];
  const int bh = blockIdx.y, b = bh / H, h = bh % H;
  const int t = blockIdx.x * kRows + threadIdx.x;
  const bool active = t < T;
  const kernels::RowRotation<float> r = rot.head(h);
  const std::int64_t x0 = std::int64_t(b) * T * ld + std::int64_t(h) * D;
  float qr[kMaxD], acc[kMaxD], tmp[kMaxD], s[kCols];
  float m = -INFINITY, l = 0.f;
  if (active) kernels::rotate_load_row(r, b, t, T, D, q + x0 + t * ld, tmp, qr);
  for (int d = 0; d < D; ++d) acc[d] = 0.f;
  for (int j0 = 0; j0 < T; j0 += kCols) {
    const int n = min(kCols, T - j0);
    if (int(threadIdx.x) < n) {  // the key tile, rotated as it is loaded
      const int j = j0 + threadIdx.x;
      kernels::rotate_load_row(r, b, j, T, D, k + x0 + j * ld, tmp, sk + threadIdx.x * D);
      for (int d = 0; d < D; ++d) sv[threadIdx.x * D + d] = v[x0 + j * ld + d];
    }
    __syncthreads();
    if (active)
      kernels::flash_forward_row_tile(qr, sk, D, sv, D, n, D, mask ? mask + std::int64_t(b) * T + j0 : nullptr, scale, s,
                                      m, l, acc);
    __syncthreads();
  }
  if (!active) return;
  const std::int64_t o = (std::int64_t(b) * T + t) * H * D + std::int64_t(h) * D;
  lse[std::int64_t(bh) * T + t] = kernels::finalize_row(acc, D, m, l, out + o);
  for (int d = 0; d < D; ++d) out_copy[o + d] = out[o + d];
}

__global__ void k_flash_di(const float* dout, const float* out, float* di, int B, int T, int H, int D) {
  LIERE_CUDA_LOOP(i, Index(B) * H * T) {
    const Index t = i % T, bh = i / T, b = bh / H, h = bh % H;
    const Index o = (b * T + t) * H * D + h * D;
    di[i] = kernels::row_dot(dout + o, out + o, D);
  }
}

__global__ void k_flash_backward_kv(const float* q, const float* k, const float* v, std::int64_t ld, FlashRot rot,
                                    const std::uint8_t* mask, const float* dout, const float* lse, const float* di,
                                    float* dkh, float* dv, int T, int H, int D, float scale) {
  __shared__ float sq[kCols * kMaxD], sdo[kCols * kMaxD], slse[kCols], sdi[kCols];
  const int bh = blockIdx.y, b = bh / H, h = bh % H, HD = H * D;
  const int j = blockIdx.x * kCols + threadIdx.x;
  const bool active = j < T;
  const kernels::RowRotation<float> r = rot.head(h);
  const std::int64_t x0 = std::int64_t(b) * T * ld + std::int64_t(h) * D, y0 = std::int64_t(b) * T * HD + std::int64_t(h) * D;
  float kr[kMaxD], vj[kMaxD], dk[kMaxD], dvj[kMaxD], tmp[kMaxD];
  const bool key_on = active && (!mask || mask[std::int64_t(b) * T + j]);
  if (active) {
    kernels::rotate_load_row(r, b, j, T, D, k + x0 + j * ld, tmp, kr);
    for (int d = 0; d < D; ++d) vj[d] = v[x0 + j * ld + d];
  }
  for (int d = 0; d < D; ++d) dk[d] = 0.f, dvj[d] = 0.f;
  for (int i0 = 0; i0 < T; i0 += kCols) {  // query tiles of kCols rows (the block's threads load one row each)
    const int n = min(kCols, T - i0);
    if (int(threadIdx.x) < n) {
      const int i = i0 + threadIdx.x;
      kernels::rotate_load_row(r, b, i, T, D, q + x0 + i * ld, tmp, sq + threadIdx.x * D);
      for (int d = 0; d < D; ++d) sdo[threadIdx.x * D + d] = dout[y0 + std::int64_t(i) * HD + d];
      slse[threadIdx.x] = lse[std::int64_t(bh) * T + i];
      sdi[threadIdx.x] = di[std::int64_t(bh) * T + i];
    }
    __syncthreads();
    if (active) kernels::flash_backward_key_row_tile(kr, vj, key_on, sq, D, sdo, D, slse, sdi, n, D, scale, dk, dvj);
    __syncthreads();
  }
  if (!active) return;
  for (int d = 0; d < D; ++d) {
    dkh[y0 + std::int64_t(j) * HD + d] = dk[d];
    if (dv) dv[x0 + j * ld + d] += dvj[d];
  }
}

__global__ void k_flash_backward_q(const float* q, const float* k, const float* v, std::int64_t ld, FlashRot rot,
                                   const std::uint8_t* mask, const float* dout, const float* lse, const float* di,
                                   float* dqh, int T, int H, int D, float scale) {
  __shared__ float sk[kCols * kMaxD], sv[kCols * kMaxD];
  const int bh = blockIdx.y, b = bh / H, h = bh % H, HD = H * D;
  const int t = blockIdx.x * kRows + threadIdx.x;
  const bool active = t < T;
  const kernels::RowRotation<float> r = rot.head(h);
  const std::int64_t x0 = std::int64_t(b) * T * ld + std::int64_t(h) * D, y0 = std::int64_t(b) * T * HD + std::int64_t(h) * D;
  float qr[kMaxD], doi[kMaxD], dq[kMaxD], tmp[kMaxD];
  float lse_i = 0.f, di_i = 0.f;
  if (active) {
    kernels::rotate_load_row(r, b, t, T, D, q + x0 + t * ld, tmp, qr);
    for (int d = 0; d < D; ++d) doi[d] = dout[y0 + std::int64_t(t) * HD + d];
    lse_i = lse[std::int64_t(bh) * T + t];
    di_i = di[std::int64_t(bh) * T + t];
  }
  for (int d = 0; d < D; ++d) dq[d] = 0.f;
  for (int j0 = 0; j0 < T; j0 += kCols) {
    const int n = min(kCols, T - j0);
    if (int(threadIdx.x) < n) {
      const int j = j0 + threadIdx.x;
      kernels::rotate_load_row(r, b, j, T, D, k + x0 + j * ld, tmp, sk + threadIdx.x * D);
      for (int d = 0; d < D; ++d) sv[threadIdx.x * D + d] = v[x0 + j * ld + d];
    }
    __syncthreads();
    if (active)
      kernels::flash_backward_query_row_tile(qr, doi, lse_i, di_i, sk, D, sv, D, n, D,
                                             mask ? mask + std::int64_t(b) * T + j0 : nullptr, scale, dq);
    __syncthreads();
  }
  if (!active) return;
  for (int d = 0; d < D; ++d) dqh[y0 + std::int64_t(t) * HD + d] = dq[d];
}

// The tables' gradient: entry (row, kb, i, j) of unique table u gets Σ over its heads and (shared tables) the batch
// of dq̂_i u_q,j + dk̂_i u_k,j, u = P·x (x without a transform).
struct FlashDTables {
  float* dtables[kMaxHeads];
  unsigned long long heads[kMaxHeads];  // bit h: head h accumulates into dtables[u]
  int count;
};
__global__ void k_flash_dtables(const float* q, const float* k, std::int64_t ld, const float* dqh, const float* dkh,
                                FlashRot rot, FlashDTables dt, int B, int T, int H, int D) {
  const int bs = rot.block, bb = bs * bs, nb = D / bs, tr = T - rot.first;
  const Index per = Index(rot.table_rows) * nb * bb;
  LIERE_CUDA_LOOP(e, Index(dt.count) * per) {
    const int u = int(e / per);
    const Index rem = e % per;
    const int j = int(rem % bs), i = int((rem / bs) % bs), kb = int((rem / bb) % nb);
    const Index row = rem / (Index(nb) * bb);
    const bool shared = rot.table_rows == tr;
    const Index b0 = shared ? 0 : row / tr, b1 = shared ? B : b0 + 1;
    const int t = rot.first + int(shared ? row : row % tr);
    const int di = kb * bs + i, xj = kb * bs + j;
    float acc = 0.f;
    for (int h = 0; h < H; ++h) {
      if (!((dt.heads[u] >> h) & 1ull)) continue;
      const float* p = rot.transforms[h];
      for (Index b = b0; b < b1; ++b) {
        const std::int64_t x = b * T * ld + std::int64_t(t) * ld + h * D;
        const Index g = (b * T + t) * H * D + h * D;
        const float uq = p ? kernels::rotate_entry(p, D, q + x, xj) : q[x + xj];
        const float uk = p ? kernels::rotate_entry(p, D, k + x, xj) : k[x + xj];
        acc += dqh[g + di] * uq + dkh[g + di] * uk;
      }
    }
    dt.dtables[u][rem] += acc;
  }
}

__global__ void k_flash_unrotate(const float* q, const float* k, std::int64_t ld, float* dqh, float* dkh, FlashRot rot,
                                 float* dq, float* dk, int B, int T, int H, int D) {
  LIERE_CUDA_LOOP(w, Index(B) * T * H) {
    const int h = int(w % H), t = int((w / H) % T), b = int(w / (Index(H) * T));
    const kernels::RowRotation<float> r = rot.head(h);
    const std::int64_t x = std::int64_t(b) * T * ld + std::int64_t(t) * ld + h * D;
    const Index y = w * D;  // (b, t, h) row of dq̂, dk̂
    float tmp[2 * kMaxD];
    for (int which = 0; which < 2; ++which) {
      float* dy = (which == 0 ? dqh : dkh) + y;
      if (dq) kernels::rotate_load_row_backward(r, b, t, T, D, (which == 0 ? q : k) + x, dy, (which == 0 ? dq : dk) + x,
                                                static_cast<float*>(nullptr), static_cast<float*>(nullptr), tmp);
      const std::int64_t row = r.row(b, t, T);
      if (r.transform && row >= 0) {  // dy ← Rᵀ·dy, the gradient w.r.t. P·x (for dP)
        for (int d = 0; d < D; ++d) tmp[d] = 0.f;
        kernels::rotate_row_backward(r.table + row * D * r.block, D / r.block, r.block, dy, tmp);
        for (int d = 0; d < D; ++d) dy[d] = tmp[d];
      }
    }
  }
}


}  // namespace

void flash_attention_forward(const AttentionCall& a, float* out, AttentionState& state) {
  FlashState& st = flash_state(state);
  const int B = a.s.batch, T = a.s.tokens, H = a.s.heads, D = a.s.head_dim;
  LIERE_ENSURE(D <= kMaxD, "flash attention on cuda: head dim " << D << " is larger than " << kMaxD);
  LIERE_ENSURE(B * H <= 65535, "flash attention on cuda: B·H = " << B * H << " is more than a grid's 65535 rows");
  const Index n = Index(B) * T * H * D;
  st.s = AttentionShape{};
  st.out = device_floats(n);
  st.lse = device_floats(Index(B) * H * T);
  st.mask = DeviceBlock();
  if (a.key_mask) {
    st.mask = DeviceBlock(std::size_t(B) * T);
    copy_to_device(st.mask.get(), a.key_mask, std::size_t(B) * T);
  }
  const dim3 grid(unsigned((T + kRows - 1) / kRows), unsigned(B * H));
  LIERE_CUDA_LAUNCH_AS("k_flash_forward", k_flash_forward, grid, kRows, a.q, a.k, a.v, a.ld, flash_rot(a), st.mask.get<std::uint8_t>(), out,
                     st.out.get<float>(), st.lse.get<float>(), T, H, D, 1.f / std::sqrt(float(D)));
  st.s = a.s;
}

void flash_attention_backward(const AttentionCall& a, const float* dout, AttentionState& state, float* dq, float* dk,
                              float* dv, const std::vector<float*>& dtables, const std::vector<float*>& dtransforms) {
  FlashState& st = flash_state(state);
  const int B = a.s.batch, T = a.s.tokens, H = a.s.heads, D = a.s.head_dim, HD = H * D;
  LIERE_ENSURE(st.s.batch == B && st.s.tokens == T && st.s.heads == H && st.s.head_dim == D && st.out,
               "flash_attention_backward: the cache does not hold a flash attention forward of this shape");
  LIERE_ENSURE((dq == nullptr) == (dk == nullptr), "flash_attention_backward on cuda: dq and dk are wanted together "
                                                       "(got " << (dq ? "dq" : "dk") << " alone)");
  const Index n = Index(B) * T * H * D, rows = Index(B) * T;
  const float scale = 1.f / std::sqrt(float(D));
  DeviceBlock dib = device_floats(Index(B) * H * T), dqhb = device_floats(n), dkhb = device_floats(n);
  float *di = dib.get<float>(), *dqh = dqhb.get<float>(), *dkh = dkhb.get<float>();
  const std::uint8_t* mask = st.mask.get<std::uint8_t>();
  const FlashRot rot = flash_rot(a);
  LIERE_CUDA_LAUNCH_AS("k_flash_di", k_flash_di, grid_for(Index(B) * H * T), kThreads, dout, st.out.get<float>(), di, B, T, H, D);
  LIERE_CUDA_LAUNCH_AS("k_flash_backward_kv", k_flash_backward_kv, dim3(unsigned((T + kCols - 1) / kCols), unsigned(B * H)), kCols, a.q, a.k,
                     a.v, a.ld, rot, mask, dout, st.lse.get<float>(), di, dkh, dv, T, H, D, scale);
  LIERE_CUDA_LAUNCH_AS("k_flash_backward_q", k_flash_backward_q, dim3(unsigned((T + kRows - 1) / kRows), unsigned(B * H)), kRows, a.q, a.k,
                     a.v, a.ld, rot, mask, dout, st.lse.get<float>(), di, dqh, T, H, D, scale);
  FlashDTables d{};
  for (int h = 0; h < H && !dtables.empty(); ++h) {
    float* t = dtables[std::size_t(h)];
    if (!t || !rot.tables[h]) continue;
    int u = 0;
    while (u < d.count && d.dtables[u] != t) ++u;
    if (u == d.count) d.dtables[d.count++] = t;
    d.heads[u] |= 1ull << h;
  }
  if (d.count > 0)  // before k_flash_unrotate, which turns dq̂, dk̂ into Rᵀ·dq̂, Rᵀ·dk̂ where there are transforms
    LIERE_CUDA_LAUNCH_AS("k_flash_dtables", k_flash_dtables, grid_for(Index(d.count) * rot.table_rows * D * rot.block), kThreads, a.q, a.k,
                       a.ld, dqh, dkh, rot, d, B, T, H, D);
  LIERE_CUDA_LAUNCH_AS("k_flash_unrotate", k_flash_unrotate, grid_for(rows * H), kThreads, a.q, a.k, a.ld, dqh, dkh, rot, dq, dk, B, T, H, D);
  // dP += Σ (Rᵀ dŷ) xᵀ, heads in order (they may share P), in full float under TF32 as the unfused path's
  // transforms (attention.cu) and the kernel's P·x here
  for (int h = 0; h < H && !dtransforms.empty(); ++h) {
    float* dP = dtransforms[std::size_t(h)];
    if (!dP || !rot.transforms[h]) continue;
    gemm(true, false, D, D, rows, 1.f, dqh + h * D, HD, a.q + h * D, a.ld, 1.f, dP, D, {}, true);
    gemm(true, false, D, D, rows, 1.f, dkh + h * D, HD, a.k + h * D, a.ld, 1.f, dP, D, {}, true);
  }
}

}  // namespace liere::cuda
