// Tensors across the plugin boundary: hodu Tensor ↔ DLPack. Only compact CPU
// tensors of the numeric dtypes DLPack 0.6 names (plus bool as code 6, as the
// native engine and compiled models use).
#pragma once
#include <dlpack/dlpack.h>

#include <string>

#include "core/tensor.h"

namespace hodu {

inline constexpr uint8_t kDLBoolCode = 6;  // kDLBool in DLPack >= 0.8

// Unsupported naming `what` for a dtype with no DLPack code (strings, f8, 4-bit).
DLDataType to_dl_dtype(DType dtype, const std::string& what);
DType from_dl_dtype(DLDataType dtype, const std::string& what);

// A DLTensor viewing `t`, which must be contiguous and stay alive (and not
// move) while the view is used: `t.shape()` backs view.shape.
DLTensor dl_view(const Tensor& t, const std::string& what);

// A Tensor over a DLTensor's memory, without a copy; `release` runs when the
// last user of the storage is gone. Non-compact strides are refused.
Tensor tensor_from_dl(const DLTensor& d, std::function<void()> release, const std::string& what);

// A DLManagedTensor owning a reference to `t` (contiguous); its deleter drops it.
DLManagedTensor* to_managed(Tensor t, const std::string& what);
// Takes ownership of `m` (calls its deleter when the tensor is released).
Tensor from_managed(DLManagedTensor* m, const std::string& what);

}  // namespace hodu
