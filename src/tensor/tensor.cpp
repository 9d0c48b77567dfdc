#include "tensor/tensor.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "core/checked_math.h"
#include "tensor/device_runtime.h"

namespace mg {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::BF16: return "bf16";
    case DType::F16: return "f16";
    case DType::I32: return "i32";
    case DType::I64: return "i64";
  }
  return "?";
}

std::optional<int64_t> checked_shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return std::nullopt;
  return n;
}

int64_t shape_numel(const Shape& shape) {
  const std::optional<int64_t> n = checked_shape_numel(shape);
  MG_CHECK(n.has_value(), "shape ", shape_str(shape),
           " has a negative dimension or more than 2^63 elements");
  return *n;
}

int64_t checked_bytes(int64_t n, DType t, const char* what) {
  return checked_mul(n, int64_t(dtype_size(t)), what);
}

int64_t tensor_alloc_bytes(int64_t n, DType t, const char* what) {
  return checked_mul(ceil_div(checked_bytes(n, t, what), 64), 64, what);
}

std::string shape_str(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

namespace {
std::atomic<int64_t> g_live{0}, g_peak{0};
}  // namespace

int64_t tensor_bytes_live() { return g_live.load(); }
int64_t tensor_bytes_peak() { return g_peak.load(); }

void TensorFree::operator()(void* p) const {
  if (device == Device::CPU) g_live -= int64_t(bytes);
  runtime::release(p, device);
}

Tensor::Tensor(Shape shape, DType dtype, Device device)
    : shape_(std::move(shape)), dtype_(dtype), device_(device) {
  const size_t bytes = size_t(tensor_alloc_bytes(numel(), dtype, "bytes of a tensor"));
  void* p = runtime::alloc(bytes ? bytes : 64, device);
  // The up-front memory check (train/rank_memory.h) refuses what cannot fit; this is what is
  // left: memory taken by someone else meanwhile.
  MG_USER_CHECK(p != nullptr, "out of ", device == Device::CPU ? "host" : "GPU",
                " memory allocating ", bytes, " bytes for a tensor of shape ", shape_str(shape_),
                "; free memory, or lower the sizes that drive it");
  buf_ = std::unique_ptr<void, TensorFree>(p, TensorFree{bytes, device});
  if (device == Device::CPU) {  // device memory is counted by the device allocator
    const int64_t live = g_live += int64_t(bytes);
    for (int64_t peak = g_peak.load(); live > peak && !g_peak.compare_exchange_weak(peak, live);) {
    }
  }
  zero();
}

void Tensor::zero() {
  if (buf_) runtime::memset_zero(buf_.get(), nbytes(), device_);
}

}  // namespace mg
