/* hodu kernel library, random section: RandomNormal/Uniform(+Like), Bernoulli, Multinomial and
 * training-mode Dropout, drawing the same numbers as hodu's reference interpreter
 * (src/engines/interp/ops/generator.cc: xoshiro256** seeded by splitmix64, one stream per
 * node; ops/tensor_misc.cc: Dropout's MT19937, as numpy's RandomState). The generated code
 * passes each node's seed (its `seed` attribute, or the interpreter's per-node seed at session
 * seed 0), so a library draws what `hodu run --engine interp` draws. Needs <math.h>,
 * <stdint.h>. */

typedef struct {
  uint64_t s[4];
} hk_rng;

static uint64_t hk_rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

HK void hk_rng_seed(hk_rng* r, uint64_t seed) {
  int i;
  for (i = 0; i < 4; ++i) {
    uint64_t z;
    seed += 0x9E3779B97F4A7C15ull;
    z = seed;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    r->s[i] = z ^ (z >> 31);
  }
}

HK uint64_t hk_rng_next(hk_rng* r) {
  uint64_t* s = r->s;
  const uint64_t result = hk_rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = hk_rotl(s[3], 45);
  return result;
}

/* Uniform in [0, 1). */
HK double hk_rng_uniform(hk_rng* r) { return (double)(hk_rng_next(r) >> 11) * 0x1.0p-53; }

HK double hk_rng_normal(hk_rng* r) {
  double u1 = hk_rng_uniform(r), u2 = hk_rng_uniform(r);
  if (u1 < 1e-300) u1 = 1e-300;
  return sqrt(-2.0 * log(u1)) * cos(2.0 * 3.14159265358979323846 * u2);
}

/* n draws: a + b * normal (mean, scale) or a + (b - a) * uniform (low, high). */
HK void hk_random_fill(double* y, int64_t n, uint64_t seed, int normal, double a, double b) {
  hk_rng r;
  int64_t i;
  hk_rng_seed(&r, seed);
  for (i = 0; i < n; ++i) y[i] = normal ? a + b * hk_rng_normal(&r) : a + (b - a) * hk_rng_uniform(&r);
}

/* 1 where a uniform draw falls below p. Returns 1 when a p is not a probability. */
HK int hk_bernoulli(const double* p, double* y, int64_t n, uint64_t seed) {
  hk_rng r;
  int64_t i;
  for (i = 0; i < n; ++i)
    if (!(p[i] >= 0.0 && p[i] <= 1.0)) return 1;
  hk_rng_seed(&r, seed);
  for (i = 0; i < n; ++i) y[i] = hk_rng_uniform(&r) < p[i] ? 1.0 : 0.0;
  return 0;
}

/* Multinomial: samples class indices of each row of unnormalized log-probabilities x
 * [batch, classes] into y [batch, samples]; cdf: scratch of classes doubles. */
HK void hk_multinomial(const double* x, int64_t* y, int64_t batch, int64_t classes, int64_t samples, uint64_t seed,
                       double* cdf) {
  hk_rng r;
  int64_t b, c, s;
  hk_rng_seed(&r, seed);
  for (b = 0; b < batch; ++b) {
    double mx = -INFINITY, total = 0;
    for (c = 0; c < classes; ++c) mx = fmax(mx, x[b * classes + c]);
    for (c = 0; c < classes; ++c) {
      total += isfinite(mx) ? exp(x[b * classes + c] - mx) : 1.0;
      cdf[c] = total;
    }
    for (s = 0; s < samples; ++s) {
      const double u = hk_rng_uniform(&r) * total;
      int64_t lo = 0, hi = classes; /* the first cdf entry above u (upper_bound) */
      while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (cdf[mid] <= u) lo = mid + 1;
        else hi = mid;
      }
      y[b * samples + s] = lo < classes - 1 ? lo : classes - 1;
    }
  }
}

/* Dropout's keep mask: numpy's RandomState(seed).uniform() >= ratio, from MT19937 with 53-bit
 * doubles. mt: scratch of 624 uint32s. */
HK void hk_dropout_mask(uint8_t* mask, int64_t n, uint32_t seed, double ratio, uint32_t* mt) {
  int64_t i;
  int k, idx = 624;
  mt[0] = seed;
  for (k = 1; k < 624; ++k) mt[k] = 1812433253u * (mt[k - 1] ^ (mt[k - 1] >> 30)) + (uint32_t)k;
  for (i = 0; i < n; ++i) {
    uint32_t ab[2];
    int j;
    for (j = 0; j < 2; ++j) {
      uint32_t v;
      if (idx >= 624) {
        for (k = 0; k < 624; ++k) {
          uint32_t yv = (mt[k] & 0x80000000u) | (mt[(k + 1) % 624] & 0x7fffffffu);
          mt[k] = mt[(k + 397) % 624] ^ (yv >> 1) ^ ((yv & 1u) ? 0x9908b0dfu : 0u);
        }
        idx = 0;
      }
      v = mt[idx++];
      v ^= v >> 11;
      v ^= (v << 7) & 0x9d2c5680u;
      v ^= (v << 15) & 0xefc60000u;
      v ^= v >> 18;
      ab[j] = v;
    }
    mask[i] = ((double)(ab[0] >> 5) * 67108864.0 + (double)(ab[1] >> 6)) / 9007199254740992.0 >= ratio;
  }
}

/* y = (keep ? x : x * 0) * scale, the scale computed in the ratio's type by the caller. */
HK void hk_dropout_apply(const double* x, const uint8_t* mask, double* y, int64_t n, double scale) {
  int64_t i;
  for (i = 0; i < n; ++i) y[i] = (mask[i] ? x[i] : x[i] * 0.0) * scale;
}
