// liere/tensor/tensor.hpp — shapes and the engine's dense tensor.
//
// TensorT<S> is a *handle*: a shape (up to 5 dimensions), a device, and a pointer into shared, contiguous,
// row-major storage on that device. Copying a tensor copies the handle (cheap, shares the data, like
// torch.Tensor); `clone()` copies the data, `to(device)` copies it to another device. Views (`view`, `select`)
// share the storage and keep it alive. Storage comes from the device's BufferPool (pool.hpp) and goes back
// there when the last handle dies; `wrap` makes a non-owning tensor over memory the caller manages. Filling and
// copying go through the device's backend (backend/dispatch.hpp); element access and to_vector() read host
// memory only (a CUDA tensor is copied to the CPU first).
//
// Tensor = TensorT<float> is what training uses; TensorT<double> is used by the derivative tests.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <liere/backend/cpu/elementwise.hpp>
#include <liere/backend/dispatch.hpp>
#include <liere/core/config.hpp>
#include <liere/core/device.hpp>
#include <liere/core/index.hpp>
#include <liere/tensor/pool.hpp>
#include <memory>
#include <ostream>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

namespace liere {

// ---- Shape ---------------------------------------------------------------------------------------------
class Shape {
 public:
  static constexpr int kMaxRank = 5;

  Shape() = default;  // rank 0: a scalar (numel 1)
  Shape(std::initializer_list<Index> dims) {
    LIERE_ENSURE(dims.size() <= std::size_t(kMaxRank),
                 "Shape: at most " << kMaxRank << " dimensions, got " << dims.size());
    for (Index d : dims) push_back(d);
  }
  template <class It>
  Shape(It first, It last) {
    for (; first != last; ++first) push_back(Index(*first));
  }

  int rank() const { return rank_; }
  // Dimension i; negative i counts from the end (-1: the last one).
  Index operator[](int i) const {
    const int j = i < 0 ? rank_ + i : i;
    LIERE_ENSURE(j >= 0 && j < rank_, "Shape " << str() << ": no dimension " << i);
    return dims_[j];
  }
  Index back() const { return (*this)[-1]; }
  Index numel() const {
    Index n = 1;
    for (int i = 0; i < rank_; ++i) n *= dims_[i];
    return n;
  }
  // Product of the dimensions before the last one (the "rows" of a row-major matrix view).
  Index rows() const {
    Index n = 1;
    for (int i = 0; i + 1 < rank_; ++i) n *= dims_[i];
    return n;
  }

  void push_back(Index d) {
    LIERE_ENSURE(rank_ < kMaxRank, "Shape: at most " << kMaxRank << " dimensions");
    LIERE_ENSURE(d >= 0, "Shape: negative dimension " << d);
    dims_[rank_++] = d;
  }
  // The same shape with dimension i replaced.
  Shape with(int i, Index d) const {
    Shape s = *this;
    const int j = i < 0 ? rank_ + i : i;
    LIERE_ENSURE(j >= 0 && j < rank_, "Shape " << str() << ": no dimension " << i);
    s.dims_[j] = d;
    return s;
  }
  // The shape without its first dimension.
  Shape tail() const {
    LIERE_ENSURE(rank_ > 0, "Shape (): has no first dimension");
    Shape s;
    for (int i = 1; i < rank_; ++i) s.push_back(dims_[i]);
    return s;
  }

  friend bool operator==(const Shape& a, const Shape& b) {
    if (a.rank_ != b.rank_) return false;
    for (int i = 0; i < a.rank_; ++i)
      if (a.dims_[i] != b.dims_[i]) return false;
    return true;
  }

  // "(8, 65, 192)", like PyTorch's torch.Size printing, for error messages.
  std::string str() const {
    std::string s = "(";
    for (int i = 0; i < rank_; ++i) s += (i ? ", " : "") + std::to_string(dims_[i]);
    return s + ")";
  }
  friend std::ostream& operator<<(std::ostream& os, const Shape& s) { return os << s.str(); }

 private:
  std::array<Index, kMaxRank> dims_{};
  int rank_ = 0;
};

// ---- Tensor ----------------------------------------------------------------------------------------------
template <class S>
class TensorT {
  static_assert(std::is_trivially_copyable_v<S>, "TensorT: the scalar type must be trivially copyable");

 public:
  using Scalar = S;

  TensorT() = default;  // undefined: no storage

  // Uninitialised storage from the device's pool.
  explicit TensorT(const Shape& shape, Device device = Device::cpu) : shape_(shape), device_(device) {
    std::size_t capacity = 0;
    BufferPool& pool = buffer_pool(device);
    void* p = pool.acquire(std::size_t(shape.numel()) * sizeof(S), &capacity);
    storage_ = std::shared_ptr<void>(p, [capacity, &pool](void* q) { pool.release(q, capacity); });
    data_ = static_cast<S*>(p);
  }

  static TensorT empty(const Shape& shape, Device device = Device::cpu) { return TensorT(shape, device); }
  static TensorT zeros(const Shape& shape, Device device = Device::cpu) { return full(shape, S(0), device); }
  static TensorT full(const Shape& shape, S v, Device device = Device::cpu) {
    TensorT t(shape, device);
    t.fill(v);
    return t;
  }
  // A tensor on `device` holding host values.
  static TensorT from(const Shape& shape, std::span<const S> values, Device device = Device::cpu) {
    LIERE_ENSURE(Index(values.size()) == shape.numel(),
                 "Tensor::from: shape " << shape << " needs " << shape.numel() << " values, got " << values.size());
    TensorT t(shape, device);
    copy_memory(t.data_, device, values.data(), Device::cpu, shape.numel());
    return t;
  }
  static TensorT from(const Shape& shape, const std::vector<S>& values, Device device = Device::cpu) {
    return from(shape, std::span<const S>(values.data(), values.size()), device);
  }
  // A non-owning tensor over caller-managed memory on `device` (which must outlive every handle).
  static TensorT wrap(S* data, const Shape& shape, Device device = Device::cpu) {
    TensorT t;
    t.shape_ = shape;
    t.data_ = data;
    t.device_ = device;
    return t;
  }

  bool defined() const { return data_ != nullptr; }
  // Whether the storage is the pool's (false for wrap(): memory the caller manages).
  bool owns_storage() const { return storage_ != nullptr; }
  Device device() const { return device_; }
  bool on_host() const { return device_ == Device::cpu; }
  const Shape& shape() const { return shape_; }
  int rank() const { return shape_.rank(); }
  Index dim(int i) const { return shape_[i]; }
  Index numel() const { return shape_.numel(); }
  // Handle semantics: a const handle still refers to mutable data (as with std::span or torch.Tensor).
  S* data() const { return data_; }
  std::span<S> span() const { return {data_, std::size_t(numel())}; }
  std::string str() const { return shape_.str(); }

  // The same storage seen with another shape of the same number of elements.
  TensorT view(const Shape& shape) const {
    LIERE_ENSURE(shape.numel() == numel(), "Tensor::view: cannot view " << shape_ << " (" << numel()
                                                                         << " elements) as " << shape);
    TensorT t = *this;
    t.shape_ = shape;
    return t;
  }
  // Sub-tensor i along the first dimension (a view): (B, T, C).select(b) -> (T, C).
  TensorT select(Index i) const {
    LIERE_ENSURE(rank() > 0 && i >= 0 && i < dim(0), "Tensor::select: index " << i << " out of range for " << shape_);
    TensorT t = *this;
    t.shape_ = shape_.tail();
    t.data_ = data_ + i * t.shape_.numel();
    return t;
  }

  // Handle semantics: these write the (shared) data, so they are const like data().
  const TensorT& zero() const { return fill(S(0)); }
  const TensorT& fill(S v) const {
    LIERE_DISPATCH(S, device_, fill, data_, numel(), v);
    return *this;
  }
  // Copies the values of `src`, whose shape must be the same (it may live on another device).
  const TensorT& copy_from(const TensorT& src) const {
    LIERE_ENSURE(src.shape_ == shape_, "Tensor::copy_from: shape " << src.shape_ << " != " << shape_);
    if (src.data_ != data_) copy_memory(data_, device_, src.data_, src.device_, numel());
    return *this;
  }
  TensorT clone() const { return to(device_); }
  // A copy on `device`.
  TensorT to(Device device) const {
    TensorT t(shape_, device);
    copy_memory(t.data_, device, data_, device_, numel());
    return t;
  }
  std::vector<S> to_vector() const {
    std::vector<S> v(static_cast<std::size_t>(numel()));
    copy_memory(v.data(), Device::cpu, data_, device_, numel());
    return v;
  }

  // Element access by indices (bounds-checked; for tests and small code, not for kernels).
  template <class... I>
  S& operator()(I... idx) const {
    static_assert(sizeof...(I) <= Shape::kMaxRank);
    LIERE_ENSURE(on_host(), "Tensor: element access to a tensor on " << to_string(device_) << " (copy it with to(Device::cpu))");
    const Index ix[] = {Index(idx)...};
    LIERE_ENSURE(int(sizeof...(I)) == rank(), "Tensor: " << sizeof...(I) << " indices for shape " << shape_);
    Index off = 0;
    for (int k = 0; k < rank(); ++k) {
      LIERE_ENSURE(ix[k] >= 0 && ix[k] < shape_[k], "Tensor: index " << ix[k] << " out of range in dimension " << k
                                                                      << " of " << shape_);
      off = off * shape_[k] + ix[k];
    }
    return data_[off];
  }

 private:
  // n elements from src on one device to dst on another (the same device: a plain copy there).
  static void copy_memory(S* dst, Device dst_device, const S* src, Device src_device, Index n) {
    // A copy that touches a device runs on it (cuda::Ops::copy_bytes moves bytes between host and device); bytes
    // of any scalar type, so the op is dispatched as float's.
    const Device where = dst_device == Device::cpu && src_device == Device::cpu ? Device::cpu : Device::cuda;
    LIERE_DISPATCH(float, where, copy_bytes, dst, dst_device, src, src_device, std::size_t(n) * sizeof(S));
  }

  std::shared_ptr<void> storage_;
  S* data_ = nullptr;
  Shape shape_;
  Device device_ = Device::cpu;
};

using Tensor = TensorT<float>;

// Throws naming both shapes unless they are equal. `what` names the operation.
inline void ensure_same_shape(const Shape& a, const Shape& b, const char* what) {
  LIERE_ENSURE(a == b, what << ": shape mismatch " << a << " vs " << b);
}

}  // namespace liere
