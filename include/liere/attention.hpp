// liere/attention.hpp — multi-head self-attention with a rotary position encoding applied to q and k,
// forward and backward on plain buffers, so that any engine can call it on its own memory.
//
// B batch, T tokens, H heads, D head dim.
//   q, k, v   element (b, t, h, i) at b·T·ld + t·ld + h·D + i: ld = H·D for three separate buffers, 3·H·D for
//             a packed qkv buffer (B, T, 3, H, D) as a fused Linear produces it (pass q = qkv, k = qkv + H·D,
//             v = qkv + 2·H·D)
//   out       (B, T, H, D) contiguous, i.e. (B, T, C) with C = H·D, ready for the output projection
//   key_mask  (B, T) bytes, 0 marks a padded key that no query may attend to; empty: attend to all
//
// Per head h the position encoding is an optional dense D×D transform P_h (STRING's learned orthogonal
// matrix) applied to every token, then an optional rotation table (pe/rotation_table.hpp) applied to the
// tokens [first_rotated, T): q̂ = R(p)·P·q, k̂ = R(p)·P·k, and
//   scores = q̂ k̂ᵀ / √D  (masked keys: −∞),  probs = softmax(scores),  out = probs · v.
// A full rotation Pᵀ·R(p)·P would give the same scores: Pᵀ is orthogonal and cancels in q̂ᵀk̂, so it is not
// applied. Values are never rotated.
//
// The backward accumulates (+=) into dq, dk, dv (the layout of q, k, v) and into each head's dtable and
// dtransform. The probabilities stay in the cache after the forward: cache.probs (B, H, T, T) is the
// attention map.
//
// The loops are the CPU backend's (backend/cpu/attention.hpp: a fused path for small blocks, a general one for
// transforms and large blocks); this header is the public call on host memory. The engine's attention op
// (nn/attention.hpp) dispatches to the same loops, or to the CUDA backend for device tensors.
//
// flash_attention_forward / flash_attention_backward take the same arguments and give the same results in O(T)
// extra memory (backend/cpu/flash_attention.hpp: tiles, online softmax, the backward recomputes the tiles); the
// cache then keeps the output and one log-sum-exp per query (cache.lse, (B, H, T)) and no attention map.
#pragma once

#include <cstdint>
#include <liere/backend/cpu/attention.hpp>
#include <liere/backend/cpu/flash_attention.hpp>
#include <liere/backend/types.hpp>
#include <liere/pe/views.hpp>
#include <liere/rotate.hpp>
#include <span>
#include <vector>

namespace liere {

// Forward: out = softmax(q̂ k̂ᵀ / √D) v per (b, h); cache keeps what the backward needs (cache.probs: the map).
template <class Scalar>
void attention_forward(const AttentionShape& s, const Scalar* q, const Scalar* k, const Scalar* v, std::int64_t ld,
                       const AttentionRotations<Scalar>& rot, std::span<const std::uint8_t> key_mask, Scalar* out,
                       AttentionCache<Scalar>& cache) {
  cpu::attention_forward<Scalar>(s, q, k, v, ld, rot, key_mask, out, cache);
}

// Backward: dq, dk, dv (layout of q, k, v) and the per-head dtable / dtransform accumulate.
template <class Scalar>
void attention_backward(const AttentionShape& s, const Scalar* q, const Scalar* k, const Scalar* v, std::int64_t ld,
                        const AttentionRotations<Scalar>& rot, std::span<const std::uint8_t> key_mask, const Scalar* dout,
                        AttentionCache<Scalar>& cache, Scalar* dq, Scalar* dk, Scalar* dv,
                        std::vector<HeadRotationGrad<Scalar>>* drot) {
  cpu::attention_backward<Scalar>(s, q, k, v, ld, rot, key_mask, dout, cache, dq, dk, dv, drot);
}

// The fused rotary flash attention: the results of attention_forward without the (B, H, T, T) map.
template <class Scalar>
void flash_attention_forward(const AttentionShape& s, const Scalar* q, const Scalar* k, const Scalar* v, std::int64_t ld,
                             const AttentionRotations<Scalar>& rot, std::span<const std::uint8_t> key_mask, Scalar* out,
                             AttentionCache<Scalar>& cache) {
  cpu::flash_attention_forward<Scalar>(s, q, k, v, ld, rot, key_mask, out, cache);
}

// Its backward: the gradients of attention_backward, accumulated the same way.
template <class Scalar>
void flash_attention_backward(const AttentionShape& s, const Scalar* q, const Scalar* k, const Scalar* v,
                              std::int64_t ld, const AttentionRotations<Scalar>& rot,
                              std::span<const std::uint8_t> key_mask, const Scalar* dout, AttentionCache<Scalar>& cache,
                              Scalar* dq, Scalar* dk, Scalar* dv, std::vector<HeadRotationGrad<Scalar>>* drot) {
  cpu::flash_attention_backward<Scalar>(s, q, k, v, ld, rot, key_mask, dout, cache, dq, dk, dv, drot);
}

}  // namespace liere
