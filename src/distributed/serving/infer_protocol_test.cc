// The KServe v2 codec: requests in JSON (flat and nested data) and with the
// binary tensor extension, responses both ways, and every malformed body an
// InvalidArgument that names what is wrong.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "distributed/serving/datatype.h"
#include "distributed/serving/infer_protocol.h"

namespace hodu::serving {
namespace {

std::string error_of(std::string_view body, std::optional<size_t> json_length = std::nullopt) {
  try {
    parse_infer_request(body, json_length);
  } catch (const Error& e) {
    EXPECT_TRUE(e.code() == ErrorCode::InvalidArgument || e.code() == ErrorCode::Unsupported) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error for " << body;
  return "";
}

TEST(Datatype, NamesRoundTrip) {
  for (DType t : {DType::Bool, DType::U8, DType::U16, DType::U32, DType::U64, DType::I8, DType::I16, DType::I32,
                  DType::I64, DType::F16, DType::F32, DType::F64, DType::BF16, DType::String}) {
    auto name = datatype_name(t);
    ASSERT_TRUE(name);
    EXPECT_EQ(parse_datatype(*name), t);
  }
  EXPECT_FALSE(parse_datatype("fp32"));  // case-sensitive
  EXPECT_FALSE(datatype_name(DType::F8E4M3FN));
  EXPECT_EQ(metadata_datatype(DType::F8E4M3FN), "F8E4M3FN");
}

TEST(InferProtocol, JsonRequestFlatAndNested) {
  auto r = parse_infer_request(
      R"({"id":"42","inputs":[{"name":"a","shape":[2,2],"datatype":"UINT32","data":[[1,2],[3,4]]},
          {"name":"b","shape":[3],"datatype":"BOOL","data":[true,false,true]},
          {"name":"c","shape":[2],"datatype":"FP32","data":[0.5,"nan"]},
          {"name":"d","shape":[1],"datatype":"BYTES","data":["hi"]}],
          "outputs":[{"name":"y","parameters":{"binary_data":true}},{"name":"z"}]})",
      std::nullopt);
  ASSERT_EQ(r.id, "42");
  ASSERT_EQ(r.inputs.size(), 4u);
  EXPECT_EQ(r.inputs[0].second.dtype(), DType::U32);
  EXPECT_EQ(r.inputs[0].second.shape(), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(r.inputs[0].second.to_int64s(), (std::vector<int64_t>{1, 2, 3, 4}));
  EXPECT_EQ(r.inputs[1].second.to_int64s(), (std::vector<int64_t>{1, 0, 1}));
  EXPECT_EQ(r.inputs[2].second.data<float>()[0], 0.5f);
  EXPECT_TRUE(std::isnan(r.inputs[2].second.data<float>()[1]));
  EXPECT_EQ(r.inputs[3].second.string_data()[0], "hi");
  ASSERT_EQ(r.outputs.size(), 2u);
  EXPECT_TRUE(r.output_binary(r.outputs[0]));
  EXPECT_FALSE(r.output_binary(r.outputs[1]));
}

TEST(InferProtocol, BinaryRequest) {
  std::string json =
      R"({"inputs":[{"name":"a","shape":[2,2],"datatype":"UINT32","parameters":{"binary_data_size":16}},
          {"name":"b","shape":[3],"datatype":"BOOL","parameters":{"binary_data_size":3}},
          {"name":"s","shape":[2],"datatype":"BYTES","parameters":{"binary_data_size":11}}],
          "parameters":{"binary_data_output":true}})";
  uint32_t a[4] = {1, 2, 3, 0xFFFFFFFFu};
  std::string body = json;
  body.append(reinterpret_cast<const char*>(a), 16);
  body += std::string("\x01\x00\x01", 3);
  uint32_t l1 = 2, l2 = 1;
  body.append(reinterpret_cast<const char*>(&l1), 4);
  body += "ab";
  body.append(reinterpret_cast<const char*>(&l2), 4);
  body += "c";
  auto r = parse_infer_request(body, json.size());
  EXPECT_TRUE(r.binary_data_output);
  EXPECT_EQ(r.inputs[0].second.data<uint32_t>()[3], 0xFFFFFFFFu);
  EXPECT_EQ(r.inputs[1].second.to_int64s(), (std::vector<int64_t>{1, 0, 1}));
  EXPECT_EQ(r.inputs[2].second.string_data()[0], "ab");
  EXPECT_EQ(r.inputs[2].second.string_data()[1], "c");
}

TEST(InferProtocol, MalformedRequestsNameTheProblem) {
  EXPECT_NE(error_of("{\"inputs\": [").find("not valid JSON"), std::string::npos);
  EXPECT_NE(error_of("[1,2]").find("must be a JSON object"), std::string::npos);
  EXPECT_NE(error_of("{}").find("no \"inputs\""), std::string::npos);
  EXPECT_NE(error_of(R"({"inputs":[{"shape":[1],"datatype":"FP32","data":[1]}]})").find("missing \"name\""),
            std::string::npos);
  EXPECT_NE(error_of(R"({"inputs":[{"name":"x","shape":[2],"datatype":"FP32","data":[1]}]})")
                .find("holds 2 elements but \"data\" has 1"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"inputs":[{"name":"x","shape":[1],"datatype":"FLOAT","data":[1]}]})")
                .find("unknown datatype \"FLOAT\""),
            std::string::npos);
  EXPECT_NE(error_of(R"({"inputs":[{"name":"x","shape":[-1],"datatype":"FP32","data":[1]}]})").find("negative dim"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"inputs":[{"name":"x","shape":[1],"datatype":"INT8","data":[300]}]})")
                .find("does not fit INT8"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"inputs":[{"name":"x","shape":[1],"datatype":"INT32","data":[1.5]}]})")
                .find("is not an integer"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":["one"]}]})")
                .find("is not a number"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[1]},
                                    {"name":"x","shape":[1],"datatype":"FP32","data":[1]}]})")
                .find("given twice"),
            std::string::npos);
  // A shape whose element count would not fit memory is refused before anything is allocated.
  EXPECT_NE(error_of(R"({"inputs":[{"name":"x","shape":[4294967296,4294967296],"datatype":"FP32","data":[1]}]})")
                .find("too many elements"),
            std::string::npos);
  // Binary extension.
  std::string json = R"({"inputs":[{"name":"x","shape":[2],"datatype":"FP32","parameters":{"binary_data_size":8}}]})";
  EXPECT_NE(error_of(json).find("no Inference-Header-Content-Length"), std::string::npos);
  EXPECT_NE(error_of(json + "1234", json.size()).find("runs past the end"), std::string::npos);
  EXPECT_NE(error_of(json + "123456789", json.size()).find("add up to 8"), std::string::npos);
  std::string short_json =
      R"({"inputs":[{"name":"x","shape":[3],"datatype":"FP32","parameters":{"binary_data_size":8}}]})";
  EXPECT_NE(error_of(short_json + "12345678", short_json.size()).find("needs 12"), std::string::npos);
  EXPECT_NE(error_of("{}", 5).find("exceeds the body size"), std::string::npos);
  EXPECT_THROW(parse_header_length("12x", 100), Error);
  EXPECT_THROW(parse_header_length("-1", 100), Error);
  EXPECT_THROW(parse_header_length("101", 100), Error);
  EXPECT_EQ(parse_header_length(" 100", 100), 100u);
  std::string bytes_json =
      R"({"inputs":[{"name":"s","shape":[1],"datatype":"BYTES","parameters":{"binary_data_size":6}}]})";
  uint32_t huge = 1000;
  std::string body = bytes_json;
  body.append(reinterpret_cast<const char*>(&huge), 4);
  body += "ab";
  EXPECT_NE(error_of(body, bytes_json.size()).find("claims 1000 bytes"), std::string::npos);
  std::string bool_json = R"({"inputs":[{"name":"b","shape":[1],"datatype":"BOOL","parameters":{"binary_data_size":1}}]})";
  EXPECT_NE(error_of(bool_json + "\x07", bool_json.size()).find("0 or 1 expected"), std::string::npos);
  EXPECT_NE(error_of(R"({"inputs":[],"parameters":{"classification":2}})").find("classification"), std::string::npos);
}

TEST(InferProtocol, ResponseRoundTripsJsonAndBinary) {
  Tensor f = Tensor::from_vector<float>(DType::F32, {2, 2}, {0.1f, -2.5f, NAN, INFINITY});
  Tensor i = Tensor::from_vector<int64_t>(DType::I64, {3}, {-1, 0, int64_t{1} << 40});
  Tensor s = Tensor::from_strings({2}, {"x", std::string("a\0b", 3)});
  Tensor h = Tensor::from_vector<uint16_t>(DType::F16, {1}, {0x3C00});  // 1.0
  for (bool binary : {false, true}) {
    std::vector<ResponseOutput> outs = {{"f", f, binary}, {"i", i, binary}, {"s", s, binary}, {"h", h, binary}};
    EncodedBody e = encode_infer_response("m", "3", std::string("req-1"), outs);
    EXPECT_EQ(e.json_length.has_value(), binary);
    InferResponse r = parse_infer_response(e.body, e.json_length);
    EXPECT_EQ(r.model_name, "m");
    EXPECT_EQ(r.model_version, "3");
    EXPECT_EQ(r.id, "req-1");
    ASSERT_EQ(r.outputs.size(), 4u);
    EXPECT_TRUE(tensors_bitwise_equal(r.outputs[0].second, f)) << "binary=" << binary;
    EXPECT_TRUE(tensors_bitwise_equal(r.outputs[1].second, i));
    EXPECT_EQ(r.outputs[2].second.string_data()[0], "x");
    EXPECT_EQ(r.outputs[2].second.string_data()[1], std::string("a\0b", 3));
    EXPECT_TRUE(tensors_bitwise_equal(r.outputs[3].second, h));
  }
  // JSON floats are the shortest exact form; NaN and infinities are strings.
  EncodedBody e = encode_infer_response("m", "", std::nullopt, {{"f", f, false}});
  EXPECT_NE(e.body.find("[0.1,-2.5,\"nan\",\"inf\"]"), std::string::npos) << e.body;
  EXPECT_EQ(e.body.find("model_version"), std::string::npos);
  EXPECT_EQ(e.body.find("\"id\""), std::string::npos);
}

TEST(InferProtocol, ClientRequestParsesOnTheServerSide) {
  Tensor x = Tensor::from_vector<float>(DType::F32, {1, 3}, {1, 2, 3});
  for (bool binary : {false, true}) {
    EncodedBody e = encode_infer_request({{"x", x}}, binary, {"y"}, binary, std::string("7"));
    InferRequest r = parse_infer_request(e.body, e.json_length);
    EXPECT_EQ(r.id, "7");
    ASSERT_EQ(r.inputs.size(), 1u);
    EXPECT_TRUE(tensors_bitwise_equal(r.inputs[0].second, x));
    ASSERT_EQ(r.outputs.size(), 1u);
    EXPECT_EQ(r.output_binary(r.outputs[0]), binary);
  }
  EncodedBody all = encode_infer_request({{"x", x}}, true, {}, true);
  EXPECT_TRUE(parse_infer_request(all.body, all.json_length).binary_data_output);
}

TEST(InferProtocol, ErrorJsonEscapes) {
  EXPECT_EQ(error_json("bad \"x\"\n"), R"({"error":"bad \"x\"\n"})");
}

}  // namespace
}  // namespace hodu::serving
