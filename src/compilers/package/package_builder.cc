#include "compilers/package/package_builder.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "compilers/c/toolchain.h"
#include "compilers/c/weight_store.h"
#include "core/error.h"
#include "core/scratch_dir.h"
#include "formats/model_io.h"
#include "hodu/kernels.h"
#include "ir/schema.h"
#include "passes/passes.h"

namespace fs = std::filesystem;

namespace hodu::pkg {
namespace {

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  HODU_CHECK(f.good(), ErrorCode::Io, "cannot read {}", p.string());
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// UTC now, or $SOURCE_DATE_EPOCH (reproducible builds: the same inputs give the same bytes).
std::string build_date() {
  std::time_t t = std::time(nullptr);
  if (const char* e = std::getenv("SOURCE_DATE_EPOCH"); e && *e) t = static_cast<std::time_t>(std::atoll(e));
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// Rewrites that make the graph's tensors the ones hodu build would derive (BatchNorm folded
// into the conv's weights, Gemm's B transposed), so that the libraries share them instead of
// storing copies; plus the folding every engine does anyway. ONNX ops only: the package's
// graph still converts to .onnx. A graph with a Gradient node stays as loaded.
void fold_for_deployment(Model& m) {
  passes::optimize(m, {1, {}});
  const bool as_loaded = passes::optimized_level(m) == 0;
  // The level key would make the cpu engine stop at -O1 on the package's graph.
  for (auto it = m.metadata.begin(); it != m.metadata.end();)
    it = it->first == "hodu.opt_level" ? m.metadata.erase(it) : std::next(it);
  if (as_loaded) return;
  Graph& g = m.graph;
  passes::fold_conv_batchnorm(g);
  passes::pretranspose_gemm_weights(g);
  passes::eliminate_dead_code(g);
  infer_types(g);
}

void apply_docs(std::vector<Value>& values, const std::map<std::string, std::string>& docs, const Graph& g,
                const char* flag) {
  for (const auto& [name, doc] : docs) {
    bool found = false;
    for (auto& v : values)
      if (v.name == name && !g.initializer(name)) {
        v.doc = doc;
        found = true;
      }
    if (!found) {
      std::string names;
      for (const auto& v : values)
        if (!g.initializer(v.name)) names += (names.empty() ? "'" : ", '") + v.name + "'";
      fail(ErrorCode::InvalidArgument, "{} {}: the model has no such {} (it has {})", flag, name,
           std::string(flag) == "--doc-input" ? "input" : "output", names.empty() ? "none" : names);
    }
  }
}

// The shapes a library fixes for the inputs the graph leaves free (--shape, --dim).
std::map<std::string, std::vector<int64_t>> bound_shapes(const Graph& g, const compilers::c::CodegenOptions& co) {
  std::map<std::string, std::vector<int64_t>> out;
  for (const auto& in : g.inputs) {
    if (g.initializer(in.name) || !in.type.is_tensor() || in.type.shape.is_static()) continue;
    if (auto it = co.input_shapes.find(in.name); it != co.input_shapes.end()) {
      out[in.name] = it->second;
      continue;
    }
    if (!in.type.shape.rank_known()) continue;
    std::vector<int64_t> dims;
    for (const auto& d : in.type.shape.dims()) {
      if (d.is_known()) dims.push_back(d.value);
      else if (auto b = co.dims.find(d.symbol); d.is_symbolic() && b != co.dims.end()) dims.push_back(b->second);
      else break;
    }
    if (dims.size() == in.type.shape.dims().size()) out[in.name] = dims;
  }
  return out;
}

}  // namespace

std::string api_prefix_for(const std::string& name) {
  std::string s;
  for (char c : name) s += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  while (!s.empty() && s.front() == '_') s.erase(0, 1);
  if (s.empty()) return "model";
  if (std::isdigit(static_cast<unsigned char>(s[0]))) s = "m_" + s;
  return s;
}

PackResult pack_model(Model model, const std::string& out_path, const PackOptions& options) {
  using clock = std::chrono::steady_clock;
  auto say = [&](const std::string& s) {
    if (options.progress) options.progress(s);
  };
  const compilers::c::CodegenOptions& user = options.codegen;
  HODU_CHECK(user.opt_level >= 0 && user.opt_level <= 2, ErrorCode::InvalidArgument,
             "-O{}: a package's libraries are built at -O0 to -O2 (-O3 tunes them for this machine's CPU with "
             "-march=native, which the machines a package goes to may lack)",
             user.opt_level);
  HODU_CHECK(!user.standalone, ErrorCode::InvalidArgument, "a package's libraries are not --standalone builds");
  HODU_CHECK(!(options.graph_only && !options.targets.empty()), ErrorCode::InvalidArgument,
             "--graph-only packs no library: drop --target");
  fs::path out = fs::absolute(out_path);
  HODU_CHECK(!out.filename().empty() && fs::is_directory(out.parent_path()), ErrorCode::InvalidArgument,
             "-o {}: folder {} does not exist", out_path, out.parent_path().string());

  // Targets: canonical, no repeats; the host's when none is given.
  const std::string host = host_triple();
  std::vector<std::string> targets;
  if (!options.graph_only) {
    for (const auto& t : options.targets.empty() ? std::vector<std::string>{host} : options.targets) {
      std::string c = canonical_triple(t);
      HODU_CHECK(std::find(targets.begin(), targets.end(), c) == targets.end(), ErrorCode::InvalidArgument,
                 "--target {} is given twice", c);
      targets.push_back(c);
    }
  }

  Meta meta = options.meta;
  if (meta.name.empty()) meta.name = "model";
  const std::string prefix = user.name.empty() || user.name == "model" ? api_prefix_for(meta.name) : user.name;
  meta.hodu_version = HODU_VERSION;
  meta.build_date = build_date();
  meta.source = options.source;
  meta.targets.clear();

  auto t0 = clock::now();
  // Only for the libraries' sake: with none, the graph is kept as loaded (folding a
  // ConstantOfShape or an Expand could only make it larger).
  if (!targets.empty()) {
    say("folding the graph for deployment (constants, identities, Conv+BatchNorm, Gemm weights)");
    fold_for_deployment(model);
  }
  apply_docs(model.graph.inputs, options.input_docs, model.graph, "--doc-input");
  apply_docs(model.graph.outputs, options.output_docs, model.graph, "--doc-output");
  for (const auto& [d, v] : model.opset_imports) meta.opsets[d.empty() ? "ai.onnx" : d] = v;
  for (const auto& in : model.graph.inputs)
    if (!model.graph.initializer(in.name)) meta.inputs.push_back({in.name, in.type, in.doc});
  for (const auto& o : model.graph.outputs) {
    auto t = model.graph.type_of(o.name);
    meta.outputs.push_back({o.name, o.type.kind != ValueType::Kind::Unknown || !t ? o.type : *t, o.doc});
  }

  // The graph's tensors first: the weights section holds them once, the graph points there.
  compilers::c::WeightStore store;
  size_t estimate = 0;
  for (const auto& [name, t] : model.graph.initializers) estimate += (t.nbytes() + 63) / 64 * 64;
  store.reserve(estimate + estimate / 16);  // and some room for derived constants
  std::string graph = write_hdss_external(model, [&](const Tensor& t) {
    return static_cast<uint64_t>(store.place(t.raw_data(), t.nbytes()));
  });
  meta.graph_weight_bytes = store.data_bytes();

  // Each target's options, as hodu build would set them.
  auto codegen_for = [&](const std::string& triple) {
    compilers::c::CodegenOptions co = user;
    co.name = prefix;
    co.embed_weights = false;
    co.weight_store = &store;
    co.kernel_library = user.kernel_library && triple == host;  // libhodu_kernels is the host's only
    return co;
  };
  // Pass 1: generate each library's code so that the constants it derives (folded at build
  // time, split, transposed) join the section; then the section is final.
  for (const auto& triple : targets) {
    say(fmt::format("{}: laying out its constants", triple));
    try {
      compilers::c::generate_c(model, codegen_for(triple));
    } catch (const Error& e) {
      fail(e.code(), "the {} library cannot be built: {} (--graph-only packs the model without libraries: the cpu "
           "engine runs its graph)", triple, e.what());
    }
  }
  store.seal();
  const int64_t shared_before = store.deduplicated_bytes();

  // Pass 2: build against the sealed section (the same code, now with its size and fingerprint).
  ScratchDir scratch("hodu-pack-");
  std::vector<std::string> libraries(targets.size()), headers(targets.size());
  for (size_t i = 0; i < targets.size(); ++i) {
    const std::string& triple = targets[i];
    compilers::c::BuildOptions bo;
    bo.codegen = codegen_for(triple);
    bo.format = compilers::c::ArtifactFormat::SharedLibrary;
    bo.target = triple == host ? "" : triple;
    bo.progress = [&](const std::string& line) { say(triple + ": " + line); };
    fs::path dir = scratch.path() / triple;
    fs::create_directories(dir);
    compilers::c::BuildResult r;
    try {
      r = compilers::c::build_model(model, (dir / ("lib" + prefix + ".so")).string(), bo);
    } catch (const Error& e) {
      throw e.with_context(fmt::format("the {} library cannot be built: ", triple));
    }
    libraries[i] = read_file(dir / ("lib" + prefix + ".so"));
    headers[i] = read_file(dir / (prefix + ".h"));
    Target t;
    t.triple = triple;
    t.library = "lib/" + triple;
    t.header = "header/" + triple;
    t.api_prefix = prefix;
    t.kernels = bo.codegen.kernel_library ? "onednn" : "portable";
    t.kernel_abi = bo.codegen.kernel_library ? HODU_KERNELS_ABI_VERSION : 0;
    t.opt_level = user.opt_level;
    t.input_shapes = bound_shapes(model.graph, user);
    t.built = fmt::format("hodu build -O{}{}: {} steps, {} library ops, arena {} bytes", user.opt_level,
                          bo.target.empty() ? "" : " --target " + triple, r.model.steps, r.model.library_ops,
                          r.model.arena_bytes);
    meta.targets.push_back(std::move(t));
  }
  meta.weight_bytes = store.data_bytes();

  const std::string meta_json = meta_to_json(meta);
  std::vector<SectionData> sections = {{"meta", SectionKind::Meta, meta_json}, {"graph", SectionKind::Graph, graph}};
  for (size_t i = 0; i < targets.size(); ++i)
    sections.push_back({"header/" + targets[i], SectionKind::Header, headers[i]});
  sections.push_back({"weights", SectionKind::Weights, store.blob()});
  for (size_t i = 0; i < targets.size(); ++i)
    sections.push_back({"lib/" + targets[i], SectionKind::Library, libraries[i]});
  say(fmt::format("writing {}", out.string()));
  write_package(out.string(), sections);

  // Read back with every check a loader makes.
  auto written = Package::open(out.string());
  PackResult result;
  result.meta = written->meta();
  result.sections = written->sections();
  result.file_bytes = written->file_size();
  result.shared_bytes = shared_before;
  say(fmt::format("packed in {:.2f} s", std::chrono::duration<double>(clock::now() - t0).count()));
  return result;
}

}  // namespace hodu::pkg
