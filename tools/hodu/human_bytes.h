// "1.5 MiB": byte counts as the CLI prints them.
#pragma once
#include <fmt/format.h>

#include <cstdint>
#include <string>

namespace hodu::cli {

inline std::string human_bytes(int64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{} B", b) : fmt::format("{:.1f} {}", v, units[u]);
}

}  // namespace hodu::cli
