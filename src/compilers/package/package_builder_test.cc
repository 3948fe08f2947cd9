// hodu pack end to end: a package with a host library runs it (native engine) and matches the
// interpreter; its weights are stored once (the library holds none); a package without a host
// library, or whose library cannot load, runs its graph on the default engine.
#include "compilers/package/package_builder.h"

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "compilers/c/toolchain.h"
#include "core/error.h"
#include "engines/interp/interpreter.h"
#include "runtime/session.h"

namespace hodu::pkg {
namespace {

namespace fs = std::filesystem;

Tensor random_tensor(std::vector<int64_t> shape, uint32_t seed, float scale = 1) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0, scale);
  std::vector<float> v(shape_numel(shape));
  for (auto& x : v) x = d(rng);
  return Tensor::from_vector(DType::F32, shape, v);
}

Node node(const std::string& op, std::vector<std::string> ins, std::vector<std::string> outs,
          std::vector<Attribute> attrs = {}) {
  Node n;
  n.name = outs[0] + "_node";
  n.op_type = op;
  n.inputs = std::move(ins);
  n.outputs = std::move(outs);
  n.attributes = std::move(attrs);
  return n;
}

// x[batch, 3, 8, 8] → Conv → BatchNormalization → Relu → GlobalAveragePool → Flatten →
// Gemm(transB=1): the two rewrites whose weights hodu build would derive.
Model small_cnn() {
  Model m;
  m.opset_imports[""] = 17;
  Graph& g = m.graph;
  g.name = "cnn";
  g.inputs.push_back({"x", ValueType::tensor(DType::F32, Shape{Dim::sym("batch"), 3, 8, 8}), ""});
  g.outputs.push_back({"y", ValueType::tensor(DType::F32, Shape{Dim::sym("batch"), 5}), ""});
  g.set_initializer("w", random_tensor({16, 3, 3, 3}, 1, 0.3f));
  g.set_initializer("b", random_tensor({16}, 2));
  g.set_initializer("gamma", random_tensor({16}, 3));
  g.set_initializer("beta", random_tensor({16}, 4));
  g.set_initializer("mean", random_tensor({16}, 5));
  Tensor var = random_tensor({16}, 6);
  for (int i = 0; i < 16; ++i) var.data<float>()[i] = std::fabs(var.data<float>()[i]) + 0.5f;
  g.set_initializer("var", var);
  g.set_initializer("fc", random_tensor({5, 16}, 7));
  g.set_initializer("fcb", random_tensor({5}, 8));
  g.nodes = {node("Conv", {"x", "w", "b"}, {"c"}, {Attribute::make_ints("pads", {1, 1, 1, 1})}),
             node("BatchNormalization", {"c", "gamma", "beta", "mean", "var"}, {"n"}),
             node("Relu", {"n"}, {"r"}),
             node("GlobalAveragePool", {"r"}, {"p"}),
             node("Flatten", {"p"}, {"f"}),
             node("Gemm", {"f", "fc", "fcb"}, {"y"}, {Attribute::make_int("transB", 1)})};
  return m;
}

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct TempDir {
  fs::path path = fs::temp_directory_path() / ("hodu_pack_test_" + std::to_string(::getpid()));
  TempDir() { fs::create_directories(path); }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

PackOptions options(std::vector<std::string> targets = {}) {
  PackOptions o;
  o.targets = std::move(targets);
  o.meta.name = "small-cnn";
  o.meta.version = "0.3.1";
  o.meta.author = "hodu tests";
  o.meta.license = "Apache-2.0";
  o.codegen.dims["batch"] = 2;
  o.input_docs["x"] = "RGB images, 8x8";
  return o;
}

// The session's output for a fixed input, and the interpreter's on the original model.
void expect_matches_interpreter(Session& s, const Model& original) {
  Tensor x = random_tensor({2, 3, 8, 8}, 42);
  auto got = s.run({{"x", x}});
  interp::Interpreter ref(original);
  auto want = ref.run({{"x", x}});
  ASSERT_EQ(got.size(), 1u);
  auto a = got[0].value.tensor.to_doubles(), b = want[0].tensor.to_doubles();
  ASSERT_EQ(a.size(), b.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  EXPECT_LT(std::sqrt(num / den), 1e-5) << "engine " << s.engine_name();
}

TEST(Pack, HostLibraryRunsOverTheSharedWeights) {
  TempDir tmp;
  std::string out = (tmp.path / "cnn.hodupkg").string();
  PackResult r = pack_model(small_cnn(), out, options());
  auto p = Package::open(out);
  const Meta& m = p->meta();
  EXPECT_EQ(m.name, "small-cnn");
  EXPECT_EQ(m.version, "0.3.1");
  EXPECT_EQ(m.license, "Apache-2.0");
  EXPECT_EQ(m.inputs.at(0).doc, "RGB images, 8x8");
  EXPECT_EQ(m.inputs.at(0).type.to_string(), "f32[batch, 3, 8, 8]");  // the graph keeps the dim free
  ASSERT_EQ(m.targets.size(), 1u);
  const Target& t = m.targets[0];
  EXPECT_EQ(t.triple, host_triple());
  EXPECT_EQ(t.api_prefix, "small_cnn");
  EXPECT_EQ(t.kernels, "onednn");
  EXPECT_EQ(t.input_shapes.at("x"), (std::vector<int64_t>{2, 3, 8, 8}));
  ASSERT_NE(p->find("lib/" + host_triple()), nullptr);
  ASSERT_NE(p->find("header/" + host_triple()), nullptr);
  EXPECT_NE(p->bytes(*p->find("header/" + host_triple())).find("small_cnn_create_with_weights"), std::string::npos);

  // Weights once: the graph's BatchNorm is folded into the conv and the Gemm's B transposed, so
  // the library derives nothing of its own, and its file holds none of the weight bytes.
  EXPECT_EQ(m.weight_bytes, m.graph_weight_bytes);
  EXPECT_GT(r.shared_bytes, 0);
  Model graph = p->model();
  const Tensor* w = nullptr;
  for (const auto& [name, tensor] : graph.graph.initializers)
    if (tensor.rank() == 4) w = &tensor;
  ASSERT_NE(w, nullptr) << "the folded conv weights";
  std::string_view weights(static_cast<const char*>(w->raw_data()), w->nbytes());
  std::string_view lib = p->bytes(*p->find("lib/" + host_triple()));
  EXPECT_EQ(lib.find(weights.substr(0, 256)), std::string_view::npos) << "the library embeds the conv weights";
  EXPECT_NE(p->bytes(*p->find("weights")).find(weights), std::string_view::npos);
  EXPECT_LT(lib.size(), 200u * 1024);

  auto s = Session::load(out);
  EXPECT_EQ(s->engine_name(), "native");
  expect_matches_interpreter(*s, small_cnn());
  // The engine can still be chosen: the graph on the cpu engine.
  SessionOptions cpu;
  cpu.engine = "cpu";
  auto sc = Session::load(out, cpu);
  EXPECT_EQ(sc->engine_name(), "cpu");
  expect_matches_interpreter(*sc, small_cnn());
  // A size the library was not built for: a clear error naming what it was built for.
  try {
    s->run({{"x", random_tensor({3, 3, 8, 8}, 1)}});
    ADD_FAILURE() << "the batch-2 library ran batch 3";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("was built for x [2, 3, 8, 8]"), std::string::npos) << e.what();
  }
}

// The C entry point a package's library is created with, called directly.
TEST(Pack, CreateWithWeightsChecksTheBlob) {
  TempDir tmp;
  std::string a = (tmp.path / "a.hodupkg").string(), b = (tmp.path / "b.hodupkg").string();
  PackOptions o = options();
  o.codegen.kernel_library = false;
  pack_model(small_cnn(), a, o);
  Model other = small_cnn();
  other.graph.set_initializer("fc", random_tensor({5, 16}, 99));  // another model: other weights
  pack_model(other, b, o);
  auto pa = Package::open(a), pb = Package::open(b);
  fs::path so = tmp.path / "lib.so";
  {
    std::string_view lib = pa->bytes(*pa->find("lib/" + host_triple()));
    std::ofstream(so, std::ios::binary).write(lib.data(), static_cast<std::streamsize>(lib.size()));
  }
  void* h = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(h, nullptr) << dlerror();
  using Create = int (*)(const void*, size_t, int, int, void**, char*, size_t);
  auto create = reinterpret_cast<Create>(dlsym(h, "small_cnn_create_with_weights"));
  auto destroy = reinterpret_cast<void (*)(void*)>(dlsym(h, "small_cnn_destroy"));
  ASSERT_TRUE(create && destroy);
  std::string_view wa = pa->bytes(*pa->find("weights")), wb = pb->bytes(*pb->find("weights"));
  char err[600] = "";
  void* m = nullptr;
  EXPECT_EQ(create(wa.data(), wa.size(), 1, 1, &m, err, sizeof err), 0) << err;
  ASSERT_NE(m, nullptr);
  destroy(m);
  EXPECT_EQ(create(wb.data(), wb.size(), 1, 0, &m, err, sizeof err), 3);  // another build's blob
  EXPECT_NE(std::string(err).find("belongs to another build"), std::string::npos) << err;
  EXPECT_EQ(m, nullptr);
  EXPECT_EQ(create(wa.data() + 8, wa.size() - 8, 1, 0, &m, err, sizeof err), 1);  // not 64-byte aligned
  EXPECT_EQ(create(wa.data(), wa.size() - 64, 1, 0, &m, err, sizeof err), 1);     // too small
  EXPECT_EQ(create(wa.data(), wa.size(), 1, 6, &m, err, sizeof err), 1);          // unknown flag
  EXPECT_NE(std::string(err).find("unknown flags"), std::string::npos) << err;
  dlclose(h);
}

TEST(Pack, LibraryThatCannotLoadFallsBackToTheGraph) {
  TempDir tmp;
  std::string out = (tmp.path / "cnn.hodupkg").string();
  pack_model(small_cnn(), out, options());
  // This hodu's libhodu_kernels cannot be found: the library cannot load, the graph runs.
  fs::create_directories(tmp.path / "empty");
  ::setenv("HODU_KERNELS_DIR", (tmp.path / "empty").c_str(), 1);
  std::unique_ptr<Session> s;
  try {
    s = Session::load(out);
  } catch (...) {
    ::unsetenv("HODU_KERNELS_DIR");
    throw;
  }
  ::unsetenv("HODU_KERNELS_DIR");
  EXPECT_NE(s->engine_name(), "native");
  expect_matches_interpreter(*s, small_cnn());
}

TEST(Pack, PortableHostLibraryAndGraphOnly) {
  TempDir tmp;
  PackOptions o = options();
  o.codegen.kernel_library = false;
  std::string portable = (tmp.path / "portable.hodupkg").string();
  pack_model(small_cnn(), portable, o);
  auto p = Package::open(portable);
  EXPECT_EQ(p->meta().targets.at(0).kernels, "portable");
  auto s = Session::load(portable);
  EXPECT_EQ(s->engine_name(), "native");
  expect_matches_interpreter(*s, small_cnn());

  o = options();
  o.graph_only = true;
  std::string graph = (tmp.path / "graph.hodupkg").string();
  pack_model(small_cnn(), graph, o);
  auto g = Package::open(graph);
  EXPECT_TRUE(g->meta().targets.empty());
  EXPECT_EQ(g->sections().size(), 3u);
  auto sg = Session::load(graph);
  EXPECT_NE(sg->engine_name(), "native");
  expect_matches_interpreter(*sg, small_cnn());
}

TEST(Pack, CrossTargetOnlyRunsTheGraphHere) {
  if (compilers::c::c_compiler_for("aarch64-linux-gnu").find("aarch64") == std::string::npos)
    GTEST_SKIP() << "aarch64-linux-gnu-gcc is not installed (Debian gcc-aarch64-linux-gnu)";
  TempDir tmp;
  std::string out = (tmp.path / "arm.hodupkg").string();
  pack_model(small_cnn(), out, options({"aarch64-unknown-linux-gnu"}));
  auto p = Package::open(out);
  ASSERT_EQ(p->meta().targets.size(), 1u);
  EXPECT_EQ(p->meta().targets[0].triple, "aarch64-linux-gnu");
  EXPECT_EQ(p->meta().targets[0].kernels, "portable");
  std::string_view lib = p->bytes(*p->find("lib/aarch64-linux-gnu"));
  ASSERT_GT(lib.size(), 20u);
  EXPECT_EQ(static_cast<unsigned char>(lib[18]) | (static_cast<unsigned char>(lib[19]) << 8), 183);  // EM_AARCH64
  auto s = Session::load(out);
  EXPECT_NE(s->engine_name(), "native");
  expect_matches_interpreter(*s, small_cnn());
}

TEST(Pack, ReproducibleWithSourceDateEpoch) {
  TempDir tmp;
  ::setenv("SOURCE_DATE_EPOCH", "1700000000", 1);
  std::string a = (tmp.path / "a.hodupkg").string(), b = (tmp.path / "b.hodupkg").string();
  pack_model(small_cnn(), a, options());
  pack_model(small_cnn(), b, options());
  ::unsetenv("SOURCE_DATE_EPOCH");
  EXPECT_EQ(Package::open(a)->meta().build_date, "2023-11-14T22:13:20Z");
  EXPECT_TRUE(read_file(a) == read_file(b)) << "two packs of the same model differ";
}

TEST(Pack, BadOptionsAreRefused) {
  TempDir tmp;
  std::string out = (tmp.path / "x.hodupkg").string();
  auto expect_error = [&](PackOptions o, const std::string& fragment) {
    try {
      pack_model(small_cnn(), out, o);
      ADD_FAILURE() << "accepted; expected " << fragment;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
    EXPECT_FALSE(fs::exists(out));
  };
  PackOptions o = options();
  o.input_docs["nope"] = "x";
  expect_error(o, "--doc-input nope: the model has no such input (it has 'x')");
  o = options();
  o.codegen.opt_level = 3;
  expect_error(o, "-march=native");
  o = options({"x86_64-linux-gnu", "x86_64-pc-linux-gnu"});
  expect_error(o, "--target x86_64-linux-gnu is given twice");
  o = options({"not a triple"});
  expect_error(o, "not a GNU target triple");
  o = options();
  o.codegen.input_shapes["x"] = {2, 3};
  expect_error(o, fmt::format("the {} library cannot be built: --shape x: rank 2", host_triple()));
}

TEST(Pack, ApiPrefixes) {
  EXPECT_EQ(api_prefix_for("resnet-50"), "resnet_50");
  EXPECT_EQ(api_prefix_for("3d-unet"), "m_3d_unet");
  EXPECT_EQ(api_prefix_for("--"), "model");
}

}  // namespace
}  // namespace hodu::pkg
