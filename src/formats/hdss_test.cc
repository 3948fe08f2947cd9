#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <random>

#include "core/error.h"
#include "formats/model_io.h"

namespace hodu {
namespace {

namespace fs = std::filesystem;

Model sample_model() {
  Model m;
  m.ir_version = 9;
  m.opset_imports = {{"", 21}, {"ai.onnx.ml", 5}};
  m.producer_name = "test";
  m.producer_version = "1";
  m.domain = "d";
  m.model_version = -3;
  m.doc = "doc";
  m.metadata = {{"a", "b"}, {"a", "c"}};
  Graph& g = m.graph;
  g.name = "main";
  g.doc = "gdoc";
  g.inputs.push_back({"x", ValueType::tensor(DType::F32, Shape{Dim::sym("batch"), 4}), "xdoc"});
  g.inputs.push_back({"u", ValueType::tensor(DType::F32, Shape::unknown_rank()), ""});
  g.inputs.push_back({"s", ValueType::sequence(ValueType::optional(ValueType{})), ""});
  ValueType map;
  map.kind = ValueType::Kind::Map;
  map.key_type = DType::I64;
  map.elem = std::make_shared<ValueType>(ValueType::tensor(DType::F32, Shape{}));
  g.inputs.push_back({"m", map, ""});
  g.outputs.push_back({"y", ValueType::tensor(DType::F32, Shape{Dim::sym("batch"), 4}), ""});
  std::vector<float> w(4 * 4);
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i) * 0.5f - 3;
  g.initializers.emplace_back("w", Tensor::from_vector(DType::F32, {4, 4}, w));
  g.initializers.emplace_back("b", Tensor::from_vector<double>(DType::F64, {3}, {1, NAN, -0.0}));
  g.initializers.emplace_back("i4", Tensor::from_vector<uint8_t>(DType::I4, {3}, {0x12, 0xf3}));
  g.initializers.emplace_back("odd", Tensor::from_vector<uint8_t>(DType::U8, {3}, {1, 2, 3}));
  g.initializers.emplace_back("str", Tensor::from_strings({2}, {"hello", std::string("\0x", 2)}));
  g.initializers.emplace_back("empty", Tensor::empty(DType::I64, {0}));
  g.initializers.emplace_back("undef", Tensor());
  g.value_types["t"] = ValueType::tensor(DType::F32, Shape{Dim::sym("batch"), 4});
  Node n;
  n.name = "mm";
  n.op_type = "MatMul";
  n.inputs = {"x", "w"};
  n.outputs = {"t"};
  n.doc = "ndoc";
  g.nodes.push_back(n);
  Node c;
  c.op_type = "Custom";
  c.domain = "hodu";
  c.inputs = {"t", "", "b"};
  c.outputs = {"y", ""};
  c.attributes.push_back(Attribute::make_float("f", -1.5f));
  c.attributes.push_back(Attribute::make_int("i", -7));
  c.attributes.push_back(Attribute::make_string("s", "str"));
  c.attributes.push_back(Attribute::make_floats("fs", {1, NAN}));
  c.attributes.push_back(Attribute::make_ints("is", {1, -2, 1LL << 62}));
  c.attributes.push_back(Attribute::make_strings("ss", {"", "a"}));
  c.attributes.push_back(Attribute::make_tensor("t", Tensor::from_vector<int32_t>(DType::I32, {2}, {5, 6})));
  Attribute ts;
  ts.name = "ts";
  ts.kind = Attribute::Kind::Tensors;
  ts.tensors = {Tensor::from_vector<uint16_t>(DType::F16, {1}, {0x3c00}), Tensor()};
  c.attributes.push_back(ts);
  auto body = std::make_shared<Graph>();
  body->name = "body";
  body->inputs.push_back({"a", ValueType::tensor(DType::F32, Shape{}), ""});
  body->outputs.push_back({"z", ValueType::tensor(DType::F32, Shape{}), ""});
  body->initializers.emplace_back("k", Tensor::scalar<float>(DType::F32, 2));
  Node inner;
  inner.op_type = "Mul";
  inner.inputs = {"a", "k"};
  inner.outputs = {"z"};
  body->nodes.push_back(inner);
  c.attributes.push_back(Attribute::make_graph("g", body));
  Attribute gs;
  gs.name = "gs";
  gs.kind = Attribute::Kind::Graphs;
  gs.graphs = {body, body};
  c.attributes.push_back(gs);
  Attribute tp;
  tp.name = "tp";
  tp.kind = Attribute::Kind::TypeProtos;
  tp.types = {map, ValueType{}};
  c.attributes.push_back(tp);
  Attribute ref;
  ref.name = "r";
  ref.kind = Attribute::Kind::Int;
  ref.ref_attr_name = "outer";
  ref.doc = "adoc";
  c.attributes.push_back(ref);
  Attribute undef;
  undef.name = "u";
  c.attributes.push_back(undef);
  g.nodes.push_back(c);
  return m;
}

fs::path temp_file(const std::string& name) {
  return fs::temp_directory_path() / ("hodu_hdss_test_" + std::to_string(::getpid()) + "_" + name);
}

void write_file(const fs::path& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

uint64_t get_u64(const std::string& s, size_t at) {
  uint64_t v;
  std::memcpy(&v, s.data() + at, 8);
  return v;
}
uint32_t get_u32(const std::string& s, size_t at) {
  uint32_t v;
  std::memcpy(&v, s.data() + at, 4);
  return v;
}
void set_u64(std::string& s, size_t at, uint64_t v) { std::memcpy(s.data() + at, &v, 8); }
void set_u32(std::string& s, size_t at, uint32_t v) { std::memcpy(s.data() + at, &v, 4); }

void expect_invalid(const std::string& bytes, const std::string& fragment) {
  try {
    read_hdss(bytes, "bad.hdss");
    ADD_FAILURE() << "no error, expected: " << fragment;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidModel) << e.what();
    std::string msg = e.what();
    EXPECT_EQ(msg.rfind("bad.hdss: ", 0), 0u) << msg;
    EXPECT_NE(msg.find(fragment), std::string::npos) << msg;
  }
}

TEST(Hdss, RoundTripInMemory) {
  Model m = sample_model();
  std::string bytes = write_hdss(m);
  ASSERT_GE(bytes.size(), 64u);
  EXPECT_EQ(bytes.substr(0, 4), "HDSS");
  Model back = read_hdss(bytes, "mem.hdss");
  EXPECT_TRUE(back == m);
  EXPECT_EQ(back.graph.doc, "gdoc");
  EXPECT_EQ(back.graph.nodes[0].doc, "ndoc");
  EXPECT_EQ(back.graph.inputs[0].doc, "xdoc");
  EXPECT_EQ(back.graph.nodes[1].attr("r")->doc, "adoc");
  // Deterministic output.
  EXPECT_EQ(write_hdss(back), bytes);
}

TEST(Hdss, LayoutIsAligned) {
  std::string bytes = write_hdss(sample_model());
  uint64_t data_offset = get_u64(bytes, 32), data_size = get_u64(bytes, 40);
  EXPECT_EQ(data_offset % 64, 0u);
  EXPECT_EQ(data_offset + data_size, bytes.size());
  EXPECT_EQ(get_u64(bytes, 16), 64u);
}

TEST(Hdss, FileIsMemoryMapped) {
  Model m = sample_model();
  fs::path p = temp_file("mmap.hdss");
  write_file(p, write_hdss(m));
  Tensor w;
  {
    Model back = read_hdss_file(p.string());
    EXPECT_TRUE(back == m);
    w = back.graph.initializers[0].second;
    // Every tensor is 64-byte aligned in memory (the mapping is page aligned).
    for (const auto& [k, t] : back.graph.initializers) {
      if (t.defined() && t.dtype() != DType::String && t.nbytes()) {
        EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw_data()) % 64, 0u) << k;
      }
    }
  }
  // The tensor outlives the model (it keeps the mapping alive) and reads the
  // file's bytes in place; writing to it does not change the file.
  EXPECT_EQ(w.to_doubles()[3], 1.5 - 3);
  w.data<float>()[0] = 123;
  fs::remove(p);  // the mapping stays valid after unlink
  EXPECT_EQ(w.to_doubles()[0], 123);
  EXPECT_EQ(Tensor().defined(), false);
}

TEST(Hdss, NoCopyWhenMapped) {
  Model m;
  m.graph.initializers.emplace_back("w", Tensor::from_vector<float>(DType::F32, {1000}, std::vector<float>(1000, 1)));
  fs::path p = temp_file("nocopy.hdss");
  write_file(p, write_hdss(m));
  uint64_t before = Storage::allocation_count();
  Model back = read_hdss_file(p.string());
  EXPECT_EQ(Storage::allocation_count(), before);  // wrapped, not allocated
  EXPECT_TRUE(back == m);
  fs::remove(p);
}

TEST(Hdss, RefusesNewerVersion) {
  std::string bytes = write_hdss(sample_model());
  set_u32(bytes, 4, 7);
  expect_invalid(bytes, "bad.hdss: format version 7 is newer than this hodu supports (1)");
  set_u32(bytes, 4, 0);
  expect_invalid(bytes, "format version 0 is invalid");
}

TEST(Hdss, RefusesWrongMagic) {
  std::string bytes = write_hdss(sample_model());
  bytes[0] = 'X';
  expect_invalid(bytes, "wrong magic");
  expect_invalid("", "wrong magic");
  expect_invalid("HDS", "wrong magic");
  expect_invalid("HDSS\x01", "truncated header");
}

TEST(Hdss, RefusesUnknownRequiredFlags) {
  std::string bytes = write_hdss(sample_model());
  set_u32(bytes, 8, 2);
  expect_invalid(bytes, "flags 0x2");
  set_u32(bytes, 8, 1);  // external data, which a plain .hdss reader does not have
  expect_invalid(bytes, "kept outside the file");
  set_u32(bytes, 8, 0x10000);  // optional bits are ignored
  EXPECT_NO_THROW(read_hdss(bytes, "ok.hdss"));
}

// The graph of a .hodupkg: tensors in external data (deduplicated by the place function).
TEST(Hdss, ExternalDataRoundTrip) {
  Model m = sample_model();
  std::string data;
  std::map<std::string, uint64_t> seen;
  auto place = [&](const Tensor& t) -> uint64_t {
    std::string bytes(static_cast<const char*>(t.raw_data()), t.nbytes());
    if (auto it = seen.find(bytes); it != seen.end()) return it->second;
    uint64_t at = (data.size() + 63) / 64 * 64;
    data.resize(at);
    data += bytes;
    return seen[bytes] = at;
  };
  std::string bytes = write_hdss_external(m, place);
  EXPECT_EQ(get_u32(bytes, 8), 1u);
  EXPECT_EQ(get_u64(bytes, 40), 0u);  // no data section of its own
  EXPECT_LT(bytes.size(), write_hdss(m).size());
  Model copied = read_hdss_external(bytes, data, nullptr, "ext.hdss");
  EXPECT_TRUE(copied == m);
  // With an owner, tensors wrap the external bytes and keep the owner alive.
  auto owner = std::make_shared<std::string>(data);
  std::weak_ptr<std::string> watch = owner;
  Tensor w;
  {
    Model wrapped = read_hdss_external(bytes, *owner, owner, "ext.hdss");
    EXPECT_TRUE(wrapped == m);
    w = wrapped.graph.initializers[0].second;
    const char* p = static_cast<const char*>(w.raw_data());
    EXPECT_TRUE(p >= owner->data() && p < owner->data() + owner->size());
  }
  owner.reset();
  EXPECT_FALSE(watch.expired());  // w still holds it
  w = Tensor();
  EXPECT_TRUE(watch.expired());
  // Offsets outside the given data are refused.
  try {
    read_hdss_external(bytes, std::string_view(data).substr(0, 64), nullptr, "short.hdss");
    ADD_FAILURE() << "accepted data shorter than its tensors";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("lies outside the data section"), std::string::npos) << e.what();
  }
}

TEST(Hdss, RefusesTruncation) {
  std::string bytes = write_hdss(sample_model());
  expect_invalid(bytes.substr(0, 40), "truncated header");
  expect_invalid(bytes.substr(0, 100), "outside the file");
  expect_invalid(bytes.substr(0, bytes.size() - 1), "data section");
  // Every truncation of the file fails cleanly.
  for (size_t n = 0; n < bytes.size(); ++n) {
    try {
      read_hdss(std::string_view(bytes).substr(0, n), "cut.hdss");
      ADD_FAILURE() << "truncation to " << n << " bytes was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidModel);
    }
  }
}

TEST(Hdss, RefusesOutOfBoundsSections) {
  std::string bytes = write_hdss(sample_model());
  std::string b = bytes;
  set_u64(b, 24, ~uint64_t(0) - 10);  // graph size overflows
  expect_invalid(b, "graph section");
  b = bytes;
  set_u64(b, 32, bytes.size() + 64);
  expect_invalid(b, "data section");
  b = bytes;
  set_u64(b, 32, get_u64(bytes, 32) + 1);
  expect_invalid(b, "not 64-byte aligned");
  b = bytes;
  set_u64(b, 40, ~uint64_t(0));
  expect_invalid(b, "data section");
  b = bytes;
  set_u64(b, 32, 0);
  expect_invalid(b, "overlaps");
}

TEST(Hdss, RefusesChecksumMismatch) {
  std::string bytes = write_hdss(sample_model());
  std::string b = bytes;
  b[70] ^= 0x40;
  expect_invalid(b, "graph section checksum mismatch");
  b = bytes;
  b[get_u64(bytes, 32) + 1] ^= 1;
  expect_invalid(b, "tensor data checksum mismatch");
}

// A tensor whose offset/size escape the data section, with a valid checksum:
// the reader must still refuse it.
TEST(Hdss, RefusesCorruptGraphWithValidChecksum) {
  Model m;
  m.graph.initializers.emplace_back("w", Tensor::from_vector<float>(DType::F32, {2}, {1, 2}));
  std::string bytes = write_hdss(m);
  // Random corruptions of the graph section, re-checksummed: never a crash.
  uint64_t gsize = get_u64(bytes, 24);
  std::mt19937 rng(3);
  auto fnv = [](const char* p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; ++i) {
      h ^= static_cast<uint8_t>(p[i]);
      h *= 0x100000001b3ull;
    }
    return h;
  };
  Model big = sample_model();
  std::string big_bytes = write_hdss(big);
  for (const std::string* src : {&bytes, &big_bytes}) {
    gsize = get_u64(*src, 24);
    for (int k = 0; k < 3000; ++k) {
      std::string b = *src;
      int edits = 1 + static_cast<int>(rng() % 3);
      for (int e = 0; e < edits; ++e) b[64 + rng() % gsize] = static_cast<char>(rng());
      set_u64(b, 48, fnv(b.data() + 64, gsize));
      set_u64(b, 56, fnv(b.data() + get_u64(b, 32), get_u64(b, 40)));
      try {
        Model r = read_hdss(b, "fuzz.hdss");
        EXPECT_TRUE(read_hdss(write_hdss(r), "again.hdss") == r);
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::InvalidModel) << e.what();
        EXPECT_EQ(std::string(e.what()).rfind("fuzz.hdss: ", 0), 0u) << e.what();
      }
    }
  }
}

TEST(Hdss, FileErrorsNameTheFile) {
  fs::path p = temp_file("short.hdss");
  write_file(p, std::string("HDSS\x07\0\0\0", 8));
  try {
    read_hdss_file(p.string());
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(p.string() + ": format version 7 is newer"), std::string::npos) << e.what();
  }
  std::string bytes = write_hdss(sample_model());
  bytes[80] ^= 1;
  write_file(p, bytes);
  try {
    read_hdss_file(p.string());
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidModel);
    EXPECT_NE(std::string(e.what()).find(p.string() + ": graph section checksum"), std::string::npos) << e.what();
  }
  fs::remove(p);
  try {
    read_hdss_file(p.string());
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Io);
    EXPECT_NE(std::string(e.what()).find(p.string()), std::string::npos);
  }
}

TEST(Hdss, RoundTripsOnnxTestModels) {
  const char* src = std::getenv("HODU_SOURCE_DIR");
  fs::path root = (src ? fs::path(src) : fs::path(__FILE__).parent_path() / ".." / "..") / ".." / "shared" / "onnx-tests";
  if (!fs::exists(root)) GTEST_SKIP() << "no ONNX test data at " << root.string();
  int checked = 0, import_failed = 0;
  std::vector<std::string> mismatches;
  fs::path tmp = temp_file("onnx.hdss");
  for (const char* part : {"node", "simple", "pytorch-converted", "pytorch-operator", "light"}) {
    fs::path dir = root / part;
    if (!fs::exists(dir)) continue;
    for (const auto& e : fs::recursive_directory_iterator(dir)) {
      if (e.path().extension() != ".onnx") continue;
      Model m;
      try {
        LoadOptions o;
        o.verify = false;
        m = load_model(e.path().string(), o);
      } catch (const Error&) {
        ++import_failed;
        continue;
      }
      try {
        std::string bytes = write_hdss(m);
        if (!(read_hdss(bytes, e.path().string()) == m)) mismatches.push_back(e.path().string() + " (bytes)");
        write_file(tmp, bytes);
        if (!(read_hdss_file(tmp.string()) == m)) mismatches.push_back(e.path().string() + " (mmap)");
      } catch (const Error& err) {
        mismatches.push_back(e.path().string() + ": " + err.what());
      }
      ++checked;
    }
  }
  fs::remove(tmp);
  std::cout << "[ hdss ] " << checked << " ONNX test models round-tripped, " << import_failed << " not importable\n";
  for (size_t i = 0; i < mismatches.size() && i < 20; ++i) ADD_FAILURE() << "mismatch: " << mismatches[i];
  EXPECT_TRUE(mismatches.empty()) << mismatches.size() << " mismatches";
  if (checked == 0) GTEST_SKIP() << "the ONNX importer loaded no model";
}

}  // namespace
}  // namespace hodu
