#include "ir/hoduscript.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <random>

#include "core/error.h"
#include "formats/model_io.h"

namespace hodu {
namespace {

float bits_to_float(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

std::shared_ptr<Graph> small_body(const std::string& name, const std::string& in, const std::string& out) {
  auto g = std::make_shared<Graph>();
  g->name = name;
  g->inputs.push_back({in, ValueType::tensor(DType::F32, Shape{Dim::sym("n")}), ""});
  g->outputs.push_back({out, ValueType::tensor(DType::F32, Shape{Dim::sym("n")}), "body output"});
  Node n;
  n.op_type = "Neg";
  n.inputs = {in};
  n.outputs = {out};
  g->nodes.push_back(n);
  return g;
}

// A model that uses every attribute kind, every type kind and odd names.
Model everything_model() {
  Model m;
  m.ir_version = 8;
  m.opset_imports = {{"", 17}, {"ai.onnx.ml", 3}, {"com.weird domain", -2}};
  m.producer_name = "pytorch";
  m.producer_version = "2.1";
  m.domain = "org.test";
  m.model_version = 42;
  m.doc = "A \"doc\"\nwith lines\tand \x01 control";
  m.metadata = {{"k", "v"}, {"k", "dup"}, {"", "empty key"}};

  Graph& g = m.graph;
  g.name = "main";
  g.doc = "graph doc";
  g.inputs.push_back({"x", ValueType::tensor(DType::F32, Shape{Dim::sym("batch"), 3, Dim::unknown(), Dim::sym("s q")}),
                      "input doc"});
  g.inputs.push_back({"onnx::odd:name", ValueType::tensor(DType::I64, Shape::unknown_rank()), ""});
  g.inputs.push_back({"s", ValueType::sequence(ValueType::tensor(DType::F16, Shape::scalar())), ""});
  ValueType empty_seq;
  empty_seq.kind = ValueType::Kind::Sequence;
  g.inputs.push_back({"seq_noelem", empty_seq, ""});
  g.inputs.push_back({"o", ValueType::optional(ValueType::sequence(ValueType::tensor(DType::Bool, Shape{2}))), ""});
  ValueType map;
  map.kind = ValueType::Kind::Map;
  map.key_type = DType::String;
  map.elem = std::make_shared<ValueType>(ValueType::tensor(DType::F32, Shape{}));
  g.inputs.push_back({"m", map, ""});
  ValueType sparse;
  sparse.kind = ValueType::Kind::SparseTensor;
  sparse.dtype = DType::F32;
  sparse.shape = Shape{4, 5};
  g.inputs.push_back({"sp", sparse, ""});
  g.inputs.push_back({"unk", ValueType{}, ""});
  Dim both = Dim::sym("sym");
  both.value = 7;
  g.inputs.push_back({"", ValueType::tensor(DType::Undefined, Shape{both, Dim(-5)}), ""});
  g.outputs.push_back({"y", ValueType::tensor(DType::F32, Shape{Dim::sym("batch"), 1000}), ""});
  g.outputs.push_back({"_", ValueType{}, ""});

  g.initializers.emplace_back("w", Tensor::from_vector<float>(DType::F32, {2, 2}, {1.5f, -0.0f, bits_to_float(0x7fc00001), INFINITY}));
  std::vector<float> big(1000);
  for (size_t i = 0; i < big.size(); ++i) big[i] = std::sin(static_cast<float>(i)) * 1e3f;
  g.initializers.emplace_back("big", Tensor::from_vector(DType::F32, {10, 100}, big));
  g.initializers.emplace_back("i8", Tensor::from_vector<int8_t>(DType::I8, {3}, {-128, 0, 127}));
  g.initializers.emplace_back("u64", Tensor::from_vector<uint64_t>(DType::U64, {2}, {0, ~uint64_t(0)}));
  g.initializers.emplace_back("i64", Tensor::from_vector<int64_t>(DType::I64, {2}, {std::numeric_limits<int64_t>::min(), 5}));
  g.initializers.emplace_back("b", Tensor::from_vector<uint8_t>(DType::Bool, {3}, {0, 1, 2}));
  g.initializers.emplace_back("h", Tensor::from_vector<uint16_t>(DType::F16, {4}, {0x3c00, 0x7e01, 0xfc00, 0x8000}));
  g.initializers.emplace_back("bf", Tensor::from_vector<uint16_t>(DType::BF16, {2}, {0x3f80, 0xffc1}));
  g.initializers.emplace_back("f8", Tensor::from_vector<uint8_t>(DType::F8E4M3FN, {4}, {0x00, 0x7f, 0xff, 0x38}));
  g.initializers.emplace_back("f8b", Tensor::from_vector<uint8_t>(DType::F8E5M2FNUZ, {3}, {0x80, 0x01, 0x7f}));
  g.initializers.emplace_back("e8", Tensor::from_vector<uint8_t>(DType::F8E8M0, {3}, {0x00, 0x7f, 0xff}));
  g.initializers.emplace_back("u4", Tensor::from_vector<uint8_t>(DType::U4, {3}, {0x21, 0x0f}));
  g.initializers.emplace_back("i4pad", Tensor::from_vector<uint8_t>(DType::I4, {3}, {0x9f, 0xa8}));  // pad nibble set
  g.initializers.emplace_back("f4", Tensor::from_vector<uint8_t>(DType::F4E2M1, {4}, {0x71, 0xf8}));
  g.initializers.emplace_back("c64", Tensor::from_vector<float>(DType::C64, {2}, {1, -2, 0.25f, NAN}));
  g.initializers.emplace_back("c128", Tensor::from_vector<double>(DType::C128, {1}, {1e300, -1e-300}));
  g.initializers.emplace_back("f64", Tensor::from_vector<double>(DType::F64, {3}, {0.1, -NAN, 5e-324}));
  g.initializers.emplace_back("str", Tensor::from_strings({2}, {"a\"b", std::string("z\0\xff", 3)}));
  g.initializers.emplace_back("empty", Tensor::empty(DType::F32, {0, 3}));
  g.initializers.emplace_back("scalar", Tensor::scalar<int32_t>(DType::I32, -7));
  g.initializers.emplace_back("undef", Tensor());
  g.initializers.emplace_back("u16", Tensor::from_vector<uint16_t>(DType::U16, {1}, {65535}));
  g.initializers.emplace_back("u32", Tensor::from_vector<uint32_t>(DType::U32, {1}, {4294967295u}));
  g.initializers.emplace_back("i16", Tensor::from_vector<int16_t>(DType::I16, {1}, {-32768}));
  g.initializers.emplace_back("u8", Tensor::from_vector<uint8_t>(DType::U8, {1}, {255}));

  g.value_types["t1"] = ValueType::tensor(DType::F32, Shape{Dim::sym("batch"), 64});
  g.value_types["not_produced"] = ValueType::tensor(DType::I32, Shape{});
  g.value_types["t3"] = ValueType{};

  Node n;
  n.name = "/conv1/Conv";
  n.op_type = "Conv";
  n.inputs = {"x", "w", ""};
  n.outputs = {"t1"};
  n.doc = "node doc";
  n.attributes.push_back(Attribute::make_ints("strides", {2, 2}));
  n.attributes.push_back(Attribute::make_ints("pads", {}));
  n.attributes.push_back(Attribute::make_int("group", std::numeric_limits<int64_t>::min()));
  n.attributes.push_back(Attribute::make_float("alpha", 1.0f));
  n.attributes.push_back(Attribute::make_float("beta", bits_to_float(0xffc00000)));
  n.attributes.push_back(Attribute::make_float("gamma", -INFINITY));
  n.attributes.push_back(Attribute::make_float("delta", bits_to_float(0x7f800001)));
  n.attributes.push_back(Attribute::make_float("eps", 1e-5f));
  n.attributes.push_back(Attribute::make_float("tiny", 1e-45f));
  n.attributes.push_back(Attribute::make_float("negzero", -0.0f));
  n.attributes.push_back(Attribute::make_floats("fl", {0.1f, 3.0f, NAN, 1e30f}));
  n.attributes.push_back(Attribute::make_floats("fl_empty", {}));
  n.attributes.push_back(Attribute::make_string("mode", "a \"quoted\" \\ string\n"));
  n.attributes.push_back(Attribute::make_string("empty_s", ""));
  n.attributes.push_back(Attribute::make_strings("names", {"a", "", "c d"}));
  n.attributes.push_back(Attribute::make_strings("no_names", {}));
  n.attributes.push_back(Attribute::make_tensor("value", Tensor::from_vector<float>(DType::F32, {2}, {1, 2})));
  n.attributes.push_back(Attribute::make_tensor("undef_t", Tensor()));
  Attribute ts;
  ts.name = "ts";
  ts.kind = Attribute::Kind::Tensors;
  ts.tensors = {Tensor::from_vector<int64_t>(DType::I64, {1}, {3}), Tensor(), Tensor::from_strings({1}, {"x"})};
  n.attributes.push_back(ts);
  Attribute ts_empty;
  ts_empty.name = "ts_empty";
  ts_empty.kind = Attribute::Kind::Tensors;
  n.attributes.push_back(ts_empty);
  Attribute tp;
  tp.name = "tp";
  tp.kind = Attribute::Kind::TypeProto;
  tp.types = {ValueType::sequence(ValueType::tensor(DType::F32, Shape{Dim::sym("n")}))};
  n.attributes.push_back(tp);
  Attribute tps;
  tps.name = "tps";
  tps.kind = Attribute::Kind::TypeProtos;
  tps.types = {ValueType::tensor(DType::I64, Shape{}), map};
  n.attributes.push_back(tps);
  Attribute undef_a;
  undef_a.name = "undef_a";
  n.attributes.push_back(undef_a);
  Attribute ref;
  ref.name = "by_ref";
  ref.kind = Attribute::Kind::Float;
  ref.ref_attr_name = "alpha";
  ref.doc = "attr doc";
  n.attributes.push_back(ref);
  Attribute ref2 = Attribute::make_ints("by_ref2", {1});
  ref2.ref_attr_name = "odd name";
  n.attributes.push_back(ref2);
  Attribute sp;
  sp.name = "sp";
  sp.kind = Attribute::Kind::SparseTensor;
  sp.t = Tensor::from_vector<float>(DType::F32, {2}, {5, 6});
  n.attributes.push_back(sp);
  n.attributes.push_back(Attribute::make_int("weird name!", 1));
  g.nodes.push_back(n);

  // If with nested subgraphs (and a Loop inside the then branch).
  Node iff;
  iff.op_type = "If";
  iff.inputs = {"cond"};
  iff.outputs = {"t2", ""};
  auto then_g = small_body("then", "t1", "t2a");
  Node loop;
  loop.op_type = "Loop";
  loop.inputs = {"", "cond", "t1"};
  loop.outputs = {"t2a_loop"};
  loop.attributes.push_back(Attribute::make_graph("body", small_body("", "i", "o")));
  then_g->nodes.push_back(loop);
  then_g->initializers.emplace_back("inner", Tensor::scalar<float>(DType::F32, 2.0f));
  then_g->value_types["t2a"] = ValueType::tensor(DType::F32, Shape{Dim::sym("n")});
  iff.attributes.push_back(Attribute::make_graph("then_branch", then_g));
  iff.attributes.push_back(Attribute::make_graph("else_branch", small_body("else", "t1", "t2b")));
  Attribute gs;
  gs.name = "gs";
  gs.kind = Attribute::Kind::Graphs;
  gs.graphs = {small_body("g1", "a", "b"), small_body("g2", "c", "d")};
  iff.attributes.push_back(gs);
  Attribute gs_empty;
  gs_empty.name = "gs_empty";
  gs_empty.kind = Attribute::Kind::Graphs;
  iff.attributes.push_back(gs_empty);
  Attribute null_g;
  null_g.name = "null_g";
  null_g.kind = Attribute::Kind::Graph;
  iff.attributes.push_back(null_g);
  g.nodes.push_back(iff);

  Node ml;
  ml.op_type = "TreeEnsemble";
  ml.domain = "ai.onnx.ml";
  ml.inputs = {"onnx::odd:name"};
  ml.outputs = {"t3", "y"};
  g.nodes.push_back(ml);

  Node weird;
  weird.op_type = "Op With Space";
  weird.domain = "ai.onnx";
  weird.outputs = {};
  weird.inputs = {"", ""};
  g.nodes.push_back(weird);

  Node none;
  none.op_type = "NoInputs";
  none.outputs = {"", "_", "1"};
  g.nodes.push_back(none);
  return m;
}

TEST(HoduScript, RoundTripsEverything) {
  Model m = everything_model();
  std::string text = print_hoduscript(m);
  Model back = parse_hoduscript(text, "everything.hodu");
  EXPECT_TRUE(back == m) << text;
  // Printing again gives the same text (the format is canonical).
  EXPECT_EQ(print_hoduscript(back), text);
  // Docs (not compared by operator==) round-trip too.
  EXPECT_EQ(back.graph.doc, m.graph.doc);
  EXPECT_EQ(back.graph.inputs[0].doc, "input doc");
  EXPECT_EQ(back.graph.nodes[0].doc, "node doc");
  EXPECT_EQ(back.graph.nodes[0].attr("by_ref")->doc, "attr doc");
}

TEST(HoduScript, FloatsAreBitExact) {
  std::mt19937 rng(1234);
  Model m;
  Node n;
  n.op_type = "X";
  std::vector<float> fs;
  for (int i = 0; i < 2000; ++i) {
    uint32_t b = rng();
    fs.push_back(bits_to_float(b));
  }
  n.attributes.push_back(Attribute::make_floats("f", fs));
  for (int i = 0; i < 50; ++i) n.attributes.push_back(Attribute::make_float(fmt::format("a{}", i), fs[i]));
  std::vector<double> ds;
  for (int i = 0; i < 30; ++i) {
    uint64_t b = (uint64_t(rng()) << 32) | rng();
    double d;
    std::memcpy(&d, &b, 8);
    ds.push_back(d);
  }
  m.graph.initializers.emplace_back("d", Tensor::from_vector(DType::F64, {30}, ds));
  std::vector<uint16_t> hs;
  for (int i = 0; i < 30; ++i) hs.push_back(static_cast<uint16_t>(rng()));
  m.graph.initializers.emplace_back("h", Tensor::from_vector(DType::F16, {30}, hs));
  m.graph.initializers.emplace_back("bf", Tensor::from_vector(DType::BF16, {30}, hs));
  std::vector<uint8_t> bytes;
  for (int i = 0; i < 32; ++i) bytes.push_back(static_cast<uint8_t>(rng()));
  for (DType t : {DType::F8E4M3FN, DType::F8E4M3FNUZ, DType::F8E5M2, DType::F8E5M2FNUZ, DType::F8E8M0, DType::F4E2M1,
                  DType::U4, DType::I4})
    m.graph.initializers.emplace_back(std::string(dtype_name(t)),
                                      Tensor::from_bytes(t, {static_cast<int64_t>(dtype_is_packed4(t) ? 32 : 32)},
                                                         bytes.data(), dtype_is_packed4(t) ? 16 : 32));
  m.graph.nodes.push_back(n);
  std::string text = print_hoduscript(m);
  Model back = parse_hoduscript(text);
  EXPECT_TRUE(back == m);
}

TEST(HoduScript, ReadableOutput) {
  Model m;
  m.ir_version = 8;
  m.opset_imports = {{"", 17}};
  m.producer_name = "pytorch";
  m.producer_version = "2.1";
  Graph& g = m.graph;
  g.name = "main";
  g.inputs.push_back({"x", ValueType::tensor(DType::F32, Shape{Dim::sym("batch"), 3}), ""});
  g.outputs.push_back({"y", ValueType::tensor(DType::F32, Shape{Dim::sym("batch"), 3}), ""});
  g.initializers.emplace_back("b", Tensor::from_vector<float>(DType::F32, {3}, {1, 2.5f, -3}));
  Node n;
  n.op_type = "Add";
  n.inputs = {"x", "b"};
  n.outputs = {"y"};
  n.attributes.push_back(Attribute::make_float("alpha", 1));
  g.nodes.push_back(n);
  EXPECT_EQ(print_hoduscript(m),
            "hodu 1\n"
            "model ir 8 opset 17\n"
            "  producer \"pytorch\" \"2.1\"\n"
            "graph main(%x: f32[batch, 3]) -> (%y: f32[batch, 3]) {\n"
            "  init %b = f32[3] [1, 2.5, -3]\n"
            "  %y = Add(%x, %b) {alpha: 1.0}\n"
            "}\n");
}

TEST(HoduScript, ParsesHandWrittenText) {
  Model m = parse_hoduscript(R"(
# a comment
hodu 1
model ir 9 opset 18, ai.onnx.ml 3 producer "me" "0"
graph g(%x: f32[2]) -> (%y: f32[2]) {
  %c = Constant() {value: f32[2] [1, 2]}   # trailing comment
  %y: f32[2] = Add(%x, %c)
}
)");
  EXPECT_EQ(m.ir_version, 9);
  EXPECT_EQ(m.opset_imports.at(""), 18);
  EXPECT_EQ(m.opset_imports.at("ai.onnx.ml"), 3);
  ASSERT_EQ(m.graph.nodes.size(), 2u);
  EXPECT_EQ(m.graph.nodes[1].inputs, (std::vector<std::string>{"x", "c"}));
  EXPECT_EQ(m.graph.value_types.at("y").to_string(), "f32[2]");
  EXPECT_EQ(m.graph.nodes[0].get_tensor("value")->to_doubles(), (std::vector<double>{1, 2}));
}

TEST(HoduScript, ParsesTheDocsExample) {
  const char* src = std::getenv("HODU_SOURCE_DIR");
  std::filesystem::path doc =
      (src ? std::filesystem::path(src) : std::filesystem::path(__FILE__).parent_path() / ".." / "..") / "docs" /
      "hoduscript.md";
  std::ifstream f(doc);
  if (!f) GTEST_SKIP() << "no " << doc.string();
  std::string md((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  size_t at = md.find("## Example");
  ASSERT_NE(at, std::string::npos);
  size_t b = md.find("```\n", at);
  ASSERT_NE(b, std::string::npos);
  size_t e = md.find("```", b + 4);
  std::string text = md.substr(b + 4, e - b - 4);
  Model m = parse_hoduscript(text, "docs/hoduscript.md");
  EXPECT_EQ(m.graph.initializer("w")->to_doubles(), (std::vector<double>{1, 2, 3, 4}));
  EXPECT_TRUE(parse_hoduscript(print_hoduscript(m)) == m);
}

void expect_parse_error(const std::string& text, const std::string& fragment) {
  try {
    parse_hoduscript(text, "bad.hodu");
    ADD_FAILURE() << "no error for: " << text;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidModel);
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(HoduScript, ErrorsNameLineAndColumn) {
  expect_parse_error("", "bad.hodu:1:1: expected 'hodu', found end of file");
  expect_parse_error("hodu 2\n", "bad.hodu:1:6: expected HoduScript version 1 (this file says 2), found '2'");
  expect_parse_error("hodu 1\nmodel ir 8\ngraph g() -> () {\n  %y = Add(%x,\n}\n", "bad.hodu:5:1: expected a value");
  expect_parse_error("hodu 1 model graph g() -> () { init %w = f32[3] [1, 2] }", "expected 3 elements for f32[3], got 2");
  expect_parse_error("hodu 1 model graph g() -> () { init %w = i8[1] [300] }", "expected an integer in [-128, 127]");
  expect_parse_error("hodu 1 model graph g() -> () { init %w = f32[1] base64 \"AAA=\" }", "expected 4 bytes of base64");
  expect_parse_error("hodu 1 model graph g() -> () { %y = X() {a: [1, \"s\"]} }", "same kind");
  expect_parse_error("hodu 1 model graph g() -> () { %y = X() {a: []} }", "empty list");
  expect_parse_error("hodu 1 model graph g() -> () { %y = X() {a: 99999999999999999999} }", "fits 64 bits");
  expect_parse_error("hodu 1 model graph g() -> () { init %w = f32[99999999999,99999999999,9999999] [1] }", "smaller tensor");
  expect_parse_error("hodu 1 model graph g() -> () {} trailing", "end of file after the main graph");
  std::string deep = "hodu 1 model graph g(%x: ";
  for (int i = 0; i < 1000; ++i) deep += "seq<";
  expect_parse_error(deep, "less nesting");
}

TEST(HoduScript, TruncationsAndMutationsThrowCleanly) {
  std::string text = print_hoduscript(everything_model());
  size_t step = std::max<size_t>(1, text.size() / 3000);
  int errors = 0;
  for (size_t n = 0; n < text.size(); n += step) {
    try {
      parse_hoduscript(std::string_view(text).substr(0, n), "cut.hodu");
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidModel);
      ++errors;
    }
  }
  EXPECT_GT(errors, 0);
  std::mt19937 rng(7);
  const char junk[] = "%_,:[](){}<>\"\\#@=-0123456789.ex ?*\n";
  for (int k = 0; k < 3000; ++k) {
    std::string t = text;
    int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits; ++e) {
      size_t at = rng() % t.size();
      switch (rng() % 3) {
        case 0: t[at] = junk[rng() % (sizeof junk - 1)]; break;
        case 1: t.erase(at, 1 + rng() % 5); break;
        default: t.insert(at, 1, junk[rng() % (sizeof junk - 1)]); break;
      }
    }
    try {
      Model m = parse_hoduscript(t, "fuzz.hodu");
      // Whatever parses prints and parses back to the same model.
      EXPECT_TRUE(parse_hoduscript(print_hoduscript(m)) == m);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidModel) << e.what();
    }
  }
}

// Every model of ONNX's backend test data: import, print, parse, compare.
TEST(HoduScript, RoundTripsOnnxTestModels) {
  const char* src = std::getenv("HODU_SOURCE_DIR");
  std::filesystem::path root = (src ? std::filesystem::path(src) : std::filesystem::path(__FILE__).parent_path() / ".." / "..") / ".." / "shared" / "onnx-tests";
  if (!std::filesystem::exists(root)) GTEST_SKIP() << "no ONNX test data at " << root.string();
  int checked = 0, import_failed = 0;
  std::vector<std::string> mismatches;
  for (const char* part : {"node", "simple", "pytorch-converted", "pytorch-operator", "light"}) {
    std::filesystem::path dir = root / part;
    if (!std::filesystem::exists(dir)) continue;
    for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
      if (e.path().filename() != "model.onnx" && e.path().extension() != ".onnx") continue;
      Model m;
      try {
        LoadOptions o;
        o.verify = false;
        m = load_model(e.path().string(), o);
      } catch (const Error&) {
        ++import_failed;
        continue;
      }
      std::string text = print_hoduscript(m);
      try {
        Model back = parse_hoduscript(text, e.path().string());
        if (!(back == m)) mismatches.push_back(e.path().string());
      } catch (const Error& err) {
        mismatches.push_back(e.path().string() + ": " + err.what());
      }
      ++checked;
    }
  }
  std::cout << "[ hoduscript ] " << checked << " ONNX test models round-tripped, " << import_failed
            << " not importable\n";
  for (size_t i = 0; i < mismatches.size() && i < 20; ++i) ADD_FAILURE() << "mismatch: " << mismatches[i];
  EXPECT_TRUE(mismatches.empty()) << mismatches.size() << " mismatches";
  if (checked == 0) GTEST_SKIP() << "the ONNX importer loaded no model";
}

}  // namespace
}  // namespace hodu
