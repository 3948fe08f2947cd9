// What each of hodu's command-line binaries (hodu, hodugaki) does around its
// subcommands: the OpenMP restart, parsing, and every error turned into
// "error: ..." on stderr and exit status 1.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>
#include <map>

namespace hodu::cli {

// Restarts the process once with a short OpenMP spin unless the user set
// OMP_WAIT_POLICY or GOMP_SPINCOUNT (cli_main.cc says why); returns otherwise.
void restart_with_short_omp_spin(char** argv);

// Parses the command line and runs the chosen subcommand's function. `quiet_parse`: parse errors
// and --help print nothing and exit 0 (the ranks but the first of an MPI job, which all parse the
// same line: the first reports).
int run_subcommand(CLI::App& app, const std::map<CLI::App*, std::function<int()>>& commands, int argc, char** argv,
                   bool quiet_parse = false);

}  // namespace hodu::cli
