// Slow, generic element access by dtype: load/store one element of any numeric
// dtype as double or int64. Used by Tensor::cast, printing, tests and the
// generic paths of the reference interpreter. Not for hot loops.
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace hodu {

// `index` counts elements from `base` (for packed 4-bit types: nibbles, low first).
double load_as_double(DType t, const void* base, int64_t index);
int64_t load_as_int64(DType t, const void* base, int64_t index);
uint64_t load_as_uint64(DType t, const void* base, int64_t index);
void store_from_double(DType t, void* base, int64_t index, double value, bool saturate = true);
void store_from_int64(DType t, void* base, int64_t index, int64_t value);
void store_from_uint64(DType t, void* base, int64_t index, uint64_t value);

}  // namespace hodu
