// hodu info MODEL [--json] [--check] [--dot FILE] [--svg FILE]
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <map>

#include "commands.h"
#include "core/error.h"
#include "engines/native/native_engine.h"
#include "formats/model_io.h"
#include "ir/model_check.h"
#include "formats/package.h"
#include "human_bytes.h"
#include "ir/value_json.h"

namespace hodu::cli {
namespace {

struct InfoArgs {
  std::string model;
  bool json = false;
  bool check = false;  // exit 1 when the model has problems
  std::string dot, svg;
};

std::map<std::string, int> op_histogram(const Graph& g) {
  std::map<std::string, int> h;
  for (const auto& n : g.nodes) {
    ++h[n.domain.empty() ? n.op_type : n.domain + "." + n.op_type];
    for (const auto& a : n.attributes) {
      if (a.g) for (auto& [k, v] : op_histogram(*a.g)) h[k] += v;
      for (const auto& sg : a.graphs) for (auto& [k, v] : op_histogram(*sg)) h[k] += v;
    }
  }
  return h;
}

std::string dot_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o;
}

std::string to_dot(const Model& m) {
  const Graph& g = m.graph;
  std::string out = "digraph hodu {\n  rankdir=TB;\n  node [fontname=\"Helvetica\", fontsize=10];\n";
  std::map<std::string, std::string> producer;  // value → dot node id
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    if (g.initializer(g.inputs[i].name)) continue;
    std::string id = fmt::format("in{}", i);
    out += fmt::format("  {} [shape=ellipse, style=filled, fillcolor=\"#d8f0d8\", label=\"{}\\n{}\"];\n", id,
                       dot_escape(g.inputs[i].name), dot_escape(g.inputs[i].type.to_string()));
    producer[g.inputs[i].name] = id;
  }
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const Node& n = g.nodes[k];
    std::string id = fmt::format("n{}", k);
    out += fmt::format("  {} [shape=box, style=\"rounded,filled\", fillcolor=\"#dde8f8\", label=\"{}\\n{}\"];\n", id,
                       dot_escape(n.op_type), dot_escape(n.name));
    for (const auto& in : n.inputs) {
      if (in.empty()) continue;
      if (auto it = producer.find(in); it != producer.end()) {
        auto t = g.type_of(in);
        out += fmt::format("  {} -> {} [label=\"{}\", fontsize=8];\n", it->second, id,
                           t ? dot_escape(t->to_string()) : "");
      }
    }
    for (const auto& o : n.outputs)
      if (!o.empty()) producer[o] = id;
  }
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    std::string id = fmt::format("out{}", i);
    out += fmt::format("  {} [shape=ellipse, style=filled, fillcolor=\"#f8e0d0\", label=\"{}\\n{}\"];\n", id,
                       dot_escape(g.outputs[i].name), dot_escape(g.outputs[i].type.to_string()));
    if (auto it = producer.find(g.outputs[i].name); it != producer.end())
      out += fmt::format("  {} -> {};\n", it->second, id);
  }
  return out + "}\n";
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  HODU_CHECK(f.good(), ErrorCode::Io, "cannot write {}", path);
  f << text;
  HODU_CHECK(f.good(), ErrorCode::Io, "error writing {}", path);
}

// A library built by `hodu build`: its API, inputs and outputs, and what was built.
int run_library_info(const InfoArgs& a) {
  HODU_CHECK(a.dot.empty() && a.svg.empty(), ErrorCode::InvalidArgument,
             "{}: a compiled library keeps no graph to draw; use the model it was built from", a.model);
  Model m = native::describe_library(a.model);
  if (a.json) {
    nlohmann::ordered_json j;
    j["model"] = a.model;
    j["kind"] = "library";
    j["api_prefix"] = m.graph.name;
    j["built"] = m.doc;
    for (const char* side : {"inputs", "outputs"}) {
      j[side] = nlohmann::ordered_json::array();
      for (const auto& v : std::string(side) == "inputs" ? m.graph.inputs : m.graph.outputs) {
        nlohmann::ordered_json o;
        o["name"] = v.name;
        o["dtype"] = std::string(dtype_name(v.type.dtype));
        auto dims = v.type.shape.to_static();  // a library's shapes are static
        o["shape"] = dims ? nlohmann::ordered_json(*dims) : nlohmann::ordered_json(nullptr);
        j[side].push_back(o);
      }
    }
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("library:    %s\n", a.model.c_str());
  std::printf("built by:   hodu build%s%s\n", m.doc.empty() ? "" : ": ", m.doc.c_str());
  std::printf("api prefix: %s (%s.h)\n", m.graph.name.c_str(), m.graph.name.c_str());
  std::printf("inputs:\n");
  for (const auto& v : m.graph.inputs) std::printf("  %s: %s\n", v.name.c_str(), v.type.to_string().c_str());
  std::printf("outputs:\n");
  for (const auto& v : m.graph.outputs) std::printf("  %s: %s\n", v.name.c_str(), v.type.to_string().c_str());
  return 0;
}

// --dot FILE and --svg FILE: the graph as Graphviz DOT and as an SVG rendered by `dot`.
void write_drawings(const InfoArgs& a, const Model& m) {
  if (!a.dot.empty()) write_text(a.dot, to_dot(m));
  if (!a.svg.empty()) {
    std::string dot_path = a.svg + ".dot";
    write_text(dot_path, to_dot(m));
    std::string cmd = fmt::format("dot -Tsvg '{}' -o '{}' 2>&1", dot_path, a.svg);
    int rc = std::system(cmd.c_str());
    std::remove(dot_path.c_str());
    HODU_CHECK(rc == 0, ErrorCode::Unsupported,
               "--svg needs Graphviz's `dot` program (apt-get install graphviz); use --dot FILE to write the graph");
  }
}

// A .hodupkg: opening it checks every checksum; then what it holds and what runs here.
int run_package_info(const InfoArgs& a) {
  auto p = pkg::Package::open(a.model);
  const pkg::Meta& m = p->meta();
  const std::string host = pkg::host_triple();
  const pkg::Target* here = m.target(host);
  std::string runs = here ? fmt::format("its {} library on the native engine", host)
                          : fmt::format("its graph on the cpu engine (no library for {})", host);
  write_drawings(a, p->model());  // of the graph; the description below is of the package
  // --check: the problems of its graph, as for any model.
  const std::vector<ModelProblem> problems = find_model_problems(p->model());
  const int status = a.check && !problems.empty() ? 1 : 0;
  if (status)
    std::fprintf(stderr, "error: %s: %zu problem%s found in its graph; the model cannot run as it is\n",
                 a.model.c_str(), problems.size(), problems.size() == 1 ? "" : "s");
  if (a.json) {
    std::printf("%s\n", p->describe_json().c_str());
    return status;
  }
  auto line = [](const char* key, const std::string& v) {
    if (!v.empty()) std::printf("%-14s%s\n", key, v.c_str());
  };
  line("package:", fmt::format("{} ({}, format version {}, checksums OK)", a.model,
                               human_bytes(static_cast<int64_t>(p->file_size())), p->version()));
  line("name:", m.version.empty() ? m.name : m.name + " " + m.version);
  line("author:", m.author);
  line("license:", m.license);
  line("description:", m.description);
  line("built:", fmt::format("{} by hodu {}{}", m.build_date, m.hodu_version, m.source.empty() ? "" : " from " + m.source));
  std::string opsets;
  for (const auto& [d, v] : m.opsets) opsets += fmt::format("{}{} {}", opsets.empty() ? "" : ", ", d, v);
  line("opsets:", opsets);
  auto values = [](const char* title, const std::vector<pkg::ValueDoc>& vs) {
    std::printf("%s\n", title);
    for (const auto& v : vs)
      std::printf("  %s: %s%s\n", v.name.c_str(), v.type.to_string().c_str(),
                  v.doc.empty() ? "" : ("  -- " + v.doc).c_str());
  };
  values("inputs:", m.inputs);
  values("outputs:", m.outputs);
  line("weights:", fmt::format("{} stored once ({} of them the graph's; the libraries read them in place)",
                               human_bytes(m.weight_bytes), human_bytes(m.graph_weight_bytes)));
  std::printf("targets:%s\n", m.targets.empty() ? " none (graph only)" : "");
  for (const auto& t : m.targets) {
    const pkg::SectionInfo* lib = p->find(t.library);
    std::string shapes;
    for (const auto& [name, dims] : t.input_shapes)
      shapes += fmt::format("{}{} {}", shapes.empty() ? ", built for " : ", ", name, shape_to_string(dims));
    std::printf("  %-20s library %s, %s kernels%s, -O%d, C API %s_*%s%s\n", t.triple.c_str(),
                human_bytes(static_cast<int64_t>(lib->size)).c_str(), t.kernels.c_str(),
                t.kernel_abi ? fmt::format(" (ABI {})", t.kernel_abi).c_str() : "", t.opt_level, t.api_prefix.c_str(),
                shapes.c_str(), t.triple == host ? "  <- this host" : "");
  }
  line("on this host:", fmt::format("{} runs {}", host, runs));
  std::printf("sections:\n");
  for (const auto& s : p->sections())
    std::printf("  %-26s %-16s %10s at %-10llu sha256 %s\n", s.name.c_str(), pkg::section_kind_name(s.kind),
                human_bytes(static_cast<int64_t>(s.size)).c_str(), static_cast<unsigned long long>(s.offset),
                sha256_hex(s.sha256).substr(0, 16).c_str());
  line("checksum:", "sha256 " + sha256_hex(p->file_checksum()) + " (header and table of contents) OK");
  line("problems:", problems.empty() ? "none found in its graph" : fmt::format("{} in its graph", problems.size()));
  for (const auto& pr : problems) std::printf("  %s\n", pr.message.c_str());
  return status;
}

int run_info(const InfoArgs& a) {
  if (native::is_native_library(a.model)) return run_library_info(a);
  if (pkg::is_package_path(a.model)) return run_package_info(a);
  // A model whose structure is broken (a cycle, a dangling value) is refused on load;
  // one that is well formed but cannot run is described, with its problems listed.
  Model m = load_model(a.model);
  const Graph& g = m.graph;
  const std::vector<ModelProblem> problems = find_model_problems(m);
  const int status = a.check && !problems.empty() ? 1 : 0;
  if (status)
    std::fprintf(stderr, "error: %s: %zu problem%s found; the model cannot run as it is\n", a.model.c_str(),
                 problems.size(), problems.size() == 1 ? "" : "s");
  auto hist = op_histogram(g);
  int node_count = 0;
  for (auto& [k, v] : hist) node_count += v;

  write_drawings(a, m);

  std::vector<const Value*> inputs;
  for (const auto& in : g.inputs)
    if (!g.initializer(in.name)) inputs.push_back(&in);

  if (a.json) {
    nlohmann::ordered_json j;
    j["model"] = a.model;
    j["producer"] = {{"name", m.producer_name}, {"version", m.producer_version}};
    j["ir_version"] = m.ir_version;
    nlohmann::ordered_json ops = nlohmann::ordered_json::object();
    for (auto& [d, v] : m.opset_imports) ops[d.empty() ? "ai.onnx" : d] = v;
    j["opsets"] = ops;
    j["inputs"] = nlohmann::ordered_json::array();
    for (auto* v : inputs) j["inputs"].push_back(value_to_json(*v));
    j["outputs"] = nlohmann::ordered_json::array();
    for (const auto& v : g.outputs) j["outputs"].push_back(value_to_json(v));
    j["node_count"] = node_count;
    j["ops"] = hist;
    j["parameter_count"] = g.parameter_count();
    j["parameter_bytes"] = g.parameter_bytes();
    j["problems"] = nlohmann::ordered_json::array();
    for (const auto& p : problems)
      j["problems"].push_back({{"node", p.node}, {"op", p.op}, {"message", p.message}});
    std::printf("%s\n", j.dump(2).c_str());
    return status;
  }

  std::printf("model:      %s\n", a.model.c_str());
  std::string producer = m.producer_name.empty() ? "(unknown)" : m.producer_name;
  if (!m.producer_version.empty()) producer += " " + m.producer_version;
  std::printf("producer:   %s\n", producer.c_str());
  std::string opsets;
  for (auto& [d, v] : m.opset_imports) opsets += fmt::format("{}{} {}", opsets.empty() ? "" : ", ", d.empty() ? "ai.onnx" : d, v);
  std::printf("ir version: %lld, opsets: %s\n", static_cast<long long>(m.ir_version), opsets.c_str());
  std::printf("inputs:\n");
  for (auto* v : inputs) std::printf("  %s: %s\n", v->name.c_str(), v->type.to_string().c_str());
  std::printf("outputs:\n");
  for (const auto& v : g.outputs) std::printf("  %s: %s\n", v.name.c_str(), v.type.to_string().c_str());
  std::printf("nodes:      %d\n", node_count);
  std::printf("parameters: %lld (%s)\n", static_cast<long long>(g.parameter_count()),
              human_bytes(g.parameter_bytes()).c_str());
  std::printf("ops:\n");
  std::vector<std::pair<std::string, int>> sorted(hist.begin(), hist.end());
  std::stable_sort(sorted.begin(), sorted.end(), [](auto& x, auto& y) { return x.second > y.second; });
  for (auto& [op, c] : sorted) std::printf("  %-28s %d\n", op.c_str(), c);
  if (problems.empty()) {
    std::printf("problems:   none found\n");
  } else {
    std::printf("problems:   %zu (the model cannot run as it is)\n", problems.size());
    for (const auto& p : problems) std::printf("  %s\n", p.message.c_str());
  }
  return status;
}

}  // namespace

CommandFn add_info_command(CLI::App& app) {
  auto a = std::make_shared<InfoArgs>();
  app.add_option("model", a->model,
                 "model file (.onnx, .hdss, .hodu), a package (.hodupkg) or a library built by hodu build (.so)")
      ->required();
  app.add_flag("--json", a->json, "print as JSON");
  app.add_flag("--check", a->check,
               "exit with status 1 when the model has problems (type or shape contradictions, dtypes an op does "
               "not take, impossible sizes, broken structure); they are listed either way");
  app.add_option("--dot", a->dot, "write the graph as Graphviz DOT to FILE");
  app.add_option("--svg", a->svg, "render the graph to an SVG FILE (needs Graphviz)");
  return [a] { return run_info(*a); };
}

}  // namespace hodu::cli
