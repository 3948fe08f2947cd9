// The per-instance context behind hodu/kernels.h: oneDNN engine and stream,
// the thread count, the prepared ops, and scratch memory shared by the ops
// (they run one at a time within an instance). Internal to libhodu_kernels.
#pragma once
#include <oneapi/dnnl/dnnl.hpp>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "hodu/kernels.h"

struct hodu_kernel {
  enum class Kind { Conv2d, MatMul, Pool2d, Concat };
  explicit hodu_kernel(Kind k) : kind(k) {}
  virtual ~hodu_kernel() = default;
  const Kind kind;
  // Convs, pools, concats: the layout run() leaves dst in (plain unless
  // dst_native) and its HODU_LAYOUT_* code.
  dnnl::memory::desc written;
  int layout = HODU_LAYOUT_NCHW;
  // The layout is one only this op's kernel needs (Winograd's nChw16c): a conv reading it picks
  // its own and reorders, rather than keep it for the rest of the network.
  bool layout_for_itself = false;
};

namespace hodu::kernels {

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using AlignedBytes = std::unique_ptr<char, FreeDeleter>;
AlignedBytes aligned_bytes(size_t bytes);  // 64-byte aligned; throws std::bad_alloc

// Scratch a run borrows from the context; grown only while ops are prepared.
struct Scratch {
  AlignedBytes bytes;
  size_t size = 0;
  void reserve(size_t n);
  void* data() const { return bytes.get(); }
};

// The calling thread's OpenMP thread count set to the context's for a scope
// (oneDNN reads it), then restored: the caller's setting is left alone.
class ThreadScope {
 public:
  explicit ThreadScope(int threads);
  ~ThreadScope();
  ThreadScope(const ThreadScope&) = delete;
  ThreadScope& operator=(const ThreadScope&) = delete;

 private:
  int saved_;
};

// A primitive run through the C API with a fixed argument array: no
// allocation on our side of the run path.
struct Execution {
  dnnl::primitive primitive;
  std::vector<dnnl_exec_arg_t> args;
  void add(int arg, const dnnl::memory& m) { args.push_back({arg, m.get()}); }
  void run(dnnl::stream& s) const;
};
// One reorder between two memories (their data handles set before each run).
Execution reorder(const dnnl::memory& from, const dnnl::memory& to);

// oneDNN answered with its reference implementation (plain C++ loops): 10-500x slower than
// its jit kernels, worth a reorder to avoid.
template <class PrimitiveDesc>
bool is_reference(const PrimitiveDesc& pd) {
  return std::string(pd.impl_info_str()).rfind("ref", 0) == 0;
}


// A constant (weights, bias) reordered once into the layout a primitive wants. The bytes
// are shared by the ops of one context that pack the same data into the same layout (a
// model with sizes known at run time prepares its ops once per shape).
struct PackedConstant {
  std::shared_ptr<char> bytes;
  dnnl::memory mem;
};

// Failure with a status for the C ABI; the message goes to the context.
struct KernelError {
  int status;
  std::string message;
};
[[noreturn]] void fail(int status, std::string message);

// Appends an activation as eltwise post-ops; KernelError UNSUPPORTED for an unknown one.
void append_activation(dnnl::post_ops& po, int activation, float alpha, float beta);

// HODU_LAYOUT_* of a 4-D f32 desc (OTHER when none fits), and the desc of a layout.
int layout_of(const dnnl::memory::desc& md);
// Bytes the caller's buffer for a native dst holds: channels rounded up to 16.
size_t native_dst_bytes(int64_t batch, int64_t channels, int64_t height, int64_t width);
// Whether a primitive's own dst layout `picked` may be written to the caller's buffer under the
// caller's dst_native mode (PLAIN: never; NATIVE: any; SIMPLE: a named layout; CONCAT: a named
// one but nhwc) and fits in `native_bytes`.
bool native_dst_allowed(int dst_native, const dnnl::memory::desc& picked, size_t native_bytes);
dnnl::memory::desc layout_desc(const dnnl::memory::dims& dims, int layout);

// The dst layout of a producing op (conv, pool, concat), which must be shaped `dims`.
dnnl::memory::desc written_by(const hodu_kernel* producer, const dnnl::memory::dims& dims, const char* what);

// The physical cores in this process's CPU affinity mask (at least 1).
int physical_cores();

}  // namespace hodu::kernels

struct hodu_kernels {
  explicit hodu_kernels(int n);
  int threads;
  dnnl::engine engine;
  dnnl::stream stream;
  std::vector<std::unique_ptr<hodu_kernel>> ops;
  // Constants packed by the ops (pack()): reused while an op holds them.
  struct Packed {
    const float* data;
    dnnl::memory::desc from, to;
    std::weak_ptr<char> bytes;
  };
  std::vector<Packed> packed;
  // oneDNN scratchpad; reordered src/dst (conv), and a matmul's variable B (its A and dst use
  // src/dst) where a strided operand is copied plain first.
  hodu::kernels::Scratch scratchpad, src_buffer, dst_buffer, b_buffer;
  std::string error;
  // Op kinds whose prepare answers UNSUPPORTED (HODU_KERNELS_REFUSE at create): the
  // caller's portable code runs them instead, which tests use to exercise that code.
  std::string refused;

  // Fails with UNSUPPORTED when `kind` ("matmul", "conv2d", "pool2d") is refused.
  void refuse_if_asked(const char* kind) const;
  // share: `data` is the caller's constant (not a temporary copy), so another op packing it
  // into the same layout may reuse the bytes.
  hodu::kernels::PackedConstant pack(const float* data, const dnnl::memory::desc& from, const dnnl::memory::desc& to,
                                     bool share = true);
  // Runs `body` under the thread scope; maps exceptions to a status and the message.
  template <class F>
  int guarded(F&& body) noexcept;
};

template <class F>
int hodu_kernels::guarded(F&& body) noexcept {
  try {
    hodu::kernels::ThreadScope scope(threads);
    error.clear();
    body();
    return HODU_KERNELS_OK;
  } catch (const hodu::kernels::KernelError& e) {
    error = e.message;
    return e.status;
  } catch (const dnnl::error& e) {
    error = std::string("oneDNN: ") + e.what();
    return e.status == dnnl_unimplemented ? HODU_KERNELS_ERR_UNSUPPORTED : HODU_KERNELS_ERR_RUNTIME;
  } catch (const std::bad_alloc&) {
    error = "out of memory";
    return HODU_KERNELS_ERR_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    error = e.what();
    return HODU_KERNELS_ERR_RUNTIME;
  }
}
