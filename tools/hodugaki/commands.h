// hodugaki's command line: one file per subcommand (serve, infer, train). Each add_*_command registers its
// options on the CLI11 app and returns the function that runs it.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>

namespace hodu::gaki {

using CommandFn = std::function<int()>;

CommandFn add_serve_command(CLI::App& app);
CommandFn add_infer_command(CLI::App& app);
CommandFn add_train_command(CLI::App& app);

}  // namespace hodu::gaki
