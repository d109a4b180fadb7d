// liere/backend/cpu/patch_embed.hpp — patch (2D) and tubelet (3D) embedding: a convolution whose stride is
// its kernel, as im2col + one GEMM.
//
// B batch, C channels, T frames, H×W pixels; tubelets of tt frames × p × p pixels (2D: T = tt = 1);
// nt = T/tt, nh = H/p, nw = W/p; N = nt·nh·nw tokens in (t, h, w) row-major order; K = C·tt·p·p; D embed dim.
//   x (B, C, T, H, W) --im2col--> cols (B·N, K) --· Wᵀ + b--> y (B, N, D)
// Column k of cols is ((c·tt + dt)·p + dy)·p + dx, so W (D, K) is exactly PyTorch's Conv3d weight
// (D, C, tt, p, p) — or Conv2d's (D, C, p, p) — flattened: checkpoints map 1:1, and y equals
// conv(x).flatten(2).transpose(1, 2) as in timm's PatchEmbed.
// Backward: dW += dyᵀ cols, db += Σ dy, dcols = dy W, dx += col2im(dcols) (patches do not overlap, so
// col2im is a scatter without collisions). cols is recomputed in the backward instead of being saved; the
// caller lends the scratch buffer (B·N·K = B·C·T·H·W values) to both passes.
#pragma once

#include <cstring>
#include <liere/backend/cpu/common.hpp>
#include <liere/backend/cpu/linear.hpp>
#include <liere/backend/kernels/patch.hpp>
#include <liere/backend/types.hpp>

namespace liere::cpu {

// The patch rows p pixels at a time, from where kernels/patch.hpp says (the CUDA kernel's index, element by element).
template <class S>
void patch_im2col(const S* x,  // (B, C, T, H, W)
                  S* cols,     // (B·N, K)
                  const PatchGeometry& g) {
  const Index K = g.patch_size(), rows = g.B * g.tokens(), p = g.p;
#pragma omp parallel for schedule(static) if (rows * K > kGrain)
  for (Index row = 0; row < rows; ++row) {
    const S* src = x + kernels::patch_origin(g, row);
    S* out = cols + row * K;
    for (Index c = 0; c < g.C; ++c)
      for (Index dt = 0; dt < g.tt; ++dt)
        for (Index dy = 0; dy < p; ++dy, out += p)
          std::memcpy(out, src + kernels::patch_offset(g, c, dt, dy, 0), std::size_t(p) * sizeof(S));
  }
}

// dx += col2im(dcols)
template <class S>
void patch_col2im_accumulate(const S* dcols,  // (B·N, K)
                             S* dx,           // (B, C, T, H, W)
                             const PatchGeometry& g) {
  const Index K = g.patch_size(), rows = g.B * g.tokens(), p = g.p;
#pragma omp parallel for schedule(static) if (rows * K > kGrain)
  for (Index row = 0; row < rows; ++row) {
    S* dst = dx + kernels::patch_origin(g, row);
    const S* in = dcols + row * K;
    for (Index c = 0; c < g.C; ++c)
      for (Index dt = 0; dt < g.tt; ++dt)
        for (Index dy = 0; dy < p; ++dy, in += p) {
          S* d = dst + kernels::patch_offset(g, c, dt, dy, 0);
          for (Index j = 0; j < p; ++j) d[j] += in[j];
        }
  }
}

template <class S>
void patch_embed_forward(const S* x,     // (B, C, T, H, W)
                         const S* w,     // (D, K) = (D, C, tt, p, p)
                         const std::type_identity_t<S>* bias,  // (D) or nullptr
                         S* scratch,     // (B·N, K)
                         S* y,           // (B, N, D)
                         const PatchGeometry& g, Index D) {
  g.check();
  patch_im2col(x, scratch, g);
  linear_forward(scratch, w, bias, y, g.B * g.tokens(), g.patch_size(), D);
}

template <class S>
void patch_embed_backward(const S* x,   // (B, C, T, H, W)
                          const S* w,   // (D, K)
                          const S* dy,  // (B, N, D)
                          S* scratch,   // (B·N, K), overwritten
                          std::type_identity_t<S>* dx,  // (B, C, T, H, W) or nullptr
                          std::type_identity_t<S>* dw,  // (D, K) or nullptr
                          std::type_identity_t<S>* dbias,  // (D) or nullptr
                          const PatchGeometry& g, Index D) {
  const Index M = g.B * g.tokens(), K = g.patch_size();
  if (dw) {
    patch_im2col(x, scratch, g);
    gemm_act<S>(true, false, D, K, M, S(1), dy, scratch, S(1), dw);
  }
  if (dbias) colsum_accumulate(dy, M, D, D, dbias);
  if (dx) {
    gemm_act<S>(false, false, M, K, D, S(1), dy, w, S(0), scratch);
    patch_col2im_accumulate(scratch, dx, g);
  }
}

}  // namespace liere::cpu
