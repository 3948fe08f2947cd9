// Tests of the op schema registry, including a check that every op of every
// model in ../shared/onnx-tests resolves to a schema at the model's opset with
// matching arity and attribute names.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

#include "formats/model_io.h"
#include "ir/schema.h"
#include "ir/verifier.h"

namespace hodu {
namespace {

TEST(Schema, FindsVersionsByOpset) {
  const auto& r = SchemaRegistry::instance();
  const OpSchema* s = r.find("", "Add", 13);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->since_version, 13);
  EXPECT_EQ(r.find("", "Add", 12)->since_version, 7);
  EXPECT_EQ(r.find("ai.onnx", "Add", 27)->since_version, 14);
  EXPECT_EQ(r.find("", "Add")->since_version, 14);
  EXPECT_EQ(r.find("", "NoSuchOp"), nullptr);
  EXPECT_EQ(r.find("", "Attention", 22), nullptr);
  EXPECT_EQ(r.find("", "Attention", 23)->since_version, 23);
  EXPECT_EQ(r.find("", "Attention")->since_version, 24);
  EXPECT_EQ(r.max_opset(""), 27);
  EXPECT_EQ(r.max_opset("ai.onnx"), 27);
  EXPECT_EQ(r.max_opset("ai.onnx.ml"), 5);
  EXPECT_EQ(r.max_opset("ai.onnx.preview.training"), 1);
  EXPECT_EQ(r.max_opset("ai.onnx.preview"), 1);
  EXPECT_EQ(r.max_opset("hodu"), 1);
  EXPECT_EQ(canonical_domain("ai.onnx"), "");
}

TEST(Schema, NewerOpsetsAreThere) {
  const auto& r = SchemaRegistry::instance();
  struct Want { const char* domain; const char* op; int since; };
  for (const Want& w : std::vector<Want>{
           {"", "BitwiseAnd", 18}, {"", "CenterCropPad", 18}, {"", "Col2Im", 18}, {"", "GroupNormalization", 21},
           {"", "Mish", 22}, {"", "LpPool", 22}, {"", "OptionalHasElement", 18}, {"", "DeformConv", 22},
           {"", "AveragePool", 22}, {"", "Equal", 19}, {"", "AffineGrid", 20}, {"", "ConstantOfShape", 25},
           {"", "DFT", 20}, {"", "Gelu", 20}, {"", "GridSample", 20}, {"", "ImageDecoder", 20}, {"", "IsInf", 20},
           {"", "RegexFullMatch", 20}, {"", "StringConcat", 20}, {"", "StringSplit", 20}, {"", "ReduceMax", 20},
           {"", "QuantizeLinear", 25}, {"", "DequantizeLinear", 25}, {"", "RMSNormalization", 23},
           {"", "RotaryEmbedding", 23}, {"", "TensorScatter", 24}, {"", "Swish", 24}, {"", "TopK", 24},
           {"", "Cast", 25}, {"", "CumProd", 26}, {"", "BitCast", 26}, {"", "CausalConvWithState", 27},
           {"", "LinearAttention", 27}, {"", "Range", 27}, {"ai.onnx.ml", "TreeEnsemble", 5},
           {"ai.onnx.ml", "LabelEncoder", 4}, {"ai.onnx.preview", "FlexAttention", 1},
           {"ai.onnx.preview.training", "Adam", 1}}) {
    const OpSchema* s = r.find(w.domain, w.op);
    ASSERT_NE(s, nullptr) << w.domain << "." << w.op;
    EXPECT_EQ(s->since_version, w.since) << w.op;
  }
  // Version history.
  std::vector<int> cast;
  for (auto* s : r.versions("", "Cast")) cast.push_back(s->since_version);
  EXPECT_EQ(cast, (std::vector<int>{1, 6, 9, 13, 19, 21, 23, 24, 25}));
}

TEST(Schema, ParametersAttributesAndConstraints) {
  const auto& r = SchemaRegistry::instance();
  const OpSchema* conv = r.find("", "Conv");
  ASSERT_NE(conv, nullptr);
  EXPECT_EQ(conv->min_inputs, 2);
  EXPECT_EQ(conv->max_inputs, 3);
  ASSERT_EQ(conv->inputs.size(), 3u);
  EXPECT_EQ(conv->inputs[2].option, FormalParameter::Option::Optional);
  const AttributeSchema* ap = conv->attribute("auto_pad");
  ASSERT_NE(ap, nullptr);
  EXPECT_EQ(ap->kind, Attribute::Kind::String);
  ASSERT_TRUE(ap->default_value.has_value());
  EXPECT_EQ(ap->default_value->s, "NOTSET");
  EXPECT_EQ(conv->attribute("group")->default_value->i, 1);
  EXPECT_EQ(conv->attribute("kernel_shape")->kind, Attribute::Kind::Ints);
  EXPECT_FALSE(conv->attribute("kernel_shape")->default_value.has_value());
  bool bf16 = false;
  for (const auto& tc : conv->type_constraints)
    if (tc.name == "T")
      for (const auto& a : tc.allowed) bf16 |= a == "tensor(bfloat16)";
  EXPECT_TRUE(bf16) << "Conv-22 allows bfloat16";

  const OpSchema* concat = r.find("", "Concat");
  EXPECT_EQ(concat->inputs[0].option, FormalParameter::Option::Variadic);
  EXPECT_EQ(concat->min_inputs, 1);
  EXPECT_EQ(concat->max_inputs, INT32_MAX);
  EXPECT_TRUE(concat->attribute("axis")->required);

  const OpSchema* loop = r.find("", "Loop");
  EXPECT_EQ(loop->min_inputs, 2);
  EXPECT_EQ(loop->inputs[2].min_arity, 0);
  EXPECT_FALSE(loop->inputs[2].homogeneous);

  const OpSchema* ln = r.find("", "LayerNormalization");
  EXPECT_FLOAT_EQ(ln->attribute("epsilon")->default_value->f, 1e-5f);
  EXPECT_EQ(ln->attribute("axis")->default_value->i, -1);

  const OpSchema* split = r.find("", "Split");
  EXPECT_NE(split->attribute("num_outputs"), nullptr);
  EXPECT_EQ(split->inputs[1].type_str, "tensor(int64)");

  const OpSchema* rmean = r.find("", "ReduceMean");
  EXPECT_EQ(rmean->since_version, 18);
  EXPECT_EQ(rmean->attribute("axes"), nullptr);
  EXPECT_EQ(rmean->inputs.size(), 2u);

  const OpSchema* cast = r.find("", "Cast");
  EXPECT_EQ(cast->attribute("round_mode")->default_value->s, "up");
  EXPECT_EQ(cast->attribute("saturate")->default_value->i, 1);

  const OpSchema* att = r.find("", "Attention");
  EXPECT_EQ(att->max_inputs, 7);
  EXPECT_EQ(att->max_outputs, 4);

  const OpSchema* resize = r.find("", "Resize");
  EXPECT_EQ(resize->attribute("keep_aspect_ratio_policy")->default_value->s, "stretch");
  EXPECT_FLOAT_EQ(resize->attribute("cubic_coeff_a")->default_value->f, -0.75f);

  // Strings lists with defaults (LSTM activations have none; Normalizer norm is "MAX").
  const OpSchema* norm = r.find("ai.onnx.ml", "Normalizer");
  ASSERT_NE(norm, nullptr);
  EXPECT_EQ(norm->attribute("norm")->default_value->s, "MAX");
}

TEST(Schema, HoduFusedOps) {
  const auto& r = SchemaRegistry::instance();
  for (const char* op : {"FusedConv", "FusedMatMul", "FusedGemm", "Attention", "LayerNorm", "Gelu", "FusedElementwise"}) {
    const OpSchema* s = r.find("hodu", op);
    ASSERT_NE(s, nullptr) << op;
    EXPECT_EQ(s->domain, "hodu");
    EXPECT_TRUE(static_cast<bool>(s->infer)) << op;
  }
  EXPECT_EQ(r.find("hodu", "FusedConv")->attribute("activation")->kind, Attribute::Kind::String);
  EXPECT_TRUE(r.find("hodu", "FusedElementwise")->attribute("body")->required);
}

TEST(Schema, LatestIsSortedAndComplete) {
  auto all = SchemaRegistry::instance().latest();
  EXPECT_GT(all.size(), 230u);
  for (size_t k = 1; k < all.size(); ++k) {
    auto a = std::make_pair(all[k - 1]->domain, all[k - 1]->name);
    auto b = std::make_pair(all[k]->domain, all[k]->name);
    EXPECT_LT(a, b);
  }
  size_t with_inference = 0, onnx_ops = 0;
  for (auto* s : all)
    if (s->domain.empty() && !s->deprecated) {
      ++onnx_ops;
      with_inference += s->infer ? 1 : 0;
    }
  EXPECT_GT(with_inference * 100, onnx_ops * 85) << with_inference << " of " << onnx_ops;
}

// ---- the ONNX test corpus -------------------------------------------------------------

// A minimal protobuf wire-format reader: just enough of ModelProto to list
// (domain, op, arity, attribute names) of every node, subgraphs included,
// straight from the file (the importer rewrites old opsets, we want them raw).
struct Wire {
  const uint8_t* p;
  const uint8_t* end;
  bool next(uint32_t& field, uint32_t& type, std::string_view& bytes, uint64_t& varint) {
    if (p >= end) return false;
    uint64_t key = read_varint();
    field = static_cast<uint32_t>(key >> 3);
    type = static_cast<uint32_t>(key & 7);
    switch (type) {
      case 0: varint = read_varint(); break;
      case 1: p += 8; break;
      case 5: p += 4; break;
      case 2: {
        uint64_t n = read_varint();
        bytes = std::string_view(reinterpret_cast<const char*>(p), n);
        p += n;
        break;
      }
      default: throw std::runtime_error("bad wire type");
    }
    return p <= end;
  }
  uint64_t read_varint() {
    uint64_t v = 0;
    for (int s = 0; p < end; s += 7) {
      uint8_t b = *p++;
      v |= uint64_t(b & 0x7f) << s;
      if (!(b & 0x80)) break;
    }
    return v;
  }
};

struct RawNode {
  std::string domain, op;
  size_t n_in = 0, n_out = 0;
  std::vector<std::pair<std::string, int>> attrs;  // name, AttributeProto.type
  std::vector<std::string> inputs, outputs;
};

void read_graph(std::string_view g, std::vector<RawNode>& out);

void read_node(std::string_view b, std::vector<RawNode>& out) {
  RawNode n;
  std::vector<std::string_view> subgraphs;
  Wire w{reinterpret_cast<const uint8_t*>(b.data()), reinterpret_cast<const uint8_t*>(b.data() + b.size())};
  uint32_t f, t;
  std::string_view bytes;
  uint64_t v;
  while (w.next(f, t, bytes, v)) {
    if (f == 1 && t == 2) n.inputs.emplace_back(bytes);
    else if (f == 2 && t == 2) n.outputs.emplace_back(bytes);
    else if (f == 4 && t == 2) n.op = std::string(bytes);
    else if (f == 7 && t == 2) n.domain = std::string(bytes);
    else if (f == 5 && t == 2) {
      std::string name;
      int type = 0;
      Wire a{reinterpret_cast<const uint8_t*>(bytes.data()), reinterpret_cast<const uint8_t*>(bytes.data() + bytes.size())};
      uint32_t af, at;
      std::string_view ab;
      uint64_t av;
      while (a.next(af, at, ab, av)) {
        if (af == 1 && at == 2) name = std::string(ab);
        else if (af == 20 && at == 0) type = static_cast<int>(av);
        else if ((af == 6 || af == 11) && at == 2) subgraphs.push_back(ab);
      }
      n.attrs.emplace_back(name, type);
    }
  }
  n.n_in = n.inputs.size();
  n.n_out = n.outputs.size();
  out.push_back(std::move(n));
  for (auto sg : subgraphs) read_graph(sg, out);
}

void read_graph(std::string_view g, std::vector<RawNode>& out) {
  Wire w{reinterpret_cast<const uint8_t*>(g.data()), reinterpret_cast<const uint8_t*>(g.data() + g.size())};
  uint32_t f, t;
  std::string_view bytes;
  uint64_t v;
  while (w.next(f, t, bytes, v))
    if (f == 1 && t == 2) read_node(bytes, out);
}

std::filesystem::path corpus_dir() {
  const char* src = std::getenv("HODU_SOURCE_DIR");
  std::filesystem::path base = src ? std::filesystem::path(src) : std::filesystem::path(__FILE__).parent_path().parent_path().parent_path();
  return base / ".." / "shared" / "onnx-tests";
}

std::vector<std::filesystem::path> corpus_models() {
  std::vector<std::filesystem::path> out;
  auto dir = corpus_dir();
  if (!std::filesystem::exists(dir)) return out;
  for (auto& suite : std::filesystem::directory_iterator(dir)) {
    if (!suite.is_directory()) continue;
    if (suite.path().filename() == "light") {
      for (auto& f : std::filesystem::directory_iterator(suite.path()))
        if (f.path().extension() == ".onnx") out.push_back(f.path());
      continue;
    }
    for (auto& c : std::filesystem::directory_iterator(suite.path()))
      if (std::filesystem::exists(c.path() / "model.onnx")) out.push_back(c.path() / "model.onnx");
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string slurp(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

TEST(SchemaCorpus, EveryOpOfEveryTestModelResolvesAtItsOpset) {
  auto models = corpus_models();
  if (models.empty()) GTEST_SKIP() << "no ONNX test corpus at " << corpus_dir();
  EXPECT_GE(models.size(), 1900u);
  const auto& reg = SchemaRegistry::instance();
  std::set<std::string> problems;
  std::set<std::tuple<std::string, std::string, int64_t>> used;
  for (const auto& path : models) {
    std::string bytes = slurp(path);
    std::map<std::string, int64_t> opsets;
    std::vector<RawNode> nodes;
    Wire w{reinterpret_cast<const uint8_t*>(bytes.data()), reinterpret_cast<const uint8_t*>(bytes.data() + bytes.size())};
    uint32_t f, t;
    std::string_view b;
    uint64_t v;
    while (w.next(f, t, b, v)) {
      if (f == 8 && t == 2) {
        std::string domain;
        int64_t version = 0;
        Wire o{reinterpret_cast<const uint8_t*>(b.data()), reinterpret_cast<const uint8_t*>(b.data() + b.size())};
        uint32_t of, ot;
        std::string_view ob;
        uint64_t ov;
        while (o.next(of, ot, ob, ov)) {
          if (of == 1 && ot == 2) domain = std::string(ob);
          if (of == 2 && ot == 0) version = static_cast<int64_t>(ov);
        }
        opsets[canonical_domain(domain)] = version;
      } else if (f == 7 && t == 2) {
        read_graph(b, nodes);
      }
    }
    std::string where = path.parent_path().filename().string() + "/" + path.filename().string();
    for (const auto& n : nodes) {
      std::string d = canonical_domain(n.domain);
      int64_t opset = opsets.count(d) ? opsets[d] : 0;
      used.insert({d, n.op, opset});
      const OpSchema* s = reg.find(d, n.op, static_cast<int>(opset));
      if (!s) {
        problems.insert(fmt::format("{}: {}.{} has no schema at opset {}", where, d, n.op, opset));
        continue;
      }
      if (static_cast<int>(n.n_in) < s->min_inputs || static_cast<int>(n.n_in) > s->max_inputs)
        problems.insert(fmt::format("{}: {}-{} has {} inputs, schema {}..{}", where, n.op, s->since_version, n.n_in,
                                    s->min_inputs, s->max_inputs));
      if (static_cast<int>(n.n_out) < s->min_outputs || static_cast<int>(n.n_out) > s->max_outputs)
        problems.insert(fmt::format("{}: {}-{} has {} outputs, schema {}..{}", where, n.op, s->since_version, n.n_out,
                                    s->min_outputs, s->max_outputs));
      for (const auto& [name, type] : n.attrs)
        if (!s->attribute(name))
          problems.insert(fmt::format("{}: {}-{} has no attribute '{}'", where, n.op, s->since_version, name));
    }
  }
  EXPECT_GT(used.size(), 500u);
  std::string all;
  for (const auto& p : problems) all += p + "\n";
  EXPECT_TRUE(problems.empty()) << problems.size() << " problems:\n" << all;
}

// Loads every model through the ONNX importer (formats/model_io.h), verifies
// it and infers its types: the whole front half of hodu on real models.
TEST(SchemaCorpus, EveryTestModelLoadsVerifiesAndInfers) {
  auto models = corpus_models();
  if (models.empty()) GTEST_SKIP() << "no ONNX test corpus at " << corpus_dir();
  std::vector<std::string> failures;
  for (const auto& path : models) {
    try {
      Model m = load_model(path.string(), LoadOptions{false});
      verify_model(m);
      infer_types(m.graph);
    } catch (const std::exception& e) {
      failures.push_back(path.parent_path().filename().string() + ": " + e.what());
    }
  }
  std::string all;
  for (size_t k = 0; k < failures.size() && k < 60; ++k) all += failures[k] + "\n";
  EXPECT_TRUE(failures.empty()) << failures.size() << " of " << models.size() << " models fail:\n" << all;
}

}  // namespace
}  // namespace hodu
