// examples/app/data_parallel.cpp — the flags check, the weight broadcast and the bucketed gradient all-reduce.
#include <app/data_parallel.hpp>

#ifdef LIERE_WITH_CUDA
#include <cuda_runtime_api.h>
#include <liere/backend/cuda/memory.hpp>
#endif
#ifdef LIERE_WITH_NCCL
#include <nccl.h>
#endif

#include <chrono>
#include <cstring>
#include <thread>

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

#ifdef LIERE_WITH_NCCL
namespace {
void nccl_check(ncclResult_t rc, const char* call) {
  LIERE_ENSURE(rc == ncclSuccess, call << " failed: " << ncclGetErrorString(rc));
}
void cuda_check(cudaError_t rc, const char* call) {
  LIERE_ENSURE(rc == cudaSuccess, call << " failed: " << cudaGetErrorString(rc));
}
}  // namespace

// NCCL between the GPUs: one communicator over every rank (its id sent by rank 0 over MPI), and a stream of its own
// on which each bucket's all-reduce waits for the compute stream's work up to the bucket's announcement.
struct GradReducer::Nccl {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  bool aborted = false;
  ~Nccl() {
    if (comm && !aborted) ncclCommDestroy(comm);
    if (stream) cudaStreamDestroy(stream);
  }
};
#else
struct GradReducer::Nccl {};
#endif

GradReducer::GradReducer(Comm& comm, const nn::Params& params, double bucket_mib)
    : comm_(comm), params_(params.all()) {
  LIERE_ENSURE(bucket_mib > 0, "--bucket-mib " << bucket_mib << ": must be > 0");
  const std::size_t limit = std::size_t(bucket_mib * 1024 * 1024 / sizeof(float));
  bucket_of_.resize(params_.size());
  offset_of_.resize(params_.size());
  // Reverse registration order: the head's gradients are final first, the patch embedding's last. One open bucket
  // per side (host, device).
  long open[2] = {-1, -1};
  for (std::size_t i = params_.size(); i-- > 0;) {
    const bool device = !params_[i].value().on_host();
    long& o = open[device];
    if (o < 0 || (buckets_[std::size_t(o)].floats + std::size_t(params_[i].numel()) > limit)) {
      buckets_.emplace_back();
      buckets_.back().device = device;
      o = long(buckets_.size()) - 1;
    }
    Bucket& b = buckets_[std::size_t(o)];
    bucket_of_[i] = std::size_t(o);
    offset_of_[i] = b.floats;
    b.params.push_back(i);
    b.floats += std::size_t(params_[i].numel());
  }
  bool any_device = false;
  for (const Bucket& b : buckets_) any_device = any_device || b.device;
#ifdef LIERE_WITH_NCCL
  if (any_device && comm_.distributed()) {
    nccl_ = std::make_unique<Nccl>();
    ncclUniqueId id{};
    if (comm_.root()) nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    comm_.broadcast(&id, sizeof id, 0, "the NCCL bootstrap");
    nccl_check(ncclCommInitRank(&nccl_->comm, comm_.size(), id, comm_.rank()), "ncclCommInitRank");
    cuda_check(cudaStreamCreateWithFlags(&nccl_->stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  }
#endif
  for (Bucket& b : buckets_) {
    if (b.device && nccl_) {
#ifdef LIERE_WITH_NCCL
      b.nccl = true;
      cudaEvent_t e = nullptr;
      cuda_check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreateWithFlags");
      b.done = e;
#endif
      continue;
    }
#ifdef LIERE_WITH_CUDA
    if (b.device) {
      void* p = nullptr;
      LIERE_ENSURE(cudaMallocHost(&p, b.floats * sizeof(float)) == cudaSuccess,
                   "cudaMallocHost of " << b.floats * sizeof(float) << " bytes for a gradient bucket failed");
      b.host = static_cast<float*>(p);
      b.pinned = true;
      continue;
    }
#endif
    b.host = new float[b.floats];
  }
}

GradReducer::~GradReducer() {
  for (Bucket& b : buckets_) {
#ifdef LIERE_WITH_NCCL
    if (b.done) cudaEventDestroy(static_cast<cudaEvent_t>(b.done));
#endif
#ifdef LIERE_WITH_CUDA
    if (b.pinned) {
      cudaFreeHost(b.host);
      continue;
    }
#endif
    delete[] b.host;
  }
}

std::string GradReducer::transport() const {
  bool device = false;
  for (const Bucket& b : buckets_) device = device || b.device;
  if (!device) return "mpi";
  return nccl_ ? "mpi + nccl" : "mpi, device gradients staged through pinned host memory";
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
  if (!b.nccl) to_host(b.host + offset_of_[k], params_[k].grad());
  if (++b.ready == int(b.params.size())) start(b);
}

void GradReducer::start(Bucket& b) {
  started_in_backward_ += in_backward_;
  if (!b.nccl) {
    b.request = comm_.start_all_reduce_sum(b.host, b.floats);
    return;
  }
#ifdef LIERE_WITH_NCCL
  // The NCCL stream waits for what the compute stream (the legacy default stream) has queued so far: the kernels
  // that wrote these gradients.
  cudaEvent_t computed = nullptr;
  cuda_check(cudaEventCreateWithFlags(&computed, cudaEventDisableTiming), "cudaEventCreateWithFlags");
  cuda_check(cudaEventRecord(computed, cudaStreamLegacy), "cudaEventRecord");
  cuda_check(cudaStreamWaitEvent(nccl_->stream, computed, 0), "cudaStreamWaitEvent");
  cudaEventDestroy(computed);  // released once recorded work completes
  nccl_check(ncclGroupStart(), "ncclGroupStart");
  for (std::size_t i : b.params) {
    float* g = params_[i].grad().data();
    nccl_check(ncclAllReduce(g, g, std::size_t(params_[i].numel()), ncclFloat, ncclSum, nccl_->comm, nccl_->stream),
               "ncclAllReduce");
  }
  nccl_check(ncclGroupEnd(), "ncclGroupEnd");
  cuda_check(cudaEventRecord(static_cast<cudaEvent_t>(b.done), nccl_->stream), "cudaEventRecord");
  b.request = 0;
#endif
}

void GradReducer::wait(Bucket& b) {
  if (!b.nccl) {
    comm_.wait(b.request, "the gradient all-reduce");
    for (std::size_t i : b.params) from_host(params_[i].grad(), b.host + offset_of_[i]);
    return;
  }
#ifdef LIERE_WITH_NCCL
  // Bounded, as the MPI path: poll the bucket's event against the deadline; on a timeout abort NCCL and the job.
  const auto t0 = std::chrono::steady_clock::now();
  const auto done = static_cast<cudaEvent_t>(b.done);
  for (;;) {
    const cudaError_t q = cudaEventQuery(done);
    if (q == cudaSuccess) break;
    LIERE_ENSURE(q == cudaErrorNotReady, "the NCCL all-reduce failed: " << cudaGetErrorString(q));
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(nccl_->comm, &async);
    LIERE_ENSURE(async == ncclSuccess || async == ncclInProgress, "the NCCL all-reduce failed: " << ncclGetErrorString(async));
    const double waited = seconds_since(t0);
    if (waited > comm_.timeout()) {
      ncclCommAbort(nccl_->comm);
      nccl_->aborted = true;
      comm_.abort("no answer from the other ranks for " + std::to_string(int(waited)) +
                      " s in the NCCL gradient all-reduce (--comm-timeout): a rank has died or stalls; ending the job",
                  4);
    }
    std::this_thread::yield();
  }
  // The compute stream's next kernels (clipping, the optimizer) run after the reduction.
  cuda_check(cudaStreamWaitEvent(cudaStreamLegacy, done, 0), "cudaStreamWaitEvent");
#endif
}

double GradReducer::finish() {
  if (!in_backward_) started_in_backward_ = 0;
  in_backward_ = false;
  const auto t0 = std::chrono::steady_clock::now();
  // Buckets not started during backward (no attach, or parameters announced only at its end): fill and start them
  // now, in bucket order.
  for (Bucket& b : buckets_)
    if (b.request < 0) {
      if (!b.nccl)
        for (std::size_t i : b.params) to_host(b.host + offset_of_[i], params_[i].grad());  // all final now
      b.ready = int(b.params.size());
      start(b);
    }
  for (Bucket& b : buckets_) {
    wait(b);
    b.request = -1;
    b.ready = 0;
  }
  return seconds_since(t0);
}

}  // namespace liere::app
