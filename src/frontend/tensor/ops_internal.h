// Ops the frontend uses internally that the public API does not name. Internal.
#pragma once
#include "hodu/tensor.h"

namespace hodu::eager {

// A dim in [-rank, rank) made non-negative (a 0-d tensor has dim 0); InvalidArgument naming `op`.
int64_t wrap_dim(int64_t d, int64_t rank, const char* op);
// Sorted, non-negative reduction dims ({}: every dim); InvalidArgument naming `op`.
Dims reduction_dims(const Dims& dims, int64_t rank, const char* op);
// A reduction's gradient g expanded back over the reduced dims of `in_shape`.
Tensor expand_reduced(const Tensor& g, const Dims& in_shape, const Dims& dims, bool keepdim);
// out = self with src added at index along dim (PyTorch's scatter_add); index i64 of src's shape.
Tensor scatter_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src);

}  // namespace hodu::eager
