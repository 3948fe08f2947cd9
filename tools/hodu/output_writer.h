// The outputs of a run, printed or written the way `hodu run` does it:
// -f pretty / json to stdout, or -o DIR: one DIR/<name>.<npy|hdt|json> per
// output (<name> with every character outside [A-Za-z0-9._-] turned into '_').
// `hodugaki infer` writes a server's outputs through the same function.
#pragma once
#include <string>
#include <vector>

#include "runtime/session.h"

namespace hodu::cli {

// `format`: pretty, json, npy or hdt (npy and hdt need `out_dir`). InvalidArgument otherwise.
void check_output_format(const std::string& format, const std::string& out_dir);
void emit_outputs(const std::vector<NamedValue>& outputs, const std::string& format, const std::string& out_dir);

}  // namespace hodu::cli
