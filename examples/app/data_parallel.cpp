// examples/app/data_parallel.cpp — the flags check, the weight broadcast and the bucketed gradient all-reduce.
#include <app/data_parallel.hpp>

#ifdef LIERE_WITH_CUDA
#include <cuda_runtime_api.h>
#include <liere/backend/cuda/memory.hpp>
#endif

#include <chrono>
#include <cstring>

namespace liere::app {

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Copies between a gradient (on its device) and host memory.
void to_host(float* dst, const Tensor& src) {
  if (src.on_host()) {
    std::memcpy(dst, src.data(), std::size_t(src.numel()) * sizeof(float));
    return;
  }
#ifdef LIERE_WITH_CUDA
  cuda::copy_bytes(dst, Device::cpu, src.data(), src.device(), std::size_t(src.numel()) * sizeof(float));
#endif
}
void from_host(const Tensor& dst, const float* src) {
  if (dst.on_host()) {
    std::memcpy(dst.data(), src, std::size_t(dst.numel()) * sizeof(float));
    return;
  }
#ifdef LIERE_WITH_CUDA
  cuda::copy_bytes(dst.data(), dst.device(), src, Device::cpu, std::size_t(dst.numel()) * sizeof(float));
#endif
}
}  // namespace

void broadcast_params(Comm& comm, const nn::Params& params) {
  if (!comm.distributed()) return;
  std::vector<float> host;
  for (const auto& p : params) {
    const Tensor& v = p.value();
    host.resize(std::size_t(v.numel()));
    to_host(host.data(), v);
    comm.broadcast(host.data(), host.size() * sizeof(float), 0, "the broadcast of the initial weights");
    from_host(v, host.data());
  }
}

GradReducer::GradReducer(Comm& comm, const nn::Params& params, double bucket_mib)
    : comm_(comm), params_(params.all()) {
  LIERE_ENSURE(bucket_mib > 0, "--bucket-mib " << bucket_mib << ": must be > 0");
  const std::size_t limit = std::size_t(bucket_mib * 1024 * 1024 / sizeof(float));
  bucket_of_.resize(params_.size());
  offset_of_.resize(params_.size());
  // Reverse registration order: the head's gradients are final first, the patch embedding's last.
  for (std::size_t i = params_.size(); i-- > 0;) {
    if (buckets_.empty() || (buckets_.back().floats > 0 && buckets_.back().floats + std::size_t(params_[i].numel()) > limit))
      buckets_.emplace_back();
    Bucket& b = buckets_.back();
    bucket_of_[i] = buckets_.size() - 1;
    offset_of_[i] = b.floats;
    b.params.push_back(i);
    b.floats += std::size_t(params_[i].numel());
  }
  for (Bucket& b : buckets_) {
    bool device = false;
    for (std::size_t i : b.params) device = device || !params_[i].value().on_host();
#ifdef LIERE_WITH_CUDA
    if (device) {
      void* p = nullptr;
      LIERE_ENSURE(cudaMallocHost(&p, b.floats * sizeof(float)) == cudaSuccess,
                   "cudaMallocHost of " << b.floats * sizeof(float) << " bytes for a gradient bucket failed");
      b.host = static_cast<float*>(p);
      b.pinned = true;
      continue;
    }
#endif
    (void)device;
    b.host = new float[b.floats];
  }
}

GradReducer::~GradReducer() {
  for (Bucket& b : buckets_) {
#ifdef LIERE_WITH_CUDA
    if (b.pinned) {
      cudaFreeHost(b.host);
      continue;
    }
#endif
    delete[] b.host;
  }
}

std::size_t GradReducer::bytes() const {
  std::size_t n = 0;
  for (const Bucket& b : buckets_) n += b.floats;
  return n * sizeof(float);
}

void GradReducer::attach(Tape& tape) {
  in_backward_ = true;
  started_in_backward_ = 0;
  tape.watch(params_, [this](std::size_t k) { ready(k); }, [this] { comm_.test(-1); });
}

void GradReducer::ready(std::size_t k) {
  Bucket& b = buckets_[bucket_of_[k]];
  to_host(b.host + offset_of_[k], params_[k].grad());
  if (++b.ready == int(b.params.size())) start(b);
}

void GradReducer::start(Bucket& b) {
  b.request = comm_.start_all_reduce_sum(b.host, b.floats);
  started_in_backward_ += in_backward_;
}

double GradReducer::finish() {
  if (!in_backward_) started_in_backward_ = 0;
  in_backward_ = false;
  const auto t0 = std::chrono::steady_clock::now();
  // Buckets not started during backward (no attach, or parameters announced only at its end): fill and start them
  // now, in bucket order.
  for (Bucket& b : buckets_)
    if (b.request < 0) {
      for (std::size_t i : b.params) to_host(b.host + offset_of_[i], params_[i].grad());  // all final now
      b.ready = int(b.params.size());
      start(b);
    }
  for (Bucket& b : buckets_) {
    comm_.wait(b.request, "the gradient all-reduce");
    for (std::size_t i : b.params) from_host(params_[i].grad(), b.host + offset_of_[i]);
    b.request = -1;
    b.ready = 0;
  }
  const double waited = seconds_since(t0);
  return waited;
}

}  // namespace liere::app
