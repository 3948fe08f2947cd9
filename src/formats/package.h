// .hodupkg: one versioned, checksummed file that deploys a model (docs/hodupkg.md): a header,
// a table of contents, and sections: metadata JSON, the graph (an .hdss whose tensors live in
// the weights section), the weights once (a hodu weights blob, which the prebuilt libraries
// read too), and a prebuilt library (+ its C header) per target triple.
//
// This file reads and writes the container and its metadata; `hodu pack`
// (compilers/package) builds one, the native engine runs its libraries, and
// Session::load picks the library for this host or runs the graph.
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/sha256.h"
#include "ir/graph.h"

namespace hodu::pkg {

inline constexpr uint32_t kFormatVersion = 1;
inline constexpr char kMagic[8] = {'H', 'O', 'D', 'U', 'P', 'K', 'G', '\0'};
inline constexpr uint32_t kHeaderBytes = 128;
inline constexpr uint32_t kEntryBytes = 128;
inline constexpr size_t kMaxNameBytes = 47;  // a section name, NUL-terminated in 48 bytes

enum class SectionKind : uint32_t { Meta = 1, Graph = 2, Weights = 3, Library = 4, Header = 5 };
const char* section_kind_name(SectionKind k);

struct SectionInfo {
  std::string name;  // "meta", "graph", "weights", "lib/<triple>", "header/<triple>"
  SectionKind kind = SectionKind::Meta;
  uint64_t offset = 0, size = 0;
  Sha256Digest sha256{};
};

// A value of the model's interface as the metadata describes it.
struct ValueDoc {
  std::string name;
  ValueType type;  // tensors: dtype and shape (symbolic dims by name); other kinds: Unknown
  std::string doc;
};

// One prebuilt library.
struct Target {
  std::string triple;          // "x86_64-linux-gnu"
  std::string library;         // its section, "lib/<triple>"
  std::string header;          // "header/<triple>" (the library's C API, <api_prefix>.h)
  std::string api_prefix;      // symbol prefix of the C API
  std::string kernels;         // "onednn" (needs libhodu_kernels.so) or "portable"
  int kernel_abi = 0;          // libhodu_kernels ABI the library calls (onednn only)
  int opt_level = 2;
  std::map<std::string, std::vector<int64_t>> input_shapes;  // the shapes it was built for
  std::string built;           // hodu build's one-line description
};

struct Meta {
  std::string name, version, author, license, description;
  std::string hodu_version, build_date;  // build date: UTC, ISO 8601
  std::string source;                    // file name the model was packed from
  std::map<std::string, int64_t> opsets;  // "ai.onnx" → 17
  std::vector<ValueDoc> inputs, outputs;
  std::vector<Target> targets;
  int64_t weight_bytes = 0;          // the weights section's data
  int64_t graph_weight_bytes = 0;    // of which the graph's tensors
  std::string json;                  // the section as written

  const Target* target(const std::string& triple) const;
  std::string target_list() const;  // "x86_64-linux-gnu, aarch64-linux-gnu" or "none"
};

// The metadata section's JSON text (json field ignored) and its parse. InvalidModel naming
// `what` and the field for JSON that is not a package's metadata.
std::string meta_to_json(const Meta& meta);
Meta meta_from_json(std::string_view text, const std::string& what);

// The GNU triple of the machine this hodu was built for ("x86_64-linux-gnu"), and a user's
// triple in that form ("x86_64-pc-linux-gnu" → "x86_64-linux-gnu"). InvalidArgument when it
// is not a triple.
std::string host_triple();
std::string canonical_triple(const std::string& triple);

// A section to write: its bytes are read while writing (held by the caller).
struct SectionData {
  std::string name;
  SectionKind kind;
  std::string_view bytes;
};
// Writes the package to `path` (through `path`.partial, renamed when complete): sections in
// the order given, 64-byte aligned (weights and libraries on 4 KiB pages), checksums filled in.
void write_package(const std::string& path, const std::vector<SectionData>& sections);

// Metadata keys of a Model that Session::load made from a package: the package file, the
// engine the model asks for ("native" when a library fits this host) and why (logged at -v).
inline constexpr const char* kPackagePathKey = "hodu.package.path";
inline constexpr const char* kPreferredEngineKey = "hodu.engine";
inline constexpr const char* kEngineReasonKey = "hodu.engine.reason";

// An opened package: the file mapped (copy-on-write) and every check passed.
class Package {
 public:
  // Maps and verifies the whole file: magic, version, flags, sizes, the file checksum, each
  // section's SHA-256, zero padding, the metadata. InvalidModel naming the file and what
  // failed; Io when it cannot be read. Opening a file already open (same path, unchanged on
  // disk) while a Package of it is alive gives that one, without hashing again.
  static std::shared_ptr<const Package> open(const std::string& path);
  // The same checks on bytes in memory (`what` names them in errors).
  static std::shared_ptr<const Package> from_bytes(std::string bytes, const std::string& what);

  ~Package();
  Package(const Package&) = delete;
  Package& operator=(const Package&) = delete;

  const std::string& path() const { return path_; }  // absolute; `what` for from_bytes
  uint32_t version() const { return version_; }
  uint64_t file_size() const { return size_; }
  const Sha256Digest& file_checksum() const { return file_sum_; }
  const std::vector<SectionInfo>& sections() const { return sections_; }
  const SectionInfo* find(const std::string& name) const;
  std::string_view bytes(const SectionInfo& s) const;
  const Meta& meta() const { return meta_; }
  // The file is mapped (open), not copied (from_bytes): unwritten pages may be given back
  // to the kernel and are read from the file again.
  bool mapped() const { return mapped_; }

  // The graph, its tensors wrapping the weights section in place (they keep the package
  // alive). Metadata as packed, none of the keys above.
  Model model() const;
  // model() plus the keys above: Session::load runs it on the native engine with the
  // library for this host when the package has one, else on the default engine.
  Model runnable_model() const;
  // `hodu info --json` of the package: the metadata's fields and "package" (file, bytes,
  // format version, checksum, checksums_ok, sections with their SHA-256, what runs here).
  std::string describe_json() const;

 private:
  Package() = default;
  void parse(const std::string& what);

  std::string path_;
  uint8_t* base_ = nullptr;  // the mapping (or owned_'s bytes)
  uint64_t size_ = 0;
  bool mapped_ = false;
  std::string owned_;
  uint32_t version_ = 0;
  Sha256Digest file_sum_{};
  std::vector<SectionInfo> sections_;
  Meta meta_;
  std::weak_ptr<const Package> self_;
};

// True for a path ending in ".hodupkg" and for bytes starting with the magic.
bool is_package_path(const std::string& path);
bool is_package_bytes(std::string_view bytes);

}  // namespace hodu::pkg
