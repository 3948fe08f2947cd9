#include "formats/tensor_io.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "core/float_convert.h"
#include "formats/tensor_files.h"

namespace hodu {
namespace {

namespace fs = std::filesystem;
using namespace tensor_files;

// Files written by numpy 1.24 (np.save / np.savez / np.savez_compressed).
// 152 bytes
const std::string kNumpyBigEndianFortranI4(
    "\x93\x4e\x55\x4d\x50\x59\x01\x00\x76\x00\x7b\x27\x64\x65\x73\x63\x72\x27\x3a\x20\x27\x3e\x69\x34\x27\x2c\x20\x27\x66\x6f\x72\x74\x72\x61\x6e\x5f\x6f\x72\x64\x65\x72\x27\x3a\x20\x54\x72\x75\x65\x2c\x20\x27\x73\x68\x61\x70\x65\x27\x3a\x20\x28\x32\x2c\x20\x33\x29\x2c\x20\x7d\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20"
    "\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x0a\x00\x00\x00\x00\x00\x00\x00\x03\x00\x00\x00\x01\x00\x00\x00\x04\x00\x00\x00\x02\x00\x00\x00\x05",
    152);
// 192 bytes
const std::string kNumpyUnicode(
    "\x93\x4e\x55\x4d\x50\x59\x01\x00\x76\x00\x7b\x27\x64\x65\x73\x63\x72\x27\x3a\x20\x27\x3c\x55\x34\x27\x2c\x20\x27\x66\x6f\x72\x74\x72\x61\x6e\x5f\x6f\x72\x64\x65\x72\x27\x3a\x20\x46\x61\x6c\x73\x65\x2c\x20\x27\x73\x68\x61\x70\x65\x27\x3a\x20\x28\x32\x2c\x20\x32\x29\x2c\x20\x7d\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20"
    "\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x0a\x61\x00\x00\x00\x62\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x63\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x78\x00\x00\x00\x79\x00\x00\x00\x7a\x00\x00\x00\xe9\x00\x00\x00",
    192);
// 138 bytes
const std::string kNumpyBytes(
    "\x93\x4e\x55\x4d\x50\x59\x01\x00\x76\x00\x7b\x27\x64\x65\x73\x63\x72\x27\x3a\x20\x27\x7c\x53\x35\x27\x2c\x20\x27\x66\x6f\x72\x74\x72\x61\x6e\x5f\x6f\x72\x64\x65\x72\x27\x3a\x20\x46\x61\x6c\x73\x65\x2c\x20\x27\x73\x68\x61\x70\x65\x27\x3a\x20\x28\x32\x2c\x29\x2c\x20\x7d\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20"
    "\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x0a\x68\x69\x00\x00\x00\x74\x68\x65\x72\x65",
    138);
// 426 bytes
const std::string kNumpySavezCompressed(
    "\x50\x4b\x03\x04\x14\x00\x00\x00\x08\x00\x00\x00\x21\x00\x2d\x6f\x22\x26\x66\x00\x00\x00\xb0\x00\x00\x00\x0b\x00\x14\x00\x77\x65\x69\x67\x68\x74\x73\x2e\x6e\x70\x79\x01\x00\x10\x00\xb0\x00\x00\x00\x00\x00\x00\x00\x66\x00\x00\x00\x00\x00\x00\x00\x9b\xec\x17\xea\x1b\x10\xc9\xc8\x50\xc6\x50\xad\x9e\x92\x5a\x9c\x5c\xa4\x6e\xa5\xa0\x6e\x93\x66\xa2\xae\xa3\xa0\x9e\x96\x5f\x54\x52\x94\x98\x17\x9f\x5f\x94"
    "\x92\x0a\x12\x77\x4b\xcc\x29\x4e\x05\x8a\x17\x67\x24\x16\xa4\x02\xf9\x1a\xc6\x3a\x0a\x26\x9a\x3a\x0a\xb5\x0a\x64\x03\x2e\x06\x30\x68\xb0\x07\x12\x0e\x40\x04\xc4\x0d\x40\xbc\x00\x88\x0f\x00\xf1\x03\x20\x66\x70\x64\x60\x10\x00\x62\x05\x20\x36\x70\x04\x00\x50\x4b\x03\x04\x14\x00\x00\x00\x08\x00\x00\x00\x21\x00\xee\x19\xbb\x5d\x46\x00\x00\x00\x82\x00\x00\x00\x09\x00\x14\x00\x66\x6c\x61\x67\x73\x2e\x6e"
    "\x70\x79\x01\x00\x10\x00\x82\x00\x00\x00\x00\x00\x00\x00\x46\x00\x00\x00\x00\x00\x00\x00\x9b\xec\x17\xea\x1b\x10\xc9\xc8\x50\xc6\x50\xad\x9e\x92\x5a\x9c\x5c\xa4\x6e\xa5\xa0\x5e\x93\x64\xa8\xae\xa3\xa0\x9e\x96\x5f\x54\x52\x94\x98\x17\x9f\x5f\x94\x92\x0a\x12\x77\x4b\xcc\x29\x4e\x05\x8a\x17\x67\x24\x16\xa4\x02\xf9\x1a\x46\x3a\x9a\x3a\x0a\xb5\x0a\x14\x00\x2e\x46\x06\x00\x50\x4b\x01\x02\x14\x03\x14\x00"
    "\x00\x00\x08\x00\x00\x00\x21\x00\x2d\x6f\x22\x26\x66\x00\x00\x00\xb0\x00\x00\x00\x0b\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x80\x01\x00\x00\x00\x00\x77\x65\x69\x67\x68\x74\x73\x2e\x6e\x70\x79\x50\x4b\x01\x02\x14\x03\x14\x00\x00\x00\x08\x00\x00\x00\x21\x00\xee\x19\xbb\x5d\x46\x00\x00\x00\x82\x00\x00\x00\x09\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x80\x01\xa3\x00\x00\x00\x66\x6c\x61\x67\x73"
    "\x2e\x6e\x70\x79\x50\x4b\x05\x06\x00\x00\x00\x00\x02\x00\x02\x00\x70\x00\x00\x00\x24\x01\x00\x00\x00\x00",
    426);
// 502 bytes
const std::string kNumpySavez(
    "\x50\x4b\x03\x04\x14\x00\x00\x00\x00\x00\x00\x00\x21\x00\xb3\xc1\x82\x0c\x84\x00\x00\x00\x84\x00\x00\x00\x05\x00\x14\x00\x78\x2e\x6e\x70\x79\x01\x00\x10\x00\x84\x00\x00\x00\x00\x00\x00\x00\x84\x00\x00\x00\x00\x00\x00\x00\x93\x4e\x55\x4d\x50\x59\x01\x00\x76\x00\x7b\x27\x64\x65\x73\x63\x72\x27\x3a\x20\x27\x3c\x66\x32\x27\x2c\x20\x27\x66\x6f\x72\x74\x72\x61\x6e\x5f\x6f\x72\x64\x65\x72\x27\x3a\x20\x46"
    "\x61\x6c\x73\x65\x2c\x20\x27\x73\x68\x61\x70\x65\x27\x3a\x20\x28\x32\x2c\x29\x2c\x20\x7d\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x0a\x00\x3e\x00\xc0\x50\x4b\x03\x04\x14\x00\x00\x00\x00\x00\x00\x00\x21"
    "\x00\x23\xb8\xf0\x6c\x88\x00\x00\x00\x88\x00\x00\x00\x05\x00\x14\x00\x79\x2e\x6e\x70\x79\x01\x00\x10\x00\x88\x00\x00\x00\x00\x00\x00\x00\x88\x00\x00\x00\x00\x00\x00\x00\x93\x4e\x55\x4d\x50\x59\x01\x00\x76\x00\x7b\x27\x64\x65\x73\x63\x72\x27\x3a\x20\x27\x3c\x69\x38\x27\x2c\x20\x27\x66\x6f\x72\x74\x72\x61\x6e\x5f\x6f\x72\x64\x65\x72\x27\x3a\x20\x46\x61\x6c\x73\x65\x2c\x20\x27\x73\x68\x61\x70\x65\x27"
    "\x3a\x20\x28\x29\x2c\x20\x7d\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x0a\x07\x00\x00\x00\x00\x00\x00\x00\x50\x4b\x01\x02\x14\x03\x14\x00\x00\x00\x00\x00\x00\x00\x21\x00\xb3\xc1\x82\x0c\x84\x00"
    "\x00\x00\x84\x00\x00\x00\x05\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x80\x01\x00\x00\x00\x00\x78\x2e\x6e\x70\x79\x50\x4b\x01\x02\x14\x03\x14\x00\x00\x00\x00\x00\x00\x00\x21\x00\x23\xb8\xf0\x6c\x88\x00\x00\x00\x88\x00\x00\x00\x05\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x80\x01\xbb\x00\x00\x00\x79\x2e\x6e\x70\x79\x50\x4b\x05\x06\x00\x00\x00\x00\x02\x00\x02\x00\x66\x00\x00\x00\x7a\x01\x00\x00"
    "\x00\x00",
    502);

class TensorFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / fmt::format("hodu_tensor_io_test_{}", getpid());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string write_bytes(const std::string& name, std::string_view bytes) const {
    std::ofstream(path(name), std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return path(name);
  }
  fs::path dir_;
};

// Expects `fn` to throw a hodu::Error whose message names `what`.
template <typename Fn>
void expect_error(Fn&& fn, ErrorCode code, const std::string& what) {
  try {
    fn();
    ADD_FAILURE() << "no error for " << what;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

// Every prefix and many corruptions of a valid file must give a hodu::Error or
// a tensor, never a crash or another exception.
template <typename Reader>
void expect_robust(const std::string& valid, Reader&& read) {
  for (size_t len = 0; len < valid.size(); ++len) {
    try {
      read(std::string_view(valid).substr(0, len));
    } catch (const Error&) {
    }
  }
  std::mt19937 rng(7);
  for (int round = 0; round < 300; ++round) {
    std::string bad = valid;
    for (int k = 0; k < 3; ++k) bad[rng() % bad.size()] = static_cast<char>(rng());
    try {
      read(bad);
    } catch (const Error&) {
    }
  }
}

NamedTensors sample_tensors() {
  return {
      {"weights", Tensor::from_vector<float>(DType::F32, {2, 3}, {0.1f, -2.5f, 3, NAN, INFINITY, -0.0f})},
      {"ids", Tensor::from_vector<int64_t>(DType::I64, {4}, {1, -2, int64_t{1} << 60, INT64_MIN})},
      {"mask", Tensor::from_vector<uint8_t>(DType::Bool, {2}, {1, 0})},
      {"half", Tensor::from_vector<uint16_t>(DType::F16, {3}, {f32_to_f16(1.5f), f32_to_f16(-65504.0f), 0x7C00})},
      {"scalar", Tensor::scalar<uint8_t>(DType::U8, 200)},
      {"empty", Tensor::empty(DType::F64, {0, 3})},
  };
}

void expect_same(const NamedTensors& got, const NamedTensors& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].first, want[i].first);
    EXPECT_TRUE(tensors_bitwise_equal(got[i].second, want[i].second))
        << want[i].first << ": " << got[i].second.type_string() << " vs " << want[i].second.type_string();
  }
}

// ---- dispatch -------------------------------------------------------------------

TEST_F(TensorFiles, FormatFromExtension) {
  EXPECT_EQ(tensor_format_from_path("a/b.NPY"), TensorFormat::Npy);
  EXPECT_EQ(tensor_format_from_path("x.safetensors"), TensorFormat::Safetensors);
  EXPECT_EQ(tensor_format_from_path("x.gguf"), TensorFormat::Gguf);
  EXPECT_STREQ(tensor_format_extension(TensorFormat::Hdt), ".hdt");
  expect_error([] { tensor_format_from_path("model.txt"); }, ErrorCode::InvalidArgument, "model.txt");
  expect_error([&] { read_tensor_file(path("missing.npy")); }, ErrorCode::Io, "missing.npy");
}

TEST_F(TensorFiles, SingleTensorFormatsNeedOne) {
  expect_error([&] { write_tensor_file(path("two.npy"), sample_tensors()); }, ErrorCode::InvalidArgument, "two.npy");
  write_tensor_file(path("two.npz"), sample_tensors());
  expect_error([&] { read_single_tensor(path("two.npz")); }, ErrorCode::InvalidArgument, "two.npz");
  expect_error([&] { write_tensor_file(path("x.gguf"), sample_tensors()); }, ErrorCode::Unsupported, "x.gguf");
}

// ---- round trips ---------------------------------------------------------------------

TEST_F(TensorFiles, RoundTripNamedFormats) {
  for (const char* ext : {".npz", ".hdt", ".json", ".safetensors"}) {
    SCOPED_TRACE(ext);
    std::string p = path(std::string("all") + ext);
    write_tensor_file(p, sample_tensors());
    expect_same(read_tensor_file(p), sample_tensors());
  }
}

TEST_F(TensorFiles, RoundTripSingleFormats) {
  for (const auto& [name, t] : sample_tensors()) {
    SCOPED_TRACE(name);
    write_tensor_file(path("one.npy"), {{name, t}});
    auto npy = read_tensor_file(path("one.npy"));
    ASSERT_EQ(npy.size(), 1u);
    EXPECT_EQ(npy[0].first, "");  // .npy has no name
    EXPECT_TRUE(tensors_bitwise_equal(npy[0].second, t));
    write_tensor_file(path("one.pb"), {{name, t}});
    expect_same(read_tensor_file(path("one.pb")), {{name, t}});  // .pb keeps the name
  }
}

TEST_F(TensorFiles, HodusOwnTypesInHdtAndJson) {
  Tensor i4 = Tensor::empty(DType::I4, {3});
  i4.set_double(0, -8);
  i4.set_double(1, 7);
  i4.set_double(2, -1);
  NamedTensors tensors = {
      {"bf16", Tensor::from_vector<uint16_t>(DType::BF16, {2}, {0x3F80, 0xFFC0})},
      {"f8", Tensor::from_vector<uint8_t>(DType::F8E4M3FN, {3}, {0x38, 0x7E, 0x7F})},
      {"e8m0", Tensor::from_vector<uint8_t>(DType::F8E8M0, {3}, {0x00, 0x7F, 0xFE})},
      {"i4", i4},
      {"c64", Tensor::from_vector<float>(DType::C64, {2}, {1, -1, 0.5f, 2})},
      {"u64", Tensor::from_vector<uint64_t>(DType::U64, {1}, {~uint64_t{0}})},
      {"text", Tensor::from_strings({2}, {"héllo", std::string("a\0b", 3)})},
  };
  for (const char* ext : {".hdt", ".json"}) {
    SCOPED_TRACE(ext);
    write_tensor_file(path(std::string("own") + ext), tensors);
    expect_same(read_tensor_file(path(std::string("own") + ext)), tensors);
  }
  // .npy has no dtype for bf16 / float8 / 4-bit: refused, not written as raw bytes.
  expect_error([&] { write_tensor_file(path("bf16.npy"), {tensors[0]}); }, ErrorCode::Unsupported, "bf16");
  // safetensors knows bf16 and float8 but not 4-bit or strings.
  write_tensor_file(path("st.safetensors"), {tensors[0], tensors[1], tensors[2]});
  expect_same(read_tensor_file(path("st.safetensors")), {tensors[0], tensors[1], tensors[2]});
  expect_error([&] { write_tensor_file(path("s.safetensors"), {tensors[6]}); }, ErrorCode::Unsupported, "text");
}

TEST_F(TensorFiles, ViewsAreWrittenInLogicalOrder) {
  Tensor t = Tensor::from_vector<float>(DType::F32, {2, 3}, {0, 1, 2, 3, 4, 5}).permute({1, 0});
  for (const char* ext : {".npy", ".hdt", ".json", ".safetensors", ".pb"}) {
    SCOPED_TRACE(ext);
    write_tensor_file(path(std::string("view") + ext), {{"t", t}});
    Tensor back = read_tensor_file(path(std::string("view") + ext))[0].second;
    EXPECT_EQ(back.to_doubles(), (std::vector<double>{0, 3, 1, 4, 2, 5}));
  }
}

// ---- .npy ----------------------------------------------------------------------------

TEST_F(TensorFiles, NpyHeaderLayout) {
  std::string bytes = write_npy(Tensor::from_vector<float>(DType::F32, {2, 3}, {1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  size_t header_len = static_cast<uint8_t>(bytes[8]) | static_cast<uint8_t>(bytes[9]) << 8;
  EXPECT_EQ((10 + header_len) % 64, 0u);
  EXPECT_EQ(bytes.substr(10, 59), "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }");
  EXPECT_EQ(bytes.size(), 10 + header_len + 24);
  std::string one = write_npy(Tensor::from_vector<int32_t>(DType::I32, {1}, {5}));
  EXPECT_NE(one.find("'shape': (1,)"), std::string::npos);
  std::string scalar = write_npy(Tensor::scalar<double>(DType::F64, 2.0));
  EXPECT_NE(scalar.find("'shape': ()"), std::string::npos);
}

TEST_F(TensorFiles, NpyFromNumpy) {
  Tensor t = read_npy(kNumpyBigEndianFortranI4, "be.npy");
  EXPECT_EQ(t.dtype(), DType::I32);
  EXPECT_EQ(t.shape(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(t.to_int64s(), (std::vector<int64_t>{0, 1, 2, 3, 4, 5}));
  Tensor u = read_npy(kNumpyUnicode, "u.npy");
  EXPECT_EQ(u.dtype(), DType::String);
  EXPECT_EQ(u.shape(), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(u.string_data()[0], "ab");
  EXPECT_EQ(u.string_data()[2], "");
  EXPECT_EQ(u.string_data()[3], "xyz\xc3\xa9");
  Tensor b = read_npy(kNumpyBytes, "b.npy");
  EXPECT_EQ(b.string_data()[0], "hi");
  EXPECT_EQ(b.string_data()[1], "there");
  // Strings written by hodu read back.
  EXPECT_TRUE(tensors_bitwise_equal(read_npy(write_npy(u), "u2.npy"), u));
}

std::string npy_with_header(const std::string& dict, std::string_view data, char major = 1) {
  std::string header = dict + "\n";
  std::string out = std::string("\x93NUMPY", 6) + major + '\0';
  if (major == 1) append_le<uint16_t>(out, static_cast<uint16_t>(header.size()));
  else append_le<uint32_t>(out, static_cast<uint32_t>(header.size()));
  return out + header + std::string(data);
}

TEST_F(TensorFiles, NpyVersionsAndFortranOrder) {
  std::string data(16, '\0');
  for (int i = 0; i < 4; ++i) data[i * 4] = static_cast<char>(i);  // <i4 0 1 2 3
  std::string v2 = npy_with_header("{'descr': '<i4', 'fortran_order': True, 'shape': (2, 2)}", data, 2);
  EXPECT_EQ(read_npy(v2, "v2.npy").to_int64s(), (std::vector<int64_t>{0, 2, 1, 3}));
  std::string v3 = npy_with_header("{\"descr\": \"<i4\", \"fortran_order\": False, \"shape\": (4,)}", data, 3);
  EXPECT_EQ(read_npy(v3, "v3.npy").to_int64s(), (std::vector<int64_t>{0, 1, 2, 3}));
  std::string c16 = npy_with_header("{'descr': '>c16', 'fortran_order': False, 'shape': ()}",
                                    std::string("\x3f\xf0\0\0\0\0\0\0\xc0\0\0\0\0\0\0\0", 16));
  Tensor c = read_npy(c16, "c.npy");
  EXPECT_EQ(c.dtype(), DType::C128);
  double parts[2];
  std::memcpy(parts, c.raw_data(), sizeof parts);
  EXPECT_EQ(parts[0], 1.0);
  EXPECT_EQ(parts[1], -2.0);
}

TEST_F(TensorFiles, NpyMalformed) {
  const std::string good = npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2,)}",
                                           std::string(8, '\0'));
  expect_error([] { read_npy("not numpy", "f.npy"); }, ErrorCode::InvalidArgument, "f.npy");
  std::string v9 = good;
  v9[6] = 9;
  expect_error([&] { read_npy(v9, "v9.npy"); }, ErrorCode::InvalidArgument, "v9.npy");
  expect_error([&] { read_npy(good.substr(0, good.size() - 1), "short.npy"); }, ErrorCode::InvalidArgument,
               "short.npy");
  expect_error([&] { read_npy(good + "x", "long.npy"); }, ErrorCode::InvalidArgument, "long.npy");
  auto header_case = [](const std::string& dict) {
    return npy_with_header(dict, std::string(8, '\0'));
  };
  expect_error([&] { read_npy(header_case("{'descr': '<f4', 'shape': (2,)}"), "h1.npy"); },
               ErrorCode::InvalidArgument, "h1.npy");
  expect_error([&] { read_npy(header_case("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}"),
                              "h2.npy"); },
               ErrorCode::InvalidArgument, "h2.npy");
  expect_error([&] { read_npy(header_case("{'descr': '<f4', 'fortran_order': maybe, 'shape': (2,)}"), "h3.npy"); },
               ErrorCode::InvalidArgument, "h3.npy");
  expect_error([&] { read_npy(header_case("{'descr': '<f4', 'fortran_order': False, 'shape': (-2,)}"),
                              "h4.npy"); },
               ErrorCode::InvalidArgument, "h4.npy");
  expect_error([&] { read_npy(header_case("{'descr': '<M8', 'fortran_order': False, 'shape': (2,)}"), "h5.npy"); },
               ErrorCode::Unsupported, "h5.npy");
  expect_error([&] { read_npy(header_case("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,)}"),
                              "h6.npy"); },
               ErrorCode::Unsupported, "h6.npy");
  // Absurd dims: refused before any allocation.
  expect_error([&] { read_npy(header_case("{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000000, "
                                          "1000000000000)}"),
                              "huge.npy"); },
               ErrorCode::InvalidArgument, "huge.npy");
  expect_error([&] { read_npy(header_case("{'descr': '<f4', 'fortran_order': False, 'shape': (100000000000,)}"),
                              "big.npy"); },
               ErrorCode::InvalidArgument, "big.npy");
  // Through a file: the message names the path.
  std::string p = write_bytes("trunc.npy", good.substr(0, 20));
  expect_error([&] { read_tensor_file(p); }, ErrorCode::InvalidArgument, p);
  expect_robust(good, [](std::string_view b) { read_npy(b, "x.npy"); });
  expect_robust(kNumpyUnicode, [](std::string_view b) { read_npy(b, "x.npy"); });
}

// ---- .npz ----------------------------------------------------------------------------

TEST_F(TensorFiles, NpzFromNumpy) {
  NamedTensors c = read_npz(kNumpySavezCompressed, "c.npz");
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].first, "weights");
  EXPECT_EQ(c[0].second.shape(), (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(c[0].second.get_double(11), 11.0);
  EXPECT_EQ(c[1].first, "flags");
  EXPECT_EQ(c[1].second.to_int64s(), (std::vector<int64_t>{1, 0}));
  NamedTensors s = read_npz(kNumpySavez, "s.npz");
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].second.dtype(), DType::F16);
  EXPECT_EQ(s[0].second.to_doubles(), (std::vector<double>{1.5, -2}));
  EXPECT_EQ(s[1].second.rank(), 0);
  EXPECT_EQ(s[1].second.get_int64(0), 7);
}

TEST_F(TensorFiles, NpzMalformed) {
  expect_error([] { read_npz("PK nonsense", "z.npz"); }, ErrorCode::InvalidArgument, "z.npz");
  std::string corrupt = kNumpySavez;
  corrupt[100] ^= 0x55;  // inside the first entry's data: CRC mismatch or a bad npy header
  expect_error([&] { read_npz(corrupt, "crc.npz"); }, ErrorCode::InvalidArgument, "crc.npz");
  expect_robust(kNumpySavez, [](std::string_view b) { read_npz(b, "x.npz"); });
  expect_robust(kNumpySavezCompressed, [](std::string_view b) { read_npz(b, "x.npz"); });
  expect_robust(write_npz(sample_tensors()), [](std::string_view b) { read_npz(b, "x.npz"); });
}

// ---- .hdt ----------------------------------------------------------------------------

TEST_F(TensorFiles, HdtLayout) {
  std::string bytes = write_hdt(sample_tensors());
  EXPECT_EQ(bytes.substr(0, 4), "HDT1");
  uint32_t version;
  uint64_t count, data_offset;
  std::memcpy(&version, bytes.data() + 4, 4);
  std::memcpy(&count, bytes.data() + 8, 8);
  std::memcpy(&data_offset, bytes.data() + 16, 8);
  EXPECT_EQ(version, 1u);
  EXPECT_EQ(count, sample_tensors().size());
  EXPECT_EQ(data_offset % 64, 0u);
  EXPECT_EQ(bytes.size() % 64, 0u);
  // The first tensor's f32 data sits right at the data offset.
  float first;
  std::memcpy(&first, bytes.data() + data_offset, 4);
  EXPECT_EQ(first, 0.1f);
}

TEST_F(TensorFiles, HdtMalformed) {
  std::string good = write_hdt(sample_tensors());
  expect_error([] { read_hdt("HDT", "a.hdt"); }, ErrorCode::InvalidArgument, "a.hdt");
  expect_error([] { read_hdt("NOPE0000000000000000000000", "b.hdt"); }, ErrorCode::InvalidArgument, "b.hdt");
  std::string v2 = good;
  v2[4] = 2;
  expect_error([&] { read_hdt(v2, "v2.hdt"); }, ErrorCode::Unsupported, "v2.hdt");
  std::string many = good;
  many[15] = 0x7F;  // tensor count 2^63-ish
  expect_error([&] { read_hdt(many, "many.hdt"); }, ErrorCode::InvalidArgument, "many.hdt");
  // A huge dim in the first entry (after name "weights", dtype "f32", rank).
  std::string huge = good;
  size_t dim_at = 24 + 4 + 7 + 1 + 3 + 4;
  int64_t absurd = int64_t{1} << 62;
  std::memcpy(huge.data() + dim_at, &absurd, 8);
  expect_error([&] { read_hdt(huge, "huge.hdt"); }, ErrorCode::InvalidArgument, "huge.hdt");
  expect_robust(good, [](std::string_view b) { read_hdt(b, "x.hdt"); });
}

// ---- .json ---------------------------------------------------------------------------

TEST_F(TensorFiles, JsonText) {
  Tensor t = Tensor::from_vector<float>(DType::F32, {2}, {0.1f, NAN});
  EXPECT_EQ(tensor_to_json(t), R"({"dtype": "f32", "shape": [2], "data": [0.1, "nan"]})");
  Tensor b = tensor_from_json(R"({"dtype": "bool", "shape": [3], "data": [true, false, 1]})", "b");
  EXPECT_EQ(b.to_int64s(), (std::vector<int64_t>{1, 0, 1}));
  Tensor nested = tensor_from_json(R"({"dtype": "float32", "data": [[1, 2, 3], [4, 5, "-inf"]]})", "n");
  EXPECT_EQ(nested.shape(), (std::vector<int64_t>{2, 3}));
  EXPECT_TRUE(std::isinf(nested.get_double(5)));
  Tensor scalar = tensor_from_json(R"({"dtype": "i64", "data": -5})", "s");
  EXPECT_EQ(scalar.rank(), 0);
  EXPECT_EQ(scalar.get_int64(0), -5);
  Tensor big = tensor_from_json(R"({"dtype": "u64", "shape": [1], "data": [18446744073709551615]})", "u");
  EXPECT_EQ(big.data<uint64_t>()[0], ~uint64_t{0});

  std::string p = write_bytes("named.json", R"({"x": {"dtype": "i32", "shape": [2], "data": [1, 2]},
                                              "y": {"dtype": "string", "shape": [], "data": ["hi"]}})");
  NamedTensors named = read_tensor_file(p);
  ASSERT_EQ(named.size(), 2u);
  EXPECT_EQ(named[0].first, "x");
  EXPECT_EQ(named[1].second.string_data()[0], "hi");
  std::string bare = write_bytes("bare.json", tensor_to_json(t));
  NamedTensors one = read_tensor_file(bare);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].first, "");
  EXPECT_TRUE(tensors_bitwise_equal(one[0].second, t));
}

TEST_F(TensorFiles, JsonMalformed) {
  auto bad = [](const std::string& text, const char* what, ErrorCode code = ErrorCode::InvalidArgument) {
    expect_error([&] { tensor_from_json(text, what); }, code, what);
  };
  bad("{", "syntax");
  bad("[1, 2]", "not-object");
  bad(R"({"dtype": "f99", "data": [1]})", "dtype");
  bad(R"({"dtype": "f32", "shape": [3], "data": [1, 2]})", "count");
  bad(R"({"dtype": "f32", "shape": [-1], "data": []})", "negative");
  bad(R"({"dtype": "i8", "data": [128]})", "range-hi");
  bad(R"({"dtype": "u8", "data": [-1]})", "range-lo");
  bad(R"({"dtype": "i32", "data": [1.5]})", "fraction");
  bad(R"({"dtype": "f32", "data": ["abc"]})", "not-a-number");
  bad(R"({"dtype": "f32", "data": [1], "extra": 2})", "extra-key");
  bad(R"({"dtype": "f32", "data": [[1, 2], [3]], "shape": [2, 2]})", "ragged");
  bad(R"({"dtype": "f32", "shape": [4294967296, 4294967296], "data": []})", "huge");
  bad(std::string(100000, '[') + std::string(100000, ']'), "deep");
  std::string p = write_bytes("bad.json", R"({"x": {"dtype": "f32", "data": [true]}})");
  expect_error([&] { read_tensor_file(p); }, ErrorCode::InvalidArgument, p);
}

// ---- .pb -----------------------------------------------------------------------------

TEST_F(TensorFiles, PbMalformed) {
  std::string p = write_bytes("junk.pb", "\xff\xff\xff\xff\xff");
  expect_error([&] { read_tensor_file(p); }, ErrorCode::InvalidArgument, "junk.pb");
}

// ---- .safetensors --------------------------------------------------------------------

std::string safetensors_file(const std::string& header, std::string_view data) {
  std::string out;
  append_le<uint64_t>(out, header.size());
  return out + header + std::string(data);
}

TEST_F(TensorFiles, SafetensorsByHand) {
  std::string data(8, '\0');
  data[1] = '\x3f';
  data[0] = '\x80';  // bf16 1.0 = 0x3F80
  std::string file = safetensors_file(
      R"({"__metadata__": {"format": "pt"}, "b": {"dtype": "I32", "shape": [1], "data_offsets": [4, 8]},)"
      R"( "a": {"dtype": "BF16", "shape": [2], "data_offsets": [0, 4]}})",
      data);
  NamedTensors t = read_safetensors(file, "h.safetensors");
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].first, "a");  // file order (by offset)
  EXPECT_EQ(t[0].second.get_double(0), 1.0);
  EXPECT_EQ(t[1].second.get_int64(0), 0);
}

TEST_F(TensorFiles, SafetensorsMalformed) {
  std::string good = write_safetensors(sample_tensors());
  expect_error([] { read_safetensors("abc", "a.safetensors"); }, ErrorCode::InvalidArgument, "a.safetensors");
  std::string huge_header;
  append_le<uint64_t>(huge_header, ~uint64_t{0});
  expect_error([&] { read_safetensors(huge_header + "{}", "h.safetensors"); }, ErrorCode::InvalidArgument,
               "h.safetensors");
  expect_error([] { read_safetensors(safetensors_file("{\"a\": 1}", ""), "b.safetensors"); },
               ErrorCode::InvalidArgument, "b.safetensors");
  expect_error([] {
    read_safetensors(safetensors_file(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", "1234"),
                     "c.safetensors");
  }, ErrorCode::InvalidArgument, "c.safetensors");
  expect_error([] {
    read_safetensors(safetensors_file(R"({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})",
                                      "12345678"),
                     "d.safetensors");
  }, ErrorCode::InvalidArgument, "d.safetensors");
  expect_error([] {
    read_safetensors(safetensors_file(R"({"a": {"dtype": "F32", "shape": [4294967296, 4294967296, 16],)"
                                      R"( "data_offsets": [0, 0]}})", ""),
                     "e.safetensors");
  }, ErrorCode::InvalidArgument, "e.safetensors");
  expect_error([] {
    read_safetensors(safetensors_file(R"({"a": {"dtype": "Q4", "shape": [1], "data_offsets": [0, 1]}})", "1"),
                     "f.safetensors");
  }, ErrorCode::Unsupported, "f.safetensors");
  expect_robust(good, [](std::string_view b) { read_safetensors(b, "x.safetensors"); });
}

// ---- .gguf ---------------------------------------------------------------------------

void gguf_string(std::string& out, const std::string& s) {
  append_le<uint64_t>(out, s.size());
  out += s;
}

struct GgufTensor {
  std::string name;
  std::vector<uint64_t> ne;  // ggml order: innermost first
  uint32_t type;
  std::string data;
};

std::string gguf_file(const std::vector<GgufTensor>& tensors, uint32_t version = 3) {
  std::string out = "GGUF";
  append_le<uint32_t>(out, version);
  append_le<uint64_t>(out, tensors.size());
  append_le<uint64_t>(out, 3);  // metadata entries
  gguf_string(out, "general.name");
  append_le<uint32_t>(out, 8);  // string
  gguf_string(out, "test");
  gguf_string(out, "tokenizer.tokens");
  append_le<uint32_t>(out, 9);  // array
  append_le<uint32_t>(out, 8);  // of strings
  append_le<uint64_t>(out, 2);
  gguf_string(out, "a");
  gguf_string(out, "bc");
  gguf_string(out, "general.alignment");
  append_le<uint32_t>(out, 4);  // u32
  append_le<uint32_t>(out, 64);
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    gguf_string(out, t.name);
    append_le<uint32_t>(out, static_cast<uint32_t>(t.ne.size()));
    for (auto d : t.ne) append_le<uint64_t>(out, d);
    append_le<uint32_t>(out, t.type);
    append_le<uint64_t>(out, offset);
    offset = (offset + t.data.size() + 63) / 64 * 64;
  }
  out.resize((out.size() + 63) / 64 * 64, '\0');
  for (const auto& t : tensors) {
    out += t.data;
    out.resize((out.size() + 63) / 64 * 64, '\0');
  }
  return out;
}

std::string raw(const void* p, size_t n) { return std::string(static_cast<const char*>(p), n); }

TEST_F(TensorFiles, GgufReads) {
  float f32[6] = {0, 1, 2, 3, 4, 5};
  uint16_t f16[2] = {f32_to_f16(0.5f), f32_to_f16(-3.0f)};
  std::string q8(34, '\0');
  uint16_t scale = f32_to_f16(0.5f);
  std::memcpy(q8.data(), &scale, 2);
  for (int k = 0; k < 32; ++k) q8[2 + k] = static_cast<char>(k - 16);
  std::string file = gguf_file({{"w", {3, 2}, 0, raw(f32, sizeof f32)},
                                {"h", {2}, 1, raw(f16, sizeof f16)},
                                {"q", {32}, 8, q8}});
  std::string p = write_bytes("m.gguf", file);
  NamedTensors t = read_tensor_file(p);
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[0].first, "w");
  EXPECT_EQ(t[0].second.shape(), (std::vector<int64_t>{2, 3}));  // ggml's ne reversed
  EXPECT_EQ(t[0].second.get_double(4), 4.0);
  EXPECT_EQ(t[1].second.dtype(), DType::F16);
  EXPECT_EQ(t[1].second.to_doubles(), (std::vector<double>{0.5, -3}));
  EXPECT_EQ(t[2].second.dtype(), DType::F32);
  EXPECT_EQ(t[2].second.get_double(0), -8.0);
  EXPECT_EQ(t[2].second.get_double(31), 7.5);
  expect_robust(file, [](std::string_view b) { read_gguf(b, "x.gguf"); });
}

TEST_F(TensorFiles, GgufMalformed) {
  std::string q4(18, '\0');
  expect_error([&] { read_gguf(gguf_file({{"q4", {32}, 2, q4}}), "q4.gguf"); }, ErrorCode::Unsupported, "Q4_0");
  expect_error([] { read_gguf(gguf_file({}, 1), "v1.gguf"); }, ErrorCode::Unsupported, "v1.gguf");
  expect_error([] { read_gguf("GGML", "m.gguf"); }, ErrorCode::InvalidArgument, "m.gguf");
  expect_error([] { read_gguf(gguf_file({{"big", {uint64_t{1} << 40, uint64_t{1} << 40}, 0, ""}}), "big.gguf"); },
               ErrorCode::InvalidArgument, "big.gguf");
  expect_error([] { read_gguf(gguf_file({{"short", {1000}, 0, "abcd"}}), "short.gguf"); },
               ErrorCode::InvalidArgument, "short.gguf");
  std::string many = gguf_file({});
  uint64_t absurd = uint64_t{1} << 60;
  std::memcpy(many.data() + 8, &absurd, 8);
  expect_error([&] { read_gguf(many, "many.gguf"); }, ErrorCode::InvalidArgument, "many.gguf");
}

}  // namespace
}  // namespace hodu
