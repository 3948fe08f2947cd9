// .npz: a zip archive of .npy files, one per tensor ("name.npy"). Reads stored
// and deflated entries (np.savez / np.savez_compressed), zip64 included;
// writes stored entries, as np.savez does.
#include <zlib.h>

#include <set>

#include "formats/tensor_files.h"

namespace hodu::tensor_files {
namespace {

constexpr uint32_t kLocalHeaderSignature = 0x04034b50;
constexpr uint32_t kCentralHeaderSignature = 0x02014b50;
constexpr uint32_t kEndSignature = 0x06054b50;
constexpr uint32_t kZip64EndSignature = 0x06064b50;
constexpr uint32_t kZip64LocatorSignature = 0x07064b50;
constexpr uint16_t kStored = 0;
constexpr uint16_t kDeflated = 8;

struct ZipEntry {
  std::string name;
  uint16_t flags = 0;
  uint16_t method = 0;
  uint32_t crc = 0;
  uint64_t compressed_size = 0;
  uint64_t uncompressed_size = 0;
  uint64_t local_header_offset = 0;
};

uint32_t crc_of(std::string_view data) {
  uLong crc = crc32(0L, Z_NULL, 0);
  // zlib takes 32-bit lengths: feed large buffers in pieces.
  for (size_t pos = 0; pos < data.size(); pos += 1u << 30) {
    size_t n = std::min<size_t>(data.size() - pos, 1u << 30);
    crc = crc32(crc, reinterpret_cast<const Bytef*>(data.data() + pos), static_cast<uInt>(n));
  }
  return static_cast<uint32_t>(crc);
}

std::string inflate_raw(std::string_view compressed, uint64_t expected_size, const std::string& what) {
  std::string out(static_cast<size_t>(expected_size), '\0');
  z_stream zs{};
  HODU_CHECK(inflateInit2(&zs, -MAX_WBITS) == Z_OK, ErrorCode::Internal, "{}: zlib initialisation failed", what);
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(compressed.data()));
  zs.avail_in = static_cast<uInt>(compressed.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  int rc = inflate(&zs, Z_FINISH);
  uint64_t produced = zs.total_out;
  inflateEnd(&zs);
  HODU_CHECK(rc == Z_STREAM_END && produced == expected_size, ErrorCode::InvalidArgument,
             "{}: corrupt deflate data (zlib: {}, {} of {} bytes)", what, zs.msg ? zs.msg : std::to_string(rc),
             produced, expected_size);
  return out;
}

// Replaces 0xFFFFFFFF sizes and offsets by the values of the zip64 extra field.
void apply_zip64_extra(std::string_view extra, ZipEntry& e, bool size32_max, bool csize32_max, bool offset32_max,
                       const std::string& what) {
  ByteReader r(extra, what);
  while (r.remaining() >= 4) {
    auto id = r.read<uint16_t>("zip extra id");
    auto len = r.read<uint16_t>("zip extra size");
    ByteReader field(r.take(len, "zip extra field"), what);
    if (id != 0x0001) continue;
    if (size32_max) e.uncompressed_size = field.read<uint64_t>("zip64 size");
    if (csize32_max) e.compressed_size = field.read<uint64_t>("zip64 compressed size");
    if (offset32_max) e.local_header_offset = field.read<uint64_t>("zip64 offset");
    return;
  }
  HODU_CHECK(!(size32_max || csize32_max || offset32_max), ErrorCode::InvalidArgument,
             "{}: zip entry '{}' needs a zip64 extra field and has none", what, e.name);
}

std::vector<ZipEntry> read_central_directory(std::string_view bytes, const std::string& what) {
  HODU_CHECK(bytes.size() >= 22, ErrorCode::InvalidArgument, "{}: not a zip (.npz) file: too short", what);
  // The end record is the last 22 bytes plus a comment of up to 64 KiB.
  size_t end = std::string_view::npos;
  size_t lowest = bytes.size() > 22 + 65535 ? bytes.size() - 22 - 65535 : 0;
  for (size_t pos = bytes.size() - 22 + 1; pos-- > lowest;) {
    uint32_t sig;
    std::memcpy(&sig, bytes.data() + pos, 4);
    if (sig == kEndSignature) { end = pos; break; }
  }
  HODU_CHECK(end != std::string_view::npos, ErrorCode::InvalidArgument,
             "{}: not a zip (.npz) file: no end-of-central-directory record", what);
  ByteReader r(bytes, what);
  r.seek(end + 4, "zip end record");
  r.read<uint16_t>("disk number");
  r.read<uint16_t>("disk number");
  r.read<uint16_t>("entry count");
  uint64_t count = r.read<uint16_t>("entry count");
  uint64_t directory_size = r.read<uint32_t>("central directory size");
  uint64_t directory_offset = r.read<uint32_t>("central directory offset");
  if (count == 0xFFFF || directory_size == 0xFFFFFFFF || directory_offset == 0xFFFFFFFF) {
    HODU_CHECK(end >= 20, ErrorCode::InvalidArgument, "{}: zip64 end locator missing", what);
    r.seek(end - 20, "zip64 locator");
    HODU_CHECK(r.read<uint32_t>("zip64 locator") == kZip64LocatorSignature, ErrorCode::InvalidArgument,
               "{}: zip64 end locator missing", what);
    r.read<uint32_t>("disk number");
    uint64_t record = r.read<uint64_t>("zip64 end record offset");
    r.seek(record, "zip64 end record");
    HODU_CHECK(r.read<uint32_t>("zip64 end record") == kZip64EndSignature, ErrorCode::InvalidArgument,
               "{}: bad zip64 end record", what);
    r.take(8 + 2 + 2 + 4 + 4 + 8, "zip64 end record");
    count = r.read<uint64_t>("entry count");
    directory_size = r.read<uint64_t>("central directory size");
    directory_offset = r.read<uint64_t>("central directory offset");
  }
  HODU_CHECK(directory_offset <= bytes.size() && directory_size <= bytes.size() - directory_offset,
             ErrorCode::InvalidArgument, "{}: zip central directory lies outside the file", what);
  HODU_CHECK(count <= directory_size / 46, ErrorCode::InvalidArgument,
             "{}: zip says {} entries, its directory has room for {}", what, count, directory_size / 46);

  ByteReader dir(bytes.substr(directory_offset, directory_size), what);
  std::vector<ZipEntry> entries;
  for (uint64_t i = 0; i < count; ++i) {
    HODU_CHECK(dir.read<uint32_t>("zip directory entry") == kCentralHeaderSignature, ErrorCode::InvalidArgument,
               "{}: bad zip central directory entry {}", what, i);
    ZipEntry e;
    dir.take(4, "zip versions");
    e.flags = dir.read<uint16_t>("zip flags");
    e.method = dir.read<uint16_t>("zip method");
    dir.take(4, "zip time");
    e.crc = dir.read<uint32_t>("zip crc");
    e.compressed_size = dir.read<uint32_t>("zip compressed size");
    e.uncompressed_size = dir.read<uint32_t>("zip size");
    auto name_len = dir.read<uint16_t>("zip name length");
    auto extra_len = dir.read<uint16_t>("zip extra length");
    auto comment_len = dir.read<uint16_t>("zip comment length");
    dir.take(8, "zip attributes");
    e.local_header_offset = dir.read<uint32_t>("zip local header offset");
    e.name = std::string(dir.take(name_len, "zip entry name"));
    std::string_view extra = dir.take(extra_len, "zip extra");
    dir.take(comment_len, "zip comment");
    apply_zip64_extra(extra, e, e.uncompressed_size == 0xFFFFFFFF, e.compressed_size == 0xFFFFFFFF,
                      e.local_header_offset == 0xFFFFFFFF, what);
    entries.push_back(std::move(e));
  }
  return entries;
}

std::string_view entry_data(std::string_view bytes, const ZipEntry& e, const std::string& what) {
  ByteReader r(bytes, what);
  r.seek(e.local_header_offset, "zip local header");
  HODU_CHECK(r.read<uint32_t>("zip local header") == kLocalHeaderSignature, ErrorCode::InvalidArgument,
             "{}: bad zip local header for '{}'", what, e.name);
  r.take(22, "zip local header");
  auto name_len = r.read<uint16_t>("zip name length");
  auto extra_len = r.read<uint16_t>("zip extra length");
  r.take(uint64_t{name_len} + extra_len, "zip local name");
  return r.take(e.compressed_size, "zip entry data");
}

}  // namespace

NamedTensors read_npz(std::string_view bytes, const std::string& what) {
  NamedTensors out;
  std::set<std::string> seen;
  for (const ZipEntry& e : read_central_directory(bytes, what)) {
    if (!e.name.empty() && e.name.back() == '/') continue;  // a folder
    std::string entry_what = fmt::format("{} (entry '{}')", what, e.name);
    HODU_CHECK(e.name.size() > 4 && e.name.compare(e.name.size() - 4, 4, ".npy") == 0, ErrorCode::InvalidArgument,
               "{}: an .npz holds .npy entries only", entry_what);
    HODU_CHECK(!(e.flags & 1), ErrorCode::Unsupported, "{}: encrypted zip entries are not supported", entry_what);
    std::string name = e.name.substr(0, e.name.size() - 4);
    HODU_CHECK(seen.insert(name).second, ErrorCode::InvalidArgument, "{}: duplicate entry", entry_what);
    std::string_view stored = entry_data(bytes, e, what);
    std::string inflated;
    std::string_view npy;
    if (e.method == kStored) {
      HODU_CHECK(e.compressed_size == e.uncompressed_size, ErrorCode::InvalidArgument,
                 "{}: stored entry with different sizes", entry_what);
      npy = stored;
    } else if (e.method == kDeflated) {
      // Deflate cannot compress more than 1032:1: a larger claim is a lie, not a reason to allocate.
      HODU_CHECK(e.uncompressed_size <= e.compressed_size * 1032 + 1024 && e.uncompressed_size < (uint64_t{1} << 40),
                 ErrorCode::InvalidArgument, "{}: implausible uncompressed size {}", entry_what, e.uncompressed_size);
      HODU_CHECK(e.compressed_size < (uint64_t{1} << 32) && e.uncompressed_size < (uint64_t{1} << 32),
                 ErrorCode::Unsupported, "{}: deflated entries of 4 GiB and more are not supported", entry_what);
      inflated = inflate_raw(stored, e.uncompressed_size, entry_what);
      npy = inflated;
    } else {
      fail(ErrorCode::Unsupported, "{}: zip compression method {} (only stored and deflate are supported)",
           entry_what, e.method);
    }
    HODU_CHECK(crc_of(npy) == e.crc, ErrorCode::InvalidArgument, "{}: CRC mismatch (corrupt file)", entry_what);
    out.emplace_back(name, read_npy(npy, entry_what));
  }
  return out;
}

std::string write_npz(const NamedTensors& tensors) {
  std::string out, directory;
  std::set<std::string> seen;
  for (const auto& [name, tensor] : tensors) {
    HODU_CHECK(seen.insert(name).second, ErrorCode::InvalidArgument, "two tensors are named '{}'", name);
    std::string npy = write_npy(tensor);
    std::string entry_name = name + ".npy";
    HODU_CHECK(out.size() + npy.size() < 0xFFFFFFFFull && entry_name.size() < 0xFFFF, ErrorCode::Unsupported,
               ".npz files of 4 GiB and more are not supported (write .hdt or .safetensors)");
    uint32_t crc = crc_of(npy);
    auto size = static_cast<uint32_t>(npy.size());
    auto offset = static_cast<uint32_t>(out.size());
    auto common = [&](std::string& s) {
      append_le<uint16_t>(s, 20);        // version needed: 2.0
      append_le<uint16_t>(s, 0x0800);    // flags: names are UTF-8
      append_le<uint16_t>(s, kStored);
      append_le<uint16_t>(s, 0);         // time
      append_le<uint16_t>(s, 0x21);      // date: 1980-01-01
      append_le<uint32_t>(s, crc);
      append_le<uint32_t>(s, size);
      append_le<uint32_t>(s, size);
      append_le<uint16_t>(s, static_cast<uint16_t>(entry_name.size()));
      append_le<uint16_t>(s, 0);         // extra length
    };
    append_le<uint32_t>(out, kLocalHeaderSignature);
    common(out);
    out += entry_name;
    out += npy;

    append_le<uint32_t>(directory, kCentralHeaderSignature);
    append_le<uint16_t>(directory, 20);  // version made by
    common(directory);
    append_le<uint16_t>(directory, 0);   // comment length
    append_le<uint16_t>(directory, 0);   // disk
    append_le<uint16_t>(directory, 0);   // internal attributes
    append_le<uint32_t>(directory, 0);   // external attributes
    append_le<uint32_t>(directory, offset);
    directory += entry_name;
  }
  HODU_CHECK(out.size() + directory.size() < 0xFFFFFFFFull && tensors.size() < 0xFFFF, ErrorCode::Unsupported,
             ".npz files of 4 GiB or 65535 tensors and more are not supported (write .hdt or .safetensors)");
  auto directory_offset = static_cast<uint32_t>(out.size());
  out += directory;
  append_le<uint32_t>(out, kEndSignature);
  append_le<uint16_t>(out, 0);
  append_le<uint16_t>(out, 0);
  append_le<uint16_t>(out, static_cast<uint16_t>(tensors.size()));
  append_le<uint16_t>(out, static_cast<uint16_t>(tensors.size()));
  append_le<uint32_t>(out, static_cast<uint32_t>(directory.size()));
  append_le<uint32_t>(out, directory_offset);
  append_le<uint16_t>(out, 0);  // comment length
  return out;
}

}  // namespace hodu::tensor_files
