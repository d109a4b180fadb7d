// liere/backend/cuda/cudnn_attention.hpp — cuDNN 9's fused scaled-dot-product attention, the peer that issue 22
// measures liere's attention against: softmax(s · q kᵀ) v over 16-bit (bf16 or fp16) q, k, v with fp32
// accumulation, forward (with the rows' log-sum-exps, what the backward needs) and backward, through the SDPA_FWD and
// SDPA_BWD operations of cuDNN's backend API (cuDNN ≥ 9.13 and ≥ 9.17; no cudnn_frontend). Host code only
// (cudnn_attention.cu, compiled into liere::cuda).
//
// libcudnn.so.9 is loaded with dlopen on first use, as the CPU backend loads oneDNN: programs built with the CUDA
// backend do not need cuDNN to start, and a machine without it gets a message saying so (cudnn_loaded). The build
// needs cuDNN's headers (cudnn_graph.h; in the CUDA Toolkit here) to compile the calls; without them every
// function below reports that the build has no cuDNN.
//
// Layout: q, k, v, o and the gradients are (B, H, T, D) on the device, contiguous (element (b, h, t, d) at
// ((b·H + h)·T + t)·D + d), 16-byte aligned; the log-sum-exps (B, H, T) float, natural log. D a multiple of 8 (cuDNN's
// fused attention requires it), at most 256. Every call runs on the legacy default stream, as the rest of the
// CUDA backend.
//
// What cuDNN offers depends on the device and the version: a graph it cannot run gives no execution plan, and the
// constructor (forward) or backward_plan() (backward) says so with cuDNN's own message. bench/bench_cudnn_attention
// times it; tests/test_cuda.cpp checks it against a double reference where there is a device; tests/test_kernels.cpp
// checks that cuDNN accepts the operations' descriptors without one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <liere/core/precision.hpp>
#include <memory>
#include <string>

namespace liere::cuda {

struct CudnnAttentionShape {
  int B = 1, H = 1, T = 1, D = 64;
};

// Whether libcudnn.so.9 can be loaded and this build has the calls (else *why says which is missing).
bool cudnn_loaded(std::string* why = nullptr);
// cudnnGetVersion() as "9.19.0"; "none" when cudnn_loaded() is false.
std::string cudnn_version();

// Builds the tensors and the SDPA_FWD operation (and SDPA_BWD when `backward`) for this shape and type (bf16 or fp16)
// and finalizes them: cuDNN checks their attributes without a device. Throws liere::Error with cuDNN's message when
// it refuses one, or when the shape or the type is out of range (the message names which).
void cudnn_attention_check_descriptors(const CudnnAttentionShape& s, Precision type, bool backward);

class CudnnAttention {
 public:
  // The forward's execution plan for this shape and type (cuDNN's heuristics, mode A then the fallback list: the
  // first configuration that finalizes); `scale` multiplies q kᵀ (1/√D for a ViT). Throws liere::Error when there is
  // no device, no cuDNN, or no plan (cuDNN's message).
  CudnnAttention(const CudnnAttentionShape& s, Precision type, float scale);
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  // o = softmax(scale · q kᵀ) v, lse = the rows' log-sum-exps of scale · q kᵀ. Device pointers (16-bit data as raw
  // bits); queued on the stream, not synchronised.
  void forward(const void* q, const void* k, const void* v, void* o, float* lse);
  // Builds the backward's plan on first call; false when cuDNN has none for this device, shape and type (why() says
  // why), true when backward() can run.
  bool backward_plan();
  // dq, dk, dv (overwritten) from the forward's q, k, v, o, lse and the output's gradient do_. Needs backward_plan().
  void backward(const void* q, const void* k, const void* v, const void* o, const float* lse, const void* do_, void* dq,
                void* dk, void* dv);

  const std::string& why() const;       // why backward_plan() is false; empty otherwise
  std::string forward_engine() const;   // "engine 7 (configuration 1 of 3, workspace 0 B)"
  std::string backward_engine() const;  // the same for the backward, "" before backward_plan()
  std::size_t workspace_bytes() const;  // the larger of the two plans' workspaces

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace liere::cuda
