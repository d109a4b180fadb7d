// liere/backend/types.hpp — the shapes and layouts every backend's kernels take (B batch, T tokens, H heads,
// D head dim). Plain data: the same structs describe host and device buffers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <liere/core/config.hpp>
#include <liere/core/index.hpp>

namespace liere {

// The size of a multi-head attention problem.
struct AttentionShape {
  int batch = 0, tokens = 0, heads = 0, head_dim = 0;
  std::int64_t size() const { return std::int64_t(batch) * tokens * heads * head_dim; }
};

// The checks of an attention call that every backend makes, one definition (backend/cpu/attention.hpp and the CUDA
// seam, backend/cuda/ops.hpp): the shape, the token stride ld of q, k, v, the number of head rotations (0 or H),
// the first rotated token, the key mask's size (0 or B·T).
inline void check_attention(const AttentionShape& s, std::int64_t ld, std::size_t rot_heads, int first_rotated,
                            std::size_t key_mask_size) {
  LIERE_ENSURE(s.batch > 0 && s.tokens > 0 && s.heads > 0 && s.head_dim > 0,
               "attention: bad shape B=" << s.batch << " T=" << s.tokens << " H=" << s.heads << " D=" << s.head_dim);
  LIERE_ENSURE(ld >= std::int64_t(s.heads) * s.head_dim,
               "attention: the token stride " << ld << " is smaller than H·D = " << s.heads * s.head_dim);
  LIERE_ENSURE(rot_heads == 0 || rot_heads == std::size_t(s.heads),
               "attention: " << rot_heads << " head rotations for " << s.heads << " heads");
  LIERE_ENSURE(first_rotated >= 0 && first_rotated <= s.tokens,
               "attention: first_rotated " << first_rotated << " outside [0, " << s.tokens << "]");
  LIERE_ENSURE(key_mask_size == 0 || key_mask_size == std::size_t(s.batch) * s.tokens,
               "attention: the key mask has " << key_mask_size << " entries, expected B x T = " << s.batch << " x "
                                              << s.tokens << " = " << std::size_t(s.batch) * s.tokens);
}
// attention_backward's gradients of the rotations: none (drot_size 0 with no vector) or one per head rotation.
inline void check_attention_grads(bool has_drot, std::size_t drot_size, std::size_t rot_heads) {
  LIERE_ENSURE(!has_drot || drot_size == rot_heads,
               "attention_backward: " << (has_drot ? drot_size : 0) << " rotation gradients for " << rot_heads
                                      << " head rotations");
}

// A strided batch of GEMMs (cuda::gemm, backend/rotate_gemms.hpp): count ≥ 1 products, the i-th on A + i·a,
// B + i·b, C + i·c (strides in elements); count 0: one product, no batch.
struct GemmBatch {
  Index count = 0;
  Index a = 0, b = 0, c = 0;
};

// Where element (b, t, h, i) of a (B, T, H, D) buffer lives: b·batch + t·token + h·D + i. Contiguous buffers
// have token = H·D and batch = T·H·D; a packed qkv buffer has token = 3·H·D.
struct HeadsLayout {
  std::int64_t batch = 0, token = 0;
  static HeadsLayout contiguous(int tokens, int heads, int head_dim) {
    return {std::int64_t(tokens) * heads * head_dim, std::int64_t(heads) * head_dim};
  }
};

// Patch (2D) and tubelet (3D) embedding: B batch, C channels, T frames, H×W pixels; tubelets of tt frames × p × p
// pixels (2D: T = tt = 1); N = (T/tt)·(H/p)·(W/p) tokens in (t, h, w) row-major order; K = C·tt·p·p.
struct PatchGeometry {
  Index B = 0, C = 0, T = 1, H = 0, W = 0;  // input (B, C, T, H, W)
  Index tt = 1, p = 1;                      // tubelet frames, patch side

  LIERE_HOST_DEVICE Index nt() const { return T / tt; }
  LIERE_HOST_DEVICE Index nh() const { return H / p; }
  LIERE_HOST_DEVICE Index nw() const { return W / p; }
  LIERE_HOST_DEVICE Index tokens() const { return nt() * nh() * nw(); }  // N
  LIERE_HOST_DEVICE Index patch_size() const { return C * tt * p * p; }   // K
  LIERE_HOST_DEVICE Index input_size() const { return B * C * T * H * W; }

  void check() const {
    LIERE_ENSURE(B >= 0 && C > 0 && T > 0 && H > 0 && W > 0 && tt > 0 && p > 0,
                 "patch_embed: bad geometry B=" << B << " C=" << C << " T=" << T << " H=" << H << " W=" << W
                                                << " tubelet=" << tt << " patch=" << p);
    LIERE_ENSURE(T % tt == 0 && H % p == 0 && W % p == 0,
                 "patch_embed: input (T, H, W) = (" << T << ", " << H << ", " << W << ") is not a multiple of the tubelet ("
                                                   << tt << ", " << p << ", " << p << ")");
  }
};

// `head` argument of the rotation kernels: every head.
inline constexpr int kAllHeads = -1;

// A batch of rotation tables (backend/cpu/rotation_table.hpp, backend/cuda/rotation_table.cu): `sets` parameter
// sets of `dim` position axes, each head_dim/block blocks of block(block−1)/2 generator coordinates, stored
// (sets, dim, head_dim/block, block(block−1)/2); `rows` positions (rows, dim) shared by the sets; the table
// (sets·rows, head_dim/block, block, block), set s's rows at [s·rows, (s + 1)·rows).
struct RotationTableShape {
  int sets = 1, dim = 2, rows = 0, head_dim = 64, block = 8;
  LIERE_HOST_DEVICE int num_blocks() const { return head_dim / block; }
  LIERE_HOST_DEVICE int coords_per_block() const { return block * (block - 1) / 2; }
  LIERE_HOST_DEVICE std::int64_t num_generators() const { return std::int64_t(sets) * dim * num_blocks() * coords_per_block(); }
  LIERE_HOST_DEVICE std::int64_t table_size() const { return std::int64_t(sets) * rows * head_dim * block; }
  LIERE_HOST_DEVICE std::int64_t num_matrices() const { return std::int64_t(sets) * rows * num_blocks(); }
  // Matrix i of the table (i = (set·rows + t)·num_blocks() + k): where its block's coordinates start in the
  // generators (axis 0; axis a is num_blocks()·coords_per_block() further per axis) and its position row t.
  LIERE_HOST_DEVICE std::int64_t generator_offset(std::int64_t i) const {
    const std::int64_t row = i / num_blocks(), set = row / rows;
    return (set * dim * num_blocks() + i % num_blocks()) * coords_per_block();
  }
  LIERE_HOST_DEVICE int position_row(std::int64_t i) const { return int((i / num_blocks()) % rows); }
};

}  // namespace liere
