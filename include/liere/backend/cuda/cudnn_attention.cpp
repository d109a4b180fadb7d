// liere/backend/cuda/cudnn_attention.cpp — cuDNN's fused attention through its backend API (cudnn_attention.hpp):
// libcudnn.so.9 loaded with dlopen, the tensors and the SDPA_FWD / SDPA_BWD operation, the operation graph,
// cuDNN's heuristics (mode A, then its fallback list) and the first engine configuration that gives an execution
// plan, and a variant pack per call. Host code only; compiled into liere::cuda (LIERE_WITH_CUDA).
#include <liere/backend/cuda/cudnn_attention.hpp>
#include <liere/backend/cuda/memory.hpp>
#include <liere/core/config.hpp>

#if __has_include(<cudnn_graph.h>)
#include <cudnn_graph.h>
#if CUDNN_VERSION >= 91700  // SDPA_FWD since 9.13, SDPA_BWD since 9.17
#define LIERE_CUDNN_HEADERS 1
#endif
#endif

#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <initializer_list>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace liere::cuda {

#ifdef LIERE_CUDNN_HEADERS

namespace {

constexpr std::size_t kSdpaFwdVersion = 91300, kSdpaBwdVersion = 91700;  // cudnnGetVersion() of the first with each

// The functions of libcudnn.so.9 this file calls, found with dlsym; `why` is empty when all of them were.
struct Api {
  decltype(&::cudnnGetVersion) get_version = nullptr;
  decltype(&::cudnnGetErrorString) error_string = nullptr;
  decltype(&::cudnnGetLastErrorString) last_error = nullptr;
  decltype(&::cudnnCreate) create = nullptr;
  decltype(&::cudnnBackendCreateDescriptor) create_desc = nullptr;
  decltype(&::cudnnBackendDestroyDescriptor) destroy_desc = nullptr;
  decltype(&::cudnnBackendSetAttribute) set = nullptr;
  decltype(&::cudnnBackendGetAttribute) get = nullptr;
  decltype(&::cudnnBackendFinalize) finalize = nullptr;
  decltype(&::cudnnBackendExecute) execute = nullptr;
  std::string why;
};

template <class F>
void find(void* lib, F& fn, const char* name, std::string& why) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  if (!fn && why.empty()) why = std::string("libcudnn.so.9 has no ") + name;
}

const Api& api() {
  static const Api a = [] {
    Api r;
    void* lib = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      const char* e = dlerror();
      r.why = std::string("libcudnn.so.9 cannot be loaded (") + (e ? e : "?") +
              "): cuDNN 9 is part of the CUDA Toolkit here (/usr/local/cuda/lib64); elsewhere install it (NVIDIA's "
              "cudnn9-cuda-13 package) or add its folder to LD_LIBRARY_PATH";
      return r;
    }
    find(lib, r.get_version, "cudnnGetVersion", r.why);
    find(lib, r.error_string, "cudnnGetErrorString", r.why);
    find(lib, r.last_error, "cudnnGetLastErrorString", r.why);
    find(lib, r.create, "cudnnCreate", r.why);
    find(lib, r.create_desc, "cudnnBackendCreateDescriptor", r.why);
    find(lib, r.destroy_desc, "cudnnBackendDestroyDescriptor", r.why);
    find(lib, r.set, "cudnnBackendSetAttribute", r.why);
    find(lib, r.get, "cudnnBackendGetAttribute", r.why);
    find(lib, r.finalize, "cudnnBackendFinalize", r.why);
    find(lib, r.execute, "cudnnBackendExecute", r.why);
    // The forward from 9.13; the backward's version is checked by backward_plan (9.17), so that a cuDNN between
    // the two (PyTorch's wheels carried 9.14 on the H200 of 2026-11-27) still runs and measures the forward.
    if (r.why.empty() && r.get_version() < kSdpaFwdVersion)
      r.why = "libcudnn.so.9 is version " + std::to_string(r.get_version()) +
              ": the SDPA_FWD operation needs cuDNN 9.13 or newer (91300)";
    return r;
  }();
  return a;
}

const Api& loaded_api() {
  const Api& a = api();
  LIERE_ENSURE(a.why.empty(), "cuDNN: " << a.why);
  return a;
}

// cuDNN's name of a status and its last error message (the reason, where cuDNN gives one).
std::string status_text(cudnnStatus_t s) {
  const Api& a = api();
  std::string t = a.error_string(s);
  char buf[1024] = {0};
  a.last_error(buf, sizeof buf);
  if (buf[0]) t += std::string(": ") + buf;
  return t;
}

void check_cudnn(cudnnStatus_t s, const char* what, const char* file, int line) {
  if (s != CUDNN_STATUS_SUCCESS) detail::fail(file, line, std::string("cuDNN: ") + what + ": " + status_text(s));
}
#define LIERE_CUDNN_CHECK(call, what) check_cudnn((call), (what), __FILE__, __LINE__)

// A backend descriptor (none until made with a type), destroyed with its owner.
class Desc {
 public:
  Desc() = default;
  explicit Desc(cudnnBackendDescriptorType_t type) {
    LIERE_CUDNN_CHECK(loaded_api().create_desc(type, &d_), "cudnnBackendCreateDescriptor");
  }
  Desc(Desc&& o) noexcept : d_(std::exchange(o.d_, nullptr)) {}
  Desc& operator=(Desc&& o) noexcept {
    std::swap(d_, o.d_);
    return *this;
  }
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  ~Desc() {
    if (d_) api().destroy_desc(d_);
  }
  cudnnBackendDescriptor_t get() const { return d_; }
  const cudnnBackendDescriptor_t* ptr() const { return &d_; }

  void set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, std::int64_t n, const void* values,
           const char* what) {
    LIERE_CUDNN_CHECK(api().set(d_, name, type, n, values), what);
  }
  void set(cudnnBackendAttributeName_t name, const Desc& v, const char* what) {
    set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, v.ptr(), what);
  }
  cudnnStatus_t try_finalize() { return api().finalize(d_); }
  void finalize(const char* what) { LIERE_CUDNN_CHECK(try_finalize(), what); }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

enum Uid : std::int64_t { kQ = 1, kK, kV, kO, kLse, kScale, kDO, kDQ, kDK, kDV };

void check_shape(const CudnnAttentionShape& s) {
  LIERE_ENSURE(s.B >= 1 && s.H >= 1 && s.T >= 1, "cuDNN attention: B, H and T must be at least 1 (got B "
                                                     << s.B << ", H " << s.H << ", T " << s.T << ")");
  LIERE_ENSURE(s.D >= 8 && s.D <= 256 && s.D % 8 == 0,
               "cuDNN attention: the head dim D must be a multiple of 8 in [8, 256] (got " << s.D << ")");
}

// A (B, H, T, cols) tensor, contiguous; cols = D for q, k, v, o and the gradients, 1 for the log-sum-exps.
Desc tensor(Uid uid, const CudnnAttentionShape& s, std::int64_t cols, cudnnDataType_t type) {
  Desc t(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  const std::array<std::int64_t, 4> dims{s.B, s.H, s.T, cols},
      strides{std::int64_t(s.H) * s.T * cols, std::int64_t(s.T) * cols, cols, 1};
  const std::int64_t id = uid, alignment = 16;
  t.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type, "tensor data type");
  t.set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data(), "tensor dimensions");
  t.set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data(), "tensor strides");
  t.set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &id, "tensor unique id");
  t.set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment, "tensor alignment");
  t.finalize("a (B, H, T, D) tensor");
  return t;
}

// The scale, a float passed by value (a host pointer in the variant pack).
Desc scale_tensor() {
  Desc t(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  const std::array<std::int64_t, 4> ones{1, 1, 1, 1};
  const std::int64_t id = kScale, alignment = 4;
  const cudnnDataType_t type = CUDNN_DATA_FLOAT;
  const bool by_value = true;
  t.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type, "scale data type");
  t.set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, ones.data(), "scale dimensions");
  t.set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, ones.data(), "scale strides");
  t.set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &id, "scale unique id");
  t.set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment, "scale alignment");
  t.set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value, "scale by value");
  t.finalize("the scale tensor");
  return t;
}

// One SDPA operation and the tensors it names (kept alive with it).
struct Operation {
  std::vector<Desc> tensors;
  Desc op;
};

// One tensor an operation names: the attribute, the tensor's id (its layout and type follow from it) and a name for
// errors.
struct Port {
  cudnnBackendAttributeName_t attribute;
  Uid uid;
  const char* name;
};

// The operation of this type over these tensors, finalized: q, k, v, o and the gradients (B, H, T, D) in the 16-bit
// type, the log-sum-exps (B, H, T, 1) float, the scale a float by value.
Operation operation(cudnnBackendDescriptorType_t type, const char* what, const CudnnAttentionShape& s, Precision h,
                    std::initializer_list<Port> ports) {
  check_shape(s);
  LIERE_ENSURE(h == Precision::bf16 || h == Precision::fp16,
               "cuDNN attention: the type must be bf16 or fp16 (got " << to_string(h) << ")");
  const cudnnDataType_t half = h == Precision::bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
  Operation o;
  o.op = Desc(type);
  for (const Port& p : ports) {
    o.tensors.push_back(p.uid == kScale ? scale_tensor()
                        : p.uid == kLse ? tensor(kLse, s, 1, CUDNN_DATA_FLOAT)
                                        : tensor(p.uid, s, s.D, half));
    o.op.set(p.attribute, o.tensors.back(), p.name);
  }
  o.op.finalize(what);
  return o;
}

Operation forward_operation(const CudnnAttentionShape& s, Precision h) {
  return operation(CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR, "the SDPA_FWD operation", s, h,
                   {{CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC, kQ, "SDPA_FWD q"},
                    {CUDNN_ATTR_OPERATION_SDPA_FWD_KDESC, kK, "SDPA_FWD k"},
                    {CUDNN_ATTR_OPERATION_SDPA_FWD_VDESC, kV, "SDPA_FWD v"},
                    {CUDNN_ATTR_OPERATION_SDPA_FWD_ODESC, kO, "SDPA_FWD o"},
                    {CUDNN_ATTR_OPERATION_SDPA_FWD_STATSDESC, kLse, "SDPA_FWD stats"},
                    {CUDNN_ATTR_OPERATION_SDPA_FWD_SCALEDESC, kScale, "SDPA_FWD scale"}});
}

Operation backward_operation(const CudnnAttentionShape& s, Precision h) {
  return operation(CUDNN_BACKEND_OPERATION_SDPA_BWD_DESCRIPTOR, "the SDPA_BWD operation", s, h,
                   {{CUDNN_ATTR_OPERATION_SDPA_BWD_QDESC, kQ, "SDPA_BWD q"},
                    {CUDNN_ATTR_OPERATION_SDPA_BWD_KDESC, kK, "SDPA_BWD k"},
                    {CUDNN_ATTR_OPERATION_SDPA_BWD_VDESC, kV, "SDPA_BWD v"},
                    {CUDNN_ATTR_OPERATION_SDPA_BWD_ODESC, kO, "SDPA_BWD o"},
                    {CUDNN_ATTR_OPERATION_SDPA_BWD_STATSDESC, kLse, "SDPA_BWD stats"},
                    {CUDNN_ATTR_OPERATION_SDPA_BWD_SCALEDESC, kScale, "SDPA_BWD scale"},
                    {CUDNN_ATTR_OPERATION_SDPA_BWD_DODDESC, kDO, "SDPA_BWD dO"},
                    {CUDNN_ATTR_OPERATION_SDPA_BWD_DQDESC, kDQ, "SDPA_BWD dQ"},
                    {CUDNN_ATTR_OPERATION_SDPA_BWD_DKDESC, kDK, "SDPA_BWD dK"},
                    {CUDNN_ATTR_OPERATION_SDPA_BWD_DVDESC, kDV, "SDPA_BWD dV"}});
}

// The process's cuDNN handle, on the legacy default stream (created on first use; needs a device).
cudnnHandle_t handle() {
  static const cudnnHandle_t h = [] {
    cudnnHandle_t r = nullptr;
    LIERE_CUDNN_CHECK(loaded_api().create(&r), "cudnnCreate");
    return r;
  }();
  return h;
}

// An operation's graph and execution plan; `engine` describes the plan, `why` (when there is none) what failed.
struct Plan {
  Operation operation;
  Desc graph, config, plan;  // config: the plan's engine configuration, kept for the plan's life
  bool ok = false;
  std::int64_t workspace = 0;
  std::string engine, why;
};

// The first engine configuration of cuDNN's heuristics (mode A, then the fallback list) that finalizes into an
// execution plan for the operation's graph.
void make_plan(Plan& p) {
  cudnnHandle_t h = handle();
  p.graph = Desc(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  p.graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, p.operation.op, "operation graph ops");
  p.graph.set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h, "operation graph handle");
  if (const cudnnStatus_t s = p.graph.try_finalize(); s != CUDNN_STATUS_SUCCESS) {
    p.why = "cuDNN refused the operation graph: " + status_text(s);
    return;
  }
  std::ostringstream tried;
  for (const cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    const char* mode_name = mode == CUDNN_HEUR_MODE_A ? "mode A" : "fallback";
    Desc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    heur.set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, p.graph, "heuristics graph");
    heur.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, "heuristics mode");
    if (const cudnnStatus_t s = heur.try_finalize(); s != CUDNN_STATUS_SUCCESS) {
      tried << "; heuristics " << mode_name << ": " << status_text(s);
      continue;
    }
    std::int64_t count = 0;
    LIERE_CUDNN_CHECK(
        api().get(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr),
        "the number of engine configurations");
    std::vector<Desc> configs;
    std::vector<cudnnBackendDescriptor_t> raw;
    for (std::int64_t i = 0; i < count; ++i) {
      configs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
      raw.push_back(configs.back().get());
    }
    std::int64_t got = 0;
    if (count > 0)
      LIERE_CUDNN_CHECK(
          api().get(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, raw.data()),
          "the engine configurations");
    tried << "; heuristics " << mode_name << ": " << got << " configuration(s)";
    for (std::int64_t i = 0; i < got; ++i) {
      Desc plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
      plan.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h, "plan handle");
      plan.set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, configs[std::size_t(i)], "plan engine configuration");
      if (const cudnnStatus_t s = plan.try_finalize(); s != CUDNN_STATUS_SUCCESS) {
        tried << ", #" << i << " refused (" << status_text(s) << ")";
        continue;
      }
      std::int64_t n = 0, index = -1;
      LIERE_CUDNN_CHECK(
          api().get(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &p.workspace),
          "the plan's workspace size");
      Desc engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
      cudnnBackendDescriptor_t e = engine.get();
      if (api().get(configs[std::size_t(i)].get(), CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n,
                    &e) == CUDNN_STATUS_SUCCESS)
        api().get(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &index);
      std::ostringstream d;
      d << "engine " << index << " (" << mode_name << ", configuration " << i + 1 << " of " << got << ", workspace "
        << p.workspace << " B)";
      p.engine = d.str();
      p.config = std::move(configs[std::size_t(i)]);
      p.plan = std::move(plan);
      p.ok = true;
      return;
    }
  }
  p.why = "cuDNN " + cudnn_version() + " has no execution plan for this graph on " + device_description() + tried.str();
}

// One execution: the variant pack of (uid, pointer) pairs and the workspace, then cudnnBackendExecute.
void execute(const Plan& p, const std::vector<std::pair<std::int64_t, void*>>& data, void* workspace) {
  std::vector<std::int64_t> uids;
  std::vector<void*> ptrs;
  for (const auto& [uid, ptr] : data) {
    uids.push_back(uid);
    ptrs.push_back(ptr);
  }
  Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, std::int64_t(uids.size()), uids.data(),
           "variant pack ids");
  pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, std::int64_t(ptrs.size()), ptrs.data(),
           "variant pack pointers");
  pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace, "variant pack workspace");
  pack.finalize("the variant pack");
  LIERE_CUDNN_CHECK(api().execute(handle(), p.plan.get(), pack.get()), "cudnnBackendExecute");
  if (sync_launches()) synchronize();
}

}  // namespace

bool cudnn_loaded(std::string* why) {
  if (why) *why = api().why;
  return api().why.empty();
}

std::string cudnn_version() {
  if (!cudnn_loaded()) return "none";
  const std::size_t v = api().get_version();
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

void cudnn_attention_check_descriptors(const CudnnAttentionShape& s, Precision type, bool backward) {
  (void)forward_operation(s, type);
  if (backward) (void)backward_operation(s, type);
}

struct CudnnAttention::Impl {
  CudnnAttentionShape s;
  Precision type;
  float scale;
  Plan fwd, bwd;
  bool bwd_tried = false;
  DeviceBlock workspace;

  void* workspace_for(std::int64_t bytes) {
    if (bytes <= 0) return nullptr;
    if (workspace.capacity() < std::size_t(bytes)) workspace = DeviceBlock(std::size_t(bytes));
    return workspace.get();
  }
};

CudnnAttention::CudnnAttention(const CudnnAttentionShape& s, Precision type, float scale) : impl_(new Impl) {
  impl_->s = s;
  impl_->type = type;
  impl_->scale = scale;
  LIERE_ENSURE(device_count() > 0, "cuDNN attention needs a CUDA device: " << device_description());
  impl_->fwd.operation = forward_operation(s, type);
  make_plan(impl_->fwd);
  LIERE_ENSURE(impl_->fwd.ok, "cuDNN attention forward (" << to_string(type) << ", B " << s.B << ", H " << s.H << ", T "
                                                          << s.T << ", D " << s.D << "): " << impl_->fwd.why);
}

CudnnAttention::~CudnnAttention() = default;

void CudnnAttention::forward(const void* q, const void* k, const void* v, void* o, float* lse) {
  Impl& m = *impl_;
  execute(m.fwd,
          {{kQ, const_cast<void*>(q)},
           {kK, const_cast<void*>(k)},
           {kV, const_cast<void*>(v)},
           {kO, o},
           {kLse, lse},
           {kScale, &m.scale}},
          m.workspace_for(m.fwd.workspace));
}

bool CudnnAttention::backward_plan() {
  Impl& m = *impl_;
  if (!m.bwd_tried) {
    m.bwd_tried = true;
    if (const std::size_t v = api().get_version(); v < kSdpaBwdVersion) {
      m.bwd.why = "libcudnn.so.9 is version " + std::to_string(v) +
                  ": the SDPA_BWD operation needs cuDNN 9.17 or newer (91700)";
      return false;
    }
    m.bwd.operation = backward_operation(m.s, m.type);
    make_plan(m.bwd);
  }
  return m.bwd.ok;
}

void CudnnAttention::backward(const void* q, const void* k, const void* v, const void* o, const float* lse,
                              const void* do_, void* dq, void* dk, void* dv) {
  LIERE_ENSURE(backward_plan(), "cuDNN attention backward: " << impl_->bwd.why);
  Impl& m = *impl_;
  execute(m.bwd,
          {{kQ, const_cast<void*>(q)},
           {kK, const_cast<void*>(k)},
           {kV, const_cast<void*>(v)},
           {kO, const_cast<void*>(o)},
           {kLse, const_cast<float*>(lse)},
           {kScale, &m.scale},
           {kDO, const_cast<void*>(do_)},
           {kDQ, dq},
           {kDK, dk},
           {kDV, dv}},
          m.workspace_for(m.bwd.workspace));
}

const std::string& CudnnAttention::why() const { return impl_->bwd.why; }
std::string CudnnAttention::forward_engine() const { return impl_->fwd.engine; }
std::string CudnnAttention::backward_engine() const { return impl_->bwd.engine; }
std::size_t CudnnAttention::workspace_bytes() const {
  return std::size_t(std::max(impl_->fwd.workspace, impl_->bwd.workspace));
}

#else  // no cuDNN headers (or older than 9.17) at build time

namespace {
const char* kNoHeaders =
    "this build of liere has no cuDNN: its headers (cudnn_graph.h, cuDNN 9.17 or newer) were not found when "
    "liere::cuda was compiled";
}

bool cudnn_loaded(std::string* why) {
  if (why) *why = kNoHeaders;
  return false;
}
std::string cudnn_version() { return "none"; }
void cudnn_attention_check_descriptors(const CudnnAttentionShape&, Precision, bool) { LIERE_ENSURE(false, kNoHeaders); }

struct CudnnAttention::Impl {
  std::string why;
};
CudnnAttention::CudnnAttention(const CudnnAttentionShape&, Precision, float) { LIERE_ENSURE(false, kNoHeaders); }
CudnnAttention::~CudnnAttention() = default;
void CudnnAttention::forward(const void*, const void*, const void*, void*, float*) {}
bool CudnnAttention::backward_plan() { return false; }
void CudnnAttention::backward(const void*, const void*, const void*, const void*, const float*, const void*, void*,
                              void*, void*) {}
const std::string& CudnnAttention::why() const { return impl_->why; }
std::string CudnnAttention::forward_engine() const { return ""; }
std::string CudnnAttention::backward_engine() const { return ""; }
std::size_t CudnnAttention::workspace_bytes() const { return 0; }

#endif

}  // namespace liere::cuda
