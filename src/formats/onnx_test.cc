// ONNX import/export: canonicalization of older opsets, export round trips on
// the ONNX backend test corpus, and malformed input.
#ifndef ONNX_ML
#define ONNX_ML 1
#endif
#ifndef ONNX_NAMESPACE
#define ONNX_NAMESPACE onnx
#endif
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/process_memory.h"
#include "formats/model_io.h"

namespace fs = std::filesystem;
using namespace hodu;

namespace {

// ---- helpers to build ONNX models ------------------------------------------

onnx::ModelProto make_model(int opset, int ir = 8) {
  onnx::ModelProto m;
  m.set_ir_version(ir);
  m.set_producer_name("hodu-test");
  auto* op = m.add_opset_import();
  op->set_domain("");
  op->set_version(opset);
  m.mutable_graph()->set_name("g");
  return m;
}

void add_value(google::protobuf::RepeatedPtrField<onnx::ValueInfoProto>* list, const std::string& name,
               int elem, std::vector<int64_t> dims) {
  auto* v = list->Add();
  v->set_name(name);
  auto* tt = v->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(elem);
  auto* sh = tt->mutable_shape();
  for (auto d : dims) {
    if (d < 0) sh->add_dim()->set_dim_param("N");
    else sh->add_dim()->set_dim_value(d);
  }
}

onnx::NodeProto* add_node(onnx::ModelProto& m, const std::string& op, std::vector<std::string> in,
                          std::vector<std::string> out, const std::string& name = "") {
  auto* n = m.mutable_graph()->add_node();
  n->set_op_type(op);
  n->set_name(name.empty() ? op + "_" + out[0] : name);
  for (auto& i : in) n->add_input(i);
  for (auto& o : out) n->add_output(o);
  return n;
}

void attr_ints(onnx::NodeProto* n, const std::string& name, std::vector<int64_t> v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (auto x : v) a->add_ints(x);
}
void attr_int(onnx::NodeProto* n, const std::string& name, int64_t v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}
void attr_float(onnx::NodeProto* n, const std::string& name, float v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(v);
}
void attr_string(onnx::NodeProto* n, const std::string& name, const std::string& v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s(v);
}

Model load(const onnx::ModelProto& m, const std::string& dir = ".") {
  return import_onnx(m.SerializeAsString(), dir, "test.onnx");
}

const Node* find_node(const Graph& g, const std::string& op) {
  for (const auto& n : g.nodes)
    if (n.op_type == op) return &n;
  return nullptr;
}

std::vector<int64_t> const_ints(const Graph& g, const std::string& name) {
  const Tensor* t = g.initializer(name);
  EXPECT_NE(t, nullptr) << name;
  return t ? t->to_int64s() : std::vector<int64_t>{};
}

template <typename Fn>
void expect_error(Fn&& fn, ErrorCode code, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one containing '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

std::string tmp_dir() {
  fs::path p = fs::temp_directory_path() / ("hodu_onnx_test_" + std::to_string(::getpid()));
  fs::create_directories(p);
  return p.string();
}

}  // namespace

// ---- import basics ---------------------------------------------------------

TEST(OnnxImport, GraphInputsOutputsInitializersAndTypes) {
  auto m = make_model(17);
  m.set_doc_string("doc");
  auto* md = m.add_metadata_props();
  md->set_key("k");
  md->set_value("v");
  auto* g = m.mutable_graph();
  add_value(g->mutable_input(), "x", onnx::TensorProto::FLOAT, {-1, 3});
  add_value(g->mutable_input(), "w", onnx::TensorProto::FLOAT, {3});  // overridable (IR >= 4)
  add_value(g->mutable_output(), "y", onnx::TensorProto::FLOAT, {-1, 3});
  add_value(g->mutable_value_info(), "t", onnx::TensorProto::FLOAT, {-1, 3});
  auto* w = g->add_initializer();
  w->set_name("w");
  w->set_data_type(onnx::TensorProto::FLOAT);
  w->add_dims(3);
  for (float v : {1.f, 2.f, 3.f}) w->add_float_data(v);
  auto* b = g->add_initializer();
  b->set_name("b");
  b->set_data_type(onnx::TensorProto::INT64);
  b->add_dims(2);
  b->set_raw_data(std::string("\x01\0\0\0\0\0\0\0\x02\0\0\0\0\0\0\0", 16));
  add_node(m, "Add", {"x", "w"}, {"t"});
  add_node(m, "Relu", {"t"}, {"y"});

  Model model = load(m);
  EXPECT_EQ(model.ir_version, 8);
  EXPECT_EQ(model.opset_imports.at(""), 17);
  EXPECT_EQ(model.doc, "doc");
  ASSERT_EQ(model.metadata.size(), 1u);
  ASSERT_EQ(model.graph.inputs.size(), 2u);
  EXPECT_EQ(model.graph.inputs[0].type.to_string(), "f32[N, 3]");
  ASSERT_EQ(model.graph.initializers.size(), 2u);
  EXPECT_EQ(model.graph.initializer("w")->to_doubles(), (std::vector<double>{1, 2, 3}));
  EXPECT_EQ(const_ints(model.graph, "b"), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(model.graph.value_types.at("t").to_string(), "f32[N, 3]");
  EXPECT_EQ(model.graph.nodes.size(), 2u);
}

TEST(OnnxImport, OldIrListsInitializersAsInputs) {
  auto m = make_model(7, 3);
  auto* g = m.mutable_graph();
  add_value(g->mutable_input(), "x", onnx::TensorProto::FLOAT, {3});
  add_value(g->mutable_input(), "w", onnx::TensorProto::FLOAT, {3});
  add_value(g->mutable_output(), "y", onnx::TensorProto::FLOAT, {3});
  auto* w = g->add_initializer();
  w->set_name("w");
  w->set_data_type(onnx::TensorProto::FLOAT);
  w->add_dims(3);
  for (float v : {1.f, 2.f, 3.f}) w->add_float_data(v);
  add_node(m, "Add", {"x", "w"}, {"y"});
  Model model = load(m);
  ASSERT_EQ(model.graph.inputs.size(), 1u);
  EXPECT_EQ(model.graph.inputs[0].name, "x");
  EXPECT_NE(model.graph.initializer("w"), nullptr);
}

TEST(OnnxImport, SubgraphsSparseTypesAndAttributes) {
  auto m = make_model(17);
  auto* g = m.mutable_graph();
  add_value(g->mutable_input(), "c", onnx::TensorProto::BOOL, {});
  add_value(g->mutable_output(), "y", onnx::TensorProto::FLOAT, {2, 2});
  auto* n = add_node(m, "If", {"c"}, {"y"});
  for (const char* branch : {"then_branch", "else_branch"}) {
    auto* a = n->add_attribute();
    a->set_name(branch);
    a->set_type(onnx::AttributeProto::GRAPH);
    auto* sg = a->mutable_g();
    sg->set_name(branch);
    auto* cn = sg->add_node();
    cn->set_op_type("Constant");
    cn->add_output(std::string(branch) + "_out");
    auto* ca = cn->add_attribute();
    ca->set_name("sparse_value");
    ca->set_type(onnx::AttributeProto::SPARSE_TENSOR);
    auto* sp = ca->mutable_sparse_tensor();
    sp->add_dims(2);
    sp->add_dims(2);
    sp->mutable_values()->set_data_type(onnx::TensorProto::FLOAT);
    sp->mutable_values()->add_dims(2);
    sp->mutable_values()->add_float_data(5);
    sp->mutable_values()->add_float_data(7);
    sp->mutable_indices()->set_data_type(onnx::TensorProto::INT64);
    sp->mutable_indices()->add_dims(2);
    sp->mutable_indices()->add_int64_data(1);
    sp->mutable_indices()->add_int64_data(2);
    add_value(sg->mutable_output(), std::string(branch) + "_out", onnx::TensorProto::FLOAT, {2, 2});
  }
  // A sparse initializer with 2-D indices and a sequence-typed value_info.
  auto* sp = g->add_sparse_initializer();
  sp->add_dims(2);
  sp->add_dims(3);
  sp->mutable_values()->set_name("s");
  sp->mutable_values()->set_data_type(onnx::TensorProto::INT32);
  sp->mutable_values()->add_dims(1);
  sp->mutable_values()->add_int32_data(9);
  sp->mutable_indices()->set_data_type(onnx::TensorProto::INT64);
  sp->mutable_indices()->add_dims(1);
  sp->mutable_indices()->add_dims(2);
  sp->mutable_indices()->add_int64_data(1);
  sp->mutable_indices()->add_int64_data(2);
  auto* vi = g->add_value_info();
  vi->set_name("seq");
  vi->mutable_type()->mutable_sequence_type()->mutable_elem_type()->mutable_tensor_type()->set_elem_type(
      onnx::TensorProto::INT64);
  Model model = load(m);
  const Node* iff = find_node(model.graph, "If");
  ASSERT_NE(iff, nullptr);
  const Graph* then_g = iff->get_graph("then_branch");
  ASSERT_NE(then_g, nullptr);
  const Attribute* sv = then_g->nodes[0].attr("sparse_value");
  ASSERT_NE(sv, nullptr);
  EXPECT_EQ(sv->kind, Attribute::Kind::SparseTensor);
  EXPECT_EQ(sv->t.to_doubles(), (std::vector<double>{0, 5, 7, 0}));
  EXPECT_EQ(model.graph.initializer("s")->to_doubles(), (std::vector<double>{0, 0, 0, 0, 0, 9}));
  EXPECT_EQ(model.graph.value_types.at("seq").to_string(), "seq<i64<unknown rank>>");

  // Round trip keeps all of it.
  Model again = import_onnx(export_onnx(model, 0), ".", "again");
  again.ir_version = model.ir_version;
  EXPECT_TRUE(again == model);
}

TEST(OnnxImport, ExternalData) {
  std::string dir = tmp_dir();
  {
    std::ofstream f(dir + "/weights.bin", std::ios::binary);
    float v[4] = {1, 2, 3, 4};
    f.write(reinterpret_cast<const char*>(v), sizeof(v));
  }
  auto m = make_model(17);
  auto* g = m.mutable_graph();
  add_value(g->mutable_output(), "w", onnx::TensorProto::FLOAT, {2});
  auto* w = g->add_initializer();
  w->set_name("w");
  w->set_data_type(onnx::TensorProto::FLOAT);
  w->add_dims(2);
  w->set_data_location(onnx::TensorProto::EXTERNAL);
  auto* e = w->add_external_data();
  e->set_key("location");
  e->set_value("weights.bin");
  e = w->add_external_data();
  e->set_key("offset");
  e->set_value("8");
  Model model = load(m, dir);
  EXPECT_EQ(model.graph.initializer("w")->to_doubles(), (std::vector<double>{3, 4}));
  // Missing file: an Io error naming it.
  expect_error([&] { load(m, dir + "/nowhere"); }, ErrorCode::Io, "weights.bin");
  fs::remove_all(dir);
}

// ---- canonicalization --------------------------------------------------------

TEST(OnnxCanonicalize, AxesAttributesBecomeInputs) {
  auto m = make_model(11);
  auto* g = m.mutable_graph();
  add_value(g->mutable_input(), "x", onnx::TensorProto::FLOAT, {2, 3, 4});
  add_value(g->mutable_output(), "r", onnx::TensorProto::FLOAT, {});
  add_value(g->mutable_output(), "s", onnx::TensorProto::FLOAT, {});
  add_value(g->mutable_output(), "u", onnx::TensorProto::FLOAT, {});
  attr_ints(add_node(m, "ReduceSum", {"x"}, {"r"}), "axes", {1});
  attr_ints(add_node(m, "ReduceMean", {"x"}, {"rm"}), "axes", {0, 2});
  attr_ints(add_node(m, "Squeeze", {"rm"}, {"s"}), "axes", {0});
  attr_ints(add_node(m, "Unsqueeze", {"x"}, {"u"}), "axes", {0});
  auto* sp = add_node(m, "Split", {"x"}, {"a", "b"});
  attr_int(sp, "axis", 2);
  attr_ints(sp, "split", {1, 3});
  add_node(m, "Split", {"x"}, {"c", "d"});
  Model model = load(m);
  const Graph& cg = model.graph;
  EXPECT_EQ(const_ints(cg, cg.nodes[0].inputs.at(1)), (std::vector<int64_t>{1}));
  EXPECT_FALSE(cg.nodes[0].has_attr("axes"));
  EXPECT_EQ(const_ints(cg, cg.nodes[1].inputs.at(1)), (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(const_ints(cg, cg.nodes[2].inputs.at(1)), (std::vector<int64_t>{0}));
  EXPECT_EQ(const_ints(cg, cg.nodes[4].inputs.at(1)), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(cg.nodes[5].get_int("num_outputs", 0), 2);
  // The ReduceMean axes (an attribute again at 17) come after every other initializer.
  EXPECT_EQ(cg.initializers.back().first, cg.nodes[1].inputs[1]);

  // Export at 17: ReduceMean takes axes as an attribute again, ReduceSum keeps the input.
  Model back = import_onnx(export_onnx(model, 17), ".", "back");
  onnx::ModelProto p;
  ASSERT_TRUE(p.ParseFromString(export_onnx(model, 17)));
  bool saw_mean = false;
  for (const auto& n : p.graph().node()) {
    if (n.op_type() == "ReduceMean") {
      saw_mean = true;
      EXPECT_EQ(n.input_size(), 1);
      ASSERT_EQ(n.attribute_size(), 1);
      EXPECT_EQ(n.attribute(0).name(), "axes");
    }
    if (n.op_type() == "Split") {
      for (const auto& a : n.attribute()) EXPECT_NE(a.name(), "num_outputs");  // 18+ only
    }
  }
  EXPECT_TRUE(saw_mean);
  back.ir_version = model.ir_version;
  back.opset_imports = model.opset_imports;
  EXPECT_TRUE(back == model);
}

TEST(OnnxCanonicalize, SliceClipPadTopKDropout) {
  auto m = make_model(9);
  auto* g = m.mutable_graph();
  add_value(g->mutable_input(), "x", onnx::TensorProto::FLOAT, {4, 4});
  add_value(g->mutable_output(), "k", onnx::TensorProto::FLOAT, {});
  add_value(g->mutable_value_info(), "sl", onnx::TensorProto::FLOAT, {2, 4});
  add_value(g->mutable_value_info(), "cl", onnx::TensorProto::FLOAT, {2, 4});
  auto* s = add_node(m, "Slice", {"x"}, {"sl"});
  attr_ints(s, "starts", {1});
  attr_ints(s, "ends", {3});
  attr_ints(s, "axes", {0});
  auto* c = add_node(m, "Clip", {"sl"}, {"cl"});
  attr_float(c, "min", -1);
  attr_float(c, "max", 1);
  auto* p = add_node(m, "Pad", {"cl"}, {"pd"});
  attr_ints(p, "pads", {0, 1, 0, 1});
  attr_float(p, "value", 2.5f);
  auto* t = add_node(m, "TopK", {"pd"}, {"k", "ki"});
  attr_int(t, "k", 2);
  auto* d = add_node(m, "Dropout", {"x"}, {"dr"});
  attr_float(d, "ratio", 0.25f);
  Model model = load(m);
  const Graph& cg = model.graph;
  const Node* sl = find_node(cg, "Slice");
  ASSERT_EQ(sl->inputs.size(), 4u);
  EXPECT_EQ(const_ints(cg, sl->inputs[1]), (std::vector<int64_t>{1}));
  EXPECT_EQ(const_ints(cg, sl->inputs[2]), (std::vector<int64_t>{3}));
  const Node* cl = find_node(cg, "Clip");
  ASSERT_EQ(cl->inputs.size(), 3u);
  EXPECT_EQ(cg.initializer(cl->inputs[1])->to_doubles(), (std::vector<double>{-1}));
  EXPECT_TRUE(cl->attributes.empty());
  const Node* pd = find_node(cg, "Pad");
  ASSERT_EQ(pd->inputs.size(), 3u);
  EXPECT_EQ(const_ints(cg, pd->inputs[1]), (std::vector<int64_t>{0, 1, 0, 1}));
  EXPECT_EQ(cg.initializer(pd->inputs[2])->to_doubles(), (std::vector<double>{2.5}));
  EXPECT_EQ(const_ints(cg, find_node(cg, "TopK")->inputs.at(1)), (std::vector<int64_t>{2}));
  const Node* dr = find_node(cg, "Dropout");
  EXPECT_FALSE(dr->has_attr("ratio"));
  EXPECT_EQ(cg.initializer(dr->inputs.at(1))->to_doubles(), (std::vector<double>{0.25}));

  // Without a known input type the bound is a float constant cast like the input.
  auto m2 = make_model(6);
  auto* c2 = add_node(m2, "Clip", {"u"}, {"v"});
  attr_float(c2, "max", 6);
  Model model2 = load(m2);
  ASSERT_EQ(model2.graph.nodes.size(), 2u);
  EXPECT_EQ(model2.graph.nodes[0].op_type, "CastLike");
  EXPECT_EQ(model2.graph.nodes[1].inputs, (std::vector<std::string>{"u", "", model2.graph.nodes[0].outputs[0]}));
}

TEST(OnnxCanonicalize, SoftmaxBefore13BecomesFlattenSoftmaxReshape) {
  auto m = make_model(11);
  auto* g = m.mutable_graph();
  add_value(g->mutable_input(), "x", onnx::TensorProto::FLOAT, {2, 3, 4});
  add_value(g->mutable_output(), "y", onnx::TensorProto::FLOAT, {2, 3, 4});
  add_value(g->mutable_output(), "z", onnx::TensorProto::FLOAT, {2, 3, 4});
  add_node(m, "Softmax", {"x"}, {"y"});                 // axis 1 of rank 3: 2-D coercion
  attr_int(add_node(m, "LogSoftmax", {"x"}, {"z"}), "axis", 2);  // last axis: same meaning
  Model model = load(m);
  const Graph& cg = model.graph;
  std::vector<std::string> ops;
  for (const auto& n : cg.nodes) ops.push_back(n.op_type);
  EXPECT_EQ(ops, (std::vector<std::string>{"Shape", "Flatten", "Softmax", "Reshape", "LogSoftmax"}));
  EXPECT_EQ(cg.nodes[1].get_int("axis", 0), 1);
  EXPECT_EQ(cg.nodes[2].get_int("axis", 0), -1);
  EXPECT_EQ(cg.nodes[3].outputs[0], "y");
  EXPECT_EQ(cg.nodes[4].get_int("axis", 0), 2);
}

TEST(OnnxCanonicalize, UpsampleScatterCastBatchNormLegacyBroadcast) {
  auto m = make_model(9);
  auto* g = m.mutable_graph();
  add_value(g->mutable_input(), "x", onnx::TensorProto::FLOAT, {1, 2, 3, 4});
  add_value(g->mutable_input(), "sc", onnx::TensorProto::FLOAT, {4});
  add_value(g->mutable_output(), "up", onnx::TensorProto::FLOAT, {});
  attr_string(add_node(m, "Upsample", {"x", "sc"}, {"up"}), "mode", "nearest");
  attr_int(add_node(m, "Scatter", {"x", "i", "u"}, {"se"}), "axis", 1);
  Model model = load(m);
  const Node* rs = find_node(model.graph, "Resize");
  ASSERT_NE(rs, nullptr);
  EXPECT_EQ(rs->inputs, (std::vector<std::string>{"x", "", "sc"}));
  EXPECT_EQ(rs->get_string("coordinate_transformation_mode", ""), "asymmetric");
  EXPECT_EQ(rs->get_string("nearest_mode", ""), "floor");
  EXPECT_NE(find_node(model.graph, "ScatterElements"), nullptr);

  auto m5 = make_model(5, 3);
  auto* g5 = m5.mutable_graph();
  add_value(g5->mutable_input(), "x", onnx::TensorProto::FLOAT, {1, 2, 3, 4});
  add_value(g5->mutable_input(), "b", onnx::TensorProto::FLOAT, {2});
  attr_string(add_node(m5, "Cast", {"x"}, {"c"}), "to", "INT64");
  auto* mul = add_node(m5, "Mul", {"x", "b"}, {"mb"});
  attr_int(mul, "broadcast", 1);
  attr_int(mul, "axis", 1);
  auto* bn = add_node(m5, "BatchNormalization", {"x", "b", "b", "b", "b"}, {"bn", "m1", "v1", "sm", "sv"});
  attr_int(bn, "is_test", 1);
  attr_int(bn, "spatial", 1);
  attr_ints(bn, "consumed_inputs", {0, 0, 0, 1, 1});
  Model mm = load(m5);
  EXPECT_EQ(find_node(mm.graph, "Cast")->get_int("to", 0), 7);
  const Node* unsq = find_node(mm.graph, "Unsqueeze");
  ASSERT_NE(unsq, nullptr);
  EXPECT_EQ(const_ints(mm.graph, unsq->inputs[1]), (std::vector<int64_t>{-1, -2}));
  EXPECT_EQ(find_node(mm.graph, "Mul")->inputs[1], unsq->outputs[0]);
  EXPECT_TRUE(find_node(mm.graph, "Mul")->attributes.empty());
  const Node* bnn = find_node(mm.graph, "BatchNormalization");
  EXPECT_TRUE(bnn->attributes.empty());
  EXPECT_EQ(bnn->outputs.size(), 1u);
}

// RoiAlign before 16 sampled without the half-pixel shift (ONNX Runtime: output_half_pixel);
// 16's default is half_pixel. torchvision writes the old form at opset 11 (Faster R-CNN), whose
// boxes came out wrong while the import kept 16's default.
TEST(OnnxCanonicalize, RoiAlignBefore16IsOutputHalfPixel) {
  auto make = [](int opset) {
    auto m = make_model(opset);
    auto* g = m.mutable_graph();
    add_value(g->mutable_input(), "x", onnx::TensorProto::FLOAT, {1, 2, 8, 8});
    add_value(g->mutable_input(), "rois", onnx::TensorProto::FLOAT, {3, 4});
    add_value(g->mutable_input(), "bi", onnx::TensorProto::INT64, {3});
    add_value(g->mutable_output(), "y", onnx::TensorProto::FLOAT, {3, 2, 2, 2});
    auto* n = add_node(m, "RoiAlign", {"x", "rois", "bi"}, {"y"});
    attr_int(n, "output_height", 2);
    attr_int(n, "output_width", 2);
    return m;
  };
  Model m11 = load(make(11));
  EXPECT_EQ(find_node(m11.graph, "RoiAlign")->get_string("coordinate_transformation_mode", ""), "output_half_pixel");
  Model m16 = load(make(16));
  EXPECT_FALSE(find_node(m16.graph, "RoiAlign")->has_attr("coordinate_transformation_mode"));
  // Written back at 13 the attribute (unknown there) goes; half_pixel cannot be written below 16.
  onnx::ModelProto p;
  ASSERT_TRUE(p.ParseFromString(export_onnx(m11, 13)));
  for (const auto& n : p.graph().node())
    for (const auto& a : n.attribute()) EXPECT_NE(a.name(), "coordinate_transformation_mode");
  EXPECT_EQ(find_node(import_onnx(export_onnx(m11, 13), ".", "again").graph, "RoiAlign")
                ->get_string("coordinate_transformation_mode", ""),
            "output_half_pixel");
  expect_error([&] { export_onnx(m16, 13); }, ErrorCode::Unsupported, "half_pixel needs opset 16");
}

// ---- malformed input -------------------------------------------------------

TEST(OnnxMalformed, TruncatedCorruptAndNotOnnx) {
  auto m = make_model(17);
  add_value(m.mutable_graph()->mutable_input(), "x", onnx::TensorProto::FLOAT, {3});
  add_value(m.mutable_graph()->mutable_output(), "y", onnx::TensorProto::FLOAT, {3});
  add_node(m, "Relu", {"x"}, {"y"});
  std::string bytes = m.SerializeAsString();
  expect_error([&] { import_onnx(std::string_view(bytes).substr(0, bytes.size() - 3), ".", "cut.onnx"); },
               ErrorCode::InvalidModel, "cut.onnx: not a valid ONNX model");
  std::string corrupt = bytes;
  corrupt[0] = '\xff';
  corrupt[1] = '\xff';
  expect_error([&] { import_onnx(corrupt, ".", "bad.onnx"); }, ErrorCode::InvalidModel,
               "bad.onnx: not a valid ONNX model");
  expect_error([&] { import_onnx("hello, this is text\n", ".", "text.onnx"); }, ErrorCode::InvalidModel,
               "text.onnx: not a valid ONNX model");
  expect_error([&] { import_onnx("", ".", "empty.onnx"); }, ErrorCode::InvalidModel, "empty.onnx");
  EXPECT_EQ(model_format_from_bytes(bytes), ModelFormat::Onnx);
}

TEST(OnnxMalformed, NoGraph) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  expect_error([&] { load(m); }, ErrorCode::InvalidModel, "no graph");
}

TEST(OnnxMalformed, OpsetOutOfRange) {
  expect_error([&] { load(make_model(28)); }, ErrorCode::Unsupported, "ai.onnx opset 28");
  expect_error([&] { load(make_model(0)); }, ErrorCode::InvalidModel, "opset version 0");
  auto m = make_model(17);
  m.set_ir_version(99);
  expect_error([&] { load(m); }, ErrorCode::Unsupported, "IR version 99");
}

// An attribute declared INT that holds a float (ONNX's checker calls it a type/data mismatch):
// reading the declared field would give 0 silently, so it is refused, naming node and attribute.
TEST(OnnxMalformed, AttributeTypeAndValueDisagree) {
  auto m = make_model(17);
  add_value(m.mutable_graph()->mutable_input(), "x", onnx::TensorProto::FLOAT, {2, 3});
  add_value(m.mutable_graph()->mutable_output(), "y", onnx::TensorProto::FLOAT, {2, 3});
  auto* n = add_node(m, "LeakyRelu", {"x"}, {"y"}, "leaky");
  auto* a = n->add_attribute();
  a->set_name("alpha");
  a->set_type(onnx::AttributeProto::INT);
  a->set_f(0.25f);
  expect_error([&] { load(m); }, ErrorCode::InvalidModel, "'alpha' is declared INT but its value is a float");
  a->set_type(onnx::AttributeProto::FLOAT);  // the same model, well formed
  EXPECT_NO_THROW(load(m));
}

TEST(OnnxMalformed, BadInitializerDims) {
  auto m = make_model(17);
  auto* w = m.mutable_graph()->add_initializer();
  w->set_name("w");
  w->set_data_type(onnx::TensorProto::FLOAT);
  w->add_dims(-2);
  expect_error([&] { load(m); }, ErrorCode::InvalidModel, "invalid dim -2");
  w->set_dims(0, int64_t(1) << 50);
  expect_error([&] { load(m); }, ErrorCode::InvalidModel, "'w'");
  w->set_dims(0, 1 << 20);
  w->add_dims(1 << 20);
  w->add_dims(1 << 20);
  expect_error([&] { load(m); }, ErrorCode::InvalidModel, "too large");
  w->clear_dims();
  w->add_dims(3);
  w->add_float_data(1);  // 1 value for 3 elements
  expect_error([&] { load(m); }, ErrorCode::InvalidModel, "has 1 values");
}

TEST(OnnxMalformed, OutputProducedTwice) {
  auto m = make_model(17);
  add_value(m.mutable_graph()->mutable_input(), "x", onnx::TensorProto::FLOAT, {3});
  add_node(m, "Relu", {"x"}, {"y"}, "a");
  add_node(m, "Neg", {"x"}, {"y"}, "b");
  expect_error([&] { load(m); }, ErrorCode::InvalidModel, "output 'y' is already produced");
  auto m2 = make_model(17);
  add_value(m2.mutable_graph()->mutable_input(), "x", onnx::TensorProto::FLOAT, {3});
  add_node(m2, "Relu", {"x"}, {"x"}, "a");
  expect_error([&] { load(m2); }, ErrorCode::InvalidModel, "output 'x'");
}

// ONNX requires nodes in topological order; published models (an fp16 converter's Casts
// appended at the end) break it, and ONNX Runtime sorts them. So does the importer.
TEST(OnnxImport, NodesOutOfOrderAreSorted) {
  auto m = make_model(17);
  add_value(m.mutable_graph()->mutable_input(), "x", onnx::TensorProto::FLOAT, {3});
  add_value(m.mutable_graph()->mutable_output(), "z", onnx::TensorProto::FLOAT, {3});
  add_node(m, "Add", {"y", "c"}, {"z"}, "add");  // reads y and c, produced below
  add_node(m, "Neg", {"x"}, {"y"}, "neg");
  add_node(m, "Cast", {"x"}, {"c"}, "cast");
  attr_int(m.mutable_graph()->mutable_node(2), "to", onnx::TensorProto::FLOAT);
  std::string bytes = m.SerializeAsString();
  Model model = load_model_from_bytes(bytes, ModelFormat::Onnx, ".", "unsorted.onnx");
  ASSERT_EQ(model.graph.nodes.size(), 3u);
  EXPECT_EQ(model.graph.nodes[0].name, "neg");  // file order kept where it is already right
  EXPECT_EQ(model.graph.nodes[1].name, "cast");
  EXPECT_EQ(model.graph.nodes[2].name, "add");

  // A subgraph reading an outer value makes its node depend on that value's producer.
  auto m2 = make_model(17);
  add_value(m2.mutable_graph()->mutable_input(), "x", onnx::TensorProto::FLOAT, {3});
  add_value(m2.mutable_graph()->mutable_input(), "cond", onnx::TensorProto::BOOL, {});
  add_value(m2.mutable_graph()->mutable_output(), "r", onnx::TensorProto::FLOAT, {3});
  auto* iff = add_node(m2, "If", {"cond"}, {"r"}, "if");
  for (const char* branch : {"then_branch", "else_branch"}) {
    auto* a = iff->add_attribute();
    a->set_name(branch);
    a->set_type(onnx::AttributeProto::GRAPH);
    auto* body = a->mutable_g();
    body->set_name(branch);
    auto* n = body->add_node();
    n->set_op_type("Relu");
    n->set_name(std::string(branch) + "_relu");
    n->add_input("late");  // produced in the outer graph after the If
    n->add_output(std::string(branch) + "_out");
    add_value(body->mutable_output(), std::string(branch) + "_out", onnx::TensorProto::FLOAT, {3});
  }
  add_node(m2, "Neg", {"x"}, {"late"}, "late");
  Model model2 = load_model_from_bytes(m2.SerializeAsString(), ModelFormat::Onnx, ".", "unsorted_if.onnx");
  EXPECT_EQ(model2.graph.nodes[0].name, "late");
  EXPECT_EQ(model2.graph.nodes[1].name, "if");

  // A cycle cannot be sorted: the verifier names it.
  auto m3 = make_model(17);
  add_value(m3.mutable_graph()->mutable_input(), "x", onnx::TensorProto::FLOAT, {3});
  add_value(m3.mutable_graph()->mutable_output(), "b", onnx::TensorProto::FLOAT, {3});
  add_node(m3, "Add", {"x", "b"}, {"a"}, "first");
  add_node(m3, "Neg", {"a"}, {"b"}, "second");
  expect_error([&] { load_model_from_bytes(m3.SerializeAsString(), ModelFormat::Onnx, ".", "cycle.onnx"); },
               ErrorCode::InvalidModel, "cycle");
}

TEST(OnnxMalformed, UnknownOpIsNotAnImportError) {
  auto m = make_model(17);
  add_value(m.mutable_graph()->mutable_input(), "x", onnx::TensorProto::FLOAT, {3});
  add_value(m.mutable_graph()->mutable_output(), "y", onnx::TensorProto::FLOAT, {3});
  add_node(m, "NoSuchOp", {"x"}, {"y"});
  Model model = load(m);
  EXPECT_EQ(model.graph.nodes[0].op_type, "NoSuchOp");
}

// ---- ONNX Runtime contrib ops (com.microsoft): lowered at import (docs/import.md) ----

onnx::NodeProto* add_ms_node(onnx::ModelProto& m, const std::string& op, std::vector<std::string> in,
                             std::vector<std::string> out) {
  auto* n = add_node(m, op, std::move(in), std::move(out));
  n->set_domain("com.microsoft");
  return n;
}

onnx::ModelProto make_ms_model() {
  auto m = make_model(13);
  auto* op = m.add_opset_import();
  op->set_domain("com.microsoft");
  op->set_version(1);
  return m;
}

std::vector<std::string> op_list(const Graph& g) {
  std::vector<std::string> ops;
  for (const auto& n : g.nodes) ops.push_back(n.domain.empty() ? n.op_type : n.domain + "." + n.op_type);
  return ops;
}

TEST(OnnxContrib, SkipLayerNormAndFastGeluBecomeStandardOps) {
  auto m = make_ms_model();
  auto* g = m.mutable_graph();
  add_value(g->mutable_input(), "x", onnx::TensorProto::FLOAT, {2, 3, 8});
  add_value(g->mutable_input(), "skip", onnx::TensorProto::FLOAT, {2, 3, 8});
  add_value(g->mutable_input(), "gamma", onnx::TensorProto::FLOAT, {8});
  add_value(g->mutable_input(), "bias", onnx::TensorProto::FLOAT, {8});
  add_value(g->mutable_output(), "y", onnx::TensorProto::FLOAT, {2, 3, 8});
  add_value(g->mutable_output(), "sum", onnx::TensorProto::FLOAT, {2, 3, 8});
  add_ms_node(m, "SkipLayerNormalization", {"x", "skip", "gamma", "", "bias"}, {"ln", "", "", "sum"});
  add_ms_node(m, "FastGelu", {"ln", "bias"}, {"y"});
  Model model = load(m);
  EXPECT_EQ(op_list(model.graph),
            (std::vector<std::string>{"Add", "Add", "LayerNormalization", "Add", "Gelu"}));
  const Graph& cg = model.graph;
  EXPECT_EQ(cg.nodes[1].outputs[0], "sum");  // input + skip + bias, the optional output
  EXPECT_EQ(cg.nodes[2].outputs[0], "ln");
  EXPECT_FLOAT_EQ(cg.nodes[2].get_float("epsilon", 0), 1e-12f);  // ORT's default for SkipLayerNorm
  EXPECT_EQ(cg.nodes[4].get_string("approximate", ""), "tanh");
  EXPECT_EQ(cg.nodes[4].outputs[0], "y");
  EXPECT_EQ(model.opset_imports.count("com.microsoft"), 0u);
}

TEST(OnnxContrib, QLinearAddIsDequantizeAddQuantizeWithTheInputsZeroPointType) {
  auto m = make_ms_model();
  auto* g = m.mutable_graph();
  add_value(g->mutable_input(), "a", onnx::TensorProto::INT8, {4});
  add_value(g->mutable_input(), "b", onnx::TensorProto::INT8, {4});
  add_value(g->mutable_input(), "s", onnx::TensorProto::FLOAT, {});
  add_value(g->mutable_output(), "c", onnx::TensorProto::INT8, {4});
  // Zero points left out: the output's is 0 of A's type (int8), not QuantizeLinear's uint8 default.
  add_ms_node(m, "QLinearAdd", {"a", "s", "", "b", "s", "", "s"}, {"c"});
  Model model = load(m);
  EXPECT_EQ(op_list(model.graph),
            (std::vector<std::string>{"DequantizeLinear", "DequantizeLinear", "Add", "QuantizeLinear"}));
  const Node& q = model.graph.nodes[3];
  ASSERT_EQ(q.inputs.size(), 3u);
  const Tensor* zp = model.graph.initializer(q.inputs[2]);
  ASSERT_NE(zp, nullptr);
  EXPECT_EQ(zp->dtype(), DType::I8);
  EXPECT_EQ(q.outputs[0], "c");
}

TEST(OnnxContrib, ATypeFoundByInferenceThroughEarlierNodes) {
  // The mask reaches Attention through a Cast: its rank is known only by inference.
  auto m = make_ms_model();
  auto* g = m.mutable_graph();
  add_value(g->mutable_input(), "x", onnx::TensorProto::FLOAT, {1, 4, 8});
  add_value(g->mutable_input(), "w", onnx::TensorProto::FLOAT, {8, 24});
  add_value(g->mutable_input(), "mask", onnx::TensorProto::INT64, {1, 4});
  add_value(g->mutable_output(), "y", onnx::TensorProto::FLOAT, {1, 4, 8});
  attr_int(add_node(m, "Cast", {"mask"}, {"mask32"}), "to", onnx::TensorProto::INT32);
  attr_int(add_ms_node(m, "Attention", {"x", "w", "", "mask32"}, {"y"}), "num_heads", 2);
  Model model = load(m);
  bool softmax = false;
  for (const auto& n : model.graph.nodes) {
    EXPECT_TRUE(n.domain.empty()) << n.describe();
    softmax |= n.op_type == "Softmax";
  }
  EXPECT_TRUE(softmax);
  EXPECT_EQ(model.graph.nodes.back().outputs[0], "y");
}

TEST(OnnxContrib, UnknownOpsAndUnhandledInputsAreClearErrors) {
  auto m = make_ms_model();
  add_value(m.mutable_graph()->mutable_input(), "x", onnx::TensorProto::FLOAT, {3});
  add_value(m.mutable_graph()->mutable_output(), "y", onnx::TensorProto::FLOAT, {3});
  add_ms_node(m, "NotARealContribOp", {"x"}, {"y"});
  expect_error([&] { load(m); }, ErrorCode::Unsupported, "unsupported op NotARealContribOp of domain com.microsoft");

  auto a = make_ms_model();
  auto* g = a.mutable_graph();
  add_value(g->mutable_input(), "x", onnx::TensorProto::FLOAT, {1, 4, 8});
  add_value(g->mutable_input(), "w", onnx::TensorProto::FLOAT, {8, 24});
  add_value(g->mutable_input(), "past", onnx::TensorProto::FLOAT, {2, 1, 2, 8, 4});
  add_value(g->mutable_input(), "plen", onnx::TensorProto::INT32, {1});
  add_value(g->mutable_output(), "y", onnx::TensorProto::FLOAT, {1, 4, 8});
  auto* n = add_ms_node(a, "Attention", {"x", "w", "", "", "past", "", "plen"}, {"y"});
  n->set_name("att");
  attr_int(n, "num_heads", 2);
  expect_error([&] { load(a); }, ErrorCode::Unsupported,
               "node 'att' (com.microsoft.Attention) (op Attention, domain com.microsoft): input 6 "
               "(past_sequence_length");

  auto c = make_ms_model();
  add_value(c.mutable_graph()->mutable_input(), "x", onnx::TensorProto::FLOAT, {1, 2, 5});
  add_value(c.mutable_graph()->mutable_input(), "w", onnx::TensorProto::FLOAT, {2, 2, 1});
  add_value(c.mutable_graph()->mutable_output(), "y", onnx::TensorProto::FLOAT, {1, 2, 5});
  attr_string(add_ms_node(c, "FusedConv", {"x", "w"}, {"y"}), "activation", "Softplus");
  expect_error([&] { load(c); }, ErrorCode::Unsupported, "activation 'Softplus' is not lowered");
}

TEST(ModelIo, FormatsAndMissingFile) {
  EXPECT_EQ(model_format_from_path("a/b.onnx"), ModelFormat::Onnx);
  EXPECT_EQ(model_format_from_path("b.HDSS"), ModelFormat::Hdss);
  EXPECT_EQ(model_format_from_path("b.hodu"), ModelFormat::HoduScript);
  expect_error([] { model_format_from_path("b.txt"); }, ErrorCode::InvalidArgument, "b.txt");
  EXPECT_EQ(model_format_from_bytes("model m {\n}\n"), ModelFormat::HoduScript);
  expect_error([] { load_model("/nonexistent/dir/m.onnx"); }, ErrorCode::Io, "/nonexistent/dir/m.onnx");

  std::string dir = tmp_dir();
  auto m = make_model(13);
  add_value(m.mutable_graph()->mutable_input(), "x", onnx::TensorProto::FLOAT, {3});
  add_value(m.mutable_graph()->mutable_output(), "y", onnx::TensorProto::FLOAT, {3});
  add_node(m, "Relu", {"x"}, {"y"});
  {
    std::ofstream f(dir + "/m.onnx", std::ios::binary);
    f << m.SerializeAsString();
  }
  Model model = load_model(dir + "/m.onnx");
  save_model(model, dir + "/out.onnx");
  Model again = load_model(dir + "/out.onnx");
  again.ir_version = model.ir_version;
  again.opset_imports = model.opset_imports;
  EXPECT_TRUE(again == model);
  // A corrupt file names the path.
  {
    std::ofstream f(dir + "/bad.onnx", std::ios::binary);
    f << std::string("\x0a\xff\xff\xff", 4);
  }
  expect_error([&] { load_model(dir + "/bad.onnx"); }, ErrorCode::InvalidModel, dir + "/bad.onnx");
  fs::remove_all(dir);
}

// A file's weights are held once while it loads: the file is read through a small buffer into
// the protobuf's strings, which the tensors then take over (a mapping parsed in place held
// the file's pages too: peak 2x the weights, 130 MiB here).
TEST(ModelIo, LoadingAFileHoldsItsWeightsOnce) {
  std::string dir = tmp_dir();
  const int64_t n = 16 << 20;  // 64 MiB of floats
  {
    auto m = make_model(17);
    add_value(m.mutable_graph()->mutable_input(), "x", onnx::TensorProto::FLOAT, {n});
    add_value(m.mutable_graph()->mutable_output(), "y", onnx::TensorProto::FLOAT, {n});
    auto* w = m.mutable_graph()->add_initializer();
    w->set_name("w");
    w->set_data_type(onnx::TensorProto::FLOAT);
    w->add_dims(n);
    w->mutable_raw_data()->assign(static_cast<size_t>(n) * 4, '\x01');
    add_node(m, "Add", {"x", "w"}, {"y"});
    std::ofstream f(dir + "/big.onnx", std::ios::binary);
    f << m.SerializeAsString();
  }
  if (!reset_peak_rss()) GTEST_SKIP() << "this kernel does not let a process reset its peak memory";
  long before = static_cast<long>(peak_rss_bytes() >> 20);
  Model model = load_model(dir + "/big.onnx");
  long grew_mib = static_cast<long>(peak_rss_bytes() >> 20) - before;
  ASSERT_NE(model.graph.initializer("w"), nullptr);
  EXPECT_EQ(model.graph.initializer("w")->nbytes(), static_cast<size_t>(n) * 4);
  // Protobuf grows a string read from a stream by doubling: the last step briefly holds 1.5x.
  EXPECT_LT(grew_mib, 64 * 7 / 4) << "peak memory while loading a 64 MiB model grew by " << grew_mib << " MiB";
  fs::remove_all(dir);
}

// ---- round trip over the ONNX backend test corpus ----------------------------

namespace {

std::string corpus_dir() {
  const char* src = std::getenv("HODU_SOURCE_DIR");
  fs::path p = src ? fs::path(src) / ".." / "shared" / "onnx-tests" : fs::path("/work/shared/onnx-tests");
  return p.string();
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

// ONNX → IR → ONNX → IR gives the same Model (ir_version/opset as written
// excepted). Set HODU_ONNX_EXPORT_DIR to also keep the exported files, for
// tests/formats/check_onnx_export.py.
TEST(OnnxRoundTrip, BackendTestCorpus) {
  std::string root = corpus_dir();
  if (!fs::is_directory(root)) GTEST_SKIP() << "ONNX test corpus not found at " << root;
  const char* keep = std::getenv("HODU_ONNX_EXPORT_DIR");
  std::vector<fs::path> files;
  for (const auto& e : fs::recursive_directory_iterator(root))
    if (e.is_regular_file() && e.path().extension() == ".onnx") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  int ok = 0, import_failed = 0, unsupported = 0, export_failed = 0, mismatched = 0;
  std::vector<std::string> problems;
  for (const auto& f : files) {
    std::string what = fs::relative(f, root).string();
    Model a;
    try {
      a = import_onnx(slurp(f), f.parent_path().string(), what);
    } catch (const Error& e) {
      // Element types hodu does not have (int2/uint2) are a clean refusal.
      if (e.code() == ErrorCode::Unsupported) ++unsupported;
      else ++import_failed;
      problems.push_back(std::string("import: ") + e.what());
      continue;
    }
    std::string bytes;
    Model b;
    try {
      bytes = export_onnx(a, 0);
      b = import_onnx(bytes, f.parent_path().string(), what + " (exported)");
    } catch (const Error& e) {
      ++export_failed;
      problems.push_back(std::string("export: ") + what + ": " + e.what());
      continue;
    }
    b.ir_version = a.ir_version;
    Model b2 = b;
    b.opset_imports = a.opset_imports;
    if (!(a == b)) {
      ++mismatched;
      problems.push_back("round trip differs: " + what);
      continue;
    }
    // A second trip from the exported opset is exact (opsets included).
    Model c = import_onnx(export_onnx(b2, 0), ".", what + " (twice)");
    c.ir_version = b2.ir_version;
    if (!(c == b2)) {
      ++mismatched;
      problems.push_back("second round trip differs: " + what);
      continue;
    }
    ++ok;
    if (keep) {
      std::string name = what;
      for (auto& ch : name)
        if (ch == '/') ch = '_';
      std::ofstream(fs::path(keep) / name, std::ios::binary) << bytes;
    }
  }
  std::cout << "ONNX round trip: " << ok << " / " << files.size() << " models (unsupported " << unsupported
            << ", import failed " << import_failed << ", export failed " << export_failed << ", mismatched " << mismatched << ")\n";
  for (size_t k = 0; k < problems.size() && k < 40; ++k) std::cout << "  " << problems[k] << "\n";
  EXPECT_GE(files.size(), 1800u) << "the corpus shrank";
  EXPECT_EQ(mismatched, 0);
  EXPECT_EQ(export_failed, 0);
  EXPECT_EQ(import_failed, 0);
  EXPECT_LE(unsupported, 40);
}
