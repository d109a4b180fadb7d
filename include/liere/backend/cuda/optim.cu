// liere/backend/cuda/optim.cu — the optimizer's multi-tensor kernels: the Adam/AdamW update, the clipping scale and
// the zeroing of gradients for a list of parameters, kMultiTensor tensors per launch instead of one launch each
// (ViT-Tiny has 151 parameters: three launches where there were 453 per step).
//
// A launch takes its tensors by value in the kernel's parameters (a MultiTensor, under the 4 KiB that every
// architecture accepts), blockIdx.y the tensor, blockIdx.x and the threads a grid-stride loop over its elements: the
// per-element body of the CPU's loops (kernels::adam_update), so the updates are the same.
#include <liere/backend/cuda/api.hpp>
#include <liere/backend/cuda/common.cuh>
#include <liere/backend/kernels/adam.hpp>

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
  for (Index i = Index(blockIdx.x) * blockDim.x + threadIdx.x; i < t.n; i += Index(blockDim.x) * gridDim.x)
    kernels::adam_update(t.theta[i], t.g[i], t.m[i], t.v[i], t.step);
}
__global__ void k_scale_many(MultiTensor<Span> ts, float c) {
  const Span& t = ts.item[blockIdx.y];
  for (Index i = Index(blockIdx.x) * blockDim.x + threadIdx.x; i < t.n; i += Index(blockDim.x) * gridDim.x)
    t.p[i] *= c;
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
void Ops::scale_many(float* const* xs, const Index* ns, int count, float c) {
  const std::vector<Span> s = spans(xs, ns, count);
  in_groups(s.data(), count, [](const Span& t) { return t.n; }, [c](const MultiTensor<Span>& pack, int m, unsigned bx) {
    LIERE_CUDA_LAUNCH_AS("k_scale_many", k_scale_many, dim3(bx, unsigned(m)), kThreads, pack, c);
  });
}
void Ops::fill_many(float* const* xs, const Index* ns, int count, float v) {
  const std::vector<Span> s = spans(xs, ns, count);
  in_groups(s.data(), count, [](const Span& t) { return t.n; }, [v](const MultiTensor<Span>& pack, int m, unsigned bx) {
    LIERE_CUDA_LAUNCH_AS("k_fill_many", k_fill_many, dim3(bx, unsigned(m)), kThreads, pack, v);
  });
}

}  // namespace liere::cuda
