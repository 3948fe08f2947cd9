/* hodu/hodu.h — hodu's C++ frontend: eager tensors with autograd, nn modules,
 * optimizers, data loading, checkpoints, and capture into the graph IR that
 * `hodu build` compiles. The guide is docs/frontend.md.
 *
 *   #include <hodu/hodu.h>
 *   hodu::manual_seed(0);
 *   hodu::nn::Linear fc(4, 2);
 *   hodu::Tensor loss = hodu::nn::mse_loss(fc(hodu::randn({8, 4})), hodu::zeros({8, 2}));
 *   loss.backward();
 *
 * Link with the CMake target hodu::hodu (find_package(hodu)). Every name lives
 * in namespace hodu::eager; this header makes them visible in namespace hodu. */
#pragma once
#include "hodu/autograd.h"
#include "hodu/capture.h"
#include "hodu/checkpoint.h"
#include "hodu/data.h"
#include "hodu/dtype.h"
#include "hodu/error.h"
#include "hodu/nn.h"
#include "hodu/optim.h"
#include "hodu/random.h"
#include "hodu/tensor.h"

namespace hodu {
using namespace eager;  // NOLINT: hodu::Tensor, hodu::nn::Linear, hodu::optim::Adam, ...
}
