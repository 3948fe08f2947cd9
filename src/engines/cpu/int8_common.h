// Helpers of the quantized ops (dnnl_int8.cc, quantize.cc): constant scales and zero points.
#pragma once
#include <optional>
#include <vector>

#include "engines/cpu/plan.h"

namespace hodu::cpu {

inline bool is_8bit(DType t) { return t == DType::U8 || t == DType::I8; }

// A constant input (an initializer); `present` false when the input is absent.
struct ConstIn {
  bool present = false;
  const Tensor* t = nullptr;
};
ConstIn const_input(const PlanBuilder& b, const Node& n, size_t i);

// Values of a float scale: 1 or `count` of them (count 0: only one).
std::optional<std::vector<float>> scales_of(const Tensor* t, int64_t count);

// Values of an optional zero point of dtype `dt`: 1 or `count` (count 0: only one); {0} when absent.
std::optional<std::vector<int32_t>> zero_points_of(const ConstIn& z, DType dt, int64_t count);

}  // namespace hodu::cpu
