// hodu::Error — the one error type of the project (defined in the public
// include/hodu/error.h, which the eager API exposes) — and the helpers that throw it.
#pragma once
#include <fmt/format.h>

#include <string>

#include "hodu/error.h"  // ErrorCode, Error (public)

namespace hodu {

template <typename... Args>
[[noreturn]] void fail(ErrorCode code, fmt::format_string<Args...> format, Args&&... args) {
  throw Error(code, fmt::format(format, std::forward<Args>(args)...));
}

// HODU_CHECK(cond, code, "fmt", args...) — throws hodu::Error when cond is false.
#define HODU_CHECK(cond, code, ...)                   \
  do {                                                \
    if (!(cond)) ::hodu::fail(code, __VA_ARGS__);     \
  } while (0)

}  // namespace hodu
