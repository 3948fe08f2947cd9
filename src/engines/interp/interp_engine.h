#pragma once
#include <memory>

#include "runtime/engine.h"

namespace hodu::interp {
std::shared_ptr<Engine> make_interp_engine();
}
