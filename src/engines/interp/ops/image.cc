// ImageDecoder: an encoded image (1-D uint8) → uint8 [H, W, 3] (RGB or BGR) or
// [H, W, 1] (Grayscale). Formats by their magic bytes: JPEG (libjpeg-turbo),
// PNG (libpng), TIFF (libtiff), WebP (libwebp), JPEG 2000 (openjpeg), and BMP
// and PNM parsed here. Every format decodes to 8-bit RGB first (alpha dropped,
// palettes expanded, 16-bit samples cut to their high byte, as Pillow, ONNX's
// reference, does for RGB); Grayscale then uses Pillow's "L" conversion
// (ITU-R 601-2 luma in 16-bit fixed point), which leaves gray images unchanged.
// One known difference: Pillow clips 16-bit *gray* PNGs to 255 instead of
// taking the high byte; hodu takes the high byte for every 16-bit image.
#include <algorithm>
#include <cctype>
#include <csetjmp>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <jpeglib.h>  // before jerror.h, which needs its types
#include <jerror.h>
#include <openjpeg.h>
#include <png.h>
#include <tiffio.h>
#include <webp/decode.h>

#include "engines/interp/ops/op_utils.h"

namespace hodu::interp {
namespace {

struct Rgb8 {
  int64_t width = 0, height = 0;
  std::vector<uint8_t> pixels;  // row-major, 3 bytes per pixel
  void resize(int64_t w, int64_t h) {
    width = w;
    height = h;
    pixels.assign(static_cast<size_t>(w * h * 3), 0);
  }
};

// Decoders throw this (caught and reported by the kernel as InvalidArgument naming the format).
[[noreturn]] void corrupt(const char* format, const std::string& why) {
  throw Error(ErrorCode::InvalidArgument, fmt::format("cannot decode the {} stream: {}", format, why));
}

constexpr int64_t kMaxPixels = int64_t{1} << 28;  // refuse absurd headers before allocating

void check_size(const char* format, int64_t w, int64_t h) {
  if (w <= 0 || h <= 0 || w > kMaxPixels / h)
    corrupt(format, fmt::format("image size {}x{} is invalid or too large", w, h));
}

// ---- JPEG --------------------------------------------------------------------------

struct JpegError {
  jpeg_error_mgr mgr;
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
  bool truncated;
};

void jpeg_error_exit(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegError*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  longjmp(err->jump, 1);
}
// libjpeg pads a truncated stream with gray and only warns; treat that as corrupt
// (as Pillow does). Other warnings (e.g. extraneous bytes) are tolerated.
void jpeg_on_message(j_common_ptr cinfo, int level) {
  if (level == -1 && cinfo->err->msg_code == JWRN_JPEG_EOF) reinterpret_cast<JpegError*>(cinfo->err)->truncated = true;
}

// libjpeg reports errors by longjmp: this frame holds no C++ objects whose
// destructors a jump could skip (`out` lives in the caller).
bool decode_jpeg_c(const uint8_t* data, size_t size, Rgb8* out, char* message) {
  jpeg_decompress_struct cinfo;
  JpegError err;
  cinfo.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = jpeg_error_exit;
  err.mgr.emit_message = jpeg_on_message;
  err.truncated = false;
  if (setjmp(err.jump)) {
    std::snprintf(message, JMSG_LENGTH_MAX, "%s", err.message);
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(&cinfo, TRUE);
  if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK) {
    std::snprintf(message, JMSG_LENGTH_MAX, "CMYK JPEG images are not supported");
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  cinfo.out_color_space = JCS_RGB;
  jpeg_start_decompress(&cinfo);
  const int64_t w = cinfo.output_width, h = cinfo.output_height;
  if (w <= 0 || h <= 0 || w > kMaxPixels / h) {
    std::snprintf(message, JMSG_LENGTH_MAX, "image size %lldx%lld is invalid or too large", static_cast<long long>(w),
                  static_cast<long long>(h));
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  out->resize(w, h);
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = out->pixels.data() + static_cast<size_t>(cinfo.output_scanline) * static_cast<size_t>(w) * 3;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  if (err.truncated) {
    std::snprintf(message, JMSG_LENGTH_MAX, "the stream is truncated");
    return false;
  }
  return true;
}

Rgb8 decode_jpeg(const uint8_t* data, size_t size) {
  Rgb8 img;
  char message[JMSG_LENGTH_MAX] = {};
  if (!decode_jpeg_c(data, size, &img, message)) corrupt("JPEG", message);
  return img;
}

// ---- PNG ---------------------------------------------------------------------------

struct PngSource {
  const uint8_t* data;
  size_t size, pos;
  char message[256];
};

void png_read_mem(png_structp png, png_bytep dst, png_size_t n) {
  auto* src = static_cast<PngSource*>(png_get_io_ptr(png));
  if (n > src->size - src->pos) png_error(png, "unexpected end of data");
  std::memcpy(dst, src->data + src->pos, n);
  src->pos += n;
}
void png_on_error(png_structp png, png_const_charp msg) {
  auto* src = static_cast<PngSource*>(png_get_error_ptr(png));
  std::snprintf(src->message, sizeof(src->message), "%s", msg);
  png_longjmp(png, 1);
}
void png_on_warning(png_structp, png_const_charp) {}

// Same longjmp discipline as decode_jpeg_c.
bool decode_png_c(PngSource* src, Rgb8* out, std::vector<png_bytep>* rows) {
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, src, png_on_error, png_on_warning);
  if (!png) {
    std::snprintf(src->message, sizeof(src->message), "out of memory");
    return false;
  }
  png_infop info = png_create_info_struct(png);
  if (!info || setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, info ? &info : nullptr, nullptr);
    return false;
  }
  png_set_read_fn(png, src, png_read_mem);
  png_read_info(png, info);
  const png_uint_32 w = png_get_image_width(png, info), h = png_get_image_height(png, info);
  if (w == 0 || h == 0 || static_cast<int64_t>(w) > kMaxPixels / static_cast<int64_t>(h))
    png_error(png, "image size is invalid or too large");
  const int color = png_get_color_type(png, info);
  png_set_strip_16(png);  // high byte, as Pillow's "RGB;16B" unpacking
  png_set_packing(png);
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color == PNG_COLOR_TYPE_GRAY || color == PNG_COLOR_TYPE_GRAY_ALPHA) {
    png_set_expand_gray_1_2_4_to_8(png);
    png_set_gray_to_rgb(png);
  }
  png_set_strip_alpha(png);  // tRNS is not expanded, so no alpha channel appears from it
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  if (png_get_rowbytes(png, info) != static_cast<png_size_t>(w) * 3) png_error(png, "unexpected row layout");
  out->resize(w, h);
  rows->resize(h);
  for (png_uint_32 y = 0; y < h; ++y) (*rows)[y] = out->pixels.data() + static_cast<size_t>(y) * w * 3;
  png_read_image(png, rows->data());
  png_read_end(png, nullptr);
  png_destroy_read_struct(&png, &info, nullptr);
  return true;
}

Rgb8 decode_png(const uint8_t* data, size_t size) {
  PngSource src{data, size, 0, {}};
  Rgb8 img;
  std::vector<png_bytep> rows;
  if (!decode_png_c(&src, &img, &rows)) corrupt("PNG", src.message);
  return img;
}

// ---- TIFF --------------------------------------------------------------------------

struct TiffSource {
  const uint8_t* data;
  toff_t size, pos;
};

tsize_t tiff_read(thandle_t h, tdata_t buf, tsize_t n) {
  auto* s = static_cast<TiffSource*>(h);
  toff_t left = s->pos < s->size ? s->size - s->pos : 0;
  toff_t k = std::min<toff_t>(left, static_cast<toff_t>(n));
  std::memcpy(buf, s->data + s->pos, k);
  s->pos += k;
  return static_cast<tsize_t>(k);
}
tsize_t tiff_write(thandle_t, tdata_t, tsize_t) { return 0; }
toff_t tiff_seek(thandle_t h, toff_t off, int whence) {
  auto* s = static_cast<TiffSource*>(h);
  toff_t base = whence == SEEK_SET ? 0 : whence == SEEK_CUR ? s->pos : s->size;
  s->pos = base + off;
  return s->pos;
}
int tiff_close(thandle_t) { return 0; }
toff_t tiff_size(thandle_t h) { return static_cast<TiffSource*>(h)->size; }
int tiff_map(thandle_t, tdata_t*, toff_t*) { return 0; }
void tiff_unmap(thandle_t, tdata_t, toff_t) {}

thread_local std::string tiff_last_error;
int tiff_on_error(TIFF*, void*, const char* module, const char* f, va_list ap) {
  char buf[512];
  std::vsnprintf(buf, sizeof(buf), f, ap);
  tiff_last_error = std::string(module ? module : "") + (module ? ": " : "") + buf;
  return 1;  // handled: libtiff prints nothing
}
int tiff_on_warning(TIFF*, void*, const char*, const char*, va_list) { return 1; }

Rgb8 decode_tiff(const uint8_t* data, size_t size) {
  TiffSource src{data, static_cast<toff_t>(size), 0};
  tiff_last_error.clear();
  TIFFOpenOptions* opts = TIFFOpenOptionsAlloc();
  TIFFOpenOptionsSetErrorHandlerExtR(opts, tiff_on_error, nullptr);
  TIFFOpenOptionsSetWarningHandlerExtR(opts, tiff_on_warning, nullptr);
  TIFF* tif = TIFFClientOpenExt("memory", "rm", &src, tiff_read, tiff_write, tiff_seek, tiff_close, tiff_size,
                                tiff_map, tiff_unmap, opts);
  TIFFOpenOptionsFree(opts);
  if (!tif) corrupt("TIFF", tiff_last_error.empty() ? "not a TIFF stream" : tiff_last_error);
  uint32_t w = 0, h = 0;
  TIFFGetField(tif, TIFFTAG_IMAGEWIDTH, &w);
  TIFFGetField(tif, TIFFTAG_IMAGELENGTH, &h);
  if (w == 0 || h == 0 || static_cast<int64_t>(w) > kMaxPixels / static_cast<int64_t>(h)) {
    TIFFClose(tif);
    corrupt("TIFF", fmt::format("image size {}x{} is invalid or too large", w, h));
  }
  // The RGBA interface covers every photometric interpretation and bit depth libtiff knows.
  std::vector<uint32_t> raster(static_cast<size_t>(w) * h);
  const int ok = TIFFReadRGBAImageOriented(tif, w, h, raster.data(), ORIENTATION_TOPLEFT, 0);
  TIFFClose(tif);
  if (!ok) corrupt("TIFF", tiff_last_error.empty() ? "cannot read the image data" : tiff_last_error);
  Rgb8 img;
  img.resize(w, h);
  for (size_t i = 0; i < raster.size(); ++i) {
    img.pixels[3 * i] = static_cast<uint8_t>(TIFFGetR(raster[i]));
    img.pixels[3 * i + 1] = static_cast<uint8_t>(TIFFGetG(raster[i]));
    img.pixels[3 * i + 2] = static_cast<uint8_t>(TIFFGetB(raster[i]));
  }
  return img;
}

// ---- WebP --------------------------------------------------------------------------

Rgb8 decode_webp(const uint8_t* data, size_t size) {
  int w = 0, h = 0;
  if (!WebPGetInfo(data, size, &w, &h)) corrupt("WebP", "invalid header");
  check_size("WebP", w, h);
  Rgb8 img;
  img.resize(w, h);
  if (!WebPDecodeRGBInto(data, size, img.pixels.data(), img.pixels.size(), w * 3))
    corrupt("WebP", "invalid or truncated image data");
  return img;
}

// ---- JPEG 2000 -----------------------------------------------------------------------

struct OpjSource {
  const uint8_t* data;
  OPJ_UINT64 size, pos;
};

OPJ_SIZE_T opj_read(void* buf, OPJ_SIZE_T n, void* user) {
  auto* s = static_cast<OpjSource*>(user);
  if (s->pos >= s->size) return static_cast<OPJ_SIZE_T>(-1);
  OPJ_SIZE_T k = static_cast<OPJ_SIZE_T>(std::min<OPJ_UINT64>(n, s->size - s->pos));
  std::memcpy(buf, s->data + s->pos, k);
  s->pos += k;
  return k;
}
OPJ_OFF_T opj_skip(OPJ_OFF_T n, void* user) {
  auto* s = static_cast<OpjSource*>(user);
  if (n < 0) return -1;
  OPJ_UINT64 k = std::min<OPJ_UINT64>(static_cast<OPJ_UINT64>(n), s->size - s->pos);
  s->pos += k;
  return static_cast<OPJ_OFF_T>(k);
}
OPJ_BOOL opj_seek(OPJ_OFF_T n, void* user) {
  auto* s = static_cast<OpjSource*>(user);
  if (n < 0 || static_cast<OPJ_UINT64>(n) > s->size) return OPJ_FALSE;
  s->pos = static_cast<OPJ_UINT64>(n);
  return OPJ_TRUE;
}
void opj_on_error(const char* msg, void* user) {
  auto* last = static_cast<std::string*>(user);
  *last = msg;
  while (!last->empty() && (last->back() == '\n' || last->back() == ' ')) last->pop_back();
}
void opj_quiet(const char*, void*) {}

// One sample scaled to 8 bits (high bits kept, as Pillow does for >8-bit samples).
uint8_t opj_sample8(const opj_image_comp_t& c, size_t i) {
  int64_t v = c.data[i];
  if (c.sgnd) v += int64_t{1} << (c.prec - 1);
  if (c.prec > 8) v >>= (c.prec - 8);
  else if (c.prec < 8) v = v * 255 / ((int64_t{1} << c.prec) - 1);
  return static_cast<uint8_t>(std::clamp<int64_t>(v, 0, 255));
}

Rgb8 decode_jpeg2000(const uint8_t* data, size_t size, bool codestream) {
  OpjSource src{data, size, 0};
  std::string last_error;
  opj_stream_t* stream = opj_stream_create(OPJ_J2K_STREAM_CHUNK_SIZE, OPJ_TRUE);
  opj_stream_set_user_data(stream, &src, nullptr);
  opj_stream_set_user_data_length(stream, size);
  opj_stream_set_read_function(stream, opj_read);
  opj_stream_set_skip_function(stream, opj_skip);
  opj_stream_set_seek_function(stream, opj_seek);
  opj_codec_t* codec = opj_create_decompress(codestream ? OPJ_CODEC_J2K : OPJ_CODEC_JP2);
  opj_set_error_handler(codec, opj_on_error, &last_error);
  opj_set_warning_handler(codec, opj_quiet, nullptr);
  opj_set_info_handler(codec, opj_quiet, nullptr);
  opj_dparameters_t params;
  opj_set_default_decoder_parameters(&params);
  opj_image_t* image = nullptr;
  // Strict mode: a truncated codestream is an error, not a partially decoded image.
  bool ok = opj_setup_decoder(codec, &params) && opj_decoder_set_strict_mode(codec, OPJ_TRUE) &&
            opj_read_header(stream, codec, &image) &&
            opj_decode(codec, stream, image) && opj_end_decompress(codec, stream);
  opj_destroy_codec(codec);
  opj_stream_destroy(stream);
  auto fail_with = [&](const std::string& why) {
    if (image) opj_image_destroy(image);
    corrupt("JPEG 2000", why);
  };
  if (!ok) fail_with(last_error.empty() ? "invalid stream" : last_error);
  const OPJ_UINT32 nc = image->numcomps;
  if (nc != 1 && nc != 2 && nc != 3 && nc != 4) fail_with(fmt::format("{} components are not supported", nc));
  if (image->color_space == OPJ_CLRSPC_SYCC || image->color_space == OPJ_CLRSPC_CMYK ||
      image->color_space == OPJ_CLRSPC_EYCC)
    fail_with("YCC and CMYK colour spaces are not supported");
  const opj_image_comp_t* c = image->comps;
  const int64_t w = c[0].w, h = c[0].h;
  for (OPJ_UINT32 k = 0; k < nc; ++k)
    if (c[k].w != c[0].w || c[k].h != c[0].h || !c[k].data || c[k].prec < 1 || c[k].prec > 31)
      fail_with("subsampled or malformed components are not supported");
  if (w <= 0 || h <= 0 || w > kMaxPixels / h) fail_with("image size is invalid or too large");
  Rgb8 img;
  img.resize(w, h);
  const bool gray = nc <= 2;  // gray, or gray + alpha
  for (size_t i = 0; i < static_cast<size_t>(w * h); ++i)
    for (int ch = 0; ch < 3; ++ch) img.pixels[3 * i + ch] = opj_sample8(c[gray ? 0 : ch], i);
  opj_image_destroy(image);
  return img;
}

// ---- BMP (uncompressed; bitfields for 16/32-bit) -----------------------------------------

uint32_t le32(const uint8_t* p) { return p[0] | (p[1] << 8) | (p[2] << 16) | (static_cast<uint32_t>(p[3]) << 24); }
uint16_t le16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }

// Value of the bits of `mask` in `v`, scaled to 8 bits.
uint8_t mask8(uint32_t v, uint32_t mask) {
  if (!mask) return 0;
  int shift = 0;
  while (!((mask >> shift) & 1)) ++shift;
  uint32_t m = mask >> shift, x = (v & mask) >> shift;
  return static_cast<uint8_t>((x * 255 + m / 2) / m);
}

Rgb8 decode_bmp(const uint8_t* d, size_t size) {
  if (size < 26) corrupt("BMP", "truncated header");
  const uint32_t data_off = le32(d + 10), hsize = le32(d + 14);
  int64_t w, h;
  int bpp;
  uint32_t compression = 0, colors = 0;
  size_t palette_entry = 4;
  if (hsize == 12) {  // BITMAPCOREHEADER
    w = le16(d + 18);
    h = static_cast<int16_t>(le16(d + 20));
    bpp = le16(d + 24);
    palette_entry = 3;
  } else if (hsize >= 40 && size >= 14 + hsize) {
    w = static_cast<int32_t>(le32(d + 18));
    h = static_cast<int32_t>(le32(d + 22));
    bpp = le16(d + 28);
    compression = le32(d + 30);
    colors = le32(d + 46);
  } else {
    corrupt("BMP", fmt::format("unsupported header size {}", hsize));
  }
  const bool top_down = h < 0;
  if (top_down) h = -h;
  check_size("BMP", w, h);
  uint32_t masks[3] = {0, 0, 0};
  if (compression == 3 || compression == 6) {  // BI_BITFIELDS / BI_ALPHABITFIELDS
    const size_t mo = hsize >= 52 ? 54 : 14 + hsize;  // in the header (V2+) or right after it
    if (size < mo + 12) corrupt("BMP", "truncated bitfield masks");
    for (int k = 0; k < 3; ++k) masks[k] = le32(d + mo + 4 * k);
  } else if (compression != 0) {
    corrupt("BMP", fmt::format("compression {} (RLE/JPEG/PNG in BMP) is not supported", compression));
  } else if (bpp == 16) {
    masks[0] = 0x7C00; masks[1] = 0x03E0; masks[2] = 0x001F;
  } else if (bpp == 32) {
    masks[0] = 0xFF0000; masks[1] = 0xFF00; masks[2] = 0xFF;
  }
  if (bpp != 1 && bpp != 4 && bpp != 8 && bpp != 16 && bpp != 24 && bpp != 32)
    corrupt("BMP", fmt::format("{} bits per pixel is not supported", bpp));
  std::vector<uint8_t> palette;  // RGB triples
  if (bpp <= 8) {
    const size_t n = colors ? colors : (size_t{1} << bpp);
    const size_t po = 14 + hsize;
    if (n > 256 || size < po + n * palette_entry) corrupt("BMP", "truncated or oversized palette");
    for (size_t k = 0; k < n; ++k) {
      const uint8_t* e = d + po + k * palette_entry;
      palette.insert(palette.end(), {e[2], e[1], e[0]});
    }
  }
  const size_t stride = ((static_cast<size_t>(w) * bpp + 31) / 32) * 4;
  if (data_off > size || (size - data_off) / stride < static_cast<size_t>(h)) corrupt("BMP", "truncated pixel data");
  Rgb8 img;
  img.resize(w, h);
  for (int64_t y = 0; y < h; ++y) {
    const uint8_t* row = d + data_off + stride * static_cast<size_t>(top_down ? y : h - 1 - y);
    uint8_t* o = img.pixels.data() + static_cast<size_t>(y * w * 3);
    for (int64_t x = 0; x < w; ++x, o += 3) {
      if (bpp <= 8) {
        const size_t bit = static_cast<size_t>(x) * bpp;
        const size_t idx = (row[bit / 8] >> (8 - bpp - bit % 8)) & ((1u << bpp) - 1);
        if (3 * idx + 2 >= palette.size()) corrupt("BMP", fmt::format("palette index {} out of range", idx));
        std::memcpy(o, &palette[3 * idx], 3);
      } else if (bpp == 24) {
        o[0] = row[3 * x + 2]; o[1] = row[3 * x + 1]; o[2] = row[3 * x];
      } else {
        const uint32_t v = bpp == 16 ? le16(row + 2 * x) : le32(row + 4 * x);
        for (int k = 0; k < 3; ++k) o[k] = mask8(v, masks[k]);
      }
    }
  }
  return img;
}

// ---- PNM (P1-P6) -----------------------------------------------------------------------

struct PnmReader {
  const uint8_t* d;
  size_t size, pos = 0;
  void skip_space() {
    while (pos < size) {
      if (d[pos] == '#') {
        while (pos < size && d[pos] != '\n' && d[pos] != '\r') ++pos;
      } else if (std::isspace(d[pos])) {
        ++pos;
      } else {
        break;
      }
    }
  }
  int64_t number(const char* what) {
    skip_space();
    if (pos >= size || !std::isdigit(d[pos])) corrupt("PNM", fmt::format("expected a number for the {}", what));
    int64_t v = 0;
    while (pos < size && std::isdigit(d[pos])) {
      v = v * 10 + (d[pos++] - '0');
      if (v > (int64_t{1} << 31)) corrupt("PNM", fmt::format("the {} is too large", what));
    }
    return v;
  }
};

Rgb8 decode_pnm(const uint8_t* data, size_t size) {
  PnmReader r{data, size};
  const char kind = static_cast<char>(data[1]);
  r.pos = 2;
  const int64_t w = r.number("width"), h = r.number("height");
  check_size("PNM", w, h);
  const bool bitmap = kind == '1' || kind == '4';
  const int64_t maxval = bitmap ? 1 : r.number("maximum value");
  if (maxval < 1 || maxval > 65535) corrupt("PNM", fmt::format("maximum value {} is out of range", maxval));
  const bool ascii = kind <= '3';
  const int channels = kind == '3' || kind == '6' ? 3 : 1;
  if (!ascii) {
    if (r.pos >= size || !std::isspace(data[r.pos])) corrupt("PNM", "missing whitespace after the header");
    ++r.pos;
  }
  auto scale = [&](int64_t v) -> uint8_t {
    if (v > maxval) corrupt("PNM", fmt::format("sample {} exceeds the maximum value {}", v, maxval));
    return static_cast<uint8_t>(maxval == 255 ? v : (v * 255 + maxval / 2) / maxval);
  };
  Rgb8 img;
  img.resize(w, h);
  const size_t n = static_cast<size_t>(w * h);
  std::vector<uint8_t> samples(n * channels);
  if (kind == '4') {
    const size_t stride = static_cast<size_t>((w + 7) / 8);
    if ((size - r.pos) / stride < static_cast<size_t>(h)) corrupt("PNM", "truncated pixel data");
    for (int64_t y = 0; y < h; ++y)
      for (int64_t x = 0; x < w; ++x)
        samples[static_cast<size_t>(y * w + x)] = (data[r.pos + y * stride + x / 8] >> (7 - x % 8)) & 1;
  } else if (ascii) {
    for (auto& s : samples) {
      if (kind == '1') {  // digits need no separators in P1
        r.skip_space();
        if (r.pos >= size || (data[r.pos] != '0' && data[r.pos] != '1')) corrupt("PNM", "truncated pixel data");
        s = data[r.pos++] - '0';
      } else {
        s = scale(r.number("sample"));
      }
    }
  } else {
    const size_t bytes = maxval > 255 ? 2 : 1;
    if ((size - r.pos) / bytes < samples.size()) corrupt("PNM", "truncated pixel data");
    for (size_t i = 0; i < samples.size(); ++i) {
      const uint8_t* p = data + r.pos + i * bytes;
      samples[i] = scale(bytes == 2 ? (p[0] << 8 | p[1]) : p[0]);
    }
  }
  for (size_t i = 0; i < n; ++i)
    for (int ch = 0; ch < 3; ++ch) {
      uint8_t v = samples[i * channels + (channels == 3 ? ch : 0)];
      img.pixels[3 * i + ch] = bitmap ? (v ? 0 : 255) : v;  // in bitmaps 1 is black
    }
  return img;
}

// ---- the kernel ------------------------------------------------------------------------

bool starts_with(const uint8_t* d, size_t n, const char* magic, size_t m) {
  return n >= m && std::memcmp(d, magic, m) == 0;
}

Rgb8 decode_any(const KernelContext& ctx, const uint8_t* d, size_t n) {
  if (starts_with(d, n, "\xFF\xD8\xFF", 3)) return decode_jpeg(d, n);
  if (starts_with(d, n, "\x89PNG\r\n\x1A\n", 8)) return decode_png(d, n);
  if (starts_with(d, n, "II*\0", 4) || starts_with(d, n, "MM\0*", 4)) return decode_tiff(d, n);
  if (n >= 12 && starts_with(d, n, "RIFF", 4) && std::memcmp(d + 8, "WEBP", 4) == 0) return decode_webp(d, n);
  if (starts_with(d, n, "\0\0\0\x0CjP  \r\n\x87\n", 12)) return decode_jpeg2000(d, n, false);
  if (starts_with(d, n, "\xFF\x4F\xFF\x51", 4)) return decode_jpeg2000(d, n, true);
  if (starts_with(d, n, "BM", 2)) return decode_bmp(d, n);
  if (n >= 3 && d[0] == 'P' && d[1] >= '1' && d[1] <= '6' && std::isspace(d[2])) return decode_pnm(d, n);
  ctx.fail(ErrorCode::InvalidArgument,
           "the encoded stream ({} bytes) is not a JPEG, PNG, TIFF, WebP, JPEG 2000, BMP or PNM image", n);
}

void image_decoder_kernel(KernelContext& ctx) {
  const Tensor& in = ctx.input(0);
  if (in.dtype() != DType::U8 || in.rank() != 1)
    ctx.fail(ErrorCode::InvalidArgument, "encoded_stream must be a 1-D uint8 tensor, got {}", in.type_string());
  const std::string format = ctx.node.get_string("pixel_format", "RGB");
  if (format != "RGB" && format != "BGR" && format != "Grayscale")
    ctx.fail(ErrorCode::InvalidModel, "pixel_format must be 'RGB', 'BGR' or 'Grayscale', got '{}'", format);
  Tensor bytes = in.contiguous();
  Rgb8 img = decode_any(ctx, static_cast<const uint8_t*>(bytes.raw_data()), static_cast<size_t>(bytes.numel()));
  const size_t n = static_cast<size_t>(img.width * img.height);
  if (format == "Grayscale") {
    Tensor out = Tensor::empty(DType::U8, {img.height, img.width, 1});
    uint8_t* o = out.data<uint8_t>();
    for (size_t i = 0; i < n; ++i) {
      const uint8_t* p = &img.pixels[3 * i];
      o[i] = static_cast<uint8_t>((p[0] * 19595 + p[1] * 38470 + p[2] * 7471 + 0x8000) >> 16);
    }
    ctx.set_output(0, out);
    return;
  }
  if (format == "BGR")
    for (size_t i = 0; i < n; ++i) std::swap(img.pixels[3 * i], img.pixels[3 * i + 2]);
  ctx.set_output(0, Tensor::from_vector(DType::U8, {img.height, img.width, 3}, img.pixels));
}

}  // namespace

void register_image_ops(OpTable& t) { t.add("", "ImageDecoder", image_decoder_kernel); }

}  // namespace hodu::interp
