// liere/backend/cuda/attention.cu — multi-head attention with rotary encodings on the GPU.
//
// B batch, T tokens, H heads, D head dim; f = first rotated token, tr = T − f rotated tokens.
// Forward:
//   (transforms) x̃ = P_h·x per head on cuBLAS (STRING), kept for the backward; in full float even under TF32, as
//               the rotations (P is orthogonal too; TF32's 10-bit inputs would not keep it so), and so its backward
//   gather      q̂ (B, H, T, D), k̂, v (B, H, TP, D) (TP below) from the packed qkv rows: q̂ = R(t)·q blockwise
//               (kernels::rotate_entry, one thread per output element, or per block under set_flat_kernels:
//               k_gather_blocks), tokens < f and heads without a table
//               copied. Blocks larger than kGemmRotationAbove (16) with a table shared by the batch: the gather
//               copies the rest, and the rotated entries are the strided-batched GEMMs of backend/rotate_gemms.hpp
//               (the CPU's products), in full float even under TF32
//   S = Q̂ K̂ᵀ / √D      a strided batch over the B·H heads (gemm_act: cublasSgemmStridedBatched, or bf16 operands
//                       in a bf16 run; likewise the other five products below). The keys are padded to TP = T
//                       rounded up to 4, 8 in bf16 (scores_ld): k̂ and v have TP rows per head, the extra ones
//                       zero, so S, P and dS are (T, TP) with zero columns past T (q̂·0 = 0, and the softmax leaves
//                       them alone; dP's are dO·0) and every product's contiguous extent is a multiple of 4 floats:
//                       with T = 65 (CIFAR, a class token) cuBLAS had only its align1 kernels for the six products
//                       (3.3 of 18.8 ms of the ViT-Tiny step on the H200, docs/gpu.md). LIERE_CUDA_PAD_SCORES=0: TP = T
//   P = softmax(S)      one warp per row, kernels::softmax_row (masked keys excluded)
//   O = P V             per head a strided batch over the samples, written straight into out's rows (B, T, H·D)
// Backward: dV = Pᵀ dO, dP = dO Vᵀ (per head, dO read where it lies in dout's rows), dS = softmax_row_backward (per
//   row), dQ̂ = dS K̂, dK̂ = dSᵀ Q̂ (batched over B·H);
//   dq += R(t)ᵀ dq̂ (kernels::rotate_backward_entry) in the packed layout, likewise dk, dv += dV;
//   dR(t) += Σ_b dq̂ x̃_qᵀ + dk̂ x̃_kᵀ (per table entry and run of the batch a thread, heads sharing a table summed
//   by the same thread, then the runs added in order: no atomics); (transforms) dx += dx̃ P, dP += dx̃ᵀ x.
//   Large shared blocks: both as the GEMMs of rotate_gemms.hpp (heads into a shared dR one after the other).
// Memory: every buffer is a DeviceBlock of the CUDA BufferPool (memory.hpp), so the pool reuses it and its
// trim-and-retry on out of memory covers it. A forward that a backward will follow (AttentionCall::backward) keeps
// q̂, k̂, v, P (and x̃) in the layer's state; the backward gives q̂, k̂, v, x̃ back and keeps P (the attention map of
// the last forward) until the next forward, which gives back whatever the state still holds before it takes new
// blocks. A forward without a backward (evaluation in no-grad mode) keeps nothing, not even P unless the caller
// asks for the map (AttentionCall::keep_probs). The backward's temporaries are blocks given back when it returns.
#include <liere/backend/cuda/api.hpp>
#include <liere/backend/cuda/common.cuh>
#include <liere/backend/cuda/memory.hpp>
#include <liere/backend/kernels/gather.hpp>
#include <liere/backend/kernels/rotate.hpp>
#include <liere/backend/kernels/rotate_tiles.hpp>
#include <liere/backend/kernels/softmax.hpp>
#include <liere/backend/rotate_gemms.hpp>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <vector>

namespace liere::cuda {

namespace {

std::atomic<bool> g_rotate_gemms{[] {
  const char* v = std::getenv("LIERE_CUDA_ROTATE_GEMMS");
  return !(v && std::strcmp(v, "0") == 0);
}()};

std::atomic<bool> g_rotate_tiles{[] {
  const char* v = std::getenv("LIERE_CUDA_ROTATE_TILES");
  return v && *v && std::strcmp(v, "0") != 0;
}()};

// The keys padded: T rounded up to a multiple of 4 (16 bytes of float), of 8 in a bf16 or fp16 run (16 bytes, the
// packs' operands), or T under LIERE_CUDA_PAD_SCORES=0. A forward's TP is kept in its state for the backward.
const bool g_pad_scores = [] {
  const char* v = std::getenv("LIERE_CUDA_PAD_SCORES");
  return !(v && std::strcmp(v, "0") == 0);
}();
// bf16 and fp16 runs: attention's operands rounded once each (api.hpp, set_attention_packs).
std::atomic<bool> g_attention_packs{[] {
  const char* v = std::getenv("LIERE_CUDA_ATTENTION_PACKS");
  return !(v && std::strcmp(v, "0") == 0);
}()};

int scores_ld(int T) {
  if (!g_pad_scores) return T;
  const Precision p = gemm_precision();
  const int m = p == Precision::bf16 || p == Precision::fp16 ? 8 : 4;
  return (T + m - 1) / m * m;
}

struct State {
  DeviceBlock qh, kh, vh, p;  // q̂ (B, H, T, D); k̂, v (B, H, TP, D) with TP = scores_ld(T); P (B, H, T, TP)
  DeviceBlock xq, xk;         // (B, T, H, D) P·q, P·k (transforms only)
  // Under set_attention_packs in a bf16 or fp16 run: q̂, k̂, v, P rounded to 16 bits (of precision p16_type) by the
  // forward, rows bf16_pack_ld(D) and bf16_pack_ld(TP) apart, for the backward.
  DeviceBlock qh16, kh16, vh16, p16;
  Precision p16_type = Precision::bf16;
  AttentionShape s;
  int tp = 0;  // the padded keys of that forward (scores_ld)
  bool transformed = false;
  void release_inputs() {  // everything but the map
    qh.reset(), kh.reset(), vh.reset(), xq.reset(), xk.reset();
    qh16.reset(), kh16.reset(), vh16.reset(), p16.reset();
  }
};

const std::uint16_t* h16(const DeviceBlock& b) { return b.get<std::uint16_t>(); }

State& state_of(AttentionState& st) {
  if (!st) st = std::make_shared<State>();
  return *static_cast<State*>(st.get());
}

// Per-head table pointers and the table geometry, by value into the kernels (kernels/gather.hpp). by_gemm: the
// rotated entries are the GEMMs' (rotate_gemms.hpp), the element kernels leave them alone.
using Rot = kernels::HeadRotations<kMaxHeads>;

bool any_transform(const AttentionCall& a) {
  for (const float* t : a.transforms)
    if (t) return true;
  return false;
}

Rot rot_of(const AttentionCall& a) {
  Rot r{};
  for (int h = 0; h < a.s.heads; ++h) r.tables[h] = a.tables.empty() ? nullptr : a.tables[std::size_t(h)];
  r.block = a.block > 0 ? a.block : 1;
  r.nb = a.s.head_dim / r.block;
  r.table_tokens = a.table_tokens;
  r.first = a.first_rotated;
  r.tr = a.s.tokens - a.first_rotated;
  r.by_gemm = rotate_gemms_on() && r.table_tokens == r.tr && r.block > kGemmRotationAbove;
  return r;
}

// rotate_gemms.hpp's products on cuBLAS, in full float (TF32's 10-bit inputs would make R·x a non-rotation).
struct DeviceGemms {
  void operator()(bool ta, bool tb, Index M, Index N, Index K, const float* A, Index lda, const float* B, Index ldb,
                  float beta, float* C, Index ldc, GemmBatch batch) const {
    gemm(ta, tb, M, N, K, 1.f, A, lda, B, ldb, beta, C, ldc, batch, true);
  }
};
// The products of blocks of 64 as liere's tile kernels (api.hpp, set_rotate_tiles; kernels/rotate_tiles.hpp): one
// thread block of kTileThreads per product (side, head, token, block: the grid's x, up to 2³¹ − 1) and 64 rows of the
// batch (y) for the forward and dx, per product of the heads' tables for dR (both sides and every row summed there).
using Tiles = kernels::TileProducts<kMaxHeads>;
// (An empty batch or no rotated token launches nothing, as the GEMMs' path: a grid of size 0 is a launch error.)
bool by_tiles(const Rot& r, int B) {
  return r.by_gemm && g_rotate_tiles && r.block == kernels::kTile && B > 0 && r.tr > 0;
}
Tiles tiles_of(const Rot& r, int H, int D, int B) {
  Tiles io;
  for (int h = 0; h < H; ++h) io.m[h] = r.tables[h];
  io.heads = H;
  io.tokens = r.tr;
  io.nb = D / kernels::kTile;
  io.batch = B;
  return io;
}
__global__ void __launch_bounds__(kernels::kTileThreads) k_rotate_tiles(Tiles io) {
  __shared__ __align__(16) float as[kernels::kTile * kernels::kTileLd];
  __shared__ __align__(16) float bs[kernels::kTile * kernels::kTileLd];
  int w, h, t, kb;
  io.decode(int(blockIdx.x), w, h, t, kb);
  const float* m = io.m[h];
  if (!m) return;
  const int b0 = int(blockIdx.y) * kernels::kTile, rows = min(kernels::kTile, io.batch - b0), th = int(threadIdx.x);
  kernels::tile_stage_part(io.x[w].at(h, t, kb) + b0 * io.x[w].batch, io.x[w].batch, rows, true, as, th);
  kernels::tile_stage_part(m + io.block_offset(t, kb), std::int64_t(kernels::kTile), kernels::kTile, !io.dx, bs, th);
  __syncthreads();
  float acc[kernels::kTileRows][kernels::kTileCols] = {};
  kernels::tile_mul_part(as, bs, th, acc);
  kernels::tile_store_part(acc, io.out[w].at(h, t, kb) + b0 * io.out[w].batch, io.out[w].batch, rows, io.accumulate,
                           th);
}
__global__ void __launch_bounds__(kernels::kTileThreads) k_rotate_tiles_grad(Tiles io) {
  __shared__ __align__(16) float as[kernels::kTile * kernels::kTileLd];
  __shared__ __align__(16) float bs[kernels::kTile * kernels::kTileLd];
  int w, h, t, kb;
  io.decode(int(blockIdx.x), w, h, t, kb);
  float* dr = io.dm[h];
  if (!dr || !io.m[h]) return;
  const int th = int(threadIdx.x);
  float acc[kernels::kTileRows][kernels::kTileCols] = {};
  for (int side = 0; side < io.sides; ++side)
    for (int b0 = 0; b0 < io.batch; b0 += kernels::kTile) {
      const int rows = min(kernels::kTile, io.batch - b0);
      __syncthreads();  // the previous chunk's products are done with as and bs
      kernels::tile_stage_part(io.x[side].at(h, t, kb) + b0 * io.x[side].batch, io.x[side].batch, rows, false, as, th);
      kernels::tile_stage_part(io.y[side].at(h, t, kb) + b0 * io.y[side].batch, io.y[side].batch, rows, false, bs, th);
      __syncthreads();
      kernels::tile_mul_part(as, bs, th, acc);
    }
  kernels::tile_store_part(acc, dr + io.block_offset(t, kb), std::int64_t(kernels::kTile), kernels::kTile, true, th);
}
unsigned row_tiles(int B) { return unsigned((B + kernels::kTile - 1) / kernels::kTile); }

// Head h's table as a view (device pointer, shared rows: by_gemm only).
RotationTableView<const float> table_view(const Rot& r, int h, int D) { return {r.tables[h], r.tr, D, r.block}; }
// The (B, H, T, D) scratch (T = TP for k̂, dk̂) of head h from the first rotated token, as a HeadsLayout.
HeadsLayout heads_layout(int T, int H, int D) { return {std::int64_t(H) * T * D, D}; }

// q̂ (rotated) into (B, H, T, D), k̂ (rotated) and v into (B, H, TP, D) with zero rows t ≥ T (padded keys)
// (kernels/gather.hpp): one thread per value of k̂, or (set_flat_kernels) per K values, each block of the rotation
// read once into registers and its table block once instead of K threads each reading the whole block for one value.
__global__ void k_gather(kernels::GatherIO io, Rot r) {
  LIERE_CUDA_LOOP(i, kernels::gather_values(io)) kernels::gather_value(io, r, i);
}
template <int K>
__global__ void k_gather_blocks(kernels::GatherIO io, Rot r) {
  LIERE_CUDA_LOOP(c, kernels::gather_values(io) / K) kernels::gather_block<K>(io, r, c);
}

// A warp per row (common.cuh: launched over rows · kWarp threads).
// Rows of T scores, TP (scores_ld) apart.
__global__ void k_softmax(float* p, const std::uint8_t* mask, int T, int TP, int H, Index rows) {
  LIERE_CUDA_LOOP(t, rows * kWarp) {
    const Index r = t / kWarp, b = r / (Index(T) * H);
    kernels::softmax_row<kWarp>(p + r * TP, T, mask ? mask + b * T : nullptr, int(t % kWarp), WarpMax{}, WarpSum{});
  }
}
__global__ void k_softmax_backward(const float* p, float* dp, int T, int TP, float scale, Index rows) {
  LIERE_CUDA_LOOP(t, rows * kWarp) {
    const Index r = t / kWarp;
    kernels::softmax_row_backward<kWarp>(p + r * TP, dp + r * TP, T, scale, int(t % kWarp), WarpSum{});
  }
}

// rows of HD values, ld apart → contiguous (rows, HD)
__global__ void k_copy_rows(const float* x, std::int64_t ld, float* y, Index rows, int hd) {
  LIERE_CUDA_LOOP(idx, rows * hd) y[idx] = x[(idx / hd) * ld + idx % hd];
}
// y (rows, D) with row stride ldy += x (rows, D) with row stride ldx
__global__ void k_add_rows(const float* x, std::int64_t ldx, float* y, std::int64_t ldy, Index rows, int d) {
  LIERE_CUDA_LOOP(idx, rows * d) y[(idx / d) * ldy + idx % d] += x[(idx / d) * ldx + idx % d];
}

// Through the rotations to the rotation inputs: dq (dk) = R(t)ᵀ dq̂ (or dq̂), assigned or accumulated; dv += dV
// (kernels/gather.hpp): one thread per value of dq̂, or (set_flat_kernels) per K values.
__global__ void k_unrotate(kernels::UnrotateIO io, Rot r) {
  LIERE_CUDA_LOOP(i, kernels::unrotate_values(io)) kernels::unrotate_value(io, r, i);
}
template <int K>
__global__ void k_unrotate_blocks(kernels::UnrotateIO io, Rot r) {
  LIERE_CUDA_LOOP(c, kernels::unrotate_values(io) / K) kernels::unrotate_block<K>(io, r, c);
}

// The values a thread of k_gather_blocks and k_unrotate_blocks takes, or 0 for the element kernels: off unless
// set_flat_kernels; the rotation's block where the kernels rotate (blocks of 2, 3, 4 or 8, the sizes compiled); 4
// where they only copy (no head rotated, or the GEMMs rotate) and D allows.
int flat_chunk(const Rot& r, int H, int D) {
  if (!flat_kernels_on()) return 0;
  bool rotates = false;
  for (int h = 0; h < H; ++h) rotates = rotates || r.tables[h] != nullptr;
  if (rotates && !r.by_gemm) return r.block == 2 || r.block == 3 || r.block == 4 || r.block == 8 ? r.block : 0;
  return D % 4 == 0 ? 4 : 0;
}
// f(std::integral_constant<int, K>) for the chunks flat_chunk returns; false for 0.
template <class F>
bool with_chunk(int k, F&& f) {
  switch (k) {
    case 2: return f(std::integral_constant<int, 2>{}), true;
    case 3: return f(std::integral_constant<int, 3>{}), true;
    case 4: return f(std::integral_constant<int, 4>{}), true;
    case 8: return f(std::integral_constant<int, 8>{}), true;
    default: return false;
  }
}

// The tables' gradients (kernels/gather.hpp): unique table u (heads in d.heads[u]) gets, per entry, the sum over its
// heads and (shared tables) the batch of dq̂_i x̃q_j + dk̂_i x̃k_j; shared tables sum the batch in `chunks` runs, one
// thread per (run, entry), or (set_flat_kernels) per K entries (i, 0…K−1) sharing dq̂_i and dk̂_i, writing the
// partial sums that k_dtables_finish adds in order; per-sequence tables: one run, the sequence of the row.
using DTables = kernels::TableGrads<kMaxHeads>;
__global__ void k_dtables(kernels::DTablesIO io, Rot r, DTables d) {
  LIERE_CUDA_LOOP(i, kernels::dtables_entries(r, d) * io.chunks) kernels::dtables_entry(io, r, d, i);
}
template <int K>
__global__ void k_dtables_blocks(kernels::DTablesIO io, Rot r, DTables d) {
  LIERE_CUDA_LOOP(c, kernels::dtables_entries(r, d) / K * io.chunks) kernels::dtables_line<K>(io, r, d, c);
}

__global__ void k_dtables_finish(const float* part, Index entries, int chunks, Rot r, DTables d) {
  const Index per = Index(r.table_tokens) * r.nb * r.block * r.block;
  LIERE_CUDA_LOOP(e, entries) {
    float acc = 0.f;
    for (int c = 0; c < chunks; ++c) acc += part[Index(c) * entries + e];
    d.dtables[e / per][e % per] += acc;
  }
}
// Runs of the batch for k_dtables: enough threads to fill a large GPU (about 2^19; 2^21 under set_flat_kernels),
// runs of at least 8 sequences. Each thread sums its run one sequence after another, a chain of dependent loads:
// ViT-Tiny LieRE-8 at B 128 gets 5 runs of 26 sequences and took 41 µs a layer on the H200 (2026-11-26); 2^21
// gives 16 runs of 8, more threads to hide the loads, 16 partial sums per entry for k_dtables_finish (not yet run).
void dtables_runs(Index entries, int B, bool shared, int* chunk, int* chunks) {
  int n = 1;
  if (shared) {
    const Index want = (Index(1) << (flat_kernels_on() ? 21 : 19)) / (entries > 0 ? entries : 1);
    n = int(want < B / 8 ? want : B / 8);
    n = n > 1 ? n : 1;
  }
  *chunk = (B + n - 1) / n;
  *chunks = (B + *chunk - 1) / *chunk;
}

// Through x̃ = P·x: dx += dx̃ P, dP += dx̃ᵀ x (heads without a transform: dx += dx̃).
void transforms_backward(const AttentionCall& a, const float* dxq, const float* dxk, float* dq, float* dk,
                         const std::vector<float*>& dtransforms) {
  const int B = a.s.batch, T = a.s.tokens, H = a.s.heads, D = a.s.head_dim, HD = H * D;
  const Index rows = Index(B) * T;
  for (int w = 0; w < 2; ++w) {
    const float* x = w == 0 ? a.q : a.k;
    float* dx = w == 0 ? dq : dk;
    const float* dy = w == 0 ? dxq : dxk;
    for (int h = 0; h < H; ++h) {
      const float* P = a.transforms[std::size_t(h)];
      if (P) {
        if (dx) gemm(false, false, rows, D, D, 1.f, dy + h * D, HD, P, D, 1.f, dx + h * D, a.ld, {}, true);
        float* dP = dtransforms.empty() ? nullptr : dtransforms[std::size_t(h)];
        if (dP) gemm(true, false, D, D, rows, 1.f, dy + h * D, HD, x + h * D, a.ld, 1.f, dP, D, {}, true);
      } else if (dx) {
        LIERE_CUDA_LAUNCH(k_add_rows, rows * D, dy + h * D, HD, dx + h * D, a.ld, rows, D);
      }
    }
  }
}

}  // namespace

void Ops::attention_forward(const AttentionCall& a, float* out, AttentionState& state) {
  State& st = state_of(state);
  st.release_inputs();  // the last forward's blocks go back first: this forward may reuse them
  st.p.reset();
  st.s = AttentionShape{};
  const int B = a.s.batch, T = a.s.tokens, H = a.s.heads, D = a.s.head_dim, HD = H * D;
  const Index n = Index(B) * H * T * D, rows = Index(B) * T;
  const int TI = blas_int(T, "attention on cuda", "T (tokens)"), DI = blas_int(D, "attention on cuda", "D (head dim)");
  const int BH = blas_int(Index(B) * H, "attention on cuda", "B·H (batch × heads, the batched GEMMs' count)");
  const int TP = scores_ld(T), TPI = blas_int(TP, "attention on cuda", "TP (keys, padded)");
  const Index nk = Index(B) * H * TP * D;  // k̂, v with the padded keys
  DeviceBlock qhb = device_floats(n), khb = device_floats(nk), vhb = device_floats(nk),
              pb = device_floats(Index(B) * H * T * TP), xqb, xkb;
  float *qh = qhb.get<float>(), *kh = khb.get<float>(), *vh = vhb.get<float>(), *p = pb.get<float>();
  const float *sq = a.q, *sk = a.k;
  std::int64_t sb = std::int64_t(T) * a.ld, stok = a.ld;
  const bool transformed = any_transform(a);
  if (transformed) {
    xqb = device_floats(rows * HD), xkb = device_floats(rows * HD);
    float* xs[2] = {xqb.get<float>(), xkb.get<float>()};
    const float* src[2] = {a.q, a.k};
    for (int w = 0; w < 2; ++w) {
      LIERE_CUDA_LAUNCH(k_copy_rows, rows * HD, src[w], a.ld, xs[w], rows, HD);
      for (int h = 0; h < H; ++h)
        if (const float* P = a.transforms[std::size_t(h)])  // X̃_h (rows, D) = X_h Pᵀ, in full float as the rotations
          gemm(false, true, rows, D, D, 1.f, src[w] + h * D, a.ld, P, D, 0.f, xs[w] + h * D, HD, {}, true);
    }
    sq = xs[0], sk = xs[1], sb = std::int64_t(T) * HD, stok = HD;
  }
  const Rot r = rot_of(a);
  const kernels::GatherIO gio{sq, sk, sb, stok, a.v, a.ld, qh, kh, vh, B, T, TP, H, D};
  if (!with_chunk(flat_chunk(r, H, D), [&](auto k) {
        constexpr int K = decltype(k)::value;
        LIERE_CUDA_LAUNCH(k_gather_blocks<K>, nk / K, gio, r);
      }))
    LIERE_CUDA_LAUNCH(k_gather, nk, gio, r);
  if (by_tiles(r, B)) {
    const std::int64_t from = std::int64_t(r.first) * stok, to = std::int64_t(r.first) * D;
    Tiles io = tiles_of(r, H, D, B);
    io.x[0] = {sq + from, sb, stok, D};
    io.x[1] = {sk + from, sb, stok, D};
    io.out[0] = {qh + to, std::int64_t(H) * T * D, D, std::int64_t(T) * D};
    io.out[1] = {kh + to, std::int64_t(H) * TP * D, D, std::int64_t(TP) * D};
    LIERE_CUDA_LAUNCH_AS("k_rotate_tiles", k_rotate_tiles, dim3(unsigned(io.products()), row_tiles(B)),
                         kernels::kTileThreads, io);
  } else if (r.by_gemm) {
    const HeadsLayout src{sb, stok}, dq = heads_layout(T, H, D), dk = heads_layout(TP, H, D);
    const std::int64_t from = std::int64_t(r.first) * stok, to = std::int64_t(r.first) * D;
    for (int h = 0; h < H; ++h)
      if (r.tables[h]) {
        const std::int64_t hs = from + std::int64_t(h) * D;
        rotate_gemms<float>(table_view(r, h, D), sq + hs, src, qh + to + std::int64_t(h) * T * D, dq, B, DeviceGemms{});
        rotate_gemms<float>(table_view(r, h, D), sk + hs, src, kh + to + std::int64_t(h) * TP * D, dk, B,
                            DeviceGemms{});
      }
  }
  const float scale = 1.f / std::sqrt(float(D));
  const long long TD = (long long)T * D, TPD = (long long)TP * D, TT = (long long)T * TP;
  // 16-bit packs rounded once (set_attention_packs): q̂ and k̂ here, P and V after the softmax; kept for the backward.
  const Precision prec = gemm_precision();
  const bool packs = g_attention_packs && (prec == Precision::bf16 || prec == Precision::fp16);
  const Index pd = bf16_pack_ld(D), pp = bf16_pack_ld(TP);
  DeviceBlock qh16, kh16, vh16, p16;
  if (packs) {
    qh16 = pack_16(qh, Index(B) * H * T, D, D, prec);
    kh16 = pack_16(kh, Index(B) * H * TP, D, D, prec);
    gemm_packed(prec, false, true, TI, TPI, DI, scale, h16(qh16), pd, h16(kh16), pd, 0.f, p, TP,
                {BH, T * pd, TP * pd, TT});
  } else {
    gemm_act(false, true, TI, TPI, DI, scale, qh, DI, kh, DI, 0.f, p, TP, {BH, TD, TPD, TT});
  }
  DeviceBlock maskb;
  if (a.key_mask) {
    maskb = DeviceBlock(std::size_t(rows));
    copy_to_device(maskb.get(), a.key_mask, std::size_t(rows));
  }
  LIERE_CUDA_LAUNCH(k_softmax, Index(B) * H * T * kWarp, p, maskb.get<std::uint8_t>(), T, TP, H, Index(B) * H * T);
  // O_h = P_h V_h into out (B, T, H·D): head h's rows HD apart at h·D, the samples T·HD apart.
  const int BI = blas_int(B, "attention on cuda", "B (the per-head GEMMs' count)");
  const long long HTP = (long long)H * T * TP, HTPD = (long long)H * TP * D, THD = (long long)T * HD;
  if (packs) {  // head h of sample b: P at (b·H + h)·T rows of the pack, V at (b·H + h)·TP
    p16 = pack_16(p, Index(B) * H * T, TP, TP, prec);
    vh16 = pack_16(vh, Index(B) * H * TP, D, D, prec);
    for (int h = 0; h < H; ++h)
      gemm_packed(prec, false, false, TI, DI, TPI, 1.f, h16(p16) + h * T * pp, pp, h16(vh16) + h * TP * pd, pd, 0.f,
                  out + h * D, HD, {BI, H * T * pp, H * TP * pd, THD});
  } else {
    for (int h = 0; h < H; ++h)
      gemm_act(false, false, TI, DI, TPI, 1.f, p + h * TT, TP, vh + h * TPD, DI, 0.f, out + h * D, HD,
               {BI, HTP, HTPD, THD});
  }
  st.s = a.s;
  st.tp = TP;
  st.transformed = transformed;
  if (a.backward) {
    st.qh = std::move(qhb), st.kh = std::move(khb), st.vh = std::move(vhb);
    st.xq = std::move(xqb), st.xk = std::move(xkb);
    st.qh16 = std::move(qh16), st.kh16 = std::move(kh16), st.vh16 = std::move(vh16), st.p16 = std::move(p16);
    st.p16_type = prec;
  }
  if (a.backward || a.keep_probs) st.p = std::move(pb);
}  // the blocks not kept go back to the pool (the kernels queued on them run first: one stream)

void Ops::attention_backward(const AttentionCall& a, const float* dout, AttentionState& state, float* dq, float* dk,
                             float* dv, const std::vector<float*>& dtables, const std::vector<float*>& dtransforms) {
  State& st = state_of(state);
  const int B = a.s.batch, T = a.s.tokens, H = a.s.heads, D = a.s.head_dim, HD = H * D;
  LIERE_ENSURE(st.s.batch == B && st.s.tokens == T && st.s.heads == H && st.s.head_dim == D,
               "attention_backward: the cache does not hold a forward of this shape");
  LIERE_ENSURE(st.qh && st.p,
               "attention_backward on cuda: the forward kept nothing for a backward (it ran without gradients, or "
               "this forward's backward already ran)");
  // The gather kernels write dk where they write dq (kernels/gather.hpp): both are wanted or neither.
  LIERE_ENSURE((dq == nullptr) == (dk == nullptr), "attention_backward on cuda: dq and dk are wanted together (got "
                                                       << (dq ? "dq" : "dk") << " alone)");
  const Index n = Index(B) * H * T * D, rows = Index(B) * T;
  const int TI = blas_int(T, "attention on cuda", "T (tokens)"), DI = blas_int(D, "attention on cuda", "D (head dim)");
  const int BH = blas_int(Index(B) * H, "attention on cuda", "B·H (batch × heads, the batched GEMMs' count)");
  const int TP = st.tp, TPI = blas_int(TP, "attention on cuda", "TP (keys, padded)");  // the forward's
  const Index nk = Index(B) * H * TP * D;
  const long long TD = (long long)T * D, TPD = (long long)TP * D, TT = (long long)T * TP;
  const float scale = 1.f / std::sqrt(float(D));
  DeviceBlock dvhb = device_floats(nk), dpb = device_floats(Index(B) * H * T * TP), dqhb = device_floats(n),
              dkhb = device_floats(nk);
  float *dvh = dvhb.get<float>(), *dp = dpb.get<float>(), *dqh = dqhb.get<float>(), *dkh = dkhb.get<float>();
  const float *P = st.p.get<float>(), *qh = st.qh.get<float>(), *kh = st.kh.get<float>(), *vh = st.vh.get<float>();
  // dO_h read where it lies in dout (B, T, H·D): rows HD apart at h·D, the samples T·HD apart; head by head.
  const int BI = blas_int(B, "attention on cuda", "B (the per-head GEMMs' count)");
  const long long HTP = (long long)H * T * TP, HTPD = (long long)H * TP * D, THD = (long long)T * HD;
  if (st.p16) {  // the forward's packs (set_attention_packs), dO and dS rounded once each
    const Index pd = bf16_pack_ld(D), pp = bf16_pack_ld(TP), po = bf16_pack_ld(HD);  // the forward's row lengths
    const Precision prec = st.p16_type;
    const DeviceBlock dO16 = pack_16(dout, Index(B) * T, HD, HD, prec);
    for (int h = 0; h < H; ++h) {  // head h of sample b: dO at b·T rows of its pack, h·D columns in
      const std::uint16_t* dO = h16(dO16) + h * D;
      if (dv)
        gemm_packed(prec, true, false, TPI, DI, TI, 1.f, h16(st.p16) + h * T * pp, pp, dO, po, 0.f, dvh + h * TPD, DI,
                    {BI, H * T * pp, T * po, HTPD});
      gemm_packed(prec, false, true, TI, TPI, DI, 1.f, dO, po, h16(st.vh16) + h * TP * pd, pd, 0.f, dp + h * TT, TP,
                  {BI, T * po, H * TP * pd, HTP});
    }
    LIERE_CUDA_LAUNCH(k_softmax_backward, Index(B) * H * T * kWarp, P, dp, T, TP, scale, Index(B) * H * T);
    const DeviceBlock dS16 = pack_16(dp, Index(B) * H * T, TP, TP, prec);
    gemm_packed(prec, false, false, TI, DI, TPI, 1.f, h16(dS16), pp, h16(st.kh16), pd, 0.f, dqh, DI,
                {BH, T * pp, TP * pd, TD});
    gemm_packed(prec, true, false, TPI, DI, TI, 1.f, h16(dS16), pp, h16(st.qh16), pd, 0.f, dkh, DI,
                {BH, T * pp, T * pd, TPD});
  } else {
    for (int h = 0; h < H; ++h) {
      const float* dO = dout + h * D;
      if (dv)
        gemm_act(true, false, TPI, DI, TI, 1.f, P + h * TT, TP, dO, HD, 0.f, dvh + h * TPD, DI, {BI, HTP, THD, HTPD});
      gemm_act(false, true, TI, TPI, DI, 1.f, dO, HD, vh + h * TPD, DI, 0.f, dp + h * TT, TP, {BI, THD, HTPD, HTP});
    }
    LIERE_CUDA_LAUNCH(k_softmax_backward, Index(B) * H * T * kWarp, P, dp, T, TP, scale, Index(B) * H * T);
    gemm_act(false, false, TI, DI, TPI, 1.f, dp, TP, kh, DI, 0.f, dqh, DI, {BH, TT, TPD, TD});
    gemm_act(true, false, TPI, DI, TI, 1.f, dp, TP, qh, DI, 0.f, dkh, DI, {BH, TT, TD, TPD});
  }

  const Rot r = rot_of(a);
  const bool transformed = any_transform(a);
  LIERE_ENSURE(transformed == st.transformed, "attention_backward: the transforms differ from the forward's");
  // Through the rotations: to dq, dk directly, or to dx̃ (scratch 7) when there are transforms.
  float* dxq = nullptr;
  float* dxk = nullptr;
  DeviceBlock dxb;
  if (transformed) {
    dxb = device_floats(2 * rows * HD);
    dxq = dxb.get<float>();
    dxk = dxq + rows * HD;
  }
  const std::int64_t udt = transformed ? HD : a.ld;
  const kernels::UnrotateIO uio{dqh, dkh, transformed ? dxq : dq, transformed ? dxk : dk, std::int64_t(T) * udt, udt,
                                transformed, dvh, dv, a.ld, B, T, TP, H, D};
  if (!with_chunk(flat_chunk(r, H, D), [&](auto k) {
        constexpr int K = decltype(k)::value;
        LIERE_CUDA_LAUNCH(k_unrotate_blocks<K>, n / K, uio, r);
      }))
    LIERE_CUDA_LAUNCH(k_unrotate, n, uio, r);
  const HeadsLayout gl = heads_layout(T, H, D), glk = heads_layout(TP, H, D);  // dq̂; dk̂ (padded keys)
  const std::int64_t gfrom = std::int64_t(r.first) * D;
  float* gq = transformed ? dxq : dq;
  float* gk = transformed ? dxk : dk;
  if (r.by_gemm && gq) {  // dx = R(t)ᵀ dq̂ (transforms: into dx̃, overwritten) or dq += R(t)ᵀ dq̂
    const HeadsLayout xl =
        transformed ? HeadsLayout{std::int64_t(T) * HD, HD} : HeadsLayout{std::int64_t(T) * a.ld, a.ld};
    const float beta = transformed ? 0.f : 1.f;
    if (by_tiles(r, B)) {
      Tiles io = tiles_of(r, H, D, B);
      io.dx = true;
      io.accumulate = beta != 0.f;
      io.x[0] = {dqh + gfrom, gl.batch, D, std::int64_t(T) * D};
      io.x[1] = {dkh + gfrom, glk.batch, D, std::int64_t(TP) * D};
      const std::int64_t x0 = std::int64_t(r.first) * xl.token;
      io.out[0] = {gq + x0, xl.batch, xl.token, D};
      io.out[1] = {gk + x0, xl.batch, xl.token, D};
      LIERE_CUDA_LAUNCH_AS("k_rotate_tiles", k_rotate_tiles, dim3(unsigned(io.products()), row_tiles(B)),
                           kernels::kTileThreads, io);
    } else {
      for (int h = 0; h < H; ++h)
        if (r.tables[h]) {
          const std::int64_t hg = gfrom + std::int64_t(h) * T * D, hgk = gfrom + std::int64_t(h) * TP * D;
          const std::int64_t hx = std::int64_t(r.first) * xl.token + std::int64_t(h) * D;
          rotate_backward_gemms<float>(table_view(r, h, D), dqh + hg, gl, gq + hx, xl, beta, B, DeviceGemms{});
          rotate_backward_gemms<float>(table_view(r, h, D), dkh + hgk, glk, gk + hx, xl, beta, B, DeviceGemms{});
        }
    }
  }
  // The tables' gradients (the inputs of the rotations: x̃ with transforms, else q and k).
  DTables d{};
  for (int h = 0; h < H && !dtables.empty(); ++h) {
    float* t = dtables[std::size_t(h)];
    if (!t || !r.tables[h]) continue;
    int u = 0;
    while (u < d.count && d.dtables[u] != t) ++u;
    if (u == d.count) d.dtables[d.count++] = t;
    d.heads[u] |= 1ull << h;
  }
  if (d.count > 0) {
    const float *xq = transformed ? st.xq.get<float>() : a.q, *xk = transformed ? st.xk.get<float>() : a.k;
    const std::int64_t sb = transformed ? std::int64_t(T) * HD : std::int64_t(T) * a.ld, stok = transformed ? HD : a.ld;
    // No two rotated heads' tables share a gradient (d holds each distinct one once): the tile kernel's products may
    // then run at once.
    int rotated = 0;
    for (int h = 0; h < H; ++h) rotated += dtables[std::size_t(h)] && r.tables[h];
    if (by_tiles(r, B) && d.count == rotated) {  // dR(t) += Σ_b dq̂ x̃_qᵀ + dk̂ x̃_kᵀ, every head in one launch
      Tiles io = tiles_of(r, H, D, B);
      for (int h = 0; h < H; ++h) io.dm[h] = dtables[std::size_t(h)];
      const std::int64_t x0 = std::int64_t(r.first) * stok;
      io.x[0] = {dqh + gfrom, gl.batch, D, std::int64_t(T) * D};
      io.x[1] = {dkh + gfrom, glk.batch, D, std::int64_t(TP) * D};
      io.y[0] = {xq + x0, sb, stok, D};
      io.y[1] = {xk + x0, sb, stok, D};
      io.sides = 2;
      LIERE_CUDA_LAUNCH_AS("k_rotate_tiles_grad", k_rotate_tiles_grad, unsigned(H * r.tr * io.nb),
                           kernels::kTileThreads, io);
    } else if (r.by_gemm) {  // dR(t) += Σ_b dq̂ x̃_qᵀ + dk̂ x̃_kᵀ, head after head
      const HeadsLayout xl{sb, stok};
      for (int h = 0; h < H; ++h) {
        float* dt = dtables[std::size_t(h)];
        if (!dt || !r.tables[h]) continue;
        const RotationTableView<float> dtab{dt, r.tr, D, r.block};
        const std::int64_t hg = gfrom + std::int64_t(h) * T * D, hgk = gfrom + std::int64_t(h) * TP * D;
        const std::int64_t hx = std::int64_t(r.first) * stok + std::int64_t(h) * D;
        rotate_grad_gemms<float>(dtab, dqh + hg, gl, xq + hx, xl, B, DeviceGemms{});
        rotate_grad_gemms<float>(dtab, dkh + hgk, glk, xk + hx, xl, B, DeviceGemms{});
      }
    } else {
      const Index entries = Index(d.count) * r.table_tokens * D * r.block;
      int chunk = 0, chunks = 0;
      dtables_runs(entries, B, r.table_tokens == r.tr, &chunk, &chunks);
      DeviceBlock partb = device_floats(entries * chunks);
      const kernels::DTablesIO dio{dqh, dkh, xq, xk, sb, stok, B, T, TP, H, D, chunk, chunks, partb.get<float>()};
      if (!with_chunk(flat_chunk(r, H, D), [&](auto k) {
            constexpr int K = decltype(k)::value;
            LIERE_CUDA_LAUNCH(k_dtables_blocks<K>, entries / K * chunks, dio, r, d);
          }))
        LIERE_CUDA_LAUNCH(k_dtables, entries * chunks, dio, r, d);
      LIERE_CUDA_LAUNCH(k_dtables_finish, entries, partb.get<float>(), entries, chunks, r, d);
    }
  }
  if (transformed) transforms_backward(a, dxq, dxk, dq, dk, dtransforms);
  st.release_inputs();  // the map stays (attention_probs); the temporaries go back as they leave scope
}

int attention_scores_ld(int tokens) { return scores_ld(tokens); }
void set_rotate_gemms(bool on) { g_rotate_gemms = on; }
void set_rotate_tiles(bool on) { g_rotate_tiles = on; }
bool rotate_tiles_on() { return g_rotate_tiles; }
void set_attention_packs(bool on) { g_attention_packs = on; }
bool attention_packs_on() { return g_attention_packs; }
bool rotate_gemms_on() { return g_rotate_gemms; }

std::vector<float> attention_probs(const AttentionState& state) {
  if (!state) return {};
  const State& st = *static_cast<const State*>(state.get());
  const std::size_t n = std::size_t(st.s.batch) * st.s.heads * st.s.tokens * st.s.tokens;
  LIERE_ENSURE(st.p || n == 0,
               "the attention map on cuda: the last forward ran without gradients and did not keep its map "
               "(ask for it before the forward: nn::Attention::keep_probs(true))");
  std::vector<float> host(n);
  const int T = st.s.tokens, TP = st.tp;  // rows of T, TP apart on the device
  if (n)
    LIERE_CUDA_CHECK(cudaMemcpy2D(host.data(), std::size_t(T) * sizeof(float), st.p.get(),
                                  std::size_t(TP) * sizeof(float), std::size_t(T) * sizeof(float), n / std::size_t(T),
                                  cudaMemcpyDeviceToHost));
  return host;
}

std::size_t attention_state_bytes(const AttentionState& state) {
  if (!state) return 0;
  const State& st = *static_cast<const State*>(state.get());
  std::size_t n = 0;
  for (const DeviceBlock* b : {&st.qh, &st.kh, &st.vh, &st.p, &st.xq, &st.xk, &st.qh16, &st.kh16, &st.vh16, &st.p16})
    n += b->capacity();
  return n;
}

}  // namespace liere::cuda
