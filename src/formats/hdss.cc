// .hdss: hodu's binary model format (byte layout in docs/hdss.md).
//
//   header (64 bytes) | graph section | padding | tensor-data section
//
// The graph section is a compact binary encoding of the Model (LEB128 varints,
// length-prefixed strings, every field of every struct, so the round trip is
// exact). Every non-string tensor (initializers and tensor attributes) lives in
// the data section, each at a 64-byte aligned offset, so read_hdss_file can
// memory-map the file and wrap the tensors without a copy.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <limits>

#include "formats/little_endian.h"
#include "formats/model_io.h"

namespace hodu {
namespace {

constexpr char kMagic[4] = {'H', 'D', 'S', 'S'};
constexpr uint32_t kVersion = 1;
constexpr uint32_t kHeaderSize = 64;
constexpr uint64_t kAlign = 64;
constexpr uint32_t kRequiredFlagsMask = 0xFFFFu;  // low 16 bits: features a reader must know
// Required flag: the tensor data lives outside the file (a .hodupkg's weights section).
constexpr uint32_t kExternalData = 0x1u;
constexpr uint32_t kKnownRequiredFlags = kExternalData;
constexpr int kMaxDepth = 100;

uint64_t fnv1a64(const uint8_t* p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

uint64_t align_up(uint64_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

// Presence bits of the optional Attribute fields.
enum AttrField : uint32_t {
  kF = 1u << 0, kI = 1u << 1, kS = 1u << 2, kT = 1u << 3, kG = 1u << 4, kFloats = 1u << 5,
  kInts = 1u << 6, kStrings = 1u << 7, kTensors = 1u << 8, kGraphs = 1u << 9, kTypes = 1u << 10,
  kRef = 1u << 11, kDoc = 1u << 12, kAllFields = (1u << 13) - 1,
};

// ---- writer -----------------------------------------------------------------

class Writer {
 public:
  std::string out;
  struct Blob {
    const void* data;
    uint64_t offset;
    uint64_t size;
  };
  std::vector<Tensor> keep;  // contiguous copies kept alive until the data is written
  std::vector<Blob> blobs;
  uint64_t data_end = 0;
  // Set: each tensor's bytes go to external data, which gives their offset (no data section).
  std::function<uint64_t(const Tensor&)> place;

  void u8(uint8_t v) { out.push_back(static_cast<char>(v)); }
  void uv(uint64_t v) {
    while (v >= 0x80) {
      u8(static_cast<uint8_t>(v | 0x80));
      v >>= 7;
    }
    u8(static_cast<uint8_t>(v));
  }
  void sv(int64_t v) { uv((static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63)); }
  void str(const std::string& s) {
    uv(s.size());
    out += s;
  }
  void f32(float f) {
    char b[4];
    std::memcpy(b, &f, 4);
    out.append(b, 4);
  }

  void shape(const Shape& s) {
    u8(s.rank_known() ? 1 : 0);
    uv(s.dims().size());
    for (const auto& d : s.dims()) {
      sv(d.value);
      str(d.symbol);
    }
  }

  void type(const ValueType& t) {
    u8(static_cast<uint8_t>(t.kind));
    u8(static_cast<uint8_t>(t.dtype));
    u8(static_cast<uint8_t>(t.key_type));
    shape(t.shape);
    u8(t.elem ? 1 : 0);
    if (t.elem) type(*t.elem);
  }

  void tensor(const Tensor& t0) {
    u8(t0.defined() ? 1 : 0);
    if (!t0.defined()) return;
    Tensor t = t0.contiguous();
    u8(static_cast<uint8_t>(t.dtype()));
    uv(t.shape().size());
    for (int64_t d : t.shape()) sv(d);
    if (t.dtype() == DType::String) {
      const std::string* s = t.numel() ? t.string_data() : nullptr;
      for (int64_t i = 0; i < t.numel(); ++i) str(s[i]);
      return;
    }
    uint64_t size = t.nbytes();
    if (place) {
      uint64_t offset = size ? place(t) : 0;
      HODU_CHECK(offset % kAlign == 0, ErrorCode::Internal, "external tensor data at offset {} is not 64-byte aligned",
                 offset);
      uv(offset);
      uv(size);
      return;
    }
    uint64_t offset = size ? align_up(data_end) : 0;
    if (size) {
      blobs.push_back({t.raw_data(), offset, size});
      keep.push_back(t);
      data_end = offset + size;
    }
    uv(offset);
    uv(size);
  }

  void value(const Value& v) {
    str(v.name);
    type(v.type);
    str(v.doc);
  }

  void attribute(const Attribute& a) {
    str(a.name);
    u8(static_cast<uint8_t>(a.kind));
    uint32_t mask = 0;
    uint32_t fbits;
    std::memcpy(&fbits, &a.f, 4);
    if (fbits) mask |= kF;
    if (a.i) mask |= kI;
    if (!a.s.empty()) mask |= kS;
    if (a.t.defined()) mask |= kT;
    if (a.g) mask |= kG;
    if (!a.floats.empty()) mask |= kFloats;
    if (!a.ints.empty()) mask |= kInts;
    if (!a.strings.empty()) mask |= kStrings;
    if (!a.tensors.empty()) mask |= kTensors;
    if (!a.graphs.empty()) mask |= kGraphs;
    if (!a.types.empty()) mask |= kTypes;
    if (!a.ref_attr_name.empty()) mask |= kRef;
    if (!a.doc.empty()) mask |= kDoc;
    uv(mask);
    if (mask & kF) f32(a.f);
    if (mask & kI) sv(a.i);
    if (mask & kS) str(a.s);
    if (mask & kT) tensor(a.t);
    if (mask & kG) graph(*a.g);
    if (mask & kFloats) {
      uv(a.floats.size());
      for (float f : a.floats) f32(f);
    }
    if (mask & kInts) {
      uv(a.ints.size());
      for (int64_t v : a.ints) sv(v);
    }
    if (mask & kStrings) {
      uv(a.strings.size());
      for (const auto& s : a.strings) str(s);
    }
    if (mask & kTensors) {
      uv(a.tensors.size());
      for (const auto& t : a.tensors) tensor(t);
    }
    if (mask & kGraphs) {
      uv(a.graphs.size());
      for (const auto& g : a.graphs) {
        u8(g ? 1 : 0);
        if (g) graph(*g);
      }
    }
    if (mask & kTypes) {
      uv(a.types.size());
      for (const auto& t : a.types) type(t);
    }
    if (mask & kRef) str(a.ref_attr_name);
    if (mask & kDoc) str(a.doc);
  }

  void node(const Node& n) {
    str(n.name);
    str(n.op_type);
    str(n.domain);
    str(n.doc);
    uv(n.inputs.size());
    for (const auto& s : n.inputs) str(s);
    uv(n.outputs.size());
    for (const auto& s : n.outputs) str(s);
    uv(n.attributes.size());
    for (const auto& a : n.attributes) attribute(a);
  }

  void graph(const Graph& g) {
    str(g.name);
    str(g.doc);
    uv(g.inputs.size());
    for (const auto& v : g.inputs) value(v);
    uv(g.outputs.size());
    for (const auto& v : g.outputs) value(v);
    uv(g.initializers.size());
    for (const auto& [k, t] : g.initializers) {
      str(k);
      tensor(t);
    }
    uv(g.value_types.size());
    for (const auto& [k, t] : g.value_types) {
      str(k);
      type(t);
    }
    uv(g.nodes.size());
    for (const auto& n : g.nodes) node(n);
  }

  void model(const Model& m) {
    sv(m.ir_version);
    str(m.producer_name);
    str(m.producer_version);
    str(m.domain);
    sv(m.model_version);
    str(m.doc);
    uv(m.opset_imports.size());
    for (const auto& [d, v] : m.opset_imports) {
      str(d);
      sv(v);
    }
    uv(m.metadata.size());
    for (const auto& [k, v] : m.metadata) {
      str(k);
      str(v);
    }
    graph(m.graph);
  }
};

// ---- reader -----------------------------------------------------------------

// Keeps a memory-mapped file alive; the tensors that wrap it hold a reference (through a
// shared_ptr<const void>, which external data's owner can be too).
struct Mapping {
  void* addr = nullptr;
  size_t size = 0;
  ~Mapping() {
    if (addr) munmap(addr, size);
  }
};

class Reader {
 public:
  Reader(const uint8_t* p, const uint8_t* end, const uint8_t* data, uint64_t data_size, const std::string& what,
         std::shared_ptr<const void> mapping)
      : p_(p), end_(end), data_(data), data_size_(data_size), what_(what), mapping_(std::move(mapping)) {}

  Model model() {
    Model m;
    m.ir_version = sv();
    m.producer_name = str();
    m.producer_version = str();
    m.domain = str();
    m.model_version = sv();
    m.doc = str();
    uint64_t n = count(2);
    for (uint64_t i = 0; i < n; ++i) {
      std::string d = str();
      m.opset_imports[d] = sv();
    }
    n = count(2);
    for (uint64_t i = 0; i < n; ++i) {
      std::string k = str();
      std::string v = str();
      m.metadata.emplace_back(std::move(k), std::move(v));
    }
    m.graph = graph();
    if (p_ != end_) bad("{} bytes left over after the model", end_ - p_);
    return m;
  }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
  const uint8_t* data_;
  uint64_t data_size_;
  const std::string& what_;
  std::shared_ptr<const void> mapping_;
  int depth_ = 0;

  template <typename... Args>
  [[noreturn]] void bad(fmt::format_string<Args...> f, Args&&... args) {
    fail(ErrorCode::InvalidModel, "{}: corrupt graph section: {}", what_, fmt::format(f, std::forward<Args>(args)...));
  }

  struct Depth {
    Reader& r;
    explicit Depth(Reader& reader) : r(reader) {
      if (++r.depth_ > kMaxDepth) r.bad("nesting deeper than {}", kMaxDepth);
    }
    ~Depth() { --r.depth_; }
  };

  uint8_t u8() {
    if (p_ >= end_) bad("truncated");
    return *p_++;
  }
  uint64_t uv() {
    uint64_t v = 0;
    for (int shift = 0;; shift += 7) {
      uint8_t b = u8();
      if (shift == 63 && (b & 0x7e)) bad("varint overflows 64 bits");
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
      if (shift >= 63) bad("varint too long");
    }
  }
  int64_t sv() {
    uint64_t u = uv();
    return static_cast<int64_t>((u >> 1) ^ (~(u & 1) + 1));
  }
  // A count of items each taking at least `min_bytes` bytes.
  uint64_t count(uint64_t min_bytes) {
    uint64_t n = uv();
    if (n > static_cast<uint64_t>(end_ - p_) / min_bytes) bad("count {} exceeds the section", n);
    return n;
  }
  std::string str() {
    uint64_t n = uv();
    if (n > static_cast<uint64_t>(end_ - p_)) bad("string of {} bytes exceeds the section", n);
    std::string s(reinterpret_cast<const char*>(p_), n);
    p_ += n;
    return s;
  }
  float f32() {
    if (end_ - p_ < 4) bad("truncated");
    float f;
    std::memcpy(&f, p_, 4);
    p_ += 4;
    return f;
  }
  DType dtype() {
    uint8_t v = u8();
    if (v >= kNumDTypes) bad("unknown dtype code {}", v);
    return static_cast<DType>(v);
  }

  Shape shape() {
    uint8_t known = u8();
    if (known > 1) bad("bad shape flag {}", known);
    uint64_t n = count(2);
    std::vector<Dim> dims;
    dims.reserve(n);
    for (uint64_t i = 0; i < n; ++i) {
      Dim d;
      d.value = sv();
      d.symbol = str();
      dims.push_back(std::move(d));
    }
    if (!known) {
      if (n) bad("a shape of unknown rank with dims");
      return Shape::unknown_rank();
    }
    return Shape(std::move(dims));
  }

  ValueType type() {
    Depth guard(*this);
    ValueType t;
    uint8_t k = u8();
    if (k > static_cast<uint8_t>(ValueType::Kind::Map)) bad("unknown type kind {}", k);
    t.kind = static_cast<ValueType::Kind>(k);
    t.dtype = dtype();
    t.key_type = dtype();
    t.shape = shape();
    uint8_t has = u8();
    if (has > 1) bad("bad element flag {}", has);
    if (has) t.elem = std::make_shared<ValueType>(type());
    return t;
  }

  Tensor tensor() {
    uint8_t defined = u8();
    if (defined > 1) bad("bad tensor flag {}", defined);
    if (!defined) return Tensor();
    DType dt = dtype();
    if (dt == DType::Undefined) bad("tensor of undefined dtype");
    uint64_t rank = count(1);
    std::vector<int64_t> dims;
    int64_t numel = 1;
    for (uint64_t i = 0; i < rank; ++i) {
      int64_t d = sv();
      if (d < 0) bad("negative tensor dim {}", d);
      if (d && numel > std::numeric_limits<int64_t>::max() / 16 / d) bad("tensor too large");
      numel *= d;
      dims.push_back(d);
    }
    if (dt == DType::String) {
      if (static_cast<uint64_t>(numel) > static_cast<uint64_t>(end_ - p_)) bad("string tensor exceeds the section");
      std::vector<std::string> v;
      v.reserve(static_cast<size_t>(numel));
      for (int64_t i = 0; i < numel; ++i) v.push_back(str());
      return Tensor::from_strings(std::move(dims), v);
    }
    uint64_t offset = uv();
    uint64_t size = uv();
    uint64_t need = dtype_storage_bytes(dt, numel);
    if (size != need)
      bad("tensor {}{} has {} bytes of data, expected {}", dtype_name(dt), shape_to_string(dims), size, need);
    if (size == 0) return Tensor::empty(dt, std::move(dims));
    if (offset % kAlign) bad("tensor data offset {} is not 64-byte aligned", offset);
    if (offset > data_size_ || size > data_size_ - offset)
      bad("tensor data [{}, +{}) lies outside the data section ({} bytes)", offset, size, data_size_);
    const uint8_t* src = data_ + offset;
    if (!mapping_) return Tensor::from_bytes(dt, std::move(dims), src, size);
    auto keep = mapping_;
    auto storage = Storage::wrap(const_cast<uint8_t*>(src), size, [keep]() mutable { keep.reset(); });
    return Tensor::from_storage(dt, std::move(dims), std::move(storage));
  }

  Value value() {
    Value v;
    v.name = str();
    v.type = type();
    v.doc = str();
    return v;
  }

  Attribute attribute() {
    Attribute a;
    a.name = str();
    uint8_t k = u8();
    if (k > static_cast<uint8_t>(Attribute::Kind::SparseTensor)) bad("unknown attribute kind {}", k);
    a.kind = static_cast<Attribute::Kind>(k);
    uint64_t mask = uv();
    if (mask & ~static_cast<uint64_t>(kAllFields)) bad("unknown attribute fields {:#x}", mask);
    if (mask & kF) a.f = f32();
    if (mask & kI) a.i = sv();
    if (mask & kS) a.s = str();
    if (mask & kT) a.t = tensor();
    if (mask & kG) a.g = std::make_shared<Graph>(graph());
    if (mask & kFloats) {
      uint64_t n = count(4);
      for (uint64_t i = 0; i < n; ++i) a.floats.push_back(f32());
    }
    if (mask & kInts) {
      uint64_t n = count(1);
      for (uint64_t i = 0; i < n; ++i) a.ints.push_back(sv());
    }
    if (mask & kStrings) {
      uint64_t n = count(1);
      for (uint64_t i = 0; i < n; ++i) a.strings.push_back(str());
    }
    if (mask & kTensors) {
      uint64_t n = count(1);
      for (uint64_t i = 0; i < n; ++i) a.tensors.push_back(tensor());
    }
    if (mask & kGraphs) {
      uint64_t n = count(1);
      for (uint64_t i = 0; i < n; ++i) {
        uint8_t has = u8();
        if (has != 1) bad("attribute '{}' has a missing graph in its graph list", a.name);
        a.graphs.push_back(std::make_shared<Graph>(graph()));
      }
    }
    if (mask & kTypes) {
      uint64_t n = count(6);
      for (uint64_t i = 0; i < n; ++i) a.types.push_back(type());
    }
    if (mask & kRef) a.ref_attr_name = str();
    if (mask & kDoc) a.doc = str();
    return a;
  }

  Node node() {
    Node n;
    n.name = str();
    n.op_type = str();
    n.domain = str();
    n.doc = str();
    uint64_t c = count(1);
    for (uint64_t i = 0; i < c; ++i) n.inputs.push_back(str());
    c = count(1);
    for (uint64_t i = 0; i < c; ++i) n.outputs.push_back(str());
    c = count(3);
    for (uint64_t i = 0; i < c; ++i) n.attributes.push_back(attribute());
    return n;
  }

  Graph graph() {
    Depth guard(*this);
    Graph g;
    g.name = str();
    g.doc = str();
    uint64_t c = count(8);
    for (uint64_t i = 0; i < c; ++i) g.inputs.push_back(value());
    c = count(8);
    for (uint64_t i = 0; i < c; ++i) g.outputs.push_back(value());
    c = count(2);
    for (uint64_t i = 0; i < c; ++i) {
      std::string k = str();
      g.initializers.emplace_back(std::move(k), tensor());
    }
    c = count(7);
    for (uint64_t i = 0; i < c; ++i) {
      std::string k = str();
      g.value_types[k] = type();
    }
    c = count(7);
    for (uint64_t i = 0; i < c; ++i) g.nodes.push_back(node());
    return g;
  }
};


// Tensor data kept outside the .hdss image (kExternalData); `keep` owns it.
struct ExternalData {
  const uint8_t* data = nullptr;
  uint64_t size = 0;
  std::shared_ptr<const void> keep;
};

// Parses and checks the whole file image. `mapping` set: tensors wrap the image; `external`
// set: they wrap (or copy, when it has no owner) the external data.
Model read_image(const uint8_t* base, size_t n, const std::string& what, std::shared_ptr<const void> mapping,
                 bool verify_data, const ExternalData* external = nullptr) {
  if (n < 4 || std::memcmp(base, kMagic, 4) != 0)
    fail(ErrorCode::InvalidModel, "{}: not an .hdss file (wrong magic; expected \"HDSS\")", what);
  if (n < 8) fail(ErrorCode::InvalidModel, "{}: truncated header ({} bytes, expected {})", what, n, kHeaderSize);
  uint32_t version = get_u32(base + 4);
  if (version > kVersion)
    fail(ErrorCode::InvalidModel, "{}: format version {} is newer than this hodu supports ({})", what, version,
         kVersion);
  if (version == 0) fail(ErrorCode::InvalidModel, "{}: format version 0 is invalid", what);
  if (n < kHeaderSize)
    fail(ErrorCode::InvalidModel, "{}: truncated header ({} bytes, expected {})", what, n, kHeaderSize);
  uint32_t flags = get_u32(base + 8);
  uint32_t header_size = get_u32(base + 12);
  uint64_t graph_offset = get_u64(base + 16), graph_size = get_u64(base + 24);
  uint64_t data_offset = get_u64(base + 32), data_size = get_u64(base + 40);
  uint64_t graph_sum = get_u64(base + 48), data_sum = get_u64(base + 56);
  if (flags & kRequiredFlagsMask & ~kKnownRequiredFlags)
    fail(ErrorCode::InvalidModel, "{}: uses features this hodu does not know (flags {:#x})", what, flags);
  if ((flags & kExternalData) && !external)
    fail(ErrorCode::InvalidModel,
         "{}: its tensor data is kept outside the file (the graph section of a .hodupkg): load the package", what);
  if (header_size < kHeaderSize || header_size > n)
    fail(ErrorCode::InvalidModel, "{}: bad header size {}", what, header_size);
  if (graph_offset < header_size || graph_offset > n || graph_size > n - graph_offset)
    fail(ErrorCode::InvalidModel,
         "{}: truncated or corrupt: graph section [{}, +{}) lies outside the file ({} bytes)", what, graph_offset,
         graph_size, n);
  if (data_offset % kAlign)
    fail(ErrorCode::InvalidModel, "{}: data section offset {} is not 64-byte aligned", what, data_offset);
  if (data_offset > n || data_size > n - data_offset)
    fail(ErrorCode::InvalidModel,
         "{}: truncated or corrupt: data section [{}, +{}) lies outside the file ({} bytes)", what, data_offset,
         data_size, n);
  if (data_size && data_offset < graph_offset + graph_size)
    fail(ErrorCode::InvalidModel, "{}: data section overlaps the graph section", what);
  const uint8_t* graph = base + graph_offset;
  uint64_t sum = fnv1a64(graph, graph_size);
  if (sum != graph_sum)
    fail(ErrorCode::InvalidModel, "{}: graph section checksum mismatch (stored {:016x}, computed {:016x})", what,
         graph_sum, sum);
  if (verify_data && !external) {
    uint64_t dsum = fnv1a64(base + data_offset, data_size);
    if (dsum != data_sum)
      fail(ErrorCode::InvalidModel, "{}: tensor data checksum mismatch (stored {:016x}, computed {:016x})", what,
           data_sum, dsum);
  }
  if (external) {
    Reader r(graph, graph + graph_size, external->data, external->size, what, external->keep);
    return r.model();
  }
  Reader r(graph, graph + graph_size, base + data_offset, data_size, what, std::move(mapping));
  return r.model();
}

}  // namespace

namespace {

std::string write_image(const Model& model, std::function<uint64_t(const Tensor&)> place) {
  Writer w;
  w.place = std::move(place);
  w.model(model);
  uint64_t graph_size = w.out.size();
  uint64_t data_offset = align_up(kHeaderSize + graph_size);
  uint64_t data_size = w.data_end;
  std::string file(data_offset + data_size, '\0');
  std::memcpy(file.data(), kMagic, 4);
  put_u32(file, 4, kVersion);
  put_u32(file, 8, w.place ? kExternalData : 0);
  put_u32(file, 12, kHeaderSize);
  put_u64(file, 16, kHeaderSize);
  put_u64(file, 24, graph_size);
  put_u64(file, 32, data_offset);
  put_u64(file, 40, data_size);
  std::memcpy(file.data() + kHeaderSize, w.out.data(), graph_size);
  for (const auto& b : w.blobs) std::memcpy(file.data() + data_offset + b.offset, b.data, b.size);
  put_u64(file, 48, fnv1a64(reinterpret_cast<const uint8_t*>(w.out.data()), graph_size));
  put_u64(file, 56, fnv1a64(reinterpret_cast<const uint8_t*>(file.data()) + data_offset, data_size));
  return file;
}

}  // namespace

std::string write_hdss(const Model& model) { return write_image(model, nullptr); }

std::string write_hdss_external(const Model& model, const std::function<uint64_t(const Tensor&)>& place) {
  HODU_CHECK(place != nullptr, ErrorCode::Internal, "write_hdss_external without a place function");
  return write_image(model, place);
}

Model read_hdss_external(std::string_view bytes, std::string_view data, std::shared_ptr<const void> keep,
                         const std::string& what) {
  ExternalData external{reinterpret_cast<const uint8_t*>(data.data()), data.size(), std::move(keep)};
  return read_image(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), what, nullptr, true, &external);
}

Model read_hdss(std::string_view bytes, const std::string& what) {
  return read_image(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), what, nullptr, true);
}

Model read_hdss_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(ErrorCode::Io, "{}: cannot open: {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    fail(ErrorCode::Io, "{}: cannot stat: {}", path, std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(ErrorCode::Io, "{}: not a regular file", path);
  }
  size_t size = static_cast<size_t>(st.st_size);
  if (size < kHeaderSize) {
    // Too small to map usefully; read it for the error message (magic/version first).
    std::string bytes(size, '\0');
    size_t got = 0;
    while (got < size) {
      ssize_t r = ::read(fd, bytes.data() + got, size - got);
      if (r <= 0) break;
      got += static_cast<size_t>(r);
    }
    ::close(fd);
    bytes.resize(got);
    return read_hdss(bytes, path);
  }
  // Private, writable mapping: copy-on-write, so code that writes into a weight
  // never changes the file (and never faults).
  void* addr = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  int e = errno;
  ::close(fd);
  if (addr == MAP_FAILED) fail(ErrorCode::Io, "{}: cannot memory-map: {}", path, std::strerror(e));
  auto mapping = std::make_shared<Mapping>();
  mapping->addr = addr;
  mapping->size = size;
  const auto* base = static_cast<const uint8_t*>(addr);
  return read_image(base, size, path, std::move(mapping), false);
}

}  // namespace hodu
