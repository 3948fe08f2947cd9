// ImageDecoder: the hand-written BMP and PNM parsers on small handmade images,
// the Grayscale/BGR conversions, and clean InvalidArgument errors for corrupt or
// truncated streams of every format (cut from the conformance images).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "engines/interp/ops/kernel_test_util.h"
#include "formats/onnx_tensor.h"

namespace hodu::interp {
namespace {

using testing::run_kernel1;

Tensor bytes_of(const std::string& s) {
  return Tensor::from_bytes(DType::U8, {static_cast<int64_t>(s.size())}, s.data(), s.size());
}

Tensor decode(const std::string& stream, const std::string& format = "RGB") {
  return run_kernel1("ImageDecoder", {bytes_of(stream)}, {Attribute::make_string("pixel_format", format)});
}

std::vector<int64_t> values(const Tensor& t) { return t.to_int64s(); }

void put32(std::string& s, size_t at, uint32_t v) {
  for (int k = 0; k < 4; ++k) s[at + k] = static_cast<char>((v >> (8 * k)) & 0xFF);
}

// A BITMAPINFOHEADER bitmap: `rows` are given top to bottom, stored as the header says.
std::string bmp(int32_t w, int32_t h, int bpp, const std::string& palette, const std::string& pixel_rows) {
  std::string s(54, '\0');
  s[0] = 'B';
  s[1] = 'M';
  put32(s, 10, static_cast<uint32_t>(54 + palette.size()));
  put32(s, 14, 40);
  put32(s, 18, static_cast<uint32_t>(w));
  put32(s, 22, static_cast<uint32_t>(h));
  s[26] = 1;
  s[28] = static_cast<char>(bpp);
  put32(s, 46, static_cast<uint32_t>(palette.size() / 4));
  s += palette + pixel_rows;
  put32(s, 2, static_cast<uint32_t>(s.size()));
  return s;
}

TEST(ImageDecoder, Bmp24BottomUpWithRowPadding) {
  // 2x2, rows stored bottom-up as BGR, each padded from 6 to 8 bytes.
  std::string bottom = std::string("\x00\x00\xFF\x00\xFF\x00", 6) + std::string(2, '\0');  // red, green
  std::string top = std::string("\xFF\x00\x00\x10\x20\x30", 6) + std::string(2, '\0');     // blue, (48,32,16)
  Tensor t = decode(bmp(2, 2, 24, "", bottom + top));
  EXPECT_EQ(t.shape(), (std::vector<int64_t>{2, 2, 3}));
  EXPECT_EQ(values(t), (std::vector<int64_t>{0, 0, 255, 48, 32, 16, 255, 0, 0, 0, 255, 0}));
}

TEST(ImageDecoder, Bmp8BitPaletteTopDown) {
  std::string palette = std::string("\x00\x00\x00\x00\xFF\xFF\xFF\x00\x00\x80\xFF\x00", 12);  // black, white, orange
  std::string rows = std::string("\x02\x01\x00\x00", 4) + std::string("\x00\x02\x00\x00", 4);
  Tensor t = decode(bmp(2, -2, 8, palette, rows));
  EXPECT_EQ(values(t), (std::vector<int64_t>{255, 128, 0, 255, 255, 255, 0, 0, 0, 255, 128, 0}));
}

TEST(ImageDecoder, PnmVariants) {
  EXPECT_EQ(values(decode(std::string("P6\n2 1\n255\n\x01\x02\x03\xFA\xFB\xFC", 17))),
            (std::vector<int64_t>{1, 2, 3, 250, 251, 252}));
  // Gray, with a comment; gray becomes three equal channels.
  EXPECT_EQ(values(decode(std::string("P5 # size next\n1 2 255\n\x07\x09", 25))),
            (std::vector<int64_t>{7, 7, 7, 9, 9, 9}));
  // ASCII with maxval 15: scaled to 0..255.
  EXPECT_EQ(values(decode("P3\n1 1\n15\n15 0 5\n")), (std::vector<int64_t>{255, 0, 85}));
  // Bitmaps: 1 is black.
  EXPECT_EQ(values(decode("P1\n2 1\n1 0\n")), (std::vector<int64_t>{0, 0, 0, 255, 255, 255}));
  EXPECT_EQ(values(decode(std::string("P4\n3 1\n\xA0", 9))),
            (std::vector<int64_t>{0, 0, 0, 255, 255, 255, 0, 0, 0}));
  // 16-bit samples.
  EXPECT_EQ(values(decode(std::string("P5\n1 1\n65535\n\xFF\xFF", 16))), (std::vector<int64_t>{255, 255, 255}));
}

TEST(ImageDecoder, GrayscaleAndBgr) {
  std::string rgb = std::string("P6\n3 1\n255\n\xFF\x00\x00\x00\xFF\x00\x00\x00\xFF", 20);
  Tensor g = decode(rgb, "Grayscale");
  EXPECT_EQ(g.shape(), (std::vector<int64_t>{1, 3, 1}));
  EXPECT_EQ(values(g), (std::vector<int64_t>{76, 150, 29}));  // Pillow's "L": 0.299 R + 0.587 G + 0.114 B
  EXPECT_EQ(values(decode(rgb, "BGR")), (std::vector<int64_t>{0, 0, 255, 0, 255, 0, 255, 0, 0}));
  // Gray pixels stay what they are.
  EXPECT_EQ(values(decode(std::string("P5\n2 1\n255\n\x00\xC8", 13), "Grayscale")), (std::vector<int64_t>{0, 200}));
}

ErrorCode error_of(const std::function<void()>& f, std::string* message = nullptr) {
  try {
    f();
  } catch (const Error& e) {
    if (message) *message = e.what();
    return e.code();
  }
  ADD_FAILURE() << "no error";
  return ErrorCode::Internal;
}

TEST(ImageDecoder, BadStreamsAndArguments) {
  std::string msg;
  EXPECT_EQ(error_of([&] { decode("hello, world"); }, &msg), ErrorCode::InvalidArgument);
  EXPECT_NE(msg.find("not a JPEG"), std::string::npos) << msg;
  EXPECT_EQ(error_of([&] { decode(std::string("P6\n2 1\n255\n\x01\x02", 13)); }), ErrorCode::InvalidArgument);
  EXPECT_EQ(error_of([&] { decode("P6\n99999999 99999999\n255\n"); }), ErrorCode::InvalidArgument);
  EXPECT_EQ(error_of([&] { decode(bmp(4, 4, 24, "", "short")); }), ErrorCode::InvalidArgument);
  EXPECT_EQ(error_of([&] { decode("P3\n1 1\n15\n99 0 0\n"); }), ErrorCode::InvalidArgument);
  EXPECT_EQ(error_of([&] { decode(std::string("P6\n1 1\n255\n\x01\x02\x03", 14), "HSV"); }), ErrorCode::InvalidModel);
  Tensor f32 = Tensor::from_vector(DType::F32, {1}, std::vector<float>{1});
  EXPECT_EQ(error_of([&] { run_kernel1("ImageDecoder", {f32}); }), ErrorCode::InvalidArgument);
}

// The conformance images cut short must give InvalidArgument naming the format;
// scrambled ones an image or InvalidArgument, never a crash.
TEST(ImageDecoder, CorruptCodecStreams) {
  const char* src = std::getenv("HODU_SOURCE_DIR");
  std::filesystem::path root = std::filesystem::path(src ? src : ".") / ".." / "shared" / "onnx-tests" / "node";
  if (!std::filesystem::exists(root / "test_image_decoder_decode_png_rgb")) GTEST_SKIP() << "no onnx-tests at " << root;
  for (const char* fmt : {"jpeg", "png", "tiff", "webp", "jpeg2k", "bmp", "pnm"}) {
    std::ifstream f(root / (std::string("test_image_decoder_decode_") + fmt + "_rgb") / "test_data_set_0" / "input_0.pb",
                    std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    Tensor t = read_tensor_pb(ss.str(), fmt);
    std::string good(static_cast<const char*>(t.raw_data()), static_cast<size_t>(t.numel()));
    EXPECT_EQ(decode(good).shape(), (std::vector<int64_t>{32, 32, 3})) << fmt;
    for (size_t keep : {good.size() / 2, size_t{20}}) {
      std::string msg;
      EXPECT_EQ(error_of([&] { decode(good.substr(0, keep)); }, &msg), ErrorCode::InvalidArgument) << fmt << " " << keep;
      EXPECT_NE(msg.find("cannot decode"), std::string::npos) << fmt << ": " << msg;
    }
    // Scrambled bytes: either an image of some size or InvalidArgument, never a crash.
    uint32_t state = 99;
    for (int round = 0; round < 200; ++round) {
      std::string bad = good;
      for (int k = 0; k < 4; ++k) {
        state = state * 1664525u + 1013904223u;
        bad[(state >> 8) % bad.size()] = static_cast<char>(state >> 24);
      }
      try {
        Tensor t = decode(bad);
        EXPECT_EQ(t.rank(), 3);
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << fmt << ": " << e.what();
      }
    }
  }
}

}  // namespace
}  // namespace hodu::interp
