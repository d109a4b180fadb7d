// liere/backend/cuda/api.hpp — the CUDA kernels of the engine as plain functions on device pointers, in float:
// what CudaOps (ops.hpp) forwards to. The .cu files beside this header define them; they include nothing that
// needs Eigen, so nvcc compiles them without it.
//
// Names, arguments and accumulation rules are those of the CPU kernels in backend/cpu/ (see there for the
// maths); every pointer is device memory unless its comment says host.
// N rows, C features, OC output features, B batch, T tokens, H heads, D head dim, K classes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <liere/backend/kernels/adam.hpp>
#include <liere/backend/types.hpp>
#include <liere/core/index.hpp>
#include <memory>
#include <vector>

namespace liere::cuda {

// ---- memory and glue (elementwise.cu) --------------------------------------------------------------------------
void fill(float* p, Index n, float v);
void accumulate(const float* s, float* d, Index n);
void add_forward(const float* a, const float* b, float* y, Index n);
void add_backward(const float* dy, float* da, float* db, Index n, bool overwrite_a, bool overwrite_b);
void add_broadcast_forward(const float* x, const float* p, float* y, Index R, Index M);
void add_broadcast_backward(const float* dy, float* dx, float* dp, Index R, Index M);
void mul_forward(const float* a, const float* b, float* y, Index n);
void mul_backward(const float* a, const float* b, const float* dy, float* da, float* db, Index n);
void scale_forward(const float* x, float s, float* y, Index n);
void scale_backward(float s, const float* dy, float* dx, Index n);
void sum_forward(const float* x, float* y, Index n);       // y[0] = Σ x (fixed order)
void sum_backward(const float* dy, float* dx, Index n);    // dx += dy[0]
// out (C) += Σ_n a[n, :], a (N, C) with row stride lda; partial sums over fixed chunks of rows, added in order.
void colsum_accumulate(const float* a, Index N, Index C, Index lda, float* out);

// ---- pointwise, tokens, loss, optimizer (elementwise.cu) -------------------------------------------------------
void gelu_forward(const float* x, float* y, Index n);
void gelu_backward(const float* x, const float* dy, float* dx, Index n, bool overwrite);
void dropout_forward(const float* x, double p, std::uint64_t key, float* y, std::uint8_t* mask, Index n);
void dropout_backward(const std::uint8_t* mask, double p, const float* dy, float* dx, Index n, bool overwrite);
void prepend_token_forward(const float* x, const float* tok, float* y, Index B, Index N, Index D);
void prepend_token_backward(const float* dy, float* dx, float* dtok, Index B, Index N, Index D);
void select_token_forward(const float* x, float* y, Index B, Index T, Index D, Index t);
void select_token_backward(const float* dy, float* dx, Index B, Index T, Index D, Index t);
void mean_tokens_forward(const float* x, float* y, Index B, Index T, Index D, Index t0);
void mean_tokens_backward(const float* dy, float* dx, Index B, Index T, Index D, Index t0);
void softmax_cross_entropy_forward(const float* logits, const int* labels, double smoothing, float* probs,
                                   float* row_loss, float* loss, Index B, Index K);
void softmax_cross_entropy_backward(const float* probs, const int* labels, double smoothing, const float* dloss,
                                    float* dlogits, Index B, Index K);
void adam_update(float* theta, const float* g, float* m, float* v, Index n, const kernels::AdamStep<float>& step);
double sum_squares(const float* x, Index n);
void scale(float* x, Index n, float c);

// ---- layer norm (elementwise.cu) -------------------------------------------------------------------------------
void layernorm_forward(const float* x, const float* g, const float* b, float* y, float* mean, float* rstd, Index N,
                       Index C, double eps);
void layernorm_backward(const float* x, const float* g, const float* mean, const float* rstd, const float* dy,
                        float* dx, float* dg, float* db, float* scratch, Index N, Index C);

// ---- cuBLAS: linear layers, patch embedding (linear.cu) --------------------------------------------------------
// Row-major C (M, N) = alpha · op(A) · op(B) + beta · C, like cpu::gemm.
void gemm(bool ta, bool tb, Index M, Index N, Index K, float alpha, const float* A, Index lda, const float* B,
          Index ldb, float beta, float* C, Index ldc);
void linear_forward(const float* x, const float* w, const float* b, float* y, Index N, Index C, Index OC);
void linear_backward(const float* x, const float* w, const float* dy, float* dx, float* dw, float* db, Index N,
                     Index C, Index OC, bool overwrite_dx);
void patch_embed_forward(const float* x, const float* w, const float* bias, float* scratch, float* y,
                         const PatchGeometry& g, Index D);
void patch_embed_backward(const float* x, const float* w, const float* dy, float* scratch, float* dx, float* dw,
                          float* dbias, const PatchGeometry& g, Index D);

// ---- attention (attention.cu) ----------------------------------------------------------------------------------
inline constexpr int kMaxHeads = 64;

// One attention call: q, k, v (B, T, H, D) rows `ld` apart (the packed qkv buffer), the rotations of each head.
struct AttentionCall {
  AttentionShape s;
  const float *q = nullptr, *k = nullptr, *v = nullptr;
  std::int64_t ld = 0;
  int first_rotated = 0;                // tokens [0, first_rotated) are not rotated
  int block = 0, table_tokens = 0;      // every head's table: (table_tokens, D/block, block, block)
  std::vector<const float*> tables;     // H entries (nullptr: that head is not rotated), or empty
  std::vector<const float*> transforms; // H entries (nullptr: none), or empty: D×D applied before the table
  const std::uint8_t* key_mask = nullptr;  // host (B, T) or nullptr
  bool backward = true;     // a backward of this forward will run: keep q̂, k̂, v, P (and x̃) for it
  bool keep_probs = false;  // keep P after a forward without backward too (attention_probs)
};

// The buffers a layer keeps from its forward for its backward (the device part of AttentionCache).
using AttentionState = std::shared_ptr<void>;

void attention_forward(const AttentionCall& a, float* out, AttentionState& state);
// dq, dk, dv in the layout of q, k, v (accumulated; all nullptr: none wanted); dtables / dtransforms: H entries
// (nullptr: not wanted) or empty, accumulated.
void attention_backward(const AttentionCall& a, const float* dout, AttentionState& state, float* dq, float* dk,
                        float* dv, const std::vector<float*>& dtables, const std::vector<float*>& dtransforms);
// The probabilities (B, H, T, T) of the last forward, copied to the host (empty when there was none; an error
// when that forward kept none: no backward and no keep_probs).
std::vector<float> attention_probs(const AttentionState& state);
// The device bytes the state holds now (its blocks' capacities): what a layer keeps between its passes.
std::size_t attention_state_bytes(const AttentionState& state);

// ---- rotation tables (rotation_table.cu) -----------------------------------------------------------------------
// backend/cpu/rotation_table.hpp's ops: generators (sets, dim, D/b, b(b−1)/2), positions (rows, dim), table
// (sets·rows, D/b, b, b); the backward accumulates into dgenerators. No host copy, no synchronisation.
void rotation_table_forward(const float* generators, const float* positions, float* table, RotationTableShape shape);
void rotation_table_backward(const float* generators, const float* positions, const float* dtable, float* dgenerators,
                             RotationTableShape shape);
// Whether a forward since the last clear met a non-finite generator or position (reads a device flag: synchronises).
bool rotation_table_nonfinite(bool clear = true);

}  // namespace liere::cuda
