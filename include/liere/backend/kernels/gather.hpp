// liere/backend/kernels/gather.hpp — attention's gather into the heads' layout with the rotation, its backward, and
// the rotation tables' gradient, one output value (or one block of the rotation) per call: the bodies of
// backend/cuda/attention.cu's kernels, which run them a thread per call, and of test_kernels, which runs them on the
// CPU against each other and against rotate_row (rotate.hpp). The CPU's attention has its own loops
// (backend/cpu/attention.hpp); these follow the GPU's layouts.
//
// B batch, T tokens, TP ≥ T padded keys (their rows zero), H heads, D head dim, f = rot.first the first rotated
// token, tr = T − f. q, k are read at src + b·sb + t·st + h·D (the packed qkv rows, or x̃ = P·x); q̂ is (B, H, T, D),
// k̂ and v (B, H, TP, D). A head's table holds table_tokens rows of nb = D / block blocks of block × block: one row
// per rotated token (shared by the batch: table_tokens = tr) or per sequence and token (table_tokens = B·tr).
//   gather_value      q̂, k̂, v at one index of k̂: q̂ = R(t)·q blockwise (rotate_entry), tokens < f and heads
//                     without a table copied, the padded keys zero; rotated entries left alone when by_gemm (the
//                     GEMMs of rotate_gemms.hpp write them)
//   gather_block<K>   the same for the K values of one block (K = the rotation's block where it rotates, any K
//                     dividing D where it only copies): its inputs and table block read once, the same sums
//   unrotate_value    dq (dk) at one index: R(t)ᵀ dq̂ (rotate_backward_entry), assigned or accumulated; dv += dV
//   unrotate_block<K> the same for K values
//   dtables_entry     one entry (row, kb, i, j) of a unique table's gradient, summed over its heads and one run of
//                     the batch: Σ dq̂_i x̃q_j + dk̂_i x̃k_j, heads then sequences in order; written to
//                     part[run · entries + entry] (the runs are added in order afterwards)
//   dtables_line<K>   the K entries (row, kb, i, 0…K−1), which share dq̂_i and dk̂_i: the same sums
// Every value is a sum in the same order either way, so the block forms give the value forms' bits where the
// compiler contracts the products the same (the GPU's FMAs; a CPU compiler that vectorises the unrolled block may
// not).
#pragma once

#include <cstdint>
#include <liere/backend/kernels/rotate.hpp>
#include <liere/core/config.hpp>
#include <liere/core/index.hpp>

namespace liere::kernels {

// The rotations of one attention call, by value into a kernel: per head its table or nullptr (not rotated).
template <int MaxHeads>
struct HeadRotations {
  const float* tables[MaxHeads];
  int block, nb, table_tokens, first, tr;
  bool by_gemm;  // the rotated entries are the GEMMs' (blocks above kGemmRotationAbove, shared tables)
};

// Where gather reads and writes (see above).
struct GatherIO {
  const float *sq, *sk;
  std::int64_t sb, st;
  const float* v;  // v at v + (b·T + t)·ld + h·D
  std::int64_t ld;
  float *qh, *kh, *vh;
  int B, T, TP, H, D;
};

// Where unrotate reads and writes: dq̂ (B, H, T, D), dk̂ and dV (B, H, TP, D); dq, dk at b·db + t·dt + h·D (null:
// not wanted), dv at (b·T + t)·ldv + h·D (null: not wanted).
struct UnrotateIO {
  const float *dqh, *dkh;
  float *dq, *dk;
  std::int64_t db, dt;
  bool overwrite;
  const float* dvh;
  float* dv;
  std::int64_t ldv;
  int B, T, TP, H, D;
};

// The unique tables whose gradients are summed: dtables[u] gets the heads of bit mask heads[u].
template <int MaxHeads>
struct TableGrads {
  float* dtables[MaxHeads];
  unsigned long long heads[MaxHeads];
  int count;
};

// Where the tables' gradient reads (dq̂, dk̂ as UnrotateIO; x̃q, x̃k as GatherIO's sources) and its partial sums go:
// `chunks` runs of `chunk` sequences (shared tables; per-sequence tables: one run).
struct DTablesIO {
  const float *dqh, *dkh, *xq, *xk;
  std::int64_t sb, st;
  int B, T, TP, H, D, chunk, chunks;
  float* part;
};

// The table block of head h, token t (≥ first) of sequence b that covers value i of the head.
template <class R>
LIERE_HOST_DEVICE inline const float* table_block(const R& r, int h, Index b, int t, int i) {
  const Index row = r.table_tokens == r.tr ? Index(t - r.first) : b * r.tr + (t - r.first);
  return r.tables[h] + (row * r.nb + i / r.block) * r.block * r.block;
}

// gather: calls for kidx < gather_values(io) (one per value of k̂) or c < gather_values(io) / K.
LIERE_HOST_DEVICE inline Index gather_values(const GatherIO& io) { return Index(io.B) * io.H * io.TP * io.D; }

template <class R>
LIERE_HOST_DEVICE inline void gather_value(const GatherIO& io, const R& r, Index kidx) {
  const int D = io.D, TP = io.TP, T = io.T, H = io.H;
  const int i = int(kidx % D), t = int((kidx / D) % TP), h = int((kidx / (Index(D) * TP)) % H);
  const Index b = kidx / (Index(D) * TP * H);
  if (t >= T) {
    io.kh[kidx] = 0.f;
    io.vh[kidx] = 0.f;
    return;
  }
  const Index qidx = ((b * H + h) * T + t) * D + i;
  const std::int64_t off = b * io.sb + t * io.st + h * D;
  if (r.tables[h] && t >= r.first) {
    if (!r.by_gemm) {
      const float* blk = table_block(r, h, b, t, i);
      const int base = i - i % r.block;
      io.qh[qidx] = rotate_entry(blk, r.block, io.sq + off + base, i % r.block);
      io.kh[kidx] = rotate_entry(blk, r.block, io.sk + off + base, i % r.block);
    }
  } else {
    io.qh[qidx] = io.sq[off + i];
    io.kh[kidx] = io.sk[off + i];
  }
  io.vh[kidx] = io.v[(b * T + t) * io.ld + h * D + i];
}

template <int K, class R>
LIERE_HOST_DEVICE inline void gather_block(const GatherIO& io, const R& r, Index c) {
  const int D = io.D, TP = io.TP, T = io.T, H = io.H, nbk = D / K;
  const int i0 = int(c % nbk) * K, t = int((c / nbk) % TP), h = int((c / (Index(nbk) * TP)) % H);
  const Index b = c / (Index(nbk) * TP * H);
  const Index kidx = ((b * H + h) * TP + t) * D + i0;
  if (t >= T) {
    for (int i = 0; i < K; ++i) io.kh[kidx + i] = io.vh[kidx + i] = 0.f;
    return;
  }
  const Index qidx = ((b * H + h) * T + t) * D + i0;
  const std::int64_t off = b * io.sb + t * io.st + h * D + i0;
  if (r.tables[h] && t >= r.first) {
    if (!r.by_gemm) {
      const float* blk = table_block(r, h, b, t, i0);
      float xq[K], xk[K];
      for (int j = 0; j < K; ++j) xq[j] = io.sq[off + j], xk[j] = io.sk[off + j];
      for (int i = 0; i < K; ++i) {
        io.qh[qidx + i] = rotate_entry(blk, K, xq, i);
        io.kh[kidx + i] = rotate_entry(blk, K, xk, i);
      }
    }
  } else {
    for (int i = 0; i < K; ++i) io.qh[qidx + i] = io.sq[off + i], io.kh[kidx + i] = io.sk[off + i];
  }
  const float* vs = io.v + (b * T + t) * io.ld + h * D + i0;
  for (int i = 0; i < K; ++i) io.vh[kidx + i] = vs[i];
}

// unrotate: calls for idx < unrotate_values(io) (one per value of dq̂) or c < unrotate_values(io) / K.
LIERE_HOST_DEVICE inline Index unrotate_values(const UnrotateIO& io) { return Index(io.B) * io.H * io.T * io.D; }

template <class R>
LIERE_HOST_DEVICE inline void unrotate_value(const UnrotateIO& io, const R& r, Index idx) {
  const int D = io.D, TP = io.TP, T = io.T, H = io.H;
  const int i = int(idx % D), t = int((idx / D) % T), h = int((idx / (Index(D) * T)) % H);
  const Index b = idx / (Index(D) * T * H);
  const Index kidx = ((b * H + h) * TP + t) * D + i;
  float gq, gk;
  const bool rotated = r.tables[h] && t >= r.first;
  if (rotated && r.by_gemm) {
    gq = gk = 0.f;  // the GEMMs' entries
  } else if (rotated) {
    const float* blk = table_block(r, h, b, t, i);
    gq = rotate_backward_entry(blk, r.block, io.dqh + (idx - i % r.block), i % r.block);
    gk = rotate_backward_entry(blk, r.block, io.dkh + (kidx - i % r.block), i % r.block);
  } else {
    gq = io.dqh[idx];
    gk = io.dkh[kidx];
  }
  if (io.dq && !(rotated && r.by_gemm)) {
    const std::int64_t o = b * io.db + std::int64_t(t) * io.dt + h * D + i;
    io.dq[o] = io.overwrite ? gq : io.dq[o] + gq;
    io.dk[o] = io.overwrite ? gk : io.dk[o] + gk;
  }
  if (io.dv) io.dv[(b * T + t) * io.ldv + h * D + i] += io.dvh[kidx];
}

template <int K, class R>
LIERE_HOST_DEVICE inline void unrotate_block(const UnrotateIO& io, const R& r, Index c) {
  const int D = io.D, TP = io.TP, T = io.T, H = io.H, nbk = D / K;
  const int i0 = int(c % nbk) * K, t = int((c / nbk) % T), h = int((c / (Index(nbk) * T)) % H);
  const Index b = c / (Index(nbk) * T * H);
  const Index idx = ((b * H + h) * T + t) * D + i0, kidx = ((b * H + h) * TP + t) * D + i0;
  const bool rotated = r.tables[h] && t >= r.first;
  if (io.dq && !(rotated && r.by_gemm)) {  // by_gemm: the GEMMs' entries
    float gq[K], gk[K];
    if (rotated) {
      const float* blk = table_block(r, h, b, t, i0);
      for (int j = 0; j < K; ++j) {
        gq[j] = rotate_backward_entry(blk, K, io.dqh + idx, j);
        gk[j] = rotate_backward_entry(blk, K, io.dkh + kidx, j);
      }
    } else {
      for (int j = 0; j < K; ++j) gq[j] = io.dqh[idx + j], gk[j] = io.dkh[kidx + j];
    }
    const std::int64_t o = b * io.db + std::int64_t(t) * io.dt + h * D + i0;
    for (int j = 0; j < K; ++j) {
      io.dq[o + j] = io.overwrite ? gq[j] : io.dq[o + j] + gq[j];
      io.dk[o + j] = io.overwrite ? gk[j] : io.dk[o + j] + gk[j];
    }
  }
  if (io.dv)
    for (int j = 0; j < K; ++j) io.dv[(b * T + t) * io.ldv + h * D + i0 + j] += io.dvh[kidx + j];
}

// The tables' gradient: d.count · table_tokens · nb · block² entries (dtables_entries), each summed in `chunks`
// runs: calls for idx < entries · chunks, or (dtables_line<K>) c < entries / K · chunks.
template <class R, class G>
LIERE_HOST_DEVICE inline Index dtables_entries(const R& r, const G& d) {
  return Index(d.count) * r.table_tokens * r.nb * r.block * r.block;
}

template <class R, class G>
LIERE_HOST_DEVICE inline void dtables_entry(const DTablesIO& io, const R& r, const G& d, Index idx) {
  const int bb = r.block * r.block, T = io.T, TP = io.TP, H = io.H, D = io.D;
  const Index per = Index(r.table_tokens) * r.nb * bb, entries = Index(d.count) * per;
  const Index e = idx % entries;
  const int c = int(idx / entries);
  const int u = int(e / per);
  const Index rem = e % per;
  const int j = int(rem % r.block), i = int((rem / r.block) % r.block), kb = int((rem / bb) % r.nb);
  const Index row = rem / (Index(r.nb) * bb);
  const bool shared = r.table_tokens == r.tr;
  const Index b0 = shared ? Index(c) * io.chunk : row / r.tr;
  const Index b1 = shared ? (b0 + io.chunk < io.B ? b0 + io.chunk : io.B) : b0 + 1;
  const int t = r.first + int(shared ? row : row % r.tr);
  float acc = 0.f;
  for (int h = 0; h < H; ++h) {
    if (!((d.heads[u] >> h) & 1ull)) continue;
    const int di = kb * r.block + i, xj = kb * r.block + j;
    for (Index b = b0; b < b1; ++b) {
      const Index gq = ((b * H + h) * T + t) * D, gk = ((b * H + h) * TP + t) * D;  // dq̂ T rows, dk̂ TP
      const std::int64_t x = b * io.sb + std::int64_t(t) * io.st + h * D;
      acc += io.dqh[gq + di] * io.xq[x + xj] + io.dkh[gk + di] * io.xk[x + xj];
    }
  }
  io.part[idx] = acc;
}

template <int K, class R, class G>
LIERE_HOST_DEVICE inline void dtables_line(const DTablesIO& io, const R& r, const G& d, Index idx) {
  constexpr int bb = K * K;
  const int T = io.T, TP = io.TP, H = io.H, D = io.D;
  const Index per = Index(r.table_tokens) * r.nb * bb, entries = Index(d.count) * per, lines = entries / K;
  const Index e0 = (idx % lines) * K;  // the entry (…, i, 0)
  const int c = int(idx / lines);
  const int u = int(e0 / per);
  const Index rem = e0 % per;
  const int i = int((rem / K) % K), kb = int((rem / bb) % r.nb);
  const Index row = rem / (Index(r.nb) * bb);
  const bool shared = r.table_tokens == r.tr;
  const Index b0 = shared ? Index(c) * io.chunk : row / r.tr;
  const Index b1 = shared ? (b0 + io.chunk < io.B ? b0 + io.chunk : io.B) : b0 + 1;
  const int t = r.first + int(shared ? row : row % r.tr);
  float acc[K] = {};
  for (int h = 0; h < H; ++h) {
    if (!((d.heads[u] >> h) & 1ull)) continue;
    const int di = kb * K + i, x0 = kb * K;
    for (Index b = b0; b < b1; ++b) {
      const Index gq = ((b * H + h) * T + t) * D, gk = ((b * H + h) * TP + t) * D;
      const std::int64_t x = b * io.sb + std::int64_t(t) * io.st + h * D + x0;
      const float dq = io.dqh[gq + di], dk = io.dkh[gk + di];
      for (int j = 0; j < K; ++j) acc[j] += dq * io.xq[x + j] + dk * io.xk[x + j];
    }
  }
  for (int j = 0; j < K; ++j) io.part[Index(c) * entries + e0 + j] = acc[j];
}

}  // namespace liere::kernels
