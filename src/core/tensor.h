// TensorView: a non-owning view of a strided tensor in host or device memory.
//
// A view never owns its bytes: it points into a HostBuffer, a DeviceBuffer or a memory-mapped
// file that must outlive it. Shapes and strides are in elements, row-major, at most kMaxDims
// dimensions. Block-quantized dtypes (q4_k, ...) and packed int4 are only viewed as a whole:
// their innermost dimension must be contiguous and a multiple of the block size.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "core/dtype.h"

namespace kiln {

enum class Device : uint8_t { kHost, kCuda };

inline constexpr int kMaxDims = 6;

class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);

  // Builds a shape from any range of dimensions; fails for more than kMaxDims dimensions or a
  // negative dimension.
  template <typename Range>
  static Result<Shape> FromRange(const Range& dims);

  int ndim() const { return ndim_; }
  int64_t operator[](int i) const {
    DCHECK(i >= 0 && i < ndim_);
    return dims_[i];
  }
  int64_t& operator[](int i) {
    DCHECK(i >= 0 && i < ndim_);
    return dims_[i];
  }
  // Product of the dimensions (1 for a scalar).
  int64_t numel() const;
  const int64_t* begin() const { return dims_.data(); }
  const int64_t* end() const { return dims_.data() + ndim_; }

  bool operator==(const Shape& o) const;
  // "[4096, 128256]"
  std::string ToString() const;

 private:
  std::array<int64_t, kMaxDims> dims_{};
  int ndim_ = 0;
};

template <typename Range>
Result<Shape> Shape::FromRange(const Range& dims) {
  Shape s;
  for (auto d : dims) {
    if (s.ndim_ == kMaxDims) {
      return InvalidArgument("tensor has more than " + std::to_string(kMaxDims) + " dimensions");
    }
    if (d < 0) return InvalidArgument("negative tensor dimension " + std::to_string(d));
    s.dims_[s.ndim_++] = static_cast<int64_t>(d);
  }
  return s;
}

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::kF32;
  Device device = Device::kHost;
  Shape shape;
  std::array<int64_t, kMaxDims> strides{};  // in elements

  // A contiguous row-major view.
  static TensorView Contiguous(void* data, DType dtype, Shape shape, Device device = Device::kHost);

  int ndim() const { return shape.ndim(); }
  int64_t numel() const { return shape.numel(); }
  bool is_contiguous() const;
  // Bytes spanned by a contiguous view (CHECKs contiguity).
  int64_t nbytes() const;

  template <typename T>
  T* data_as() const {
    return static_cast<T*>(data);
  }
};

}  // namespace kiln
