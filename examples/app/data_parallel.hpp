// examples/app/data_parallel.hpp — what data-parallel training adds to the trainer (docs/scaling.md): the broadcast of the initial weights, and the bucketed gradient all-reduce.
//
// GradReducer: the parameters are split, in reverse order of registration (the order backward finishes them), into
// buckets of about --bucket-mib MiB. The tape announces each parameter when its gradient is final (Tape::watch: after
// the closure of the first op that used it has run); the gradient is copied into its bucket's host buffer, and when
// a bucket is full its non-blocking all-reduce (MPI_Iallreduce) starts while backward goes on with the layers below.
// After backward, finish() waits for the buckets and copies the sums back. Host and device parameters (a CUDA model
// keeps its position encoding's parameters on the host) go to separate buckets. A device bucket is reduced in place
// by NCCL on a stream of its own (builds with LIERE_WITH_NCCL; the communicator is bootstrapped over MPI), or else
// staged through pinned host memory (cudaMallocHost) to MPI.
//
// The loss of a step is the mean over the global batch: each rank seeds its backward with 1/N (its loss is the mean
// over its B/N samples), so the sums the all-reduce forms are the gradient of the global mean.
#pragma once

#include <app/comm.hpp>
#include <app/flags.hpp>
#include <liere/nn/engine.hpp>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace liere::app {

// Rank 0's parameter values to every rank.
void broadcast_params(Comm& comm, const nn::Params& params);

class GradReducer {
 public:
  GradReducer(Comm& comm, const nn::Params& params, double bucket_mib);
  ~GradReducer();
  GradReducer(const GradReducer&) = delete;
  GradReducer& operator=(const GradReducer&) = delete;

  // Before the forward pass: buckets start as their gradients become final during tape.backward().
  void attach(Tape& tape);
  // After backward (with or without attach): starts what has not started, waits for every bucket and writes the
  // sums into the gradients. Returns the seconds this call waited.
  double finish();

  int buckets() const { return int(buckets_.size()); }
  // "mpi", "mpi + nccl" (device buckets on NCCL) or "mpi, device gradients staged through pinned host memory".
  std::string transport() const;
  std::size_t bytes() const;  // floats reduced per step × 4
  // Buckets started during backward in the last step (the rest started in finish()).
  int started_during_backward() const { return started_in_backward_; }

 private:
  struct Bucket {
    std::vector<std::size_t> params;  // indices into params_
    std::size_t floats = 0;
    bool device = false;    // CUDA gradients
    bool nccl = false;      // reduced by NCCL in place (else through `host` and MPI)
    float* host = nullptr;  // pinned for staged CUDA gradients
    bool pinned = false;
    int ready = 0;
    int request = -1;       // MPI request; NCCL: 0 once started
    void* done = nullptr;   // NCCL: a cudaEvent_t recorded after the bucket's all-reduce
  };
  struct Nccl;
  void ready(std::size_t k);
  void start(Bucket& b);
  void wait(Bucket& b);

  Comm& comm_;
  std::vector<Parameter> params_;
  std::vector<std::size_t> bucket_of_, offset_of_;
  std::vector<Bucket> buckets_;
  std::unique_ptr<Nccl> nccl_;
  bool in_backward_ = false;
  int started_in_backward_ = 0;
};

}  // namespace liere::app
