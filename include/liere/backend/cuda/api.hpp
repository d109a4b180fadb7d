// liere/backend/cuda/api.hpp — the CUDA backend's ops: `Ops` has a static function for every engine op, with the
// name, signature and accumulation rules of the CPU kernel in backend/cpu/ (see there for the maths), in float,
// on device pointers (every pointer is device memory unless its comment says host). This is the one declaration
// of each; the .cu files beside this header define them (`void Ops::linear_forward(…) {…}`), and the device seam
// (backend/dispatch.hpp) calls them by name, so there is no forwarding layer to keep in step: a signature that
// differs from the CPU kernel's is a compile error at the LIERE_DISPATCH that calls it. Nothing here needs Eigen
// or the pe layer, so nvcc compiles the .cu files without them; the two ops that take the pe layer's views
// (attention) get them turned into plain pointer lists by SeamOps (ops.hpp, host code).
// N rows, C features, OC output features, B batch, T tokens, H heads, D head dim, K classes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <liere/backend/cuda/memory.hpp>
#include <liere/backend/kernels/adam.hpp>
#include <liere/backend/kernels/bf16.hpp>
#include <liere/backend/kernels/fp16.hpp>
#include <liere/backend/types.hpp>
#include <liere/core/device.hpp>
#include <liere/core/index.hpp>
#include <memory>
#include <vector>

namespace liere::cuda {

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

struct Ops {
  // ---- memory and glue (elementwise.cu; copy_bytes: memory.hpp) ------------------------------------------------
  static constexpr auto& copy_bytes = cuda::copy_bytes;
  static void fill(float* p, Index n, float v);
  static void accumulate(const float* s, float* d, Index n);
  static void add_forward(const float* a, const float* b, float* y, Index n);
  static void add_backward(const float* dy, float* da, float* db, Index n, bool overwrite_a = false,
                           bool overwrite_b = false);
  static void add_broadcast_forward(const float* x, const float* p, float* y, Index R, Index M);
  static void add_broadcast_backward(const float* dy, float* dx, float* dp, Index R, Index M);
  static void mul_forward(const float* a, const float* b, float* y, Index n);
  static void mul_backward(const float* a, const float* b, const float* dy, float* da, float* db, Index n);
  static void scale_forward(const float* x, float s, float* y, Index n);
  static void scale_backward(float s, const float* dy, float* dx, Index n);
  static void sum_forward(const float* x, float* y, Index n);     // y[0] = Σ x (fixed order)
  static void sum_backward(const float* dy, float* dx, Index n);  // dx += dy[0]

  // ---- pointwise, tokens, loss, optimizer (elementwise.cu) -----------------------------------------------------
  static void gelu_forward(const float* x, float* y, Index n);
  static void gelu_backward(const float* x, const float* dy, float* dx, Index n, bool overwrite = false);
  static void dropout_forward(const float* x, double p, std::uint64_t key, float* y, std::uint8_t* mask, Index n);
  static void dropout_backward(const std::uint8_t* mask, double p, const float* dy, float* dx, Index n,
                               bool overwrite = false);
  static void prepend_token_forward(const float* x, const float* tok, float* y, Index B, Index N, Index D);
  static void prepend_token_backward(const float* dy, float* dx, float* dtok, Index B, Index N, Index D);
  static void select_token_forward(const float* x, float* y, Index B, Index T, Index D, Index t);
  static void select_token_backward(const float* dy, float* dx, Index B, Index T, Index D, Index t);
  static void mean_tokens_forward(const float* x, float* y, Index B, Index T, Index D, Index t0);
  static void mean_tokens_backward(const float* dy, float* dx, Index B, Index T, Index D, Index t0);
  static void softmax_cross_entropy_forward(const float* logits, const int* labels, double smoothing, float* probs,
                                            float* row_loss, float* loss, Index B, Index K);
  static void softmax_cross_entropy_backward(const float* probs, const int* labels, double smoothing,
                                             const float* dloss, float* dlogits, Index B, Index K);
  static double sum_squares(const float* x, Index n);
  // Σ_k sum_squares(xs[k], ns[k]) in k order (the same numbers), one synchronising read for all the tensors.
  static double sum_squares_many(const float* const* xs, const Index* ns, int count);
  static void sum_squares_many_into(const float* const* xs, const Index* ns, int count, double* out);  // no read
  // The optimizer's ops on many tensors at once (optim.cu): Adam, the clipping scale and fill, a launch per 24.
  // Adam's gate and clip_scale_many's Σg² are device memory (kernels/clip.hpp).
  static void adam_update_many(const kernels::AdamTensor<float>* ts, int count);
  static void scale_many(float* const* xs, const Index* ns, int count, float c);
  static void clip_scale_many(float* const* xs, const Index* ns, int count, const double* sumsq, double max_norm);
  static void fill_many(float* const* xs, const Index* ns, int count, float v);

  // ---- layer norm (elementwise.cu) -----------------------------------------------------------------------------
  static void layernorm_forward(const float* x, const float* g, const float* b, float* y, float* mean, float* rstd,
                                Index N, Index C, double eps);
  static void layernorm_backward(const float* x, const float* g, const float* mean, const float* rstd, const float* dy,
                                 float* dx, float* dg, float* db, float* scratch, Index N, Index C);

  // ---- on cuBLAS: linear layers, patch embedding (linear.cu) ---------------------------------------------------
  // keep (nullptr: no backward follows): in a bf16 or fp16 run, x and W rounded once, for the backward's products
  // (kept, that forward's keep).
  static void linear_forward(const float* x, const float* w, const float* b, float* y, Index N, Index C, Index OC,
                             OpState* keep = nullptr);
  static void linear_backward(const float* x, const float* w, const float* dy, float* dx, float* dw, float* db, Index N,
                              Index C, Index OC, bool overwrite_dx = false, const OpState* kept = nullptr);
  static void patch_embed_forward(const float* x, const float* w, const float* bias, float* scratch, float* y,
                                  const PatchGeometry& g, Index D);
  static void patch_embed_backward(const float* x, const float* w, const float* dy, float* scratch, float* dx,
                                   float* dw, float* dbias, const PatchGeometry& g, Index D);

  // ---- rotation tables (rotation_table.cu) ---------------------------------------------------------------------
  // backend/cpu/rotation_table.hpp's ops: generators (sets, dim, D/b, b(b−1)/2), positions (rows, dim), table
  // (sets·rows, D/b, b, b); the backward accumulates into dgenerators. No host copy, no synchronisation.
  static void rotation_table_forward(const float* generators, const float* positions, float* table,
                                     RotationTableShape shape);
  static void rotation_table_backward(const float* generators, const float* positions, const float* dtable,
                                      float* dgenerators, RotationTableShape shape);

  // ---- attention (attention.cu), on plain pointer lists: SeamOps (ops.hpp) takes the views ---------------------
  static void attention_forward(const AttentionCall& a, float* out, AttentionState& state);
  // dq, dk, dv in the layout of q, k, v (accumulated; all nullptr: none wanted); dtables / dtransforms: H entries
  // (nullptr: not wanted) or empty, accumulated.
  static void attention_backward(const AttentionCall& a, const float* dout, AttentionState& state, float* dq, float* dk,
                                 float* dv, const std::vector<float*>& dtables, const std::vector<float*>& dtransforms);
};

// ---- what the ops share inside the backend ---------------------------------------------------------------------
// out (C) += Σ_n a[n, :], a (N, C) with row stride lda; partial sums over fixed chunks of rows, added in a fixed
// order (kernels/reduce.hpp: the CPU's bits).
void colsum_accumulate(const float* a, Index N, Index C, Index lda, float* out);

// The one cuBLAS wrapper (linear.cu): row-major C (M, N) = alpha · op(A) · op(B) + beta · C, like cpu::gemm
// (cublasSgemm); with a batch, batch.count ≥ 1 such products, the i-th on A + i·batch.a, B + i·batch.b,
// C + i·batch.c (cublasSgemmStridedBatched; GemmBatch: backend/types.hpp). Every size is checked against cuBLAS's
// int (blas_int). full_float: in full float even when TF32 is on (set_tf32), for the rotations, which TF32's
// 10-bit inputs would make non-orthogonal by ~1e-3.
void gemm(bool ta, bool tb, Index M, Index N, Index K, float alpha, const float* A, Index lda, const float* B,
          Index ldb, float beta, float* C, Index ldc, GemmBatch batch = {}, bool full_float = false);
// The products of activations and gradients (linear and patch embedding, forward and both backward products;
// attention's Q̂K̂ᵀ, PV and their backward), as cpu::gemm_act: gemm's arguments and meaning. Under
// gemm_precision() == fp32 it is gemm; under bf16 op(A) and op(B) are rounded to bf16 (kernels::to_bf16, the CPU's
// bits) into pool blocks (rows padded to a multiple of 8 values, 16 bytes, for the tensor cores' aligned kernels; a
// batch's operands with stride 0 once), then multiplied by cublasGemmEx / cublasGemmStridedBatchedEx: bf16 inputs,
// fp32 accumulation (CUBLAS_COMPUTE_32F), fp32 C, alpha and beta. Under fp16 the same with kernels::to_fp16 and
// CUDA_R_16F inputs.
// The rotation tables, their application and the dense transforms use gemm: they stay fp32.
void gemm_act(bool ta, bool tb, Index M, Index N, Index K, float alpha, const float* A, Index lda, const float* B,
              Index ldb, float beta, float* C, Index ldc, GemmBatch batch = {});
// The linear layers' and the patch embedding's bias in their forward GEMM and its gradient in their weight-gradient
// GEMM (cuBLASLt epilogues BIAS and BGRADB, float and TF32 runs), in place of a bias kernel before the GEMM and a
// column sum after it: on by default; off with set_gemm_epilogues(false) or LIERE_CUDA_EPILOGUES=0 in the
// environment. Where cuBLASLt has no algorithm for a product the plain path runs; the counts say how often each
// happened since the start (fused: GEMMs with an epilogue; plain: GEMMs cuBLASLt declined).
void set_gemm_epilogues(bool on);
bool gemm_epilogues_on();
struct EpilogueCounts {
  std::int64_t fused = 0, plain = 0;
};
EpilogueCounts gemm_epilogue_counts();
// dst (count, rows, cols), rows dst_ld apart (0: cols, dense), matrices rows·dst_ld apart = the bf16 roundings of
// `count` (rows, cols) matrices at src + i·stride, rows ld apart (kernels::strided_row; stride 0 with count 1:
// one matrix); dst's padding is not written. gemm_act's conversion, shown for the tests.
void round_to_bf16(const float* src, Index rows, Index cols, Index ld, kernels::bf16* dst, Index count = 1,
                   Index stride = 0, Index dst_ld = 0);
// The same rounded to fp16 (kernels::to_fp16): the packs of an fp16 run.
void round_to_fp16(const float* src, Index rows, Index cols, Index ld, kernels::fp16* dst, Index count = 1,
                   Index stride = 0, Index dst_ld = 0);
// gemm_act's product on operands already rounded to 16 bits (pack_16) for an operand that feeds several products
// and is rounded once (attention's packs under set_attention_packs): gemm's arguments with A and B of precision p
// (bf16 or fp16), their leading dimensions and batch strides in 16-bit elements; cublasGemmEx /
// cublasGemmStridedBatchedEx, fp32 accumulation and C.
void gemm_packed(Precision p, bool ta, bool tb, Index M, Index N, Index K, float alpha, const std::uint16_t* A,
                 Index lda, const std::uint16_t* B, Index ldb, float beta, float* C, Index ldc, GemmBatch batch = {});
// The row length gemm_act gives its bf16 and fp16 packs: cols rounded up to 8 values (16 bytes).
Index bf16_pack_ld(Index cols);
// gemm_act's pack of an operand: `count` (rows, cols) matrices at src + i·stride, rows ld apart (one matrix when
// stride is 0), rounded to bf16, or fp16 when p is fp16, into a pool block with rows bf16_pack_ld(cols) apart and
// matrices rows times that apart.
DeviceBlock pack_16(const float* src, Index rows, Index cols, Index ld, Precision p, Index count = 1,
                    Index stride = 0);
// How many conversions (round_to_bf16 and round_to_fp16 calls with something to round) since the start: what a
// 16-bit step costs in conversions, for the tests and profiles.
std::int64_t conversions_16();

// ---- what attention and the rotation tables show besides their ops ---------------------------------------------
// The probabilities (B, H, T, T) of the last forward, copied to the host (empty when there was none; an error
// when that forward kept none: no backward and no keep_probs).
std::vector<float> attention_probs(const AttentionState& state);
// The keys of attention on the device, padded: T rounded up to 4, to 8 under gemm_precision() == bf16 (k̂ and v get
// zero rows, the score matrices (B, H, T, TP) zero columns, so that cuBLAS's products have 16-byte aligned
// extents), or T with LIERE_CUDA_PAD_SCORES=0 in the environment.
int attention_scores_ld(int tokens);
// The device bytes the state holds now (its blocks' capacities): what a layer keeps between its passes.
std::size_t attention_state_bytes(const AttentionState& state);
// Blocks above 16 with a shared table through rotate_gemms.hpp's GEMMs (the default) or through the element
// kernels (off; also LIERE_CUDA_ROTATE_GEMMS=0 in the environment): test_cuda compares the two, a profile can too.
void set_rotate_gemms(bool on);
bool rotate_gemms_on();
// Blocks of 64 with a shared table (under set_rotate_gemms) through liere's own 64 × 64 tile kernels instead of
// cuBLAS's strided batches (kernels/rotate_tiles.hpp: every head, q and k, token and row tile of a layer in one
// launch per product, where cuBLAS ran 6 launches a layer on 32 × 32-tile SIMT kernels, about 8 TFLOP/s on an H200;
// the tables' gradient so only when no two heads share one). Off by default (written 2026-11-28 without a GPU, not
// yet run on one); on with set_rotate_tiles(true) or LIERE_CUDA_ROTATE_TILES=1. test_cuda compares the two.
void set_rotate_tiles(bool on);
bool rotate_tiles_on();
// In a bf16 or fp16 run, attention's operands rounded once each (on by default since it passed test_cuda and ran
// 8% faster on an H200, 2026-11-26; off with set_attention_packs(false) or LIERE_CUDA_ATTENTION_PACKS=0 in the
// environment): q̂, k̂, V and P packed whole in the forward and kept for the backward, dO and dS packed once there,
// every head's product reading its view of the pack (gemm_packed). Off: gemm_act rounds both operands of each
// product, head by head (24 conversions a ViT-Tiny layer against 6). test_cuda compares the two.
void set_attention_packs(bool on);
bool attention_packs_on();
// Element kernels that take four values a thread over the whole tensor (off by default: written 2026-11-26 night
// after the device time was spent, not yet run on a GPU; on with set_flat_kernels(true) or LIERE_CUDA_FLAT_KERNELS=1
// in the environment): the 16-bit packs' conversion a thread per four values of a row instead of a warp per row
// (gemm_act's aligned packs), GELU forward and backward on float4 instead of an element a thread: the same bits either
// way; attention's gather and its backward a thread per block of the rotation (2, 3, 4 or 8 values; 4 where they only
// copy) instead of a thread per value: the same bits; the tables' gradient a thread per row of a table block (written
// 2026-11-27, not yet run either); and the shared tables' gradient summed over runs of 8 sequences, not about 26
// (ViT-Tiny at B 128): the same sums grouped otherwise.
// test_cuda compares them, and gpu_run.sh times them.
void set_flat_kernels(bool on);
bool flat_kernels_on();
// Whether a table forward since the last clear met a non-finite generator or position (reads a device flag:
// synchronises).
bool rotation_table_nonfinite(bool clear = true);

}  // namespace liere::cuda
