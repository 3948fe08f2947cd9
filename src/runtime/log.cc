#include "runtime/log.h"

#include <atomic>
#include <cstdlib>

namespace hodu {
namespace {

// HODU_VERBOSE=1 in the environment turns the log on without a flag.
std::atomic<int>& verbosity() {
  static std::atomic<int> level{[] {
    const char* env = std::getenv("HODU_VERBOSE");
    return env ? std::atoi(env) : 0;
  }()};
  return level;
}

}  // namespace

void set_log_verbosity(int level) { verbosity() = level; }
int log_verbosity() { return verbosity(); }

void log_line(const std::string& line) {
  std::string text = "hodu: " + line + "\n";
  std::fwrite(text.data(), 1, text.size(), stderr);  // one write: lines of concurrent threads do not interleave
}

}  // namespace hodu
