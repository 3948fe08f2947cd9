// hodu: ML compiler and runtime. `hodu --help` lists the commands.
#include <map>

#include "cli_main.h"
#include "commands.h"

int main(int argc, char** argv) {
  hodu::cli::restart_with_short_omp_spin(argv);
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
  add("grad", "write a model's gradient graph, or a training step with --optimizer", hodu::cli::add_grad_command);
  return hodu::cli::run_subcommand(app, commands, argc, argv);
}
