// oneDNN's matmul against the 1x1 convolution hodu runs a product with constant weights on
// below AVX-512 (kernels/cpu/matmul_as_conv.h), on transformer shapes, one thread, weights in
// cache: the fastest of `rounds` rounds. Run it capped at AVX2 (where the engine takes the
// conv; docs/performance.md) or at the host ISA:
//   ONEDNN_MAX_CPU_ISA=AVX2 OMP_NUM_THREADS=1 build/bin/matmul_conv_bench [rounds]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "kernels/cpu/matmul_as_conv.h"

namespace {

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::max(1, std::atoi(argv[1])) : 15;
  using dt = dnnl::memory::data_type;
  using tag = dnnl::memory::format_tag;
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream s(eng);
  const int64_t rows[] = {1, 16, 128, 197};
  const int64_t kn[][2] = {{384, 1152}, {384, 1536}, {1536, 384}, {768, 768}, {768, 2304}, {768, 3072}, {3072, 768}};
  std::printf("%5s %5s %5s %10s %10s %8s  %s / %s\n", "M", "K", "N", "matmul ms", "conv ms", "conv/mm", "matmul", "conv");
  for (const auto& shape : kn)
    for (int64_t m : rows) {
      const int64_t k = shape[0], n = shape[1];
      std::vector<float> a(m * k), b(k * n), bias(n, 0.1f), y1(m * n), y2(m * n);
      for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i % 13) * 0.01f - 0.06f;
      for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(i % 7) * 0.01f - 0.03f;
      dnnl::memory::desc a_md({m, k}, dt::f32, tag::ab), b_md({k, n}, dt::f32, tag::ab), y_md({m, n}, dt::f32, tag::ab);
      dnnl::memory::desc bias_md({1, n}, dt::f32, tag::ab);
      dnnl::matmul::primitive_desc mpd(dnnl::matmul::desc(a_md, b_md, bias_md, y_md), eng);
      dnnl::matmul mm(mpd);
      dnnl::memory am(a_md, eng, a.data()), bm(b_md, eng, b.data()), biasm(bias_md, eng, bias.data()),
          ym(y_md, eng, y1.data());
      auto cpd = hodu::onednn::conv_1x1_pd(eng, m, k, n, true, dnnl::primitive_attr());
      if (!cpd) {
        std::printf("%5ld %5ld %5ld  no jit 1x1 conv here\n", long(m), long(k), long(n));
        continue;
      }
      dnnl::convolution_forward conv(*cpd);
      dnnl::memory wu(hodu::onednn::conv_1x1_weights(k, n, false), eng, b.data()), wp(cpd->weights_desc(), eng);
      dnnl::reorder(wu, wp).execute(s, wu, wp);  // once, as the engine packs at plan time
      dnnl::memory src(cpd->src_desc(), eng, a.data()), dst(cpd->dst_desc(), eng, y2.data()),
          cbias(cpd->bias_desc(), eng, bias.data());
      const int reps = static_cast<int>(std::max<double>(3, 2e7 / (2.0 * m * n * k)));
      double t_mm = 1e30, t_conv = 1e30;
      for (int r = 0; r < rounds; ++r) {
        double t = now_ms();
        for (int i = 0; i < reps; ++i)
          mm.execute(s, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_BIAS, biasm}, {DNNL_ARG_DST, ym}});
        t_mm = std::min(t_mm, (now_ms() - t) / reps);
        t = now_ms();
        for (int i = 0; i < reps; ++i)
          conv.execute(s, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wp}, {DNNL_ARG_BIAS, cbias}, {DNNL_ARG_DST, dst}});
        t_conv = std::min(t_conv, (now_ms() - t) / reps);
      }
      double err = 0, den = 0;
      for (size_t i = 0; i < y1.size(); ++i) err += (y1[i] - y2[i]) * (y1[i] - y2[i]), den += y1[i] * y1[i];
      std::printf("%5ld %5ld %5ld %10.4f %10.4f %8.2f  %s / %s  (rel-L2 %.1e)\n", long(m), long(k), long(n), t_mm, t_conv,
                  t_conv / t_mm, mpd.impl_info_str(), cpd->impl_info_str(), std::sqrt(err / (den > 0 ? den : 1)));
    }
  return 0;
}
