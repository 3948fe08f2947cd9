#include "cli_main.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "core/error.h"

namespace hodu::cli {

void restart_with_short_omp_spin(char** argv) {
  // OpenMP (the cpu engine's and oneDNN's threads) reads its wait policy when it loads, before
  // main: restart once with a short spin (about a millisecond at most, then the workers sleep) so
  // a worker catches the next op's parallel region without a futex wake-up, which costs 20-30 %
  // at 2 threads on models of many small ops (EfficientNet-B0 7.0 → 5.6 ms), yet idles after a
  // run. On cores shared with other busy processes OMP_WAIT_POLICY=passive is faster; the
  // user's OMP_WAIT_POLICY / GOMP_SPINCOUNT are left alone.
  if (!std::getenv("OMP_WAIT_POLICY") && !std::getenv("GOMP_SPINCOUNT") && setenv("GOMP_SPINCOUNT", "20000", 1) == 0)
    execv("/proc/self/exe", argv);
}

int run_subcommand(CLI::App& app, const std::map<CLI::App*, std::function<int()>>& commands, int argc, char** argv,
                   bool quiet_parse) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (quiet_parse) {
      // Rank 0 prints the error and exits nonzero; a nonzero exit here could let the launcher
      // kill rank 0 before it has printed.
      std::ostringstream discard;
      app.exit(e, discard, discard);
      return 0;
    }
    return app.exit(e);
  }
  try {
    for (auto* sub : app.get_subcommands())
      if (auto it = commands.find(sub); it != commands.end()) return it->second();
  } catch (const hodu::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "error: out of memory\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: internal: %s\n", e.what());
    return 1;
  }
  return 0;
}

}  // namespace hodu::cli
