// capture() for a function over params and buffers (buffers are restored after tracing),
// shared by capture and TrainingStep. Internal.
#pragma once
#include "hodu/capture.h"

namespace hodu::eager {

CapturedGraph capture_graph(const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& fn,
                            const nn::NamedTensors& params, const nn::NamedTensors& buffers,
                            const std::vector<Tensor>& inputs, const CaptureOptions& options);

}  // namespace hodu::eager
