// PluginManager and the plugin ABI, with the small C plugins of test_plugins/
// and the example runtime (examples/plugin/elementwise_runtime.c).
#include "plugins/plugin_manager.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "core/error.h"
#include "formats/model_io.h"
#include "ir/hoduscript.h"
#include "plugins/artifact_cache.h"
#include "core/dlpack_tensor.h"
#include "plugins/hodu_config.h"
#include "plugins/plugin_engine.h"
#include "core/scratch_dir.h"
#include "runtime/session.h"

namespace fs = std::filesystem;

namespace hodu::plugins {
namespace {

std::string plugin_path(const std::string& name) { return std::string(HODU_TEST_PLUGIN_DIR) + "/" + name + ".so"; }

// A scratch folder per test, removed after.
struct TempDir : ScratchDir {
  TempDir() : ScratchDir("hodu-plugin-test-") {}
};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// y = Relu(x + b) - x, b a constant: elementwise, in the example plugin's reach.
Model elementwise_model() {
  return parse_hoduscript(R"(hodu 1
model ir 8 opset 17
graph g(%x: f32[n, 3]) -> (%y: f32[n, 3]) {
  init %b = f32[3] [1, -2, 0.5]
  %s = Add(%x, %b)
  %r = Relu(%s)
  %y = Sub(%r, %x)
})");
}

TEST(PluginManager, LoadsARuntimePluginAndRunsIt) {
  PluginManager m({});
  auto p = m.load(plugin_path("elementwise"));
  EXPECT_EQ(p->name(), "elementwise");
  EXPECT_EQ(p->info().version, "1.0.0");
  EXPECT_TRUE(p->info().is(PluginKind::Runtime));
  EXPECT_FALSE(p->info().is(PluginKind::Compiler));
  EXPECT_TRUE(p->info().supports(Device::cpu()));
  EXPECT_EQ(m.find("elementwise", PluginKind::Runtime), p);
  EXPECT_EQ(m.find("elementwise", PluginKind::Compiler), nullptr);
  ASSERT_EQ(m.find_for_device(Device::cpu(), PluginKind::Runtime).size(), 1u);

  auto model = p->load(write_hdss(elementwise_model()), "hdss");
  ASSERT_EQ(model->num_inputs(), 1);
  auto in = model->input_info(0);
  EXPECT_STREQ(in.name, "x");
  ASSERT_EQ(in.ndim, 2);
  EXPECT_EQ(in.shape[0], -1);
  ASSERT_NE(in.dim_names, nullptr);
  EXPECT_STREQ(in.dim_names[0], "n");
  EXPECT_EQ(in.dim_names[1], nullptr);

  Tensor x = Tensor::from_vector(DType::F32, {2, 3}, std::vector<float>{1, 1, -1, -5, 3, 0});
  auto out = model->run({dl_view(x, "x")});
  ASSERT_EQ(out.size(), 1u);
  Tensor y = from_managed(out[0], "y");
  ASSERT_EQ(y.shape(), (std::vector<int64_t>{2, 3}));
  std::vector<float> expect = {1, -1, 1, 5, -2, 0.5f};  // relu(x + b) - x
  for (int i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(y.data<float>()[i], expect[i]) << i;
}

TEST(PluginManager, UnloadForgetsThePluginButKeepsItsModelsUsable) {
  PluginManager m({});
  auto model = m.load(plugin_path("elementwise"))->load(write_hdss(elementwise_model()), "hdss");
  EXPECT_TRUE(m.unload("elementwise"));
  EXPECT_EQ(m.find("elementwise", PluginKind::Runtime), nullptr);
  EXPECT_FALSE(m.unload("elementwise"));
  Tensor x = Tensor::from_vector(DType::F32, {1, 3}, std::vector<float>{0, 0, 0});
  auto out = model->run({dl_view(x, "x")});  // the library stays open while the model lives
  Tensor y = from_managed(out[0], "y");
  EXPECT_FLOAT_EQ(y.data<float>()[0], 1);
  // And it can be loaded again.
  EXPECT_NE(m.load(plugin_path("elementwise")), nullptr);
}

TEST(PluginManager, RefusesAnAbiMismatchNamingTheFile) {
  PluginManager m({});
  std::string e = error_of([&] { m.load(plugin_path("bad_abi")); });
  EXPECT_NE(e.find("bad_abi.so"), std::string::npos) << e;
  EXPECT_NE(e.find("ABI version 42"), std::string::npos) << e;
  EXPECT_TRUE(m.plugins().empty());
}

TEST(PluginManager, RefusesAMissingSymbolNamingIt) {
  PluginManager m({});
  std::string e = error_of([&] { m.load(plugin_path("missing_entry")); });
  EXPECT_NE(e.find("missing_entry.so"), std::string::npos) << e;
  EXPECT_NE(e.find("missing symbol hodu_plugin_entry"), std::string::npos) << e;
}

TEST(PluginManager, RefusesANonLibraryFile) {
  TempDir dir;
  std::ofstream(dir.path() / "notes.so") << "this is not a library\n";
  PluginManager m({});
  std::string e = error_of([&] { m.load((dir.path() / "notes.so").string()); });
  EXPECT_NE(e.find("notes.so: not a shared library"), std::string::npos) << e;
  e = error_of([&] { m.load((dir.path() / "absent.so").string()); });
  EXPECT_NE(e.find("absent.so: no such plugin file"), std::string::npos) << e;
}

TEST(PluginManager, RefusesADuplicateNameNamingBothFiles) {
  PluginManager m({});
  m.load(plugin_path("elementwise"));
  std::string e = error_of([&] { m.load(plugin_path("elementwise_again")); });
  EXPECT_NE(e.find("elementwise_again.so"), std::string::npos) << e;
  EXPECT_NE(e.find("already loaded from"), std::string::npos) << e;
  EXPECT_NE(e.find("/elementwise.so"), std::string::npos) << e;
  EXPECT_EQ(m.plugins().size(), 1u);
}

TEST(PluginManager, BuiltinNamesAreTaken) {
  PluginManager m({});
  m.register_builtin();
  auto interp = m.find("interp", PluginKind::Runtime);
  ASSERT_NE(interp, nullptr);
  EXPECT_TRUE(interp->info().builtin());
  ASSERT_NE(m.find("cpu", PluginKind::Runtime), nullptr);
  // Built-ins come after libraries for a device.
  m.load(plugin_path("elementwise"));
  auto cpu_runtimes = m.find_for_device(Device::cpu(), PluginKind::Runtime);
  ASSERT_GE(cpu_runtimes.size(), 3u);
  EXPECT_EQ(cpu_runtimes.front()->name(), "elementwise");
}

TEST(PluginManager, LoadAllCollectsErrorsAndLoadsTheRest) {
  TempDir dir;
  for (const char* name : {"bad_abi", "missing_entry", "elementwise", "failing", "elementwise_again"})
    fs::copy_file(plugin_path(name), dir.path() / (std::string(name) + ".so"));
  std::ofstream(dir.path() / "garbage.so") << "garbage";
  std::ofstream(dir.path() / "README.txt") << "not a .so: not even tried";
  PluginManager m({(dir.path() / "absent").string(), dir.path().string()});
  EXPECT_EQ(m.load_all(), 2);  // elementwise, failing (elementwise_again sorts after elementwise: a duplicate)
  EXPECT_NE(m.find("elementwise", PluginKind::Runtime), nullptr);
  EXPECT_NE(m.find("failing", PluginKind::Compiler), nullptr);
  auto errors = m.errors();
  ASSERT_EQ(errors.size(), 4u);
  std::string all;
  for (const auto& e : errors) all += e.path + ": " + e.message + "\n";
  for (const char* what : {"bad_abi.so", "missing_entry.so", "garbage.so", "elementwise_again.so"})
    EXPECT_NE(all.find(what), std::string::npos) << what << " in\n" << all;
}

TEST(PluginManager, SearchPathFromEnvironmentThenHoduHome) {
  TempDir home;
  setenv("HODU_HOME", home.path().c_str(), 1);
  setenv("HODU_PLUGIN_PATH", "/a::/b", 1);
  auto path = PluginManager::default_search_path();
  unsetenv("HODU_PLUGIN_PATH");
  ASSERT_GE(path.size(), 3u);
  EXPECT_EQ(path[0], "/a");
  EXPECT_EQ(path[1], "/b");
  EXPECT_EQ(path[2], (home.path() / "plugins").string());
  std::ofstream(home.path() / "config.toml") << "plugin_dirs = [\"/opt/p\"]\ndefault_engine = \"interp\"\n"
                                                "[cache]\nmax_size_mb = 3\n";
  path = PluginManager::default_search_path();
  EXPECT_EQ(path[1], "/opt/p");
  HoduConfig c = load_config();
  EXPECT_EQ(c.default_engine, "interp");
  EXPECT_EQ(c.cache_max_bytes, 3 << 20);
  std::ofstream(home.path() / "config.toml") << "colour = 3\n";
  std::string e = error_of([] { load_config(); });
  EXPECT_NE(e.find("unknown key 'colour'"), std::string::npos) << e;
  unsetenv("HODU_HOME");
}

TEST(PluginManager, AFailingCallSurfacesThePluginsOwnMessage) {
  PluginManager m({});
  auto p = m.load(plugin_path("failing"));
  std::string e = error_of([&] { p->load("bytes", "hdss"); });
  EXPECT_NE(e.find("plugin 'failing' (load): failing: cannot load anything (test)"), std::string::npos) << e;
  e = error_of([&] { p->build("bytes", {}, "/tmp/never"); });
  EXPECT_NE(e.find("failing: the compiler refuses this model (test)"), std::string::npos) << e;
  auto model = p->load("bytes", "ok");
  e = error_of([&] { model->run({}); });
  EXPECT_NE(e.find("failing: the run exploded (test)"), std::string::npos) << e;
  e = error_of([&] { model->output_info(0); });
  EXPECT_NE(e.find("failing: no tensor info (test)"), std::string::npos) << e;
  // Through an Engine: the Session's error carries the message too.
  auto engine = make_runtime_engine(p, "failing-test-engine");
  e = error_of([&] { engine->prepare(elementwise_model(), {}); });
  EXPECT_NE(e.find("cannot load models"), std::string::npos) << e;  // it does not list hdss
  // The example plugin refuses ops it lacks, by name.
  auto ew = m.load(plugin_path("elementwise"));
  Model conv = parse_hoduscript("hodu 1\nmodel ir 8 opset 17\ngraph g(%x: f32[1, 3]) -> (%y: f32[1, 3]) {\n  %y = Sigmoid(%x)\n}");
  e = error_of([&] { ew->load(write_hdss(conv), "hdss"); });
  EXPECT_NE(e.find("node 0 (Sigmoid) is not supported"), std::string::npos) << e;
}

TEST(PluginManager, RuntimePluginRunsThroughTheSessionLikeAnEngine) {
  PluginManager m({});
  auto p = m.load(plugin_path("elementwise"));
  register_engine(make_runtime_engine(p, "elementwise"), p->info());
  Tensor x = Tensor::from_vector(DType::F32, {4, 3}, std::vector<float>{1, 2, -3, 4, -5, 6, -7, 8, 9, 0, -1, 2});
  SessionOptions with_plugin, with_interp;
  with_plugin.engine = "elementwise";
  with_interp.engine = "interp";
  auto a = Session::from_model(elementwise_model(), with_plugin)->run({{"x", RuntimeValue(x)}});
  auto b = Session::from_model(elementwise_model(), with_interp)->run({{"x", RuntimeValue(x)}});
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].name, "y");
  ASSERT_EQ(a[0].value.tensor.shape(), b[0].value.tensor.shape());
  for (int i = 0; i < 12; ++i) EXPECT_FLOAT_EQ(a[0].value.tensor.data<float>()[i], b[0].value.tensor.data<float>()[i]);
}

TEST(PluginManager, ConcurrentLoadsLookupsAndRuns) {
  PluginManager m({});
  std::string hdss = write_hdss(elementwise_model());
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      try {
        for (int i = 0; i < 20; ++i) {
          auto p = m.load(plugin_path("elementwise"));  // the same library: one entry
          if (m.find("elementwise", PluginKind::Runtime) != p) ++failures;
          auto model = p->load(hdss, "hdss");
          float v = static_cast<float>(t * 100 + i);
          Tensor x = Tensor::from_vector(DType::F32, {1, 3}, std::vector<float>{v, v, v});
          Tensor y = from_managed(model->run({dl_view(x, "x")})[0], "y");
          // relu(v + b) - v with v >= 0: b where v + b >= 0
          if (y.data<float>()[0] != 1.0f || y.data<float>()[2] != 0.5f) ++failures;
          m.plugins();
          m.errors();
        }
      } catch (const std::exception& e) {
        ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(m.plugins().size(), 1u);
}

TEST(ArtifactCache, SecondBuildIsAHit) {
  TempDir dir;
  ArtifactCache cache(dir.path(), 1 << 20);
  PluginInfo compiler;
  compiler.name = "fake";
  BuildRequest r;
  r.format = "bin";
  std::string key = ArtifactCache::key("graph bytes", compiler, r);
  EXPECT_EQ(key.size(), 32u);
  int builds = 0;
  auto build = [&](const std::string& path) {
    ++builds;
    std::ofstream(path) << "artifact";
  };
  bool hit = true;
  auto a = cache.get_or_build(key, "bin", build, &hit);
  EXPECT_FALSE(hit);
  auto b = cache.get_or_build(key, "bin", build, &hit);
  EXPECT_TRUE(hit);
  EXPECT_EQ(a, b);
  EXPECT_EQ(builds, 1);
  r.opt_level = 3;  // any option changes the key
  EXPECT_NE(ArtifactCache::key("graph bytes", compiler, r), key);
  BuildRequest same;
  same.format = "bin";
  EXPECT_EQ(ArtifactCache::key("graph bytes", compiler, same), key);
  EXPECT_NE(ArtifactCache::key("graph bytez", compiler, same), key);
}

TEST(ArtifactCache, EvictsTheOldestBeyondTheLimit) {
  TempDir dir;
  ArtifactCache cache(dir.path(), 10);
  auto build = [](const std::string& path) { std::ofstream(path) << "12345678"; };  // 8 bytes each
  auto first = cache.get_or_build("aaaa", "bin", build);
  auto second = cache.get_or_build("bbbb", "bin", build);
  EXPECT_FALSE(fs::exists(first));
  EXPECT_TRUE(fs::exists(second));
}

}  // namespace
}  // namespace hodu::plugins
