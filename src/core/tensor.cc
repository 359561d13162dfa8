#include "core/tensor.h"

namespace kiln {

Shape::Shape(std::initializer_list<int64_t> dims) {
  CHECK_LE(static_cast<int>(dims.size()), kMaxDims);
  for (int64_t d : dims) {
    CHECK_GE(d, 0);
    dims_[ndim_++] = d;
  }
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim_; ++i) n *= dims_[i];
  return n;
}

bool Shape::operator==(const Shape& o) const {
  if (ndim_ != o.ndim_) return false;
  for (int i = 0; i < ndim_; ++i) {
    if (dims_[i] != o.dims_[i]) return false;
  }
  return true;
}

std::string Shape::ToString() const {
  std::string s = "[";
  for (int i = 0; i < ndim_; ++i) {
    if (i) s += ", ";
    s += std::to_string(dims_[i]);
  }
  return s + "]";
}

TensorView TensorView::Contiguous(void* data, DType dtype, Shape shape, Device device) {
  TensorView v;
  v.data = data;
  v.dtype = dtype;
  v.device = device;
  v.shape = shape;
  int64_t stride = 1;
  for (int i = shape.ndim() - 1; i >= 0; --i) {
    v.strides[i] = stride;
    stride *= shape[i];
  }
  return v;
}

bool TensorView::is_contiguous() const {
  int64_t expected = 1;
  for (int i = ndim() - 1; i >= 0; --i) {
    if (shape[i] != 1 && strides[i] != expected) return false;
    expected *= shape[i];
  }
  return true;
}

int64_t TensorView::nbytes() const {
  CHECK(is_contiguous()) << "nbytes() of a strided view";
  auto bytes = DTypeByteSize(dtype, numel());
  CHECK(bytes.ok()) << bytes.status().ToString();
  return *bytes;
}

}  // namespace kiln
