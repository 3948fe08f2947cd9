// hodugaki: distributed computing on hodu. `hodugaki --help` lists the commands:
// serve (a KServe v2 model server), infer (its client); train (data-parallel
// training over MPI) is planned (docs/hodugaki.md).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>

#include "commands.h"
#include "core/error.h"

int main(int argc, char** argv) {
  // The same short OpenMP spin as `hodu` (tools/hodu/main.cc says why): workers catch the
  // next batch's parallel regions without a futex wake-up, yet sleep soon after a run.
  if (!std::getenv("OMP_WAIT_POLICY") && !std::getenv("GOMP_SPINCOUNT") && setenv("GOMP_SPINCOUNT", "20000", 1) == 0)
    execv("/proc/self/exe", argv);
  CLI::App app{"hodugaki: serve hodu models over the network (KServe v2) and call them"};
  app.set_version_flag("--version", std::string("hodugaki ") + HODU_VERSION);
  app.require_subcommand(1);
  app.footer("Training across processes (hodugaki train, over MPI) is not built yet. See docs/hodugaki.md.");
  std::map<CLI::App*, hodu::gaki::CommandFn> commands;
  auto add = [&](const char* name, const char* help, hodu::gaki::CommandFn (*fn)(CLI::App&)) {
    CLI::App* sub = app.add_subcommand(name, help);
    commands[sub] = fn(*sub);
  };
  add("serve", "serve models over HTTP with the KServe v2 protocol, with dynamic batching and /metrics",
      hodu::gaki::add_serve_command);
  add("infer", "send inputs to a KServe v2 server and print or save the outputs", hodu::gaki::add_infer_command);
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
