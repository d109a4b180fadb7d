// liere/backend/kernels/patch.hpp — where the patch (tubelet) embedding's im2col takes each value from, shared by
// the CPU kernel (backend/cpu/patch_embed.hpp: whole patch rows of p pixels, memcpy) and the CUDA kernels
// (backend/cuda/linear.cu: one thread per element of cols), and checked against each other by the CPU tests.
//
// Element k of patch row `row` of cols (B·N, K) is pixel x[b, c, it·tt + dt, ih·p + dy, iw·p + dx] of x (B, C, T, H,
// W), with row = b·N + n, n = (it·nh + ih)·nw + iw, and k = ((c·tt + dt)·p + dy)·p + dx, so the weight (D, K) is
// PyTorch's Conv3d/Conv2d weight flattened. Its offset in x is patch_origin(row) + patch_offset(c, dt, dy, dx).
#pragma once

#include <liere/backend/types.hpp>
#include <liere/core/config.hpp>

namespace liere::kernels {

// The offset in x of the first pixel (c = dt = dy = dx = 0) of patch row `row`.
LIERE_HOST_DEVICE inline Index patch_origin(const PatchGeometry& g, Index row) {
  const Index N = g.tokens(), nh = g.nh(), nw = g.nw();
  const Index b = row / N, n = row % N;
  const Index it = n / (nh * nw), ih = (n / nw) % nh, iw = n % nw;
  return ((b * g.C * g.T + it * g.tt) * g.H + ih * g.p) * g.W + iw * g.p;
}

// The offset of pixel (c, dt, dy, dx) of a patch from the patch's origin.
LIERE_HOST_DEVICE inline Index patch_offset(const PatchGeometry& g, Index c, Index dt, Index dy, Index dx) {
  return ((c * g.T + dt) * g.H + dy) * g.W + dx;
}

// Where im2col's element k of patch row `row` comes from in x: the offset of that pixel.
LIERE_HOST_DEVICE inline Index patch_source(const PatchGeometry& g, Index row, Index k) {
  const Index p = g.p, tt = g.tt;
  return patch_origin(g, row) + patch_offset(g, k / (p * p * tt), (k / (p * p)) % tt, (k / p) % p, k % p);
}

}  // namespace liere::kernels
