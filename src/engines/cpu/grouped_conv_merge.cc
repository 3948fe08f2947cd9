#include "engines/cpu/grouped_conv_merge.h"

#include <cstring>

#include "core/error.h"

namespace hodu::cpu {

int64_t group_merge_factor(int64_t group, int64_t in_width, int64_t out_width, int64_t vector_width) {
  for (int64_t k : {2, 4})
    if (group % k == 0 && (k * in_width) % vector_width == 0 && (k * out_width) % vector_width == 0) return k;
  return 0;
}

Tensor merge_group_weights(const Tensor& w, int64_t group, int64_t k) {
  const auto& ws = w.shape();
  if (w.dtype() != DType::F32 || !w.is_contiguous() || ws.size() < 3 || k < 1 || group % k != 0 ||
      ws[0] % group != 0)
    fail(ErrorCode::Internal, "merge_group_weights: weights {} for {} groups by {}", shape_to_string(ws), group, k);
  const int64_t out = ws[0], in_width = ws[1], out_width = out / group;
  int64_t window = 1;
  for (size_t i = 2; i < ws.size(); ++i) window *= ws[i];
  std::vector<int64_t> ms = ws;
  ms[1] = k * in_width;
  Tensor m = Tensor::zeros(DType::F32, ms);
  const float* src = w.data<float>();
  float* dst = m.data<float>();
  for (int64_t o = 0; o < out; ++o) {
    const int64_t place = (o / out_width) % k;  // the old group's index inside its new group
    std::memcpy(dst + (o * ms[1] + place * in_width) * window, src + o * in_width * window,
                static_cast<size_t>(in_width * window) * sizeof(float));
  }
  return m;
}

}  // namespace hodu::cpu
