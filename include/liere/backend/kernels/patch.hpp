// liere/backend/kernels/patch.hpp — the im2col index of the patch (tubelet) embedding, shared by the CPU tests
// and the CUDA kernel (one thread per element of cols); the CPU kernel copies whole patch rows instead.
#pragma once

#include <liere/backend/types.hpp>
#include <liere/core/config.hpp>

namespace liere::kernels {

// Where im2col's element k of patch row `row` comes from in x (B, C, T, H, W): the offset of that pixel.
// Column k is ((c·tt + dt)·p + dy)·p + dx, so the weight (D, K) is PyTorch's Conv3d/Conv2d weight flattened.
LIERE_HOST_DEVICE inline Index patch_source(const PatchGeometry& g, Index row, Index k) {
  const Index N = g.tokens(), nh = g.nh(), nw = g.nw(), p = g.p, tt = g.tt;
  const Index b = row / N, n = row % N;
  const Index it = n / (nh * nw), ih = (n / nw) % nh, iw = n % nw;
  const Index dx = k % p, dy = (k / p) % p, dt = (k / (p * p)) % tt, c = k / (p * p * tt);
  return (((b * g.C + c) * g.T + it * tt + dt) * g.H + ih * p + dy) * g.W + iw * p + dx;
}

}  // namespace liere::kernels
