// hodugaki: distributed computing on hodu. `hodugaki --help` lists the commands:
// serve (a KServe v2 model server), infer (its client), train (data-parallel
// training over MPI) (docs/hodugaki.md).
#include <cstdlib>
#include <map>

#include "cli_main.h"
#include "commands.h"

namespace {

// This process's rank in an MPI job, from the launcher's environment (mpirun, srun), -1 outside one.
int launcher_rank() {
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"})
    if (const char* v = std::getenv(var); v && *v) return std::atoi(v);
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  hodu::cli::restart_with_short_omp_spin(argv);  // as hodu does (tools/hodu/cli_main.cc says why)
  CLI::App app{"hodugaki: serve hodu models over the network (KServe v2), call them, and train across processes (MPI)"};
  app.set_version_flag("--version", std::string("hodugaki ") + HODU_VERSION);
  app.require_subcommand(1);
  app.footer("Training runs under MPI: mpirun -np N hodugaki train MODEL ... See docs/hodugaki.md.");
  std::map<CLI::App*, hodu::gaki::CommandFn> commands;
  auto add = [&](const char* name, const char* help, hodu::gaki::CommandFn (*fn)(CLI::App&)) {
    CLI::App* sub = app.add_subcommand(name, help);
    commands[sub] = fn(*sub);
  };
  add("serve", "serve models over HTTP with the KServe v2 protocol, with dynamic batching and /metrics",
      hodu::gaki::add_serve_command);
  add("infer", "send inputs to a KServe v2 server and print or save the outputs", hodu::gaki::add_infer_command);
  add("train", "data-parallel training of a model with a loss, over MPI (mpirun -np N hodugaki train ...)",
      hodu::gaki::add_train_command);
  // Under mpirun every rank parses the same line: only the first prints a parse error or --help.
  return hodu::cli::run_subcommand(app, commands, argc, argv, launcher_rank() > 0);
}
