// Seeded generators and the random tensors drawn from them.
#include <cmath>
#include <mutex>
#include <random>
#include <sstream>

#include "frontend/autograd/node.h"
#include "frontend/capture/tracer.h"
#include "kernels/cpu/tensor/kernels.h"
#include "hodu/autograd.h"
#include "hodu/random.h"

namespace hodu::eager {

struct Generator::State {
  std::mt19937 engine;
};

Generator::Generator(uint64_t seed) : seed_(seed), state_(std::make_unique<State>()) { manual_seed(seed); }
Generator::~Generator() = default;
Generator::Generator(const Generator& o) : seed_(o.seed_), state_(std::make_unique<State>(*o.state_)) {}
Generator& Generator::operator=(const Generator& o) {
  seed_ = o.seed_;
  *state_ = *o.state_;
  return *this;
}

void Generator::manual_seed(uint64_t seed) {
  seed_ = seed;
  // Both halves of the seed matter.
  std::seed_seq seq{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
  state_->engine.seed(seq);
}

uint32_t Generator::next_u32() { return static_cast<uint32_t>(state_->engine()); }
uint64_t Generator::next_u64() { return (static_cast<uint64_t>(next_u32()) << 32) | next_u32(); }
float Generator::uniform_float() { return static_cast<float>(next_u32() >> 8) * (1.0f / 16777216.0f); }
double Generator::uniform() { return static_cast<double>(next_u64() >> 11) * (1.0 / 9007199254740992.0); }

double Generator::normal() {
  // Box–Muller; u1 in (0, 1] so that the log is finite.
  const double u1 = 1.0 - uniform(), u2 = uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

std::string Generator::state() const {
  std::ostringstream os;
  os << seed_ << ' ' << state_->engine;
  return os.str();
}

void Generator::set_state(const std::string& text) {
  std::istringstream is(text);
  uint64_t seed = 0;
  std::mt19937 e;
  is >> seed >> e;
  HODU_CHECK(!is.fail(), ErrorCode::InvalidArgument, "Generator::set_state: not a generator state");
  seed_ = seed;
  state_->engine = e;
}

namespace {
std::mutex& default_mutex() {
  static std::mutex mu;
  return mu;
}
// Runs f(generator) on `gen`, or on the default generator under its lock.
template <typename F>
void with_generator(Generator* gen, F&& f) {
  if (gen) {
    f(*gen);
    return;
  }
  std::lock_guard<std::mutex> lock(default_mutex());
  f(Generator::default_generator());
}

void check_float(DType dtype, const char* op) {
  HODU_CHECK(kernels::is_float(dtype), ErrorCode::InvalidArgument, "{}: dtype {} is not a floating-point type", op,
             dtype_name(dtype));
}

// Fills a row-major f64 or f32 buffer from `draw`, then converts to `dtype`.
template <typename Draw>
Tensor random_tensor(const Dims& shape, DType dtype, Generator* gen, Draw draw) {
  const bool f32 = dtype != DType::F64;
  hodu::Tensor t = kernels::empty(f32 ? DType::F32 : DType::F64, shape);
  const int64_t n = t.numel();
  with_generator(gen, [&](Generator& g) {
    if (f32) {
      float* p = static_cast<float*>(t.raw_data());
      for (int64_t i = 0; i < n; ++i) p[i] = static_cast<float>(draw(g, true));
    } else {
      double* p = static_cast<double*>(t.raw_data());
      for (int64_t i = 0; i < n; ++i) p[i] = draw(g, false);
    }
  });
  return make_tensor(kernels::cast(t, dtype));
}
}  // namespace

Generator& Generator::default_generator() {
  static Generator g(0);
  return g;
}

void manual_seed(uint64_t seed) {
  std::lock_guard<std::mutex> lock(default_mutex());
  Generator::default_generator().manual_seed(seed);
}

Tensor rand(const Dims& shape, Generator* gen, DType dtype) {
  check_float(dtype, "rand");
  return random_tensor(shape, dtype, gen, [](Generator& g, bool f32) { return f32 ? g.uniform_float() : g.uniform(); });
}

Tensor randn(const Dims& shape, Generator* gen, DType dtype) {
  check_float(dtype, "randn");
  return random_tensor(shape, dtype, gen, [](Generator& g, bool) { return g.normal(); });
}

Tensor randint(int64_t low, int64_t high, const Dims& shape, Generator* gen, DType dtype) {
  HODU_CHECK(high > low, ErrorCode::InvalidArgument, "randint: the range [{}, {}) is empty", low, high);
  hodu::Tensor t = kernels::empty(DType::I64, shape);
  int64_t* p = static_cast<int64_t*>(t.raw_data());
  const uint64_t span = static_cast<uint64_t>(high - low);
  with_generator(gen, [&](Generator& g) {
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = low + static_cast<int64_t>(g.next_u64() % span);
  });
  return make_tensor(kernels::cast(t, dtype));
}

Tensor randperm(int64_t n, Generator* gen) {
  HODU_CHECK(n >= 0, ErrorCode::InvalidArgument, "randperm: n = {}", n);
  hodu::Tensor t = kernels::empty(DType::I64, {n});
  int64_t* p = static_cast<int64_t*>(t.raw_data());
  for (int64_t i = 0; i < n; ++i) p[i] = i;
  // Fisher–Yates from the end.
  with_generator(gen, [&](Generator& g) {
    for (int64_t i = n - 1; i > 0; --i) std::swap(p[i], p[static_cast<int64_t>(g.next_u64() % (i + 1))]);
  });
  return make_tensor(t);
}

Tensor& Tensor::uniform_(double from, double to, Generator* gen) {
  NoGradGuard guard;
  Tensor r = rand(shape(), gen, dtype() == DType::F64 ? DType::F64 : DType::F32);
  return copy_(r * (to - from) + from);
}

Tensor& Tensor::normal_(double mean, double std, Generator* gen) {
  NoGradGuard guard;
  Tensor r = randn(shape(), gen, dtype() == DType::F64 ? DType::F64 : DType::F32);
  return copy_(r * std + mean);
}

Tensor bernoulli(const Tensor& p, Generator* gen) {
  const hodu::Tensor pc = kernels::contiguous(kernels::cast(core(p, "bernoulli"), DType::F64));
  hodu::Tensor out = kernels::empty(DType::F64, pc.shape());
  const double* pp = static_cast<const double*>(pc.raw_data());
  double* o = static_cast<double*>(out.raw_data());
  with_generator(gen, [&](Generator& g) {
    for (int64_t i = 0; i < out.numel(); ++i) o[i] = g.uniform() < pp[i] ? 1.0 : 0.0;
  });
  return make_tensor(kernels::cast(out, kernels::is_float(p.dtype()) ? p.dtype() : DType::F32));
}

Tensor dropout(const Tensor& x, double p, bool training, Generator* gen) {
  HODU_CHECK(p >= 0.0 && p <= 1.0, ErrorCode::InvalidArgument, "dropout: probability {} is not in [0, 1]", p);
  if (!training || p == 0.0) return x;
  if (p == 1.0) return x * 0.0;
  // A mask of 0 or 1 / (1 - p), as PyTorch scales at training time.
  const hodu::Tensor& xc = core(x, "dropout");
  hodu::Tensor mask = kernels::empty(xc.dtype() == DType::F64 ? DType::F64 : DType::F32, xc.shape());
  const double scale = 1.0 / (1.0 - p);
  with_generator(gen, [&](Generator& g) {
    if (mask.dtype() == DType::F32) {
      float* m = static_cast<float*>(mask.raw_data());
      const float keep = static_cast<float>(1.0 - p), s = static_cast<float>(scale);
      for (int64_t i = 0; i < mask.numel(); ++i) m[i] = g.uniform_float() < keep ? s : 0.0f;
    } else {
      double* m = static_cast<double*>(mask.raw_data());
      for (int64_t i = 0; i < mask.numel(); ++i) m[i] = g.uniform() < 1.0 - p ? scale : 0.0;
    }
  });
  Tensor m = make_tensor(kernels::cast(mask, xc.dtype()));
  if (trace::active()) {
    // Captured as ONNX Dropout in training mode: its own mask at run time.
    Tensor y;
    {
      trace::Pause pause;
      y = x * m;
    }
    trace::record_dropout(x, y, p);
    return y;
  }
  return x * m;
}

}  // namespace hodu::eager
