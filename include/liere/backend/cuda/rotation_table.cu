// liere/backend/cuda/rotation_table.cu — the rotation tables and their backward on the device (api.hpp; the maths
// and the layouts are backend/cpu/rotation_table.hpp's, the per-block bodies backend/kernels/matrix_exp.hpp's, the
// same functions the CPU runs and the CPU tests check).
//
// Forward: blocks 2 to 8, one thread per block matrix (set, row, block), many matrices per thread block, working memory
// in the thread's local memory; the generator summed in double (Work<N>, as the CPU op), then blocks 2 and 3 take their
// closed forms, 4 and up scaling and squaring in double. Blocks 16 to 64: one thread block of kCoopThreads per matrix,
// running the same bodies with BlockLoops (every loop and product of kernels/matrix_exp.hpp split over the block's
// threads, the product's operands staged in shared memory, each thread N/16 × N/16 entries of the result), as many
// thread blocks as the device runs at once, each looping over matrices with its own slice of a scratch buffer (at most
// kScratchBudget). One thread per 64×64 matrix ran the ViT-Tiny LieRE-64 step at 77 img/s on an H200 (bench/README.md).
// Backward: per block matrix (a thread, or a thread block from 16 up) hat*(L(Aᵀ, dR)) (b(b−1)/2 values) into a
// scratch buffer; a second kernel, one thread per generator coordinate, sums p_{t,i} times them over the rows in a
// fixed order, in double: deterministic, no atomics. Neither copies anything to the host nor synchronises.
// Non-finite generators or positions: NaN tables (and gradients), and the device flag that
// rotation_table_nonfinite() reads (a synchronising read: for when the loss is read anyway).
#include <liere/backend/cuda/api.hpp>
#include <liere/backend/cuda/common.cuh>
#include <liere/backend/cuda/memory.hpp>
#include <liere/backend/kernels/matrix_exp.hpp>
#include <liere/pe/blocks.hpp>

namespace liere::cuda {

namespace {

constexpr std::size_t kScratchBudget = std::size_t(256) << 20;  // most bytes of working memory of a launch
__device__ int g_table_nonfinite = 0;

template <int N>
constexpr bool kLocalWork = N <= 8;
template <int N>
constexpr bool kCoop = N >= 16;  // one thread block per matrix
using kernels::kCoopThreads;  // threads of a cooperative kernel
// The forward's working precision: double for every block, as the CPU op (cpu/rotation_table.hpp's
// TableForwardWork: float scaling and squaring stays orthogonal with its Newton–Schulz finish, but its tables are
// not accurate enough for the float step to stay near the double one: ViT steps with head dim 64 differed from the
// CPU's by up to 5.6e-4 with float tables on an H200, 2026-11-26); no finish in double (kTablePolish). The backward
// runs in float, as the CPU's.
template <int N>
using Work = double;  // blocks 2 and 3: the angle summed in double before the closed forms (their cos and sin)
template <int N>
constexpr int kPolish = std::is_same_v<Work<N>, float> ? 2 : 0;

// The loops and the product of kernels/matrix_exp.hpp's bodies over one thread block of kCoopThreads threads, each
// followed by a barrier (every thread of the block calls the body; scalars outside the loops are the same on all).
struct BlockLoops {
  template <class F>
  __device__ static void each(int n, F&& f) {
    for (int i = int(threadIdx.x); i < n; i += kCoopThreads) f(i);
    __syncthreads();
  }
  // A fixed tree over the threads' partial sums (partial: indices i ≡ thread mod kCoopThreads, in order), in the
  // launch's dynamic shared memory (coop_smem: at least kCoopThreads doubles), which mul leaves free behind its last
  // barrier. A static array here was one 2 KiB array per instance of reduce (each sum and max lambda its own): with
  // mul's 64 KiB for 64×64 in double, 69 KiB, above the 64 KiB a block can have on sm_75.
  template <class Op>
  __device__ static double reduce(double v, Op op) {
    extern __shared__ __align__(16) unsigned char coop_smem_bytes[];
    double* red = reinterpret_cast<double*>(coop_smem_bytes);
    red[threadIdx.x] = v;
    __syncthreads();
    for (int h = kCoopThreads / 2; h > 0; h /= 2) {
      if (int(threadIdx.x) < h) red[threadIdx.x] = op(red[threadIdx.x], red[threadIdx.x + h]);
      __syncthreads();
    }
    const double r = red[0];
    __syncthreads();  // red is free again
    return r;
  }
  template <class F>
  __device__ static double sum(int n, F&& f) {
    double v = 0;
    for (int i = int(threadIdx.x); i < n; i += kCoopThreads) v += f(i);
    return reduce(v, [](double x, double y) { return x + y; });
  }
  template <class F>
  __device__ static double max(int n, F&& f) {  // SerialLoops::max: NaN if any f(i) is
    double m = 0;
    for (int i = int(threadIdx.x); i < n; i += kCoopThreads) m = kernels::SerialLoops::max2(m, f(i));
    return reduce(m, [](double x, double y) { return kernels::SerialLoops::max2(x, y); });
  }
  // c = a·b (+ c): a and b staged in the launch's dynamic shared memory (coop_smem<N, W>() bytes: 64 KiB for 64×64
  // in double, above the 48 KiB of static shared memory), then each thread its part (kernels::coop_mul_part:
  // NaiveMul's sums, the columns interleaved against bank conflicts).
  template <int N, class W>
  __device__ static void mul(const W* __restrict__ a, const W* __restrict__ b, W* __restrict__ c, bool accumulate) {
    extern __shared__ __align__(16) unsigned char coop_smem_bytes[];
    W* sa = reinterpret_cast<W*>(coop_smem_bytes);
    W* sb = sa + N * N;
    for (int e = int(threadIdx.x); e < N * N; e += kCoopThreads) {
      sa[e] = a[e];
      sb[e] = b[e];
    }
    __syncthreads();
    kernels::coop_mul_part<N, W>(sa, sb, c, accumulate, int(threadIdx.x));
    __syncthreads();
  }
};

template <int N>
__global__ void table_forward_kernel(const float* w, const float* pos, float* table, RotationTableShape sh,
                                     std::int64_t first, std::int64_t count, Work<N>* work) {
  constexpr int NN = N * N, ppb = N * (N - 1) / 2;
  const std::int64_t j = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= count) return;
  const std::int64_t i = first + j;
  const int nb = sh.num_blocks(), dim = sh.dim;
  const int t = sh.position_row(i);
  Work<N> local[kLocalWork<N> ? (kernels::kExpWork + 2) * NN : 1];
  Work<N>* a = kLocalWork<N> ? local : work + j * std::int64_t(kernels::kExpWork + 2) * NN;
  Work<N>* r = a + NN;
  kernels::block_generator<N>(w + sh.generator_offset(i), long(nb) * ppb,
                              pos + std::int64_t(t) * dim, dim, a);
  float* out = table + i * NN;
  if constexpr (N == 2) {
    kernels::exp2_skew(a, out);
  } else if constexpr (N == 3) {
    kernels::exp3_skew(a, out);
  } else {
    kernels::expm_skew<N, Work<N>>(a, r, r + NN, kPolish<N>);
    for (int q = 0; q < NN; ++q) out[q] = float(r[q]);
  }
  if (!(out[0] == out[0])) g_table_nonfinite = 1;  // NaN in: NaN out (a benign race: every writer writes 1)
}

template <int N>
__global__ void table_backward_kernel(const float* w, const float* pos, const float* dtable, RotationTableShape sh,
                                      std::int64_t first, std::int64_t count, float* work, float* contrib) {
  constexpr int NN = N * N, ppb = N * (N - 1) / 2;
  const std::int64_t j = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= count) return;
  const std::int64_t i = first + j;
  const int nb = sh.num_blocks(), dim = sh.dim;
  const int t = sh.position_row(i);
  float local[kLocalWork<N> ? (kernels::kFrechetWork + 4) * NN : 1];
  float* a = kLocalWork<N> ? local : work + j * std::int64_t(kernels::kFrechetWork + 4) * NN;
  float *g = a + NN, *r = g + NN, *l = r + NN;
  kernels::block_generator<N>(w + sh.generator_offset(i), long(nb) * ppb,
                              pos + std::int64_t(t) * dim, dim, a);
  for (int q = 0; q < NN; ++q) g[q] = dtable[i * NN + q];
  if constexpr (N == 2) {
    for (int q = 0; q < NN; ++q) l[q] = 0.f;
    kernels::exp2_adjoint(a, g, l);
  } else {
    kernels::detail::transpose<N>(a, r);
    kernels::expm_frechet_skew<N, float>(r, g, a, l, l + NN);
  }
  float* c = contrib + i * ppb;
  for (int q = 0; q < ppb; ++q) c[q] = 0.f;
  kernels::skew_adjoint_add<N>(l, 1.0, c);
}

// The dynamic shared memory of a cooperative launch: BlockLoops::mul's two N×N operands, and reduce's
// kCoopThreads doubles between products (the kernels have no static shared memory).
template <int N, class W>
constexpr std::size_t coop_smem() {
  static_assert(2 * std::size_t(N) * N * sizeof(W) >= kCoopThreads * sizeof(double),
                "coop_smem: BlockLoops::reduce needs kCoopThreads doubles");
  return 2 * std::size_t(N) * N * sizeof(W);
}

// Blocks of 16 and up: one thread block (kCoopThreads) per matrix at a time, as many blocks as the device runs at
// once (coop_slots), each taking matrices blockIdx.x, blockIdx.x + gridDim.x, … of the `count` and its own slot of
// `work`: kExpWork + 2 matrices (in Work<N>). Until 2026-11-27 a block per matrix, in chunks of the scratch budget:
// four launches a pass for ViT-Tiny LieRE-64, each ending in a partly filled wave; with this and one pass over the
// T18 combinations (kernels/matrix_exp.hpp) the H200 ran the forward in 1.11 ms instead of 2.14, the backward in
// 1.72 instead of 2.96 (bench/README.md).
template <int N>
__global__ void __launch_bounds__(kCoopThreads) table_forward_coop(const float* w, const float* pos, float* table,
                                                                    RotationTableShape sh, std::int64_t count,
                                                                    Work<N>* work) {
  using W = Work<N>;
  constexpr int NN = N * N;
  const int dim = sh.dim;
  const long stride = long(sh.num_blocks()) * (N * (N - 1) / 2);
  W* a = work + std::int64_t(blockIdx.x) * (kernels::kExpWork + 2) * NN;
  W* r = a + NN;
  for (std::int64_t i = blockIdx.x; i < count; i += gridDim.x) {  // the same i on every thread of the block
    const float* wi = w + sh.generator_offset(i);
    const float* p = pos + std::int64_t(sh.position_row(i)) * dim;
    kernels::block_generator<N, float, W, BlockLoops>(wi, stride, p, dim, a);
    kernels::expm_skew<N, W, BlockLoops>(a, r, r + NN, kPolish<N>);
    float* out = table + i * NN;
    BlockLoops::each(NN, [&](int e) { out[e] = float(r[e]); });
    if (threadIdx.x == 0 && !(out[0] == out[0])) g_table_nonfinite = 1;
  }
}

// The backward's per-matrix part for blocks of 16 and up (table_backward_kernel's, a thread block per matrix at a
// time, as table_forward_coop); work: kFrechetWork + 4 matrices per block of the launch.
template <int N>
__global__ void __launch_bounds__(kCoopThreads) table_backward_coop(const float* w, const float* pos,
                                                                     const float* dtable, RotationTableShape sh,
                                                                     std::int64_t count, float* work, float* contrib) {
  constexpr int NN = N * N, ppb = N * (N - 1) / 2;
  const int dim = sh.dim;
  const long stride = long(sh.num_blocks()) * ppb;
  float* a = work + std::int64_t(blockIdx.x) * (kernels::kFrechetWork + 4) * NN;
  float *g = a + NN, *r = g + NN, *l = r + NN;
  for (std::int64_t i = blockIdx.x; i < count; i += gridDim.x) {
    const float* wi = w + sh.generator_offset(i);
    const float* p = pos + std::int64_t(sh.position_row(i)) * dim;
    BlockLoops::each(NN, [&](int e) {
      r[e] = kernels::block_generator_entry<N, float, float>(wi, stride, p, dim, (e % N) * N + e / N);  // Aᵀ
      g[e] = dtable[i * NN + e];
    });
    kernels::expm_frechet_skew<N, float, BlockLoops>(r, g, a, l, l + NN);
    float* c = contrib + i * ppb;
    BlockLoops::each(ppb, [&](int q) { c[q] = 0.f; });
    kernels::skew_adjoint_add<N, float, float, BlockLoops>(l, 1.0, c);
  }
}

// dw[set, ax, k, q] += Σ_t p[t, ax] · contrib[(set·rows + t)·nb + k, q], t in order, in double.
__global__ void table_backward_reduce(const float* pos, const float* contrib, float* dw, RotationTableShape sh) {
  const std::int64_t n = sh.num_generators();
  const int ppb = sh.coords_per_block(), nb = sh.num_blocks(), dim = sh.dim, rows = sh.rows;
  LIERE_CUDA_LOOP(g, n) {
    const int q = int(g % ppb);
    const int k = int((g / ppb) % nb);
    const int ax = int((g / (std::int64_t(ppb) * nb)) % dim);
    const int set = int(g / (std::int64_t(ppb) * nb * dim));
    double s = 0;
    for (int t = 0; t < rows; ++t)
      s += double(pos[std::int64_t(t) * dim + ax]) *
           double(contrib[((std::int64_t(set) * rows + t) * nb + k) * ppb + q]);
    dw[g] += float(s);
  }
}

// How many thread blocks of a cooperative kernel the device runs at once, its dynamic shared memory opted in first
// (above 48 KiB a kernel must ask for it): the grid of a launch, each block looping over matrices with its own slot
// of working memory.
template <class Kernel>
std::int64_t coop_resident(const char* name, Kernel kernel, std::size_t smem) {
  int device = 0, sms = 0, per_sm = 0;
  LIERE_CUDA_CHECK(cudaGetDevice(&device));
  if (smem > std::size_t(48) << 10) {
    int most = 0;
    LIERE_CUDA_CHECK(cudaDeviceGetAttribute(&most, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    LIERE_ENSURE(smem <= std::size_t(most), name << " on cuda: needs " << smem << " bytes of shared memory per block, "
                                                 << "this device allows " << most);
    LIERE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  }
  LIERE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  LIERE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kCoopThreads, smem));
  LIERE_ENSURE(per_sm > 0, name << " on cuda: a block of " << kCoopThreads << " threads with " << smem
                                << " bytes of shared memory does not fit on this device");
  return std::int64_t(per_sm) * sms;
}

// The grid of a cooperative launch over `total` matrices with `per` bytes of working memory each: the blocks the
// device runs at once, no more than the matrices, and within kScratchBudget.
template <class Kernel>
std::int64_t coop_slots(const char* name, Kernel kernel, std::size_t smem, std::int64_t total, std::size_t per) {
  std::int64_t slots = coop_resident(name, kernel, smem);
  const std::int64_t budget = std::int64_t(kScratchBudget / per);
  if (slots > budget) slots = budget > 0 ? budget : 1;
  return slots < total ? slots : total;
}

template <int N>
void forward_n(const float* w, const float* pos, float* table, const RotationTableShape& sh) {
  using W = Work<N>;
  const std::int64_t total = sh.num_matrices();
  if constexpr (kCoop<N>) {
    const char* name = "rotation_table_forward";
    const std::size_t per = std::size_t(kernels::kExpWork + 2) * N * N * sizeof(W), smem = coop_smem<N, W>();
    const std::int64_t slots = coop_slots(name, table_forward_coop<N>, smem, total, per);
    // Working memory from the device pool, released when this returns (one stream: after the kernel that uses it).
    const DeviceBlock work(std::size_t(slots) * per);
    LIERE_CUDA_LAUNCH_SMEM(name, table_forward_coop<N>, unsigned(slots), kCoopThreads, smem, w, pos, table, sh, total,
                           work.get<W>());
  } else {
    static_assert(kLocalWork<N>, "rotation tables on cuda: blocks up to 8 in a thread's memory, 16 and up cooperative");
    constexpr int threads = 128;
    LIERE_CUDA_LAUNCH_AS("rotation_table_forward", table_forward_kernel<N>, blocks_for(total, threads), threads, w,
                         pos, table, sh, std::int64_t(0), total, static_cast<W*>(nullptr));
  }
}

template <int N>
void backward_n(const float* w, const float* pos, const float* dtable, float* dw, const RotationTableShape& sh) {
  const std::int64_t total = sh.num_matrices();
  if (total == 0) return;
  const DeviceBlock contrib_block(std::size_t(total) * sh.coords_per_block() * sizeof(float));
  float* contrib = contrib_block.get<float>();
  if constexpr (kCoop<N>) {
    const char* name = "rotation_table_backward";
    const std::size_t per = std::size_t(kernels::kFrechetWork + 4) * N * N * sizeof(float),
                      smem = coop_smem<N, float>();
    const std::int64_t slots = coop_slots(name, table_backward_coop<N>, smem, total, per);
    const DeviceBlock work(std::size_t(slots) * per);
    LIERE_CUDA_LAUNCH_SMEM(name, table_backward_coop<N>, unsigned(slots), kCoopThreads, smem, w, pos, dtable, sh,
                           total, work.get<float>(), contrib);
  } else {
    constexpr int threads = 128;
    LIERE_CUDA_LAUNCH_AS("rotation_table_backward", table_backward_kernel<N>, blocks_for(total, threads), threads, w,
                         pos, dtable, sh, std::int64_t(0), total, static_cast<float*>(nullptr), contrib);
  }
  LIERE_CUDA_LAUNCH_AS("rotation_table_backward (reduce)", table_backward_reduce, grid_for(sh.num_generators()),
                       kThreads, pos, contrib, dw, sh);
}

}  // namespace

void Ops::rotation_table_forward(const float* generators, const float* positions, float* table,
                                 RotationTableShape shape) {
  if (shape.num_matrices() == 0) return;
  const auto run = [&](auto b) { forward_n<decltype(b)::value>(generators, positions, table, shape); };
  dispatch_block(shape.block, run, "rotation tables on cuda");
}

void Ops::rotation_table_backward(const float* generators, const float* positions, const float* dtable,
                                  float* dgenerators, RotationTableShape shape) {
  if (shape.num_matrices() == 0) return;
  const auto run = [&](auto b) { backward_n<decltype(b)::value>(generators, positions, dtable, dgenerators, shape); };
  dispatch_block(shape.block, run, "rotation tables on cuda");
}

bool rotation_table_nonfinite(bool clear) {
  int v = 0;
  LIERE_CUDA_CHECK(cudaMemcpyFromSymbol(&v, g_table_nonfinite, sizeof(int)));
  if (clear && v) {
    const int zero = 0;
    LIERE_CUDA_CHECK(cudaMemcpyToSymbol(g_table_nonfinite, &zero, sizeof(int)));
  }
  return v != 0;
}

}  // namespace liere::cuda
