#include "core/process_memory.h"

#include <sys/resource.h>

#include <fstream>
#include <string>

namespace hodu {

size_t peak_rss_bytes() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmHWM:", 0) == 0) return static_cast<size_t>(std::stoull(line.substr(6))) * 1024;
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<size_t>(ru.ru_maxrss) * 1024;
}

bool reset_peak_rss() {
  std::ofstream f("/proc/self/clear_refs");
  return static_cast<bool>(f << "5" << std::flush);
}

}  // namespace hodu
