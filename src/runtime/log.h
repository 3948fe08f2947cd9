// Diagnostic log to stderr, off by default; `hodu ... -v` turns on level 1.
// Level 1: decisions (engine and kernel choice, allocator OOM retries).
#pragma once
#include <fmt/format.h>

#include <cstdio>
#include <string>

namespace hodu {

void set_log_verbosity(int level);
int log_verbosity();
void log_line(const std::string& line);  // "hodu: <line>\n" to stderr, one write (thread-safe)

template <typename... Args>
void log_verbose(fmt::format_string<Args...> f, Args&&... args) {
  if (log_verbosity() >= 1) log_line(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace hodu
