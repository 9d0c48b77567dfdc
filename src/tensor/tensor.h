// Tensor: an owning, contiguous, 64-byte-aligned buffer with a shape and dtype.
// TensorView: a non-owning contiguous window (e.g. a named parameter inside a flat buffer).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "tensor/dtype.h"

namespace mg {

using Shape = std::vector<int64_t>;

// Bytes held by live Tensors now, and the most ever held at once (the allocator's own count).
int64_t tensor_bytes_live();
int64_t tensor_bytes_peak();

// The element count; a negative dimension or a count past int64 is a bug here (MG_CHECK).
int64_t shape_numel(const Shape& shape);
// The same for shapes read from files: nullopt for a negative dimension or int64 overflow.
std::optional<int64_t> checked_shape_numel(const Shape& shape);
std::string shape_str(const Shape& shape);
// Bytes of n elements of dtype t; an overflow is a UsageError naming `what` (sizes come from
// flags: core/checked_math.h).
int64_t checked_bytes(int64_t n, DType t, const char* what);
// Bytes a Tensor of n elements takes from the allocator (and the live count): checked_bytes
// rounded up to the 64-byte alignment. Memory estimates count tensors with this.
int64_t tensor_alloc_bytes(int64_t n, DType t, const char* what);

enum class Device : uint8_t { CPU, CUDA };

class TensorView {
 public:
  TensorView() = default;
  TensorView(void* data, Shape shape, DType dtype, Device device = Device::CPU)
      : data_(data), shape_(std::move(shape)), dtype_(dtype), device_(device) {}

  const Shape& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_.at(i < 0 ? shape_.size() + i : i); }
  int ndim() const { return int(shape_.size()); }
  int64_t numel() const { return shape_numel(shape_); }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  void* raw() const { return data_; }

  template <typename T>
  T* data() const {
    MG_CHECK(DTypeOf<T>::value == dtype_, "tensor holds ", dtype_name(dtype_));
    return static_cast<T*>(data_);
  }

 private:
  void* data_ = nullptr;
  Shape shape_;
  DType dtype_ = DType::F32;
  Device device_ = Device::CPU;
};

// Frees a Tensor's buffer and keeps the live-bytes count (host tensors; device memory is
// counted by the device allocator).
struct TensorFree {
  size_t bytes = 0;
  Device device = Device::CPU;
  void operator()(void* p) const;
};

// A tensor member of Owner given by its shape and dtype. An owner that allocates its tensors
// from a list of these (allocate_decls) holds exactly the bytes decl_bytes() counts, so a
// memory estimate made before anything is allocated and the allocation read one list.
template <typename Owner>
struct TensorDecl;

class Tensor {
 public:
  Tensor() = default;
  // Zero-filled tensor on `device` (a GPU tensor needs the CUDA backend: backend/dispatch.h).
  Tensor(Shape shape, DType dtype = DType::F32, Device device = Device::CPU);

  TensorView view() const { return {buf_.get(), shape_, dtype_, device_}; }
  operator TensorView() const { return view(); }
  const Shape& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_.at(i < 0 ? shape_.size() + i : i); }
  int64_t numel() const { return shape_numel(shape_); }
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype_); }
  // What the allocator holds for it (tensor_alloc_bytes; 0 when never allocated).
  size_t allocated_bytes() const { return buf_ ? buf_.get_deleter().bytes : 0; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  bool empty() const { return !buf_; }

  template <typename T>
  T* data() const {
    return view().data<T>();
  }
  void* raw() const { return buf_.get(); }

  void zero();

 private:
  std::unique_ptr<void, TensorFree> buf_;
  Shape shape_;
  DType dtype_ = DType::F32;
  Device device_ = Device::CPU;
};

template <typename Owner>
struct TensorDecl {
  Tensor Owner::*member;
  const char* name;
  Shape shape;
  DType dtype;
  bool host = false;  // host memory whatever the owner's device (staging buffers)
};

// Bytes the declared tensors take from the allocator (checked, tensor_alloc_bytes each).
template <typename Owner>
int64_t decl_bytes(const std::vector<TensorDecl<Owner>>& decls) {
  int64_t b = 0;
  for (const TensorDecl<Owner>& d : decls)
    if (__builtin_add_overflow(b, tensor_alloc_bytes(shape_numel(d.shape), d.dtype, d.name), &b))
      MG_USER_CHECK(false, "the bytes of ", d.name,
                    " and the tensors before it overflow a "
                    "64-bit integer; lower the sizes that drive them");
  return b;
}

// Allocates (zero-filled) every declared tensor of owner, on device or, if declared so, the host.
template <typename Owner>
void allocate_decls(Owner& owner, const std::vector<TensorDecl<Owner>>& decls, Device device) {
  for (const TensorDecl<Owner>& d : decls)
    owner.*d.member = Tensor(d.shape, d.dtype, d.host ? Device::CPU : device);
}

}  // namespace mg
