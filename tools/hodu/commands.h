// The hodu command line: one file per subcommand. Each add_*_command registers
// its options on the CLI11 app and returns the function that runs it.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>

namespace hodu::cli {

using CommandFn = std::function<int()>;

CommandFn add_info_command(CLI::App& app);
CommandFn add_run_command(CLI::App& app);
CommandFn add_convert_command(CLI::App& app);
CommandFn add_build_command(CLI::App& app);
CommandFn add_pack_command(CLI::App& app);
CommandFn add_devices_command(CLI::App& app);
CommandFn add_bench_command(CLI::App& app);
CommandFn add_plugin_command(CLI::App& app);
CommandFn add_install_command(CLI::App& app);
CommandFn add_grad_command(CLI::App& app);

}  // namespace hodu::cli
