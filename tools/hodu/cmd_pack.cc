// hodu pack MODEL -o OUT.hodupkg [--target TRIPLE]... [--graph-only] [--name N] [--version V]
//                [--author A] [--license L] [--description D] [--doc-input NAME=TEXT]...
//                [--doc-output NAME=TEXT]... [-O0..-O2] [--kernels onednn|portable]
//                [--shape NAME=1x3x224x224] [--dim NAME=V] [--api-name PREFIX] [-q]
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "commands.h"
#include "compilers/package/package_builder.h"
#include "core/error.h"
#include "formats/model_io.h"
#include "human_bytes.h"
#include "shape_flags.h"

namespace hodu::cli {
namespace {

struct PackArgs {
  std::string model, out, name, version, author, license, description, api_name, kernels = "onednn";
  std::vector<std::string> targets, input_docs, output_docs, shapes, dims;
  int opt_level = 2;
  bool graph_only = false, quiet = false;
};

std::map<std::string, std::string> parse_docs(const std::vector<std::string>& items, const char* flag) {
  std::map<std::string, std::string> docs;
  for (const auto& s : items) {
    auto eq = s.find('=');
    HODU_CHECK(eq != std::string::npos && eq > 0, ErrorCode::InvalidArgument, "{} {}: expected NAME=TEXT", flag, s);
    docs[s.substr(0, eq)] = s.substr(eq + 1);
  }
  return docs;
}

int run_pack(const PackArgs& a) {
  auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  HODU_CHECK(pkg::is_package_path(a.out), ErrorCode::InvalidArgument,
             "-o {}: a package's file name ends in .hodupkg", a.out);
  HODU_CHECK(!pkg::is_package_path(a.model), ErrorCode::InvalidArgument,
             "{} is a package already: pack the model it was made from", a.model);
  HODU_CHECK(a.kernels == "onednn" || a.kernels == "portable", ErrorCode::InvalidArgument,
             "--kernels {}: expected onednn or portable", a.kernels);
  pkg::PackOptions o;
  o.targets = a.targets;
  o.graph_only = a.graph_only;
  o.meta.name = a.name.empty() ? std::filesystem::path(a.model).stem().string() : a.name;
  o.meta.version = a.version;
  o.meta.author = a.author;
  o.meta.license = a.license;
  o.meta.description = a.description;
  o.input_docs = parse_docs(a.input_docs, "--doc-input");
  o.output_docs = parse_docs(a.output_docs, "--doc-output");
  o.codegen.opt_level = a.opt_level;
  o.codegen.kernel_library = a.kernels == "onednn";
  o.codegen.name = a.api_name.empty() ? pkg::api_prefix_for(o.meta.name) : a.api_name;
  HODU_CHECK(o.codegen.name == pkg::api_prefix_for(o.codegen.name), ErrorCode::InvalidArgument,
             "--api-name {}: the C API prefix must be a C identifier ([A-Za-z][A-Za-z0-9_]*)", o.codegen.name);
  parse_shape_flags(a.shapes, a.dims, o.codegen);
  o.source = std::filesystem::path(a.model).filename().string();
  if (!a.quiet)
    o.progress = [&](const std::string& line) { std::fprintf(stderr, "[%6.2fs] %s\n", elapsed(), line.c_str()); };
  if (!a.quiet) std::fprintf(stderr, "[%6.2fs] loading %s\n", elapsed(), a.model.c_str());
  pkg::PackResult r = pkg::pack_model(load_model(a.model), a.out, o);
  if (!a.quiet) {
    std::string parts;
    for (const auto& s : r.sections) {
      if (s.kind == pkg::SectionKind::Header || s.kind == pkg::SectionKind::Meta) continue;
      parts += fmt::format("{}{} {}", parts.empty() ? "" : ", ", s.name, human_bytes(static_cast<int64_t>(s.size)));
    }
    std::fprintf(stderr, "packed %s (%s) in %.2f s: %s; weights %s stored once (%s of them the graph's)\n",
                 a.out.c_str(), human_bytes(static_cast<int64_t>(r.file_bytes)).c_str(), elapsed(), parts.c_str(),
                 human_bytes(r.meta.weight_bytes).c_str(), human_bytes(r.meta.graph_weight_bytes).c_str());
  }
  return 0;
}

}  // namespace

CommandFn add_pack_command(CLI::App& app) {
  auto a = std::make_shared<PackArgs>();
  app.footer(R"(Writes one .hodupkg file: the graph (.hdss), the weights stored once, metadata (name, version,
author, license, inputs/outputs with their docs, opsets, hodu version, build date, targets) and a
prebuilt library per target triple, each section with its SHA-256 and the whole file checksummed.
The libraries read the package's weights section in place; none holds a copy.
  hodu run model.hodupkg -i x=x.npy    runs the library for this host (the cpu engine on the
                                       graph when the package has none for it; -v says which)
  hodu info model.hodupkg [--json]     metadata, sections, targets, checksums
  hodu convert model.hodupkg -o m.onnx the graph back to ONNX
Targets: the host's by default; --target aarch64-linux-gnu cross-builds with aarch64-linux-gnu-gcc
(portable kernels). Host libraries use libhodu_kernels (--kernels portable: none).
Symbolic input dims are bound for the libraries with --shape/--dim (the graph keeps them free).
See docs/hodupkg.md.)");
  app.add_option("model", a->model, "model file (.onnx, .hdss, .hodu)")->required();
  app.add_option("-o,--output", a->out, "the package to write (.hodupkg)")->required();
  app.add_option("--target", a->targets, "GNU triple to prebuild a library for; repeatable (default: this host's)");
  app.add_flag("--graph-only", a->graph_only, "no library: the graph runs on the cpu engine wherever it goes");
  app.add_option("--name", a->name, "package name (default: the model file's name)");
  app.add_option("--version", a->version, "package version, e.g. 1.2.0");
  app.add_option("--author", a->author, "author");
  app.add_option("--license", a->license, "license, e.g. an SPDX identifier (Apache-2.0)");
  app.add_option("--description", a->description, "one-paragraph description");
  app.add_option("--doc-input", a->input_docs, "document an input: NAME=TEXT; repeatable");
  app.add_option("--doc-output", a->output_docs, "document an output: NAME=TEXT; repeatable");
  app.add_option("-O", a->opt_level, "optimization level of the libraries, 0-2")->capture_default_str();
  app.add_option("--kernels", a->kernels, "host library kernels: onednn (libhodu_kernels.so) or portable")
      ->capture_default_str();
  app.add_option("--shape", a->shapes, "bind an input's shape for the libraries: NAME=1x3x224x224; repeatable");
  app.add_option("--dim", a->dims, "bind a symbolic dim for the libraries: NAME=VALUE; repeatable");
  app.add_option("--api-name", a->api_name, "prefix of the libraries' C API (default: from --name)");
  app.add_flag("-q,--quiet", a->quiet, "no progress lines");
  return [a] { return run_pack(*a); };
}

}  // namespace hodu::cli
