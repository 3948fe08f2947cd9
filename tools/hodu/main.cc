// hodu: ML compiler and runtime. `hodu --help` lists the commands.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>

#include "commands.h"
#include "core/error.h"

int main(int argc, char** argv) {
  // OpenMP (the cpu engine's and oneDNN's threads) reads its wait policy when it loads, before
  // main: restart once with a short spin (about a millisecond at most, then the workers sleep) so
  // a worker catches the next op's parallel region without a futex wake-up, which costs 20-30 %
  // at 2 threads on models of many small ops (EfficientNet-B0 7.0 → 5.6 ms), yet idles after a
  // run. On cores shared with other busy processes OMP_WAIT_POLICY=passive is faster; the
  // user's OMP_WAIT_POLICY / GOMP_SPINCOUNT are left alone.
  if (!std::getenv("OMP_WAIT_POLICY") && !std::getenv("GOMP_SPINCOUNT") && setenv("GOMP_SPINCOUNT", "20000", 1) == 0)
    execv("/proc/self/exe", argv);
  CLI::App app{"hodu: load, run, convert and compile ML models (ONNX, .hdss, HoduScript)"};
  app.set_version_flag("--version", std::string("hodu ") + HODU_VERSION);
  app.require_subcommand(1);
  std::map<CLI::App*, hodu::cli::CommandFn> commands;
  auto add = [&](const char* name, const char* help, hodu::cli::CommandFn (*fn)(CLI::App&)) {
    CLI::App* sub = app.add_subcommand(name, help);
    commands[sub] = fn(*sub);
  };
  add("info", "describe a model: inputs, outputs, ops, parameters", hodu::cli::add_info_command);
  add("run", "run a model on inputs and print or save its outputs", hodu::cli::add_run_command);
  add("convert", "convert between model formats (.onnx .hdss .hodu) or tensor formats", hodu::cli::add_convert_command);
  add("build", "compile a model ahead of time to C, .o, .so, .a, an executable, .s, .ll or .bc", hodu::cli::add_build_command);
  add("pack", "package a model: graph, weights once, metadata and prebuilt libraries in one .hodupkg", hodu::cli::add_pack_command);
  add("devices", "list the CPU and CUDA devices hodu can run on", hodu::cli::add_devices_command);
  add("bench", "time a model: load, first run, median/p90/min of steady runs, peak memory", hodu::cli::add_bench_command);
  add("plugin", "list, describe, add and remove compiler and runtime plugins", hodu::cli::add_plugin_command);
  add("install", "copy hodu (binary, headers, plugins, CMake package) under a prefix", hodu::cli::add_install_command);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
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
