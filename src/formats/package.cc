// .hodupkg container: layout in docs/hodupkg.md.
//
//   header (128 bytes) | table of contents (128 bytes per section) | sections, zero padding between
//
// The file checksum covers the header and the table, which holds each section's SHA-256, and
// the bytes between sections must be zero: every byte of the file is checked.
#include "formats/package.h"

#include <sys/mman.h>
#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>

#include "core/error.h"
#include "formats/little_endian.h"
#include "formats/mapped_file.h"
#include "formats/model_io.h"
#include "ir/value_json.h"

namespace fs = std::filesystem;

namespace hodu::pkg {
namespace {

constexpr uint32_t kRequiredFlagsMask = 0xFFFFu;  // low 16 bits: features a reader must know
constexpr uint32_t kKnownRequiredFlags = 0;
constexpr uint64_t kAlign = 64, kPageAlign = 4096;
constexpr size_t kChecksumAt = 48;  // the file checksum's 32 bytes in the header

std::string short_hex(const Sha256Digest& d) { return sha256_hex(d).substr(0, 16); }

// SHA-256 of the header (its checksum field as zeros) followed by the table of contents.
Sha256Digest file_checksum_of(const uint8_t* header, size_t header_size, const uint8_t* toc, size_t toc_size) {
  std::string bytes(reinterpret_cast<const char*>(header), header_size);
  std::memset(bytes.data() + kChecksumAt, 0, 32);
  bytes.append(reinterpret_cast<const char*>(toc), toc_size);
  return sha256(bytes);
}

bool valid_kind(uint32_t k) { return k >= 1 && k <= 5; }

nlohmann::ordered_json value_json(const ValueDoc& v) {
  nlohmann::ordered_json o = value_to_json(Value{v.name, v.type, {}});
  o["doc"] = v.doc;
  return o;
}

}  // namespace

const char* section_kind_name(SectionKind k) {
  switch (k) {
    case SectionKind::Meta: return "metadata (JSON)";
    case SectionKind::Graph: return "graph (.hdss)";
    case SectionKind::Weights: return "weights (blob)";
    case SectionKind::Library: return "library";
    case SectionKind::Header: return "C header";
  }
  return "unknown";
}

// ---- metadata -----------------------------------------------------------------

const Target* Meta::target(const std::string& triple) const {
  for (const auto& t : targets)
    if (t.triple == triple) return &t;
  return nullptr;
}

std::string Meta::target_list() const {
  std::string s;
  for (const auto& t : targets) s += (s.empty() ? "" : ", ") + t.triple;
  return s.empty() ? "none" : s;
}

std::string meta_to_json(const Meta& m) {
  nlohmann::ordered_json j;
  j["format"] = "hodupkg";
  j["format_version"] = kFormatVersion;
  j["name"] = m.name;
  j["version"] = m.version;
  j["author"] = m.author;
  j["license"] = m.license;
  j["description"] = m.description;
  j["hodu_version"] = m.hodu_version;
  j["build_date"] = m.build_date;
  j["source"] = m.source;
  j["opsets"] = nlohmann::ordered_json::object();
  for (const auto& [d, v] : m.opsets) j["opsets"][d] = v;
  for (const char* side : {"inputs", "outputs"}) {
    j[side] = nlohmann::ordered_json::array();
    for (const auto& v : std::string(side) == "inputs" ? m.inputs : m.outputs) j[side].push_back(value_json(v));
  }
  j["weights"] = {{"bytes", m.weight_bytes}, {"graph_bytes", m.graph_weight_bytes}};
  j["targets"] = nlohmann::ordered_json::array();
  for (const auto& t : m.targets) {
    nlohmann::ordered_json o;
    o["triple"] = t.triple;
    o["library"] = t.library;
    o["header"] = t.header;
    o["api_prefix"] = t.api_prefix;
    o["kernels"] = t.kernels;
    o["kernel_abi"] = t.kernel_abi;
    o["opt_level"] = t.opt_level;
    o["input_shapes"] = nlohmann::ordered_json::object();
    for (const auto& [k, v] : t.input_shapes) o["input_shapes"][k] = v;
    o["built"] = t.built;
    j["targets"].push_back(o);
  }
  return j.dump(2) + "\n";
}

Meta meta_from_json(std::string_view text, const std::string& what) {
  auto bad = [&](const std::string& msg) -> void {
    fail(ErrorCode::InvalidModel, "{}: metadata section: {}", what, msg);
  };
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    bad(std::string("not JSON: ") + e.what());
  }
  if (!j.is_object()) bad("not a JSON object");
  Meta m;
  m.json = std::string(text);
  try {
    if (j.value("format", "") != "hodupkg") bad("\"format\" is not \"hodupkg\"");
    auto str = [&](const char* key) { return j.contains(key) ? j.at(key).get<std::string>() : std::string(); };
    m.name = str("name");
    m.version = str("version");
    m.author = str("author");
    m.license = str("license");
    m.description = str("description");
    m.hodu_version = str("hodu_version");
    m.build_date = str("build_date");
    m.source = str("source");
    if (j.contains("opsets"))
      for (const auto& [d, v] : j.at("opsets").items()) m.opsets[d] = v.get<int64_t>();
    for (const char* side : {"inputs", "outputs"}) {
      if (!j.contains(side)) continue;
      for (const auto& o : j.at(side)) {
        ValueDoc v;
        v.name = o.at("name").get<std::string>();
        v.doc = o.value("doc", "");
        try {
          v.type = value_type_from_json(o);
        } catch (const Error& e) {
          bad("value '" + v.name + "': " + e.what());
        }
        (std::string(side) == "inputs" ? m.inputs : m.outputs).push_back(std::move(v));
      }
    }
    if (j.contains("weights")) {
      m.weight_bytes = j.at("weights").value("bytes", int64_t{0});
      m.graph_weight_bytes = j.at("weights").value("graph_bytes", int64_t{0});
    }
    if (j.contains("targets")) {
      for (const auto& o : j.at("targets")) {
        Target t;
        t.triple = o.at("triple").get<std::string>();
        t.library = o.at("library").get<std::string>();
        t.header = o.value("header", "");
        t.api_prefix = o.at("api_prefix").get<std::string>();
        t.kernels = o.value("kernels", "portable");
        t.kernel_abi = o.value("kernel_abi", 0);
        t.opt_level = o.value("opt_level", 2);
        if (o.contains("input_shapes"))
          for (const auto& [k, v] : o.at("input_shapes").items()) t.input_shapes[k] = v.get<std::vector<int64_t>>();
        t.built = o.value("built", "");
        if (m.target(t.triple)) bad("target " + t.triple + " is listed twice");
        m.targets.push_back(std::move(t));
      }
    }
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    bad(std::string("unexpected contents: ") + e.what());
  }
  return m;
}

// ---- triples --------------------------------------------------------------------

std::string host_triple() {
#if defined(__x86_64__) && defined(__linux__)
  return "x86_64-linux-gnu";
#elif defined(__aarch64__) && defined(__linux__)
  return "aarch64-linux-gnu";
#elif defined(__riscv) && __riscv_xlen == 64 && defined(__linux__)
  return "riscv64-linux-gnu";
#elif defined(__powerpc64__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ && defined(__linux__)
  return "powerpc64le-linux-gnu";
#else
  return "unknown";
#endif
}

std::string canonical_triple(const std::string& triple) {
  HODU_CHECK(!triple.empty() && triple.size() <= 40 &&
                 triple.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_-.") == std::string::npos &&
                 std::count(triple.begin(), triple.end(), '-') >= 1 && triple.front() != '-' && triple.back() != '-',
             ErrorCode::InvalidArgument, "--target '{}': not a GNU target triple like x86_64-linux-gnu", triple);
  std::vector<std::string> parts;
  for (size_t at = 0;;) {
    size_t dash = triple.find('-', at);
    parts.push_back(triple.substr(at, dash == std::string::npos ? std::string::npos : dash - at));
    if (dash == std::string::npos) break;
    at = dash + 1;
  }
  // x86_64-pc-linux-gnu, aarch64-unknown-linux-gnu: the vendor field says nothing here.
  if (parts.size() == 4 && (parts[1] == "pc" || parts[1] == "unknown" || parts[1] == "none")) parts.erase(parts.begin() + 1);
  if (parts[0] == "amd64") parts[0] = "x86_64";
  if (parts[0] == "arm64") parts[0] = "aarch64";
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : "-") + p;
  return out;
}

// ---- writer -----------------------------------------------------------------

void write_package(const std::string& path, const std::vector<SectionData>& sections) {
  const uint64_t toc_size = static_cast<uint64_t>(sections.size()) * kEntryBytes;
  std::string header(kHeaderBytes, '\0'), toc(toc_size, '\0');
  std::vector<uint64_t> offsets;
  uint64_t end = kHeaderBytes + toc_size;
  for (size_t i = 0; i < sections.size(); ++i) {
    const SectionData& s = sections[i];
    HODU_CHECK(!s.name.empty() && s.name.size() <= kMaxNameBytes, ErrorCode::Internal, "section name '{}'", s.name);
    for (size_t k = 0; k < i; ++k)
      HODU_CHECK(sections[k].name != s.name, ErrorCode::Internal, "section '{}' twice", s.name);
    const uint64_t align =
        s.kind == SectionKind::Weights || s.kind == SectionKind::Library ? kPageAlign : kAlign;
    end = (end + align - 1) / align * align;
    offsets.push_back(end);
    char* e = toc.data() + i * kEntryBytes;
    std::memcpy(e, s.name.data(), s.name.size());
    put_u32(toc, i * kEntryBytes + 48, static_cast<uint32_t>(s.kind));
    put_u64(toc, i * kEntryBytes + 56, end);
    put_u64(toc, i * kEntryBytes + 64, s.bytes.size());
    Sha256Digest d = sha256(s.bytes);
    std::memcpy(e + 72, d.data(), d.size());
    end += s.bytes.size();
  }
  std::memcpy(header.data(), kMagic, 8);
  put_u32(header, 8, kFormatVersion);
  put_u32(header, 12, 0);
  put_u32(header, 16, kHeaderBytes);
  put_u32(header, 20, static_cast<uint32_t>(sections.size()));
  put_u32(header, 24, kEntryBytes);
  put_u64(header, 32, kHeaderBytes);
  put_u64(header, 40, end);
  Sha256Digest sum = file_checksum_of(reinterpret_cast<const uint8_t*>(header.data()), header.size(),
                                      reinterpret_cast<const uint8_t*>(toc.data()), toc.size());
  std::memcpy(header.data() + kChecksumAt, sum.data(), sum.size());

  // Written beside the target and renamed: a reader never sees half a package.
  const std::string partial = path + ".partial";
  {
    std::ofstream f(partial, std::ios::binary | std::ios::trunc);
    HODU_CHECK(f.good(), ErrorCode::Io, "{}: cannot open for writing ({})", partial, std::strerror(errno));
    f.write(header.data(), static_cast<std::streamsize>(header.size()));
    f.write(toc.data(), static_cast<std::streamsize>(toc.size()));
    uint64_t at = kHeaderBytes + toc_size;
    static const std::string zeros(kPageAlign, '\0');
    for (size_t i = 0; i < sections.size(); ++i) {
      f.write(zeros.data(), static_cast<std::streamsize>(offsets[i] - at));
      f.write(sections[i].bytes.data(), static_cast<std::streamsize>(sections[i].bytes.size()));
      at = offsets[i] + sections[i].bytes.size();
    }
    f.close();
    if (f.fail()) {
      std::error_code ec;
      fs::remove(partial, ec);
      fail(ErrorCode::Io, "{}: error writing the package (disk full?)", partial);
    }
  }
  std::error_code ec;
  fs::rename(partial, path, ec);
  if (ec) {
    fs::remove(partial, ec);
    fail(ErrorCode::Io, "{}: cannot move the written package into place", path);
  }
}

// ---- reader -----------------------------------------------------------------

bool is_package_path(const std::string& path) {
  std::string ext = fs::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  return ext == ".hodupkg";
}

bool is_package_bytes(std::string_view bytes) {
  return bytes.size() >= 8 && std::memcmp(bytes.data(), kMagic, 8) == 0;
}

Package::~Package() {
  if (mapped_ && base_) ::munmap(base_, size_);
}

const SectionInfo* Package::find(const std::string& name) const {
  for (const auto& s : sections_)
    if (s.name == name) return &s;
  return nullptr;
}

std::string_view Package::bytes(const SectionInfo& s) const {
  return {reinterpret_cast<const char*>(base_) + s.offset, static_cast<size_t>(s.size)};
}

void Package::parse(const std::string& what) {
  auto bad = [&](std::string_view format, const auto&... args) {
    fail(ErrorCode::InvalidModel, "{}: {}", what, fmt::vformat(format, fmt::make_format_args(args...)));
  };
  const uint8_t* p = base_;
  const uint64_t n = size_;
  if (n < 8 && std::memcmp(p, kMagic, n) == 0 && n > 0)
    bad("truncated: {} bytes, not even the package header ({} bytes)", n, kHeaderBytes);
  if (n < 8 || std::memcmp(p, kMagic, 8) != 0) bad("not a .hodupkg package (wrong magic; expected \"HODUPKG\")");
  if (n < 12) bad("truncated: {} bytes, not even the package header ({} bytes)", n, kHeaderBytes);
  version_ = get_u32(p + 8);
  if (version_ == 0) bad("package format version 0 is invalid");
  if (version_ > kFormatVersion)
    bad("package format version {} is newer than this hodu reads ({}): upgrade hodu to load it", version_,
        kFormatVersion);
  if (n < kHeaderBytes) bad("truncated: {} bytes, less than the {}-byte package header", n, kHeaderBytes);
  const uint32_t flags = get_u32(p + 12), header_size = get_u32(p + 16), count = get_u32(p + 20),
                 entry_size = get_u32(p + 24);
  const uint64_t toc_offset = get_u64(p + 32), recorded_size = get_u64(p + 40);
  if (flags & kRequiredFlagsMask & ~kKnownRequiredFlags)
    bad("uses features this hodu does not know (flags {:#x}): upgrade hodu to load it", flags);
  if (recorded_size > n)
    bad("truncated: the header records {} bytes, the file has {} (an interrupted copy or download?)", recorded_size,
        n);
  if (recorded_size < n)
    bad("the file has {} bytes but its header records {}: data after the end (appended to, or corrupt)", n,
        recorded_size);
  if (header_size != kHeaderBytes || entry_size != kEntryBytes)
    bad("corrupt header: header size {} and entry size {} (version 1 has {} and {})", header_size, entry_size,
        kHeaderBytes, kEntryBytes);
  if (toc_offset != kHeaderBytes || count > (n - kHeaderBytes) / kEntryBytes)
    bad("corrupt header: a table of {} sections at offset {} does not fit in {} bytes", count, toc_offset, n);
  const uint64_t toc_size = static_cast<uint64_t>(count) * kEntryBytes;
  Sha256Digest stored;
  std::memcpy(stored.data(), p + kChecksumAt, 32);
  file_sum_ = file_checksum_of(p, kHeaderBytes, p + toc_offset, toc_size);
  if (stored != file_sum_)
    bad("package checksum mismatch over the header and table of contents (stored {}, computed {}): the file is "
        "corrupt or was altered",
        short_hex(stored), short_hex(file_sum_));
  for (size_t i = 8 + 4 + 4 + 4 + 4 + 4; i < 32; ++i)
    if (p[i]) bad("corrupt header: reserved bytes are not zero");
  for (size_t i = kChecksumAt + 32; i < kHeaderBytes; ++i)
    if (p[i]) bad("corrupt header: reserved bytes are not zero");

  // The table of contents.
  uint64_t end = toc_offset + toc_size;
  for (uint32_t i = 0; i < count; ++i) {
    const uint8_t* e = p + toc_offset + static_cast<uint64_t>(i) * kEntryBytes;
    const char* name = reinterpret_cast<const char*>(e);
    size_t len = strnlen(name, 48);
    if (len == 0 || len > kMaxNameBytes) bad("corrupt table of contents: entry {} has no valid name", i);
    SectionInfo s;
    s.name.assign(name, len);
    for (size_t k = len; k < 48; ++k)
      if (e[k]) bad("corrupt table of contents: bytes after the name of section '{}'", s.name);
    const uint32_t kind = get_u32(e + 48);
    s.kind = static_cast<SectionKind>(kind);
    s.offset = get_u64(e + 56);
    s.size = get_u64(e + 64);
    std::memcpy(s.sha256.data(), e + 72, 32);
    if (find(s.name)) bad("corrupt table of contents: section '{}' is listed twice", s.name);
    if (s.offset % kAlign) bad("section '{}' at offset {} is not 64-byte aligned", s.name, s.offset);
    if (s.offset < end || s.offset > n || s.size > n - s.offset)
      bad("section '{}' [{}, +{}) overlaps the previous one or lies outside the file ({} bytes)", s.name, s.offset,
          s.size, n);
    for (uint64_t k = end; k < s.offset; ++k)
      if (p[k]) bad("bytes [{}, {}) before section '{}' are not zero padding: the file is corrupt or was altered", end,
                    s.offset, s.name);
    end = s.offset + s.size;
    // Kinds a reader does not know are optional additions: kept, not interpreted.
    if (valid_kind(kind)) {
      Sha256Digest d = sha256(p + s.offset, s.size);
      if (d != s.sha256)
        bad("section '{}' ({} bytes at offset {}) fails its SHA-256 check (stored {}, computed {}): the file is "
            "corrupt or was altered",
            s.name, s.size, s.offset, short_hex(s.sha256), short_hex(d));
    }
    sections_.push_back(std::move(s));
  }
  if (end != n) bad("{} bytes after the last section: the file is corrupt or was altered", n - end);

  auto require = [&](const char* name, SectionKind kind) -> const SectionInfo& {
    const SectionInfo* s = find(name);
    if (!s) bad("no '{}' section: not a complete package", name);
    if (s->kind != kind) bad("section '{}' has kind {} (expected {})", name, static_cast<uint32_t>(s->kind),
                             static_cast<uint32_t>(kind));
    return *s;
  };
  meta_ = meta_from_json(bytes(require("meta", SectionKind::Meta)), what);
  require("graph", SectionKind::Graph);
  const SectionInfo& w = require("weights", SectionKind::Weights);
  std::string_view wb = bytes(w);
  if (wb.size() < 64 || wb.substr(0, 8) != "HODUWGT1" || get_u64(p + w.offset + 8) != wb.size() - 64)
    bad("the weights section is not a hodu weights blob (magic HODUWGT1 and its size)");
  for (const auto& t : meta_.targets) {
    const SectionInfo* lib = find(t.library);
    if (!lib || lib->kind != SectionKind::Library)
      bad("metadata names library section '{}' for {}, which the package does not have", t.library, t.triple);
    if (!t.header.empty() && !find(t.header)) bad("metadata names header section '{}', which is missing", t.header);
  }
}

namespace {

struct FileId {
  dev_t dev;
  ino_t ino;
  off_t size;
  int64_t mtime_ns;
  bool operator==(const FileId& o) const {
    return dev == o.dev && ino == o.ino && size == o.size && mtime_ns == o.mtime_ns;
  }
};

// Packages open in this process: a second open (the native engine after Session::load) finds
// the one already verified instead of hashing the file again.
std::mutex open_mutex;
std::map<std::string, std::pair<FileId, std::weak_ptr<const Package>>>& open_packages() {
  static std::map<std::string, std::pair<FileId, std::weak_ptr<const Package>>> m;
  return m;
}

}  // namespace

std::shared_ptr<const Package> Package::open(const std::string& path) {
  std::error_code ec;
  HODU_CHECK(fs::exists(path, ec), ErrorCode::Io, "{}: no such package file", path);
  HODU_CHECK(!fs::is_directory(path, ec), ErrorCode::Io, "{}: is a directory, not a package", path);
  const ReadOnlyFile file(path);  // a regular file, closed when this returns
  struct stat st {};
  HODU_CHECK(::fstat(file.fd(), &st) == 0, ErrorCode::Io, "{}: cannot stat ({})", path, std::strerror(errno));
  const FileId id{st.st_dev, st.st_ino, st.st_size, int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec};
  const std::string key = fs::absolute(path).lexically_normal().string();
  std::lock_guard<std::mutex> lock(open_mutex);
  auto& open = open_packages();
  if (auto it = open.find(key); it != open.end() && it->second.first == id) {
    if (auto p = it->second.second.lock()) return p;
  }
  std::shared_ptr<Package> pkg(new Package());
  pkg->path_ = key;
  pkg->size_ = static_cast<uint64_t>(st.st_size);
  if (pkg->size_ > 0) {
    // Private and writable, as .hdss files are mapped: writing into a weight never changes the file.
    void* addr = ::mmap(nullptr, pkg->size_, PROT_READ | PROT_WRITE, MAP_PRIVATE, file.fd(), 0);
    if (addr == MAP_FAILED) fail(ErrorCode::Io, "{}: cannot memory-map ({})", path, std::strerror(errno));
    pkg->base_ = static_cast<uint8_t*>(addr);
    pkg->mapped_ = true;
  } else {
    static uint8_t none = 0;
    pkg->base_ = &none;
  }
  pkg->parse(path);
  // Hashing read every page; the engines fault in what they use.
  if (pkg->mapped_) (void)::madvise(pkg->base_, pkg->size_, MADV_DONTNEED);
  pkg->self_ = pkg;
  open[key] = {id, pkg};
  return pkg;
}

std::shared_ptr<const Package> Package::from_bytes(std::string bytes, const std::string& what) {
  std::shared_ptr<Package> pkg(new Package());
  pkg->path_ = what;
  // 4 KiB-aligned copy, as a mapping is: the libraries read the weights blob 64-byte aligned.
  pkg->owned_.assign(bytes.size() + kPageAlign, '\0');
  uintptr_t at = (reinterpret_cast<uintptr_t>(pkg->owned_.data()) + kPageAlign - 1) & ~(kPageAlign - 1);
  pkg->base_ = reinterpret_cast<uint8_t*>(at);
  if (!bytes.empty()) std::memcpy(pkg->base_, bytes.data(), bytes.size());
  pkg->size_ = bytes.size();
  std::string().swap(bytes);
  pkg->parse(what);
  pkg->self_ = pkg;
  return pkg;
}

Model Package::model() const {
  const SectionInfo& w = *find("weights");
  std::string_view data = bytes(w).substr(64);
  return read_hdss_external(bytes(*find("graph")), data, self_.lock(), path_ + " (graph section)");
}

std::string Package::describe_json() const {
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(meta_.json);
  nlohmann::ordered_json f;
  f["file"] = path_;
  f["bytes"] = size_;
  f["format_version"] = version_;
  f["checksum"] = sha256_hex(file_sum_);
  f["checksums_ok"] = true;  // a Package exists only once every check passed
  f["sections"] = nlohmann::ordered_json::array();
  for (const auto& s : sections_)
    f["sections"].push_back({{"name", s.name},
                             {"kind", section_kind_name(s.kind)},
                             {"offset", s.offset},
                             {"bytes", s.size},
                             {"sha256", sha256_hex(s.sha256)}});
  const std::string host = host_triple();
  f["host"] = {{"triple", host}, {"runs", meta_.target(host) ? "library" : "graph"}};
  j["package"] = f;
  return j.dump(2);
}

Model Package::runnable_model() const {
  Model m = model();
  const std::string host = host_triple();
  std::string file = fs::path(path_).filename().string();
  m.metadata.push_back({kPackagePathKey, path_});
  if (const Target* t = meta_.target(host)) {
    m.metadata.push_back({kPreferredEngineKey, "native"});
    m.metadata.push_back({kEngineReasonKey, fmt::format("{}: its prebuilt {} library ({} kernels) fits this host", file,
                                                        t->triple, t->kernels)});
  } else {
    m.metadata.push_back({kEngineReasonKey, fmt::format("{}: no prebuilt library for this host ({}; the package has {}): "
                                                        "its graph runs on the default engine",
                                                        file, host, meta_.target_list())});
  }
  return m;
}

}  // namespace hodu::pkg
