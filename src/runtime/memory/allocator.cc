#include "runtime/memory/allocator.h"

#include <fmt/format.h>

#include <algorithm>

namespace hodu {

void Stat::increase(int64_t bytes) {
  current += bytes;
  peak = std::max(peak, current);
  allocated++;
}

void Stat::decrease(int64_t bytes) {
  current -= bytes;
  freed++;
}

void MemoryStats::add_uncached_block(int64_t bytes) {
  int pool = bytes < (1 << 20) ? 0 : 1;
  for (int i : {pool, 2}) {
    allocated_bytes[i].increase(bytes);
    reserved_bytes[i].increase(bytes);
    active_bytes[i].increase(bytes);
    segments[i].increase(1);
  }
}

void MemoryStats::remove_uncached_block(int64_t bytes) {
  int pool = bytes < (1 << 20) ? 0 : 1;
  for (int i : {pool, 2}) {
    allocated_bytes[i].decrease(bytes);
    reserved_bytes[i].decrease(bytes);
    active_bytes[i].decrease(bytes);
    segments[i].decrease(1);
  }
}

void MemoryStats::reset_peaks() {
  for (Stat* group : {allocated_bytes, reserved_bytes, active_bytes, segments})
    for (int i = 0; i < 3; ++i) group[i].peak = group[i].current;
}

std::string format_bytes(int64_t bytes) {
  double b = static_cast<double>(bytes);
  if (bytes < 1024) return fmt::format("{} B", bytes);
  if (bytes < (1 << 20)) return fmt::format("{:.1f} KiB", b / 1024);
  if (bytes < (int64_t{1} << 30)) return fmt::format("{:.1f} MiB", b / (1 << 20));
  return fmt::format("{:.2f} GiB", b / (int64_t{1} << 30));
}

std::string MemoryStats::summary() const {
  return fmt::format("allocated {} (peak {}), reserved {} (peak {}), active {}, cached free {}, segments {}",
                     format_bytes(allocated().current), format_bytes(allocated().peak),
                     format_bytes(reserved().current), format_bytes(reserved().peak), format_bytes(active().current),
                     format_bytes(reserved().current - active().current), segments[2].current);
}

}  // namespace hodu
