// liere/backend/cuda/optim.cu — the optimizer's multi-tensor kernels: the Adam/AdamW update, the clipping norm's sums
// of squares and its scale, and the zeroing of gradients for a list of parameters, kMultiTensor tensors per launch
// instead of one launch each (ViT-Tiny has 151 parameters: the four ops take 36 launches a step, the clipping norm 15
// of them, where it took 303).
//
// clip_scale_many and the gate of adam_update_many read the norm and the loss in device memory (kernels/clip.hpp):
// a step clipped and updated with no read of the device (optim::clip_grad_norm_into, AdamT::step's gate).
//
// A launch takes its tensors by value in the kernel's parameters (a MultiTensor, under the 4 KiB that every
// architecture accepts), blockIdx.y the tensor, blockIdx.x and the threads a grid-stride loop over its elements: the
// per-element body of the CPU's loops (kernels::adam_update), so the updates are the same.
#include <liere/backend/cuda/api.hpp>
#include <liere/backend/cuda/common.cuh>
#include <liere/backend/kernels/adam.hpp>
#include <liere/backend/kernels/clip.hpp>

#include <climits>
#include <vector>

namespace liere::cuda {

namespace {

constexpr int kMultiTensor = 24;  // tensors per launch

template <class T>
struct MultiTensor {
  T item[kMultiTensor];
};
static_assert(sizeof(MultiTensor<kernels::AdamTensor<float>>) <= 4000, "kernel parameters: at most 4 KiB");

struct Span {
  float* p;
  Index n;
};

__global__ void k_adam_many(MultiTensor<kernels::AdamTensor<float>> ts) {
  const kernels::AdamTensor<float>& t = ts.item[blockIdx.y];
  if (!kernels::gate_open(t.step.gate_loss, t.step.gate_sumsq)) return;
  for (Index i = Index(blockIdx.x) * blockDim.x + threadIdx.x; i < t.n; i += Index(blockDim.x) * gridDim.x)
    kernels::adam_update(t.theta[i], t.g[i], t.m[i], t.v[i], t.step);
}
__global__ void k_scale_many(MultiTensor<Span> ts, float c) {
  const Span& t = ts.item[blockIdx.y];
  for (Index i = Index(blockIdx.x) * blockDim.x + threadIdx.x; i < t.n; i += Index(blockDim.x) * gridDim.x)
    t.p[i] *= c;
}
// The clipping coefficient from Σg² in device memory, each thread the same double arithmetic as the host's.
__global__ void k_clip_scale_many(MultiTensor<Span> ts, const double* sumsq, double max_norm) {
  const double c = kernels::clip_from_sum(*sumsq, max_norm);
  if (c == 1.0) return;
  const float cf = float(c);
  const Span& t = ts.item[blockIdx.y];
  for (Index i = Index(blockIdx.x) * blockDim.x + threadIdx.x; i < t.n; i += Index(blockDim.x) * gridDim.x)
    t.p[i] *= cf;
}
__global__ void k_fill_many(MultiTensor<Span> ts, float v) {
  const Span& t = ts.item[blockIdx.y];
  for (Index i = Index(blockIdx.x) * blockDim.x + threadIdx.x; i < t.n; i += Index(blockDim.x) * gridDim.x)
    t.p[i] = v;
}

// Calls launch(pack, count, blocks_x) for each group of up to kMultiTensor tensors: blocks_x covers the group's
// largest tensor (at most 1024 blocks of kThreads; larger tensors by grid stride).
template <class T, class Size, class Launch>
void in_groups(const T* items, int count, Size size, Launch launch) {
  for (int first = 0; first < count; first += kMultiTensor) {
    const int m = count - first < kMultiTensor ? count - first : kMultiTensor;
    MultiTensor<T> pack{};
    Index largest = 0;
    for (int k = 0; k < m; ++k) {
      pack.item[k] = items[first + k];
      largest = size(items[first + k]) > largest ? size(items[first + k]) : largest;
    }
    if (largest == 0) continue;
    const unsigned bx = blocks_for(largest) < 1024u ? blocks_for(largest) : 1024u;
    launch(pack, m, bx);
  }
}

// The sums of squares in double, in the order the one-tensor form had: per tensor, chunks of kSqChunk (a block of
// kThreads each, block_sum's fixed tree), the chunks added in order, then the tensors in order.
constexpr Index kSqChunk = 8192;
struct SquaresTensor {
  const float* x;
  Index n;
  double* part;   // its chunks' sums
  double* total;  // their sum
};
__host__ __device__ inline Index chunks_of(Index n) { return n > 0 ? (n + kSqChunk - 1) / kSqChunk : 0; }
__global__ void k_sum_squares_many(MultiTensor<SquaresTensor> ts) {
  const SquaresTensor& t = ts.item[blockIdx.y];
  const Index c = blockIdx.x, b = c * kSqChunk, e = b + kSqChunk < t.n ? b + kSqChunk : t.n;
  if (b >= t.n) return;  // the whole block leaves together: block_sum's barriers stay uniform
  double a = 0.0;
  for (Index i = b + threadIdx.x; i < e; i += kThreads) a += double(t.x[i]) * double(t.x[i]);
  const double s = block_sum(a);
  if (threadIdx.x == 0) t.part[c] = s;
}
// Thread k: tensor k's chunks in order.
__global__ void k_sum_chunks_many(MultiTensor<SquaresTensor> ts, int m) {
  const int k = int(threadIdx.x);
  if (k >= m) return;
  const SquaresTensor& t = ts.item[k];
  double a = 0.0;
  for (Index c = 0; c < chunks_of(t.n); ++c) a += t.part[c];
  *t.total = a;
}
__global__ void k_sum_in_order(const double* x, Index n, double* out) {
  double a = 0.0;
  for (Index i = 0; i < n; ++i) a += x[i];
  out[0] = a;
}

std::vector<Span> spans(float* const* xs, const Index* ns, int count) {
  std::vector<Span> s(std::size_t(count > 0 ? count : 0));
  for (int k = 0; k < count; ++k) s[std::size_t(k)] = {xs[k], ns[k]};
  return s;
}

}  // namespace

void Ops::adam_update_many(const kernels::AdamTensor<float>* ts, int count) {
  in_groups(ts, count, [](const kernels::AdamTensor<float>& t) { return t.n; },
            [](const MultiTensor<kernels::AdamTensor<float>>& pack, int m, unsigned bx) {
              LIERE_CUDA_LAUNCH_AS("k_adam_many", k_adam_many, dim3(bx, unsigned(m)), kThreads, pack);
            });
}
double Ops::sum_squares(const float* x, Index n) { return sum_squares_many(&x, &n, 1); }
double Ops::sum_squares_many(const float* const* xs, const Index* ns, int count) {
  const DeviceBlock out(sizeof(double));
  sum_squares_many_into(xs, ns, count, out.get<double>());
  double total = 0.0;
  LIERE_CUDA_CHECK(cudaMemcpy(&total, out.get<double>(), sizeof(double), cudaMemcpyDeviceToHost));
  return total;
}
void Ops::sum_squares_many_into(const float* const* xs, const Index* ns, int count, double* out) {
  if (count <= 0) {
    LIERE_CUDA_CHECK(cudaMemsetAsync(out, 0, sizeof(double)));  // +0.0, as the CPU's empty sum
    return;
  }
  Index parts = 0;
  for (int k = 0; k < count; ++k) {
    LIERE_ENSURE(chunks_of(ns[k]) <= Index(INT_MAX),
                 "sum_squares on cuda: " << ns[k] << " elements need more than 2^31 - 1 blocks");
    parts += chunks_of(ns[k]);
  }
  // every tensor's chunk sums, then each tensor's total; the total of the totals into out
  const DeviceBlock block(std::size_t(parts + count) * sizeof(double));
  double* part = block.get<double>();
  double* totals = part + parts;
  std::vector<SquaresTensor> items(static_cast<std::size_t>(count));
  Index off = 0;
  for (int k = 0; k < count; ++k) {
    items[std::size_t(k)] = {xs[k], ns[k], part + off, totals + k};
    off += chunks_of(ns[k]);
  }
  for (int first = 0; first < count; first += kMultiTensor) {
    const int m = count - first < kMultiTensor ? count - first : kMultiTensor;
    MultiTensor<SquaresTensor> pack{};
    Index most = 0;
    for (int k = 0; k < m; ++k) {
      pack.item[k] = items[std::size_t(first + k)];
      most = chunks_of(pack.item[k].n) > most ? chunks_of(pack.item[k].n) : most;
    }
    if (most > 0)
      LIERE_CUDA_LAUNCH_AS("k_sum_squares_many", k_sum_squares_many, dim3(unsigned(most), unsigned(m)), kThreads, pack);
    LIERE_CUDA_LAUNCH_AS("k_sum_chunks_many", k_sum_chunks_many, 1, kWarp, pack, m);
  }
  LIERE_CUDA_LAUNCH_AS("k_sum_in_order", k_sum_in_order, 1, 1, totals, Index(count), out);
}
void Ops::scale_many(float* const* xs, const Index* ns, int count, float c) {
  const std::vector<Span> s = spans(xs, ns, count);
  in_groups(s.data(), count, [](const Span& t) { return t.n; }, [c](const MultiTensor<Span>& pack, int m, unsigned bx) {
    LIERE_CUDA_LAUNCH_AS("k_scale_many", k_scale_many, dim3(bx, unsigned(m)), kThreads, pack, c);
  });
}
void Ops::clip_scale_many(float* const* xs, const Index* ns, int count, const double* sumsq, double max_norm) {
  const std::vector<Span> s = spans(xs, ns, count);
  in_groups(s.data(), count, [](const Span& t) { return t.n; },
            [sumsq, max_norm](const MultiTensor<Span>& pack, int m, unsigned bx) {
              LIERE_CUDA_LAUNCH_AS("k_clip_scale_many", k_clip_scale_many, dim3(bx, unsigned(m)), kThreads, pack, sumsq,
                                   max_norm);
            });
}
void Ops::fill_many(float* const* xs, const Index* ns, int count, float v) {
  const std::vector<Span> s = spans(xs, ns, count);
  in_groups(s.data(), count, [](const Span& t) { return t.n; }, [v](const MultiTensor<Span>& pack, int m, unsigned bx) {
    LIERE_CUDA_LAUNCH_AS("k_fill_many", k_fill_many, dim3(bx, unsigned(m)), kThreads, pack, v);
  });
}

}  // namespace liere::cuda
