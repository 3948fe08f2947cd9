// The .hodupkg container: round trip, and every kind of damaged file refused with a message
// naming what failed. (Packages with libraries: compilers/package/package_builder_test.cc.)
#include "formats/package.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "formats/model_io.h"

namespace hodu::pkg {
namespace {

namespace fs = std::filesystem;

Model small_model() {
  Model m;
  m.opset_imports = {{"", 21}};
  m.producer_name = "test";
  Graph& g = m.graph;
  g.name = "affine";
  g.inputs.push_back({"x", ValueType::tensor(DType::F32, Shape{Dim::sym("batch"), 4}), "rows of four"});
  g.outputs.push_back({"y", ValueType::tensor(DType::F32, Shape{Dim::sym("batch"), 3}), ""});
  std::vector<float> w(12), b = {0.5f, -1.f, 2.f};
  for (int i = 0; i < 12; ++i) w[i] = 0.25f * static_cast<float>(i) - 1.f;
  g.set_initializer("w", Tensor::from_vector(DType::F32, {4, 3}, w));
  g.set_initializer("b", Tensor::from_vector(DType::F32, {3}, b));
  Node mm;
  mm.name = "mm";
  mm.op_type = "MatMul";
  mm.inputs = {"x", "w"};
  mm.outputs = {"xw"};
  Node add;
  add.name = "add";
  add.op_type = "Add";
  add.inputs = {"xw", "b"};
  add.outputs = {"y"};
  g.nodes = {mm, add};
  return m;
}

// A package as `hodu pack --graph-only` lays it out (no library: those need a compiler).
struct Parts {
  std::string meta, graph, weights;
};

Parts make_parts(const Model& m) {
  Parts p;
  std::string data;
  p.graph = write_hdss_external(m, [&](const Tensor& t) {
    uint64_t at = (data.size() + 63) / 64 * 64;
    data.resize(at);
    data.append(static_cast<const char*>(t.raw_data()), t.nbytes());
    return at;
  });
  data.resize((data.size() + 63) / 64 * 64);
  p.weights.assign(64, '\0');
  std::memcpy(p.weights.data(), "HODUWGT1", 8);
  uint64_t n = data.size();
  std::memcpy(p.weights.data() + 8, &n, 8);
  p.weights += data;
  Meta meta;
  meta.name = "affine";
  meta.version = "1.0";
  meta.author = "someone";
  meta.license = "MIT";
  meta.opsets = {{"ai.onnx", 21}};
  meta.inputs = {{"x", m.graph.inputs[0].type, "rows of four"}};
  meta.outputs = {{"y", m.graph.outputs[0].type, ""}};
  meta.weight_bytes = meta.graph_weight_bytes = static_cast<int64_t>(n);
  p.meta = meta_to_json(meta);
  return p;
}

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void write_bytes(const fs::path& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

fs::path temp_path(const std::string& name) {
  return fs::temp_directory_path() / ("hodu_package_test_" + std::to_string(::getpid()) + "_" + name);
}

std::string package_bytes(const Parts& p, const std::string& name = "pkg.hodupkg") {
  fs::path path = temp_path(name);
  write_package(path.string(), {{"meta", SectionKind::Meta, p.meta},
                                {"graph", SectionKind::Graph, p.graph},
                                {"weights", SectionKind::Weights, p.weights}});
  std::string bytes = read_file(path);
  fs::remove(path);
  return bytes;
}

uint64_t get_u64(const std::string& s, size_t at) {
  uint64_t v;
  std::memcpy(&v, s.data() + at, 8);
  return v;
}
void set_u32(std::string& s, size_t at, uint32_t v) { std::memcpy(s.data() + at, &v, 4); }

// The entry of a section in the table of contents.
size_t entry_of(const std::string& bytes, const std::string& name) {
  for (size_t at = kHeaderBytes; at + kEntryBytes <= bytes.size(); at += kEntryBytes)
    if (std::string(bytes.c_str() + at) == name) return at;
  ADD_FAILURE() << "no section " << name;
  return 0;
}

void expect_refused(const std::string& bytes, const std::string& fragment) {
  try {
    Package::from_bytes(bytes, "bad.hodupkg");
    ADD_FAILURE() << "accepted; expected: " << fragment;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidModel) << e.what();
    std::string msg = e.what();
    EXPECT_EQ(msg.rfind("bad.hodupkg: ", 0), 0u) << msg;
    EXPECT_NE(msg.find(fragment), std::string::npos) << msg;
  }
}

TEST(Package, RoundTrip) {
  Model m = small_model();
  Parts parts = make_parts(m);
  std::string bytes = package_bytes(parts);
  ASSERT_TRUE(is_package_bytes(bytes));
  auto p = Package::from_bytes(bytes, "mem.hodupkg");
  EXPECT_EQ(p->version(), kFormatVersion);
  EXPECT_EQ(p->file_size(), bytes.size());
  ASSERT_EQ(p->sections().size(), 3u);
  EXPECT_EQ(p->bytes(*p->find("meta")), parts.meta);
  EXPECT_EQ(p->bytes(*p->find("weights")), parts.weights);
  EXPECT_EQ(p->find("weights")->offset % 4096, 0u);  // page-aligned: read in place by the libraries
  EXPECT_EQ(p->find("nothing"), nullptr);
  const Meta& meta = p->meta();
  EXPECT_EQ(meta.name, "affine");
  EXPECT_EQ(meta.license, "MIT");
  ASSERT_EQ(meta.inputs.size(), 1u);
  EXPECT_EQ(meta.inputs[0].type, m.graph.inputs[0].type);  // symbolic dims kept
  EXPECT_EQ(meta.inputs[0].doc, "rows of four");
  EXPECT_EQ(meta.target_list(), "none");
  Model back = p->model();
  EXPECT_TRUE(back == m);
  // The tensors point into the package's weights section (no copy).
  std::string_view w = p->bytes(*p->find("weights"));
  for (const auto& [name, t] : back.graph.initializers) {
    const char* at = static_cast<const char*>(t.raw_data());
    EXPECT_TRUE(at >= w.data() && at < w.data() + w.size()) << name;
  }
  // Deterministic: the same parts give the same bytes.
  EXPECT_EQ(package_bytes(parts), bytes);
}

TEST(Package, OpenMapsFileAndSharesTheVerifiedPackage) {
  fs::path path = temp_path("open.hodupkg");
  write_bytes(path, package_bytes(make_parts(small_model())));
  auto a = Package::open(path.string());
  auto b = Package::open(path.string());
  EXPECT_EQ(a.get(), b.get());  // verified once while alive
  Tensor w = a->model().graph.initializers[0].second;
  std::weak_ptr<const Package> watch = a;
  a.reset();
  b.reset();
  EXPECT_FALSE(watch.expired());  // a tensor of its graph keeps the mapping
  EXPECT_EQ(w.to_doubles()[1], -0.75);
  w = Tensor();
  EXPECT_TRUE(watch.expired());
  // load_model reads a package's graph.
  Model m = load_model(path.string());
  EXPECT_TRUE(m == small_model());
  // A changed file is verified again, not served from memory.
  auto c = Package::open(path.string());
  std::string bytes = read_file(path);
  bytes[get_u64(bytes, entry_of(bytes, "meta") + 56) + 3] ^= 1;
  auto when = fs::last_write_time(path);
  write_bytes(path, bytes);
  fs::last_write_time(path, when + std::chrono::seconds(1));  // a new time even on coarse clocks
  try {
    Package::open(path.string());
    ADD_FAILURE() << "a file altered on disk was served from memory";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("section 'meta'"), std::string::npos) << e.what();
  }
  fs::remove(path);
  try {
    Package::open(path.string());
    ADD_FAILURE() << "opened a missing file";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Io);
    EXPECT_NE(std::string(e.what()).find("no such package file"), std::string::npos) << e.what();
  }
}

TEST(Package, RefusesCorruptSections) {
  std::string good = package_bytes(make_parts(small_model()));
  for (const char* name : {"meta", "graph", "weights"}) {
    std::string bytes = good;
    size_t e = entry_of(bytes, name);
    uint64_t off = get_u64(bytes, e + 56), size = get_u64(bytes, e + 64);
    bytes[off + size / 2] ^= 0x40;
    expect_refused(bytes, fmt::format("section '{}' ({} bytes at offset {}) fails its SHA-256 check", name, size, off));
  }
}

TEST(Package, RefusesTamperedTable) {
  std::string good = package_bytes(make_parts(small_model()));
  // A section changed and its SHA-256 in the table updated to match: the file checksum,
  // over the header and the table, no longer matches.
  std::string bytes = good;
  size_t e = entry_of(bytes, "weights");
  uint64_t off = get_u64(bytes, e + 56), size = get_u64(bytes, e + 64);
  bytes[off + 100] ^= 1;
  Sha256Digest d = sha256(std::string_view(bytes).substr(off, size));
  std::memcpy(bytes.data() + e + 72, d.data(), 32);
  expect_refused(bytes, "package checksum mismatch over the header and table of contents");
  // A section's offset moved.
  bytes = good;
  set_u32(bytes, entry_of(bytes, "graph") + 56, 64 * 3);
  expect_refused(bytes, "package checksum mismatch");
  // A header field.
  bytes = good;
  bytes[kHeaderBytes - 1] = 1;
  expect_refused(bytes, "package checksum mismatch");
}

TEST(Package, RefusesNonZeroPadding) {
  std::string bytes = package_bytes(make_parts(small_model()));
  uint64_t w = get_u64(bytes, entry_of(bytes, "weights") + 56);
  bytes[w - 1] = 'x';  // between the sections: covered by no section's SHA-256
  expect_refused(bytes, fmt::format("before section 'weights' are not zero padding"));
}

TEST(Package, RefusesTruncationAndTrailingBytes) {
  std::string bytes = package_bytes(make_parts(small_model()));
  expect_refused(bytes.substr(0, bytes.size() - 1),
                 fmt::format("truncated: the header records {} bytes, the file has {}", bytes.size(), bytes.size() - 1));
  expect_refused(bytes.substr(0, 100), "less than the 128-byte package header");
  expect_refused(bytes.substr(0, 5), "truncated: 5 bytes");
  expect_refused(bytes + "extra", "data after the end");
  // Every cut is refused cleanly.
  for (size_t n = 0; n < bytes.size(); n += 7) {
    try {
      Package::from_bytes(bytes.substr(0, n), "cut.hodupkg");
      ADD_FAILURE() << "a package cut to " << n << " bytes was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidModel) << e.what();
    }
  }
}

TEST(Package, RefusesUnknownVersionFlagsAndMagic) {
  std::string good = package_bytes(make_parts(small_model()));
  std::string bytes = good;
  set_u32(bytes, 8, 2);
  expect_refused(bytes, "package format version 2 is newer than this hodu reads (1): upgrade hodu");
  set_u32(bytes, 8, 0);
  expect_refused(bytes, "format version 0 is invalid");
  bytes = good;
  set_u32(bytes, 12, 1);
  expect_refused(bytes, "uses features this hodu does not know (flags 0x1)");
  bytes = good;
  bytes[1] = 'X';
  expect_refused(bytes, "not a .hodupkg package (wrong magic");
  expect_refused("", "wrong magic");
  expect_refused(std::string(200, '\0'), "wrong magic");
}

TEST(Package, RefusesIncompleteOrInconsistentContents) {
  Parts parts = make_parts(small_model());
  fs::path path = temp_path("partial.hodupkg");
  auto write_and_read = [&](const std::vector<SectionData>& s) {
    write_package(path.string(), s);
    std::string b = read_file(path);
    fs::remove(path);
    return b;
  };
  expect_refused(write_and_read({{"meta", SectionKind::Meta, parts.meta}, {"graph", SectionKind::Graph, parts.graph}}),
                 "no 'weights' section");
  expect_refused(write_and_read({{"meta", SectionKind::Meta, "{not json"},
                                 {"graph", SectionKind::Graph, parts.graph},
                                 {"weights", SectionKind::Weights, parts.weights}}),
                 "metadata section: not JSON");
  expect_refused(write_and_read({{"meta", SectionKind::Meta, parts.meta},
                                 {"graph", SectionKind::Graph, parts.graph},
                                 {"weights", SectionKind::Weights, "not a weights blob at all, no no no no no no no no"}}),
                 "the weights section is not a hodu weights blob");
  // The metadata names a library the package lacks.
  Meta meta = meta_from_json(parts.meta, "m");
  Target t;
  t.triple = "x86_64-linux-gnu";
  t.library = "lib/x86_64-linux-gnu";
  t.api_prefix = "affine";
  meta.targets.push_back(t);
  expect_refused(write_and_read({{"meta", SectionKind::Meta, meta_to_json(meta)},
                                 {"graph", SectionKind::Graph, parts.graph},
                                 {"weights", SectionKind::Weights, parts.weights}}),
                 "names library section 'lib/x86_64-linux-gnu' for x86_64-linux-gnu, which the package does not have");
  // Sections of a kind this reader does not know are kept, not interpreted.
  std::string extra = write_and_read({{"meta", SectionKind::Meta, parts.meta},
                                      {"graph", SectionKind::Graph, parts.graph},
                                      {"weights", SectionKind::Weights, parts.weights},
                                      {"future", static_cast<SectionKind>(99), "anything"}});
  EXPECT_NO_THROW(Package::from_bytes(extra, "extra.hodupkg"));
}

TEST(Package, Triples) {
  EXPECT_EQ(canonical_triple("x86_64-pc-linux-gnu"), "x86_64-linux-gnu");
  EXPECT_EQ(canonical_triple("aarch64-unknown-linux-gnu"), "aarch64-linux-gnu");
  EXPECT_EQ(canonical_triple("arm64-linux-gnu"), "aarch64-linux-gnu");
  EXPECT_EQ(canonical_triple("riscv64-linux-gnu"), "riscv64-linux-gnu");
  for (const char* bad : {"", "x86_64", "x86 64-linux", "-linux-gnu", "x86_64-linux-gnu-", "X86_64-LINUX"}) {
    try {
      canonical_triple(bad);
      ADD_FAILURE() << "accepted triple '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    }
  }
  EXPECT_NE(host_triple(), "unknown");
}

}  // namespace
}  // namespace hodu::pkg
