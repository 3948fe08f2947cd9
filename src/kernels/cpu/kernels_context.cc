// Context lifetime, threads and the helpers the ops share.
#include "kernels/cpu/kernels_context.h"
#include "kernels/cpu/isa_cap_onednn.h"

#include <omp.h>
#include <sched.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <utility>

#include "core/huge_pages.h"
#include "core/weight_arena.h"

namespace hodu::kernels {

AlignedBytes aligned_bytes(size_t bytes) {
  void* p = aligned_alloc_large(64, (std::max<size_t>(bytes, 1) + 63) / 64 * 64);
  if (!p) throw std::bad_alloc();
  return AlignedBytes(static_cast<char*>(p));
}

void Scratch::reserve(size_t n) {
  if (n <= size) return;
  bytes = aligned_bytes(n);
  size = n;
}

ThreadScope::ThreadScope(int threads) : saved_(omp_get_max_threads()) { omp_set_num_threads(threads); }
ThreadScope::~ThreadScope() { omp_set_num_threads(saved_); }

Execution reorder(const dnnl::memory& from, const dnnl::memory& to) {
  Execution e;
  e.primitive = dnnl::reorder(from, to);
  e.add(DNNL_ARG_FROM, from);
  e.add(DNNL_ARG_TO, to);
  return e;
}

void Execution::run(dnnl::stream& s) const {
  dnnl_status_t st = dnnl_primitive_execute(primitive.get(), s.get(), static_cast<int>(args.size()), args.data());
  if (st != dnnl_success) fail(HODU_KERNELS_ERR_RUNTIME, "oneDNN primitive failed with status " + std::to_string(st));
}

void fail(int status, std::string message) { throw KernelError{status, std::move(message)}; }

void append_activation(dnnl::post_ops& po, int activation, float alpha, float beta) {
  using alg = dnnl::algorithm;
  switch (activation) {
    case HODU_ACTIVATION_NONE: return;
    case HODU_ACTIVATION_CLIP:
      if (alpha == 0.0f && beta == INFINITY) po.append_eltwise(1.0f, alg::eltwise_relu, 0.0f, 0.0f);
      else po.append_eltwise(1.0f, alg::eltwise_clip_v2, alpha, beta);
      return;
    case HODU_ACTIVATION_SIGMOID: po.append_eltwise(1.0f, alg::eltwise_logistic, 0.0f, 0.0f); return;
    case HODU_ACTIVATION_TANH: po.append_eltwise(1.0f, alg::eltwise_tanh, 0.0f, 0.0f); return;
    case HODU_ACTIVATION_SILU: po.append_eltwise(1.0f, alg::eltwise_swish, 1.0f, 0.0f); return;
    case HODU_ACTIVATION_GELU: po.append_eltwise(1.0f, alg::eltwise_gelu_erf, 0.0f, 0.0f); return;
    case HODU_ACTIVATION_HARDSWISH: po.append_eltwise(1.0f, alg::eltwise_hardswish, 0.0f, 0.0f); return;
    default: fail(HODU_KERNELS_ERR_UNSUPPORTED, "unknown activation " + std::to_string(activation));
  }
}

int layout_of(const dnnl::memory::desc& md) {
  const auto dims = md.dims();
  if (dims.size() != 4 || md.data_type() != dnnl::memory::data_type::f32) return HODU_LAYOUT_OTHER;
  for (int l : {HODU_LAYOUT_NCHW, HODU_LAYOUT_NHWC, HODU_LAYOUT_NCHW16C, HODU_LAYOUT_NCHW8C})
    if (md == layout_desc(dims, l)) return l;
  return HODU_LAYOUT_OTHER;
}

size_t native_dst_bytes(int64_t batch, int64_t channels, int64_t height, int64_t width) {
  return static_cast<size_t>(batch * HODU_CONV2D_NATIVE_CHANNELS(channels) * height * width) * sizeof(float);
}

bool native_dst_allowed(int dst_native, const dnnl::memory::desc& picked, size_t native_bytes) {
  int layout = layout_of(picked);
  return dst_native != HODU_DST_PLAIN && picked.get_size() <= native_bytes &&
         (dst_native == HODU_DST_NATIVE || (dst_native == HODU_DST_SIMPLE && layout != HODU_LAYOUT_OTHER) ||
          (dst_native == HODU_DST_CONCAT && layout != HODU_LAYOUT_OTHER && layout != HODU_LAYOUT_NHWC));
}

dnnl::memory::desc layout_desc(const dnnl::memory::dims& dims, int layout) {
  using tag = dnnl::memory::format_tag;
  tag t = layout == HODU_LAYOUT_NHWC      ? tag::nhwc
          : layout == HODU_LAYOUT_NCHW8C  ? tag::nChw8c
          : layout == HODU_LAYOUT_NCHW16C ? tag::nChw16c
                                          : tag::nchw;
  return dnnl::memory::desc(dims, dnnl::memory::data_type::f32, t);
}

dnnl::memory::desc written_by(const hodu_kernel* producer, const dnnl::memory::dims& dims, const char* what) {
  if (producer->kind == hodu_kernel::Kind::MatMul)
    fail(HODU_KERNELS_ERR_INVALID_ARGUMENT, std::string(what) + " producer is a matmul");
  if (producer->written.dims() != dims)
    fail(HODU_KERNELS_ERR_INVALID_ARGUMENT, std::string(what) + " producer's dst is not shaped as expected");
  return producer->written;
}

int physical_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 1;
  std::set<std::pair<int, int>> cores;  // (package, core) of each CPU we may run on
  int logical = 0;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &set)) continue;
    ++logical;
    std::string base = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
    int package = -1, core = -1;
    std::ifstream(base + "physical_package_id") >> package;
    std::ifstream(base + "core_id") >> core;
    cores.insert({package, core < 0 ? cpu : core});
  }
  int n = static_cast<int>(cores.size());
  return n > 0 ? n : std::max(logical, 1);
}

}  // namespace hodu::kernels

using namespace hodu::kernels;

hodu_kernels::hodu_kernels(int n) : threads(n), engine(dnnl::engine::kind::cpu, 0), stream(engine) {
  if (const char* env = std::getenv("HODU_KERNELS_REFUSE")) refused = std::string(",") + env + ",";
}

void hodu_kernels::refuse_if_asked(const char* kind) const {
  if (refused.find(std::string(",") + kind + ",") != std::string::npos || refused == ",all,")
    hodu::kernels::fail(HODU_KERNELS_ERR_UNSUPPORTED, std::string(kind) + ": refused (HODU_KERNELS_REFUSE)");
}

PackedConstant hodu_kernels::pack(const float* data, const dnnl::memory::desc& from, const dnnl::memory::desc& to,
                                  bool share) {
  PackedConstant p;
  // The same constant packed for another op of this context (another shape's): shared.
  for (auto it = packed.begin(); share && it != packed.end();) {
    if (it->bytes.expired()) {
      it = packed.erase(it);
      continue;
    }
    if (it->data == data && it->from == from && it->to == to) {
      p.bytes = it->bytes.lock();
      p.mem = dnnl::memory(to, engine, p.bytes.get());
      return p;
    }
    ++it;
  }
  p.bytes = std::static_pointer_cast<char>(hodu::weight_buffer(to.get_size()));  // beside the other weights, huge pages
  p.mem = dnnl::memory(to, engine, p.bytes.get());
  dnnl::memory src(from, engine, const_cast<float*>(data));
  dnnl::reorder(src, p.mem).execute(stream, src, p.mem);
  stream.wait();
  if (share) packed.push_back({data, from, to, p.bytes});
  return p;
}

extern "C" {

int hodu_kernels_abi_version(void) { return HODU_KERNELS_ABI_VERSION; }

int hodu_kernel_layout(const hodu_kernel* op) { return op ? op->layout : HODU_LAYOUT_NCHW; }

namespace {
struct ConcatKernel : hodu_kernel {
  ConcatKernel() : hodu_kernel(Kind::Concat) {}
};
}  // namespace

int hodu_concat_prepare(hodu_kernels* k, int num_parts, const hodu_kernel* const* parts, const int64_t* channels,
                        int64_t height, int64_t width, hodu_kernel** out) {
  if (!k || num_parts < 1 || !parts || !channels || height <= 0 || width <= 0 || !out)
    return HODU_KERNELS_ERR_INVALID_ARGUMENT;
  *out = nullptr;
  return k->guarded([&] {
    int layout = hodu_kernel_layout(parts[0]);
    int64_t block = layout == HODU_LAYOUT_NCHW ? 1 : layout;
    int64_t total = 0;
    if (layout != HODU_LAYOUT_NCHW && layout != HODU_LAYOUT_NCHW8C && layout != HODU_LAYOUT_NCHW16C)
      fail(HODU_KERNELS_ERR_UNSUPPORTED, "concat: the first part's layout cannot be concatenated in place");
    for (int i = 0; i < num_parts; ++i) {
      dnnl::memory::dims dims = {1, channels[i], height, width};
      if (parts[i]) written_by(parts[i], dims, "concat: part");
      if (hodu_kernel_layout(parts[i]) != layout)
        fail(HODU_KERNELS_ERR_UNSUPPORTED, "concat: part " + std::to_string(i) + " is in another layout than part 0");
      if (channels[i] <= 0 || channels[i] % block)
        fail(HODU_KERNELS_ERR_UNSUPPORTED, "concat: part " + std::to_string(i) + "'s channels are not whole blocks");
      total += channels[i];
    }
    auto op = std::make_unique<ConcatKernel>();
    op->written = layout_desc({1, total, height, width}, layout);
    op->layout = layout;
    k->ops.push_back(std::move(op));
    *out = k->ops.back().get();
  });
}

int hodu_kernels_create(int num_threads, hodu_kernels** out, char* errbuf, size_t errbuf_size) {
  auto report = [&](const char* msg) {
    if (errbuf && errbuf_size) std::snprintf(errbuf, errbuf_size, "%s", msg);
  };
  if (!out) {
    report("out is NULL");
    return HODU_KERNELS_ERR_INVALID_ARGUMENT;
  }
  *out = nullptr;
  // HODU_MAX_ISA caps oneDNN's kernels as it caps hodu's own loops (and the cpu engine's).
  const char* cap = std::getenv("HODU_MAX_ISA");
  const int level = hodu::isa_cap::level_of(cap);
  if (level < 0) {
    const std::string msg = std::string("HODU_MAX_ISA=") + cap +
                            ": expected baseline, avx2, avx2_vnni, avx512, avx512_vnni, avx512_bf16 or amx";
    report(msg.c_str());
    return HODU_KERNELS_ERR_INVALID_ARGUMENT;
  }
  hodu::isa_cap::pass_to_onednn(level);
  if (num_threads <= 0) {
    const char* env = std::getenv("HODU_NUM_THREADS");
    num_threads = env && *env ? std::atoi(env) : 0;
    if (num_threads <= 0) num_threads = physical_cores();
  }
  try {
    *out = new hodu_kernels(num_threads);
    return HODU_KERNELS_OK;
  } catch (const std::bad_alloc&) {
    report("out of memory");
    return HODU_KERNELS_ERR_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    report(e.what());
    return HODU_KERNELS_ERR_RUNTIME;
  }
}

void hodu_kernels_destroy(hodu_kernels* k) { delete k; }

void hodu_kernel_release(hodu_kernels* k, hodu_kernel* op) {
  if (!k || !op) return;
  for (auto it = k->ops.begin(); it != k->ops.end(); ++it)
    if (it->get() == op) {
      k->ops.erase(it);
      return;
    }
}

int hodu_kernels_num_threads(const hodu_kernels* k) { return k ? k->threads : 0; }

const char* hodu_kernels_last_error(const hodu_kernels* k) { return k ? k->error.c_str() : "context is NULL"; }

void hodu_kernels_parallel_for(hodu_kernels* k, int64_t n, int64_t min_range, hodu_kernels_range_fn fn, void* arg) {
  if (n <= 0) return;
  int64_t chunks = std::min<int64_t>(k ? k->threads : 1, n / std::max<int64_t>(min_range, 1));
  if (chunks < 2) {
    fn(arg, 0, n);
    return;
  }
#pragma omp parallel for num_threads(static_cast<int>(chunks)) schedule(static)
  for (int64_t c = 0; c < chunks; ++c) fn(arg, n * c / chunks, n * (c + 1) / chunks);
}

}  // extern "C"
