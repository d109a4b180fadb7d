// liere/backend/cuda/linear.cu — the one cuBLAS wrapper family (gemm of api.hpp, single or strided-batched: every
// GEMM of the CUDA backend goes through it; gemm_act, the products of activations and gradients: gemm, or in a bf16
// (fp16) run bf16 (fp16) operands with fp32 accumulation), linear layers and the patch (tubelet) embedding (im2col
// through kernels::patch_source, the body the CPU tests check, then one GEMM), whose bias rides in their GEMMs through
// cuBLASLt's epilogues in float and TF32 runs (lt_matmul below; the plain path where cuBLASLt has no algorithm).
//
// cuBLAS is column-major: a row-major (r, c) matrix with leading dimension ld is, read column-major, its
// transpose. So row-major C = op(A)·op(B) is column-major Cᵀ = op(B)ᵀ·op(A)ᵀ: the same call with A and B
// swapped, M and N swapped, and the transpose flags unchanged.
#include <cublasLt.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <liere/backend/cuda/api.hpp>
#include <liere/backend/cuda/common.cuh>
#include <liere/backend/kernels/fp16.hpp>
#include <liere/backend/kernels/patch.hpp>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

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
// One value, and four in memory order (one 8-byte store), rounded to bf16 (Half: fp16) bits.
template <bool Half>
__device__ inline std::uint16_t round16(float v) {
  return Half ? kernels::to_fp16(v).bits : kernels::to_bf16(v).bits;
}
template <bool Half>
__device__ inline std::uint64_t round16x4(float4 v) {
  return Half ? kernels::to_fp16x4(v.x, v.y, v.z, v.w) : kernels::to_bf16x4(v.x, v.y, v.z, v.w);
}

// The count·rows rows of the pack: dst (rows dst_ld apart) = the bf16 (Half: fp16) rounding of the strided batch at
// src, a warp per row (kernels::strided_row), its lanes along the row: coalesced, and one index division per row. (An
// element per thread took six 64-bit index divisions per element: on the H200, 2026-11-26, bf16 runs were slower than
// TF32 ones.) With `quads` (every source row 16-byte aligned, every pack row 8-byte aligned) a lane takes four values
// at a time, one 16-byte load and one 8-byte store (kernels::to_bf16x4), the row's last cols % 4 one by one: the
// element-wise warp per row still took a third of a bf16 ViT-Tiny step's kernel time (4.1 of 12.5 ms, H200,
// 2026-11-26 evening), each warp waiting on one load after another along its row.
template <bool Half>
__global__ void k_round_16(const float* __restrict__ src, std::uint16_t* __restrict__ dst, Index rows, Index cols,
                           Index ld, Index stride, Index dst_ld, Index nrows, bool quads) {
  LIERE_CUDA_LOOP(t, nrows * kWarp) {
    const Index g = t / kWarp, lane = t % kWarp;
    const float* s = src + kernels::strided_row(g, rows, ld, stride);
    std::uint16_t* d = dst + g * dst_ld;
    Index c = lane;
    if (quads) {
      const Index nq = cols / 4;
      const auto* s4 = reinterpret_cast<const float4*>(s);
      auto* d4 = reinterpret_cast<std::uint64_t*>(d);
#pragma unroll 4
      for (Index q = lane; q < nq; q += kWarp) d4[q] = round16x4<Half>(s4[q]);
      c = nq * 4 + lane;
    }
    for (; c < cols; c += kWarp) d[c] = round16<Half>(s[c]);
  }
}
// The quads flat, under set_flat_kernels (api.hpp): a thread per four values of a row, the thread of a row's last,
// partial quad taking its last cols % 4 values one by one. The warp per row leaves lanes idle where a row has few
// quads (attention's 64-value rows: 16 quads, half the warp) and waits on each load along its row: the activations'
// packs ran at 1.0–1.3 TB/s of the H200's 4.8 (8–10 µs a launch for 8320 rows, 2026-11-26 night).
template <bool Half>
__global__ void k_round_16_quads(const float* __restrict__ src, std::uint16_t* __restrict__ dst, Index rows,
                                 Index cols, Index ld, Index stride, Index dst_ld, Index nrows) {
  const Index nq = (cols + 3) / 4;
  LIERE_CUDA_LOOP(t, nrows * nq) {
    const Index g = t / nq, q = t % nq;
    const float* s = src + kernels::strided_row(g, rows, ld, stride);
    std::uint16_t* d = dst + g * dst_ld;
    if (q * 4 + 4 <= cols)
      reinterpret_cast<std::uint64_t*>(d)[q] = round16x4<Half>(reinterpret_cast<const float4*>(s)[q]);
    else
      for (Index c = q * 4; c < cols; ++c) d[c] = round16<Half>(s[c]);
  }
}
}  // namespace

Index bf16_pack_ld(Index cols) { return (cols + 7) / 8 * 8; }

namespace {
std::atomic<std::int64_t> g_conversions{0};
}  // namespace
std::int64_t conversions_16() { return g_conversions.load(); }

namespace {
template <bool Half>
void round_to_16(const float* src, Index rows, Index cols, Index ld, std::uint16_t* dst, Index count, Index stride,
                 Index dst_ld) {
  if (dst_ld == 0) dst_ld = cols;
  LIERE_ENSURE(rows >= 0 && cols >= 0 && ld >= cols && dst_ld >= cols && count >= 0,
               "cuda::round_to_" << (Half ? "fp16" : "bf16") << ": " << count << " matrices of (" << rows << ", "
                                 << cols << ") with leading dimensions " << ld << " and " << dst_ld
                                 << " (at least the columns)");
  const bool quads = cols >= 4 && ld % 4 == 0 && stride % 4 == 0 && aligned(src, 16) && dst_ld % 4 == 0 &&
                     aligned(dst, 8);
  if (cols > 0 && rows > 0 && count > 0) ++g_conversions;
  if (cols > 0 && quads && flat_kernels_on())
    LIERE_CUDA_LAUNCH(k_round_16_quads<Half>, count * rows * ((cols + 3) / 4), src, dst, rows, cols, ld, stride, dst_ld,
                      count * rows);
  else if (cols > 0)
    LIERE_CUDA_LAUNCH(k_round_16<Half>, count * rows * kWarp, src, dst, rows, cols, ld, stride, dst_ld, count * rows,
                      quads);
}
}  // namespace

void round_to_bf16(const float* src, Index rows, Index cols, Index ld, kernels::bf16* dst, Index count, Index stride,
                   Index dst_ld) {
  round_to_16<false>(src, rows, cols, ld, reinterpret_cast<std::uint16_t*>(dst), count, stride, dst_ld);
}
void round_to_fp16(const float* src, Index rows, Index cols, Index ld, kernels::fp16* dst, Index count, Index stride,
                   Index dst_ld) {
  round_to_16<true>(src, rows, cols, ld, reinterpret_cast<std::uint16_t*>(dst), count, stride, dst_ld);
}

DeviceBlock pack_16(const float* src, Index rows, Index cols, Index ld, Precision p, Index count, Index stride) {
  const Index ld16 = bf16_pack_ld(cols), n = stride == 0 ? 1 : count;
  DeviceBlock b(std::size_t(n * rows * ld16) * sizeof(std::uint16_t));
  if (p == Precision::fp16)
    round_to_fp16(src, rows, cols, ld, b.get<kernels::fp16>(), n, stride, ld16);
  else
    round_to_bf16(src, rows, cols, ld, b.get<kernels::bf16>(), n, stride, ld16);
  return b;
}

namespace {
// One operand of a 16-bit product (bf16, or fp16 in an fp16 run: gemm_precision()), rounded into a pool block:
// `count` stored (rows, cols) matrices (one when the batch shares it: stride 0), rows ld = bf16_pack_ld(cols) apart
// (16-byte aligned rows: T = 65 scores or 100 classes would otherwise leave cuBLAS its unaligned kernels), matrices
// rows·ld apart.
struct Pack16 {
  DeviceBlock block;
  Index ld = 0, stride = 0;
  cudaDataType_t type = CUDA_R_16BF;
  const void* get() const { return block.get(); }
};
bool half_products() {
  const Precision p = gemm_precision();
  return p == Precision::bf16 || p == Precision::fp16;
}
// The operand in the run's precision (gemm_precision()).
Pack16 pack_operand(const float* src, Index rows, Index cols, Index ld, Index count = 1, Index stride = 0) {
  const Precision prec = gemm_precision();
  Pack16 p;
  p.ld = bf16_pack_ld(cols);
  p.stride = stride == 0 ? 0 : rows * p.ld;
  p.type = prec == Precision::fp16 ? CUDA_R_16F : CUDA_R_16BF;
  p.block = pack_16(src, rows, cols, ld, prec, count, stride);
  return p;
}

// The product of two 16-bit operands of one type: cublasGemmEx / cublasGemmStridedBatchedEx, A and B of `type`, fp32 C.
void gemm_16(cudaDataType_t type, bool ta, bool tb, Index M, Index N, Index K, float alpha, const void* A, Index lda,
             const void* B, Index ldb, float beta, float* C, Index ldc, GemmBatch batch) {
  if (M <= 0 || N <= 0) return;
  const char* op = type == CUDA_R_16F ? "cuda::gemm_act (fp16)" : "cuda::gemm_act (bf16)";
  LIERE_ENSURE(K > 0 && lda >= (ta ? M : K) && ldb >= (tb ? K : N) && ldc >= N,
               op << ": K=" << K << " or leading dimensions (" << lda << ", " << ldb << ", " << ldc
                  << ") too small for M=" << M << " N=" << N);
  const int m = blas_int(M, op, "M (rows of the result)"), n = blas_int(N, op, "N (columns of the result)"),
            k = blas_int(K, op, "K (the summed dimension)");
  const int la = blas_int(lda, op, "lda"), lb = blas_int(ldb, op, "ldb"), lc = blas_int(ldc, op, "ldc");
  const cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  // Column-major Cᵀ = op(B)ᵀ op(A)ᵀ, as gemm (the top of this file).
  if (batch.count == 0) {
    LIERE_CUBLAS_CHECK(cublasGemmEx(blas(), opb, opa, n, m, k, &alpha, B, type, lb, A, type, la, &beta, C,
                                    CUDA_R_32F, lc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  } else {
    const int batches = blas_int(batch.count, op, "the batch count");
    LIERE_CUBLAS_CHECK(cublasGemmStridedBatchedEx(blas(), opb, opa, n, m, k, &alpha, B, type, lb, (long long)batch.b,
                                                  A, type, la, (long long)batch.a, &beta, C, CUDA_R_32F, lc,
                                                  (long long)batch.c, batches, CUBLAS_COMPUTE_32F,
                                                  CUBLAS_GEMM_DEFAULT));
  }
}

// gemm_16 on two packs of one type (a batch's strides the packs').
void gemm_packs(bool ta, bool tb, Index M, Index N, Index K, float alpha, const Pack16& A, const Pack16& B,
                float beta, float* C, Index ldc, GemmBatch batch = {}) {
  gemm_16(A.type, ta, tb, M, N, K, alpha, A.get(), A.ld, B.get(), B.ld, beta, C, ldc,
          {batch.count, A.stride, B.stride, batch.c});
}  // the packs go back to the pool when their owners leave; the GEMM queued on them runs first (one stream)
}  // namespace

void gemm_packed(Precision p, bool ta, bool tb, Index M, Index N, Index K, float alpha, const std::uint16_t* A,
                 Index lda, const std::uint16_t* B, Index ldb, float beta, float* C, Index ldc, GemmBatch batch) {
  LIERE_ENSURE(p == Precision::bf16 || p == Precision::fp16,
               "cuda::gemm_packed: packs of " << to_string(p) << " (bf16 or fp16 only)");
  gemm_16(p == Precision::fp16 ? CUDA_R_16F : CUDA_R_16BF, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc,
          batch);
}

void gemm_act(bool ta, bool tb, Index M, Index N, Index K, float alpha, const float* A, Index lda, const float* B,
              Index ldb, float beta, float* C, Index ldc, GemmBatch batch) {
  if (!half_products() || M <= 0 || N <= 0 || K <= 0) {
    gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, batch);
    return;
  }
  LIERE_ENSURE(lda >= (ta ? M : K) && ldb >= (tb ? K : N) && ldc >= N,
               "cuda::gemm_act (" << to_string(gemm_precision()) << "): leading dimensions (" << lda << ", " << ldb
                                  << ", " << ldc << ") too small for M=" << M << " N=" << N << " K=" << K);
  // Stored shapes: A is (M, K), or (K, M) when ta; B is (K, N), or (N, K) when tb.
  const Index count = batch.count == 0 ? 1 : batch.count;
  const Pack16 a = pack_operand(A, ta ? K : M, ta ? M : K, lda, count, batch.a),
               b = pack_operand(B, tb ? N : K, tb ? K : N, ldb, count, batch.b);
  gemm_packs(ta, tb, M, N, K, alpha, a, b, beta, C, ldc, batch);
}

namespace {
__global__ void k_bias_rows(const float* b, float* y, Index N, Index OC) {
  LIERE_CUDA_LOOP(i, N * OC) y[i] = b[i % OC];
}
__global__ void k_add_vec(const float* a, float* y, Index n) {
  LIERE_CUDA_LOOP(i, n) y[i] += a[i];
}

// ---- cuBLASLt epilogues: the bias in the forward GEMM, its gradient in the weight-gradient GEMM ----------------
// A linear layer's forward was a kernel writing the bias into every row, then the GEMM adding x·Wᵀ (β = 1); its
// backward summed dy's columns for the bias (colsum_accumulate: two kernels) beside the GEMM dW += dyᵀ·x. cuBLASLt
// does both inside the GEMMs: CUBLASLT_EPILOGUE_BIAS adds the bias to D's columns (length m), BGRADB writes the sum
// of op(B) over the GEMM's k dimension (length n). Each (shape, transposes, epilogue, compute type, pointer
// alignment) gets cuBLASLt's first heuristic algorithm once, cached; where there is none the plain path runs.
std::atomic<bool> g_epilogues{[] {
  const char* v = std::getenv("LIERE_CUDA_EPILOGUES");
  return !(v && std::strcmp(v, "0") == 0);
}()};
std::atomic<std::int64_t> g_fused{0}, g_plain{0};
constexpr std::size_t kLtWorkspace = std::size_t(32) << 20;  // NVIDIA's suggestion for Hopper

#define LIERE_CUBLASLT_CHECK(call) ::liere::cuda::check_blas((call), #call, __FILE__, __LINE__)

cublasLtHandle_t lt() {
  static cublasLtHandle_t h = [] {  // never destroyed, as blas()
    cublasLtHandle_t x = nullptr;
    LIERE_CUBLASLT_CHECK(cublasLtCreate(&x));
    return x;
  }();
  return h;
}

// The largest power of two up to 256 that divides the address (cuBLASLt's algorithms assume an alignment).
int alignment_of(const void* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  int al = 256;
  while (al > 4 && a % std::uintptr_t(al) != 0) al /= 2;
  return al;
}

struct LtPlan {
  bool ok = false;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  std::size_t workspace = 0;
};

// Column-major D (m, n) = op(A)·op(B) + β·D with `epilogue`, `vec` its vector (the bias, or the bias gradient's
// output), full float or TF32 as tf32() says; A and B of type ab: float, or bf16 or fp16 packs (fp32
// accumulation, D and the vector fp32). False (and nothing run) when the epilogues are off or cuBLASLt has no
// algorithm for it.
bool lt_matmul(cublasOperation_t opa, cublasOperation_t opb, int m, int n, int k, const void* A, int lda,
               const void* B, int ldb, float beta, float* D, int ldd, cublasLtEpilogue_t epilogue, float* vec,
               cudaDataType_t ab = CUDA_R_32F) {
  if (!g_epilogues) return false;
  const bool fast = ab == CUDA_R_32F && tf32();
  const std::uint32_t al[4] = {std::uint32_t(alignment_of(A)), std::uint32_t(alignment_of(B)),
                               std::uint32_t(alignment_of(D)), std::uint32_t(alignment_of(vec))};
  const std::array<std::int64_t, 15> key = {std::int64_t(opa), std::int64_t(opb), m, n, k, lda, ldb, ldd,
                                            std::int64_t(epilogue), fast, std::int64_t(ab), al[0], al[1], al[2], al[3]};
  static std::mutex mu;
  static std::map<std::array<std::int64_t, 15>, LtPlan> plans;
  std::lock_guard<std::mutex> lock(mu);
  auto [it, fresh] = plans.try_emplace(key);
  LtPlan& plan = it->second;
  if (fresh) {
    const cublasComputeType_t compute = fast ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    LIERE_CUBLASLT_CHECK(cublasLtMatmulDescCreate(&plan.op, compute, CUDA_R_32F));
    LIERE_CUBLASLT_CHECK(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof(opa)));
    LIERE_CUBLASLT_CHECK(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof(opb)));
    LIERE_CUBLASLT_CHECK(
        cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
    LIERE_CUBLASLT_CHECK(
        cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &vec, sizeof(vec)));
    // The stored matrices: A is (m, k), or (k, m) transposed; B is (k, n), or (n, k); D is (m, n).
    const bool ta = opa != CUBLAS_OP_N, tb = opb != CUBLAS_OP_N;
    LIERE_CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(&plan.a, ab, ta ? k : m, ta ? m : k, lda));
    LIERE_CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(&plan.b, ab, tb ? n : k, tb ? k : n, ldb));
    LIERE_CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(&plan.c, CUDA_R_32F, m, n, ldd));
    cublasLtMatmulPreference_t pref = nullptr;
    LIERE_CUBLASLT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const std::uint64_t ws = kLtWorkspace;
    LIERE_CUBLASLT_CHECK(
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    // A, B, then C and D (the same matrix).
    const std::pair<cublasLtMatmulPreferenceAttributes_t, std::uint32_t> which[4] = {
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, al[0]}, {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, al[1]},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, al[2]}, {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, al[2]}};
    for (const auto& [attr, bytes] : which)
      LIERE_CUBLASLT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &bytes, sizeof(bytes)));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const cublasStatus_t st =
        cublasLtMatmulAlgoGetHeuristic(lt(), plan.op, plan.a, plan.b, plan.c, plan.c, pref, 1, &result, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    plan.ok = st == CUBLAS_STATUS_SUCCESS && found > 0 && result.state == CUBLAS_STATUS_SUCCESS;
    if (plan.ok) plan.algo = result.algo, plan.workspace = result.workspaceSize;
  }
  if (!plan.ok) {
    ++g_plain;
    return false;
  }
  LIERE_CUBLASLT_CHECK(
      cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &vec, sizeof(vec)));
  DeviceBlock work;
  if (plan.workspace) work = DeviceBlock(plan.workspace);
  const float alpha = 1.f;
  const cublasStatus_t st = cublasLtMatmul(lt(), plan.op, &alpha, A, plan.a, B, plan.b, &beta, D, plan.c, D, plan.c,
                                           &plan.algo, plan.workspace ? work.get() : nullptr, plan.workspace, 0);
  if (st == CUBLAS_STATUS_NOT_SUPPORTED) {  // refused before it ran: this product takes the plain path from now on
    plan.ok = false;
    ++g_plain;
    return false;
  }
  check_blas(st, "cublasLtMatmul", __FILE__, __LINE__);
  if (sync_launches()) launched("cublasLtMatmul", __FILE__, __LINE__);
  ++g_fused;
  return true;
}

// y (N, OC) = x (N, C) Wᵀ + b through the bias epilogue: column-major yᵀ (OC, N) = op(W stored (C, OC))ᵀ x. False
// (nothing run) when the epilogues are off or cuBLASLt has no algorithm for it.
bool fused_linear_forward(const float* x, const float* w, const float* b, float* y, Index N, Index C, Index OC) {
  const char* op = "linear on cuda (cuBLASLt)";
  const int n = blas_int(N, op, "N (rows)"), c = blas_int(C, op, "C (input features)"),
            oc = blas_int(OC, op, "OC (output features)");
  return lt_matmul(CUBLAS_OP_T, CUBLAS_OP_N, oc, n, c, w, c, x, c, 0.f, y, oc, CUBLASLT_EPILOGUE_BIAS,
                   const_cast<float*>(b));
}

// What a 16-bit run's linear forward keeps for its backward (linear_forward's keep): x and W rounded once, and where
// they were read, so that a backward handed other buffers rounds those instead.
struct LinearPacks {
  const float *x = nullptr, *w = nullptr;
  Pack16 x16, w16;
};

// y (N, OC) = x Wᵀ + b on the packs of x and W (bf16 or fp16): the bias epilogue (the bias added in fp32 to the fp32
// sums, as the plain path's bias kernel and β = 1), or without it where cuBLASLt has none. (The weight gradient's
// BGRADB would sum dy rounded to 16 bits: such a run keeps the fp32 column sum.)
void linear_forward_16(const Pack16& x16, const Pack16& w16, const float* b, float* y, Index N, Index C, Index OC) {
  const char* op = "linear on cuda (16-bit)";
  const int n = blas_int(N, op, "N (rows)"), c = blas_int(C, op, "C (input features)"),
            oc = blas_int(OC, op, "OC (output features)");
  const int lx = blas_int(x16.ld, op, "ld of the 16-bit pack");
  if (b && lt_matmul(CUBLAS_OP_T, CUBLAS_OP_N, oc, n, c, w16.get(), lx, x16.get(), lx, 0.f, y, oc,
                     CUBLASLT_EPILOGUE_BIAS, const_cast<float*>(b), x16.type))
    return;
  if (b) LIERE_CUDA_LAUNCH(k_bias_rows, N * OC, b, y, N, OC);
  gemm_packs(false, true, N, OC, C, 1.f, x16, w16, b ? 1.f : 0.f, y, OC);
}

// dW (OC, C) += dyᵀ x and db += Σ_rows dy through BGRADB: column-major dWᵀ (C, OC) = x (stored (C, N)) · op(dy
// stored (OC, N)), whose op(B) = dy (N, OC) summed over k = N is db's increment (written to a block, then added).
bool fused_weight_grad(const float* dy, const float* x, float* dw, float* db, Index N, Index C, Index OC) {
  if (half_products() || !g_epilogues) return false;  // 16-bit runs: linear_backward's packs
  const char* op = "weight gradient on cuda (cuBLASLt)";
  const int n = blas_int(N, op, "N (rows)"), c = blas_int(C, op, "C (input features)"),
            oc = blas_int(OC, op, "OC (output features)");
  const DeviceBlock part(std::size_t(OC) * sizeof(float));
  if (!lt_matmul(CUBLAS_OP_N, CUBLAS_OP_T, c, oc, n, x, c, dy, oc, 1.f, dw, c, CUBLASLT_EPILOGUE_BGRADB,
                 part.get<float>()))
    return false;
  LIERE_CUDA_LAUNCH(k_add_vec, OC, part.get<float>(), db, OC);
  return true;
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

void set_gemm_epilogues(bool on) { g_epilogues = on; }
bool gemm_epilogues_on() { return g_epilogues; }
EpilogueCounts gemm_epilogue_counts() { return {g_fused.load(), g_plain.load()}; }

void Ops::linear_forward(const float* x, const float* w, const float* b, float* y, Index N, Index C, Index OC,
                         OpState* keep) {
  check_linear(N, C, OC);
  if (N <= 0 || OC <= 0) return;
  if (half_products() && C > 0) {  // x and W rounded once, kept for the backward when one follows
    auto packs = std::make_shared<LinearPacks>();
    packs->x = x, packs->w = w;
    packs->x16 = pack_operand(x, N, C, C), packs->w16 = pack_operand(w, OC, C, C);
    linear_forward_16(packs->x16, packs->w16, b, y, N, C, OC);
    if (keep) *keep = std::move(packs);
    return;
  }
  if (b && C > 0 && fused_linear_forward(x, w, b, y, N, C, OC)) return;
  if (b) LIERE_CUDA_LAUNCH(k_bias_rows, N * OC, b, y, N, OC);
  gemm_act(false, true, N, OC, C, 1.f, x, C, w, C, b ? 1.f : 0.f, y, OC);
}

void Ops::linear_backward(const float* x, const float* w, const float* dy, float* dx, float* dw, float* db, Index N,
                          Index C, Index OC, bool overwrite_dx, const OpState* kept) {
  check_linear(N, C, OC);
  if (half_products() && (dx || dw) && N > 0 && C > 0 && OC > 0) {
    // dy is op(A) of both products, stored (N, OC) in both: rounded to 16 bits once; x and W as the forward rounded
    // them (kept), or rounded here.
    const auto* packs = kept && *kept ? static_cast<const LinearPacks*>(kept->get()) : nullptr;
    const Pack16 dy16 = pack_operand(dy, N, OC, OC);
    if (dx) {
      const bool reuse = packs && packs->w == w;
      const Pack16 fresh = reuse ? Pack16{} : pack_operand(w, OC, C, C);
      gemm_packs(false, false, N, C, OC, 1.f, dy16, reuse ? packs->w16 : fresh, overwrite_dx ? 0.f : 1.f, dx, C);
    }
    if (dw) {
      const bool reuse = packs && packs->x == x;
      const Pack16 fresh = reuse ? Pack16{} : pack_operand(x, N, C, C);
      gemm_packs(true, false, OC, C, N, 1.f, dy16, reuse ? packs->x16 : fresh, 1.f, dw, C);
    }
    if (db) colsum_accumulate(dy, N, OC, OC, db);
    return;
  }
  if (dx) gemm_act(false, false, N, C, OC, 1.f, dy, OC, w, C, overwrite_dx ? 0.f : 1.f, dx, C);
  if (dw && db && N > 0 && C > 0 && OC > 0 && fused_weight_grad(dy, x, dw, db, N, C, OC)) return;
  if (dw) gemm_act(true, false, OC, C, N, 1.f, dy, OC, x, C, 1.f, dw, C);
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
  bool fused = false;
  if (dw) {
    LIERE_CUDA_LAUNCH(k_im2col, M * K, x, scratch_buf, g);
    fused = dbias && D > 0 && fused_weight_grad(dy, scratch_buf, dw, dbias, M, K, D);
    if (!fused) gemm_act(true, false, D, K, M, 1.f, dy, D, scratch_buf, K, 1.f, dw, K);
  }
  if (dbias && !fused) colsum_accumulate(dy, M, D, D, dbias);
  if (dx) {
    gemm_act(false, false, M, K, D, 1.f, dy, D, w, K, 0.f, scratch_buf, K);
    LIERE_CUDA_LAUNCH(k_col2im_accumulate, M * K, scratch_buf, dx, g);
  }
}

}  // namespace liere::cuda
