// liere/backend/cuda/linear.cu — the one cuBLAS wrapper (gemm of api.hpp, single or strided-batched: every GEMM of the
// CUDA backend goes through it), linear layers and the patch (tubelet) embedding (im2col through kernels::patch_source,
// the body the CPU tests check, then one GEMM).
//
// cuBLAS is column-major: a row-major (r, c) matrix with leading dimension ld is, read column-major, its
// transpose. So row-major C = op(A)·op(B) is column-major Cᵀ = op(B)ᵀ·op(A)ᵀ: the same call with A and B
// swapped, M and N swapped, and the transpose flags unchanged.
#include <liere/backend/cuda/api.hpp>
#include <liere/backend/cuda/common.cuh>
#include <liere/backend/kernels/patch.hpp>

namespace liere::cuda {

namespace {
// Full float for one call while TF32 is on: the handle's math mode back to the default, restored on leaving.
struct FullFloat {
  bool on;
  explicit FullFloat(bool want) : on(want && tf32()) {
    if (on) LIERE_CUBLAS_CHECK(cublasSetMathMode(blas(), CUBLAS_DEFAULT_MATH));
  }
  ~FullFloat() {
    if (on) cublasSetMathMode(blas(), CUBLAS_TF32_TENSOR_OP_MATH);
  }
  FullFloat(const FullFloat&) = delete;
  FullFloat& operator=(const FullFloat&) = delete;
};
}  // namespace

void gemm(bool ta, bool tb, Index M, Index N, Index K, float alpha, const float* A, Index lda, const float* B,
          Index ldb, float beta, float* C, Index ldc, GemmBatch batch, bool full_float) {
  if (M <= 0 || N <= 0) return;
  const char* op = "cuda::gemm";
  if (K <= 0) {  // C = beta·C
    LIERE_ENSURE(beta == 0.f || beta == 1.f, op << ": K = 0 with beta " << beta);
    LIERE_ENSURE(batch.count == 0, op << ": K = 0 in a batch of " << batch.count << " products");
    if (beta == 0.f)
      for (Index r = 0; r < M; ++r) Ops::fill(C + r * ldc, N, 0.f);
    return;
  }
  const int m = blas_int(M, op, "M (rows of the result)"), n = blas_int(N, op, "N (columns of the result)"),
            k = blas_int(K, op, "K (the summed dimension)");
  const int la = blas_int(lda, op, "lda"), lb = blas_int(ldb, op, "ldb"), lc = blas_int(ldc, op, "ldc");
  const cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  const FullFloat mode(full_float);
  if (batch.count == 0) {
    LIERE_CUBLAS_CHECK(cublasSgemm(blas(), opb, opa, n, m, k, &alpha, B, lb, A, la, &beta, C, lc));
  } else {
    const int count = blas_int(batch.count, op, "the batch count");
    LIERE_CUBLAS_CHECK(cublasSgemmStridedBatched(blas(), opb, opa, n, m, k, &alpha, B, lb, (long long)batch.b, A, la,
                                                 (long long)batch.a, &beta, C, lc, (long long)batch.c, count));
  }
}

namespace {
__global__ void k_bias_rows(const float* b, float* y, Index N, Index OC) {
  LIERE_CUDA_LOOP(i, N * OC) y[i] = b[i % OC];
}
__global__ void k_im2col(const float* x, float* cols, PatchGeometry g) {
  const Index K = g.patch_size(), n = g.B * g.tokens() * K;
  LIERE_CUDA_LOOP(i, n) cols[i] = x[kernels::patch_source(g, i / K, i % K)];
}
// Patches do not overlap: every pixel receives from at most one element of dcols, no collisions.
__global__ void k_col2im_accumulate(const float* dcols, float* dx, PatchGeometry g) {
  const Index K = g.patch_size(), n = g.B * g.tokens() * K;
  LIERE_CUDA_LOOP(i, n) dx[kernels::patch_source(g, i / K, i % K)] += dcols[i];
}
}  // namespace

namespace {
// The sizes of a linear layer, named as the user knows them, before cuBLAS sees them as int.
void check_linear(Index N, Index C, Index OC) {
  blas_int(N, "linear on cuda", "N (rows: batch × tokens)");
  blas_int(C, "linear on cuda", "C (input features)");
  blas_int(OC, "linear on cuda", "OC (output features)");
}
}  // namespace

void Ops::linear_forward(const float* x, const float* w, const float* b, float* y, Index N, Index C, Index OC) {
  check_linear(N, C, OC);
  if (b) LIERE_CUDA_LAUNCH(k_bias_rows, N * OC, b, y, N, OC);
  gemm(false, true, N, OC, C, 1.f, x, C, w, C, b ? 1.f : 0.f, y, OC);
}

void Ops::linear_backward(const float* x, const float* w, const float* dy, float* dx, float* dw, float* db, Index N,
                          Index C, Index OC, bool overwrite_dx) {
  check_linear(N, C, OC);
  if (dx) gemm(false, false, N, C, OC, 1.f, dy, OC, w, C, overwrite_dx ? 0.f : 1.f, dx, C);
  if (dw) gemm(true, false, OC, C, N, 1.f, dy, OC, x, C, 1.f, dw, C);
  if (db) colsum_accumulate(dy, N, OC, OC, db);
}

void Ops::patch_embed_forward(const float* x, const float* w, const float* bias, float* scratch_buf, float* y,
                              const PatchGeometry& g, Index D) {
  const Index M = g.B * g.tokens(), K = g.patch_size();
  blas_int(M, "patch_embed on cuda", "B·N (batch × patches)");
  blas_int(K, "patch_embed on cuda", "K (values per patch)");
  LIERE_CUDA_LAUNCH(k_im2col, M * K, x, scratch_buf, g);
  linear_forward(scratch_buf, w, bias, y, M, K, D);
}

void Ops::patch_embed_backward(const float* x, const float* w, const float* dy, float* scratch_buf, float* dx,
                               float* dw, float* dbias, const PatchGeometry& g, Index D) {
  const Index M = g.B * g.tokens(), K = g.patch_size();
  if (M * K <= 0) return;
  if (dw) {
    LIERE_CUDA_LAUNCH(k_im2col, M * K, x, scratch_buf, g);
    gemm(true, false, D, K, M, 1.f, dy, D, scratch_buf, K, 1.f, dw, K);
  }
  if (dbias) colsum_accumulate(dy, M, D, D, dbias);
  if (dx) {
    gemm(false, false, M, K, D, 1.f, dy, D, w, K, 0.f, scratch_buf, K);
    LIERE_CUDA_LAUNCH(k_col2im_accumulate, M * K, scratch_buf, dx, g);
  }
}

}  // namespace liere::cuda
