/* Element types, deterministic inputs and expected outputs.
 *
 * Every input element is a pure function of (seed, rank, index), so a rank
 * can compute any other rank's inputs, and so the expected output, on the
 * host without talking to anyone. Inputs are chosen so that results are
 * exact where the type allows, and compared bit for bit there:
 *
 *   integers   sum, prod, max, min, mulsum: any bits (wrap-around arithmetic
 *              gives the same bits in any order); avg: values in
 *              [min/n, max/n] so that the sum does not overflow, expected
 *              = exact sum / n truncated toward zero (C division).
 *   floats     sum, mulsum: small integers whose every partial sum is exact
 *              in the type (at most `window` ranks contribute non-zero values
 *              per element when the type's exact-integer range is small,
 *              as for fp8); prod: +-1, +-2, +-0.5 with at most `window`
 *              non-unit factors, so every partial product is an exact power
 *              of two; max, min: small integers. avg (NCCL: each input times
 *              1/n rounded to the type, then summed) is compared with a
 *              tolerance of (2n+2) ulp(1) * sum|x/n| + 2n * smallest
 *              subnormal, which grows with the type's ulp (half, bf16, fp8).
 *   copies     (gathers, broadcast, scatter, all-to-all, send/recv): any bits,
 *              NaN patterns included; the result must be bit-exact.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "perf.h"

const char* const perfTypeNames[PERF_NUM_TYPES] = {"int8",  "uint8", "int32",  "uint32",   "int64",  "uint64",
                                                   "half",  "float", "double", "bfloat16", "f8e4m3", "f8e5m2"};
const char* const perfOpNames[PERF_NUM_OPS] = {"sum", "prod", "max", "min", "avg", "mulsum"};

/* Per type: bytes, signed, float; for floats the format and two budgets. */
struct typeInfo {
  int size, isSigned, isFloat;
  int ebits, mbits, e4m3; /* small float formats (half, bf16, fp8) */
  double exact;           /* every integer up to this is exact */
  int prodBudget;         /* powers of two 2^-k..2^k are exact (normal or subnormal) */
};
static const struct typeInfo types[PERF_NUM_TYPES] = {
    {1, 1, 0, 0, 0, 0, 0, 0},          {1, 0, 0, 0, 0, 0, 0, 0},
    {4, 1, 0, 0, 0, 0, 0, 0},          {4, 0, 0, 0, 0, 0, 0, 0},
    {8, 1, 0, 0, 0, 0, 0, 0},          {8, 0, 0, 0, 0, 0, 0, 0},
    {2, 1, 1, 5, 10, 0, 2048, 14},     /* half */
    {4, 1, 1, 8, 23, 0, 16777216, 100}, /* float */
    {8, 1, 1, 11, 52, 0, 9007199254740992.0, 1000}, /* double */
    {2, 1, 1, 8, 7, 0, 256, 100},      /* bfloat16 */
    {1, 1, 1, 4, 3, 1, 16, 7},         /* f8e4m3: max 448, subnormals down to 2^-9 */
    {1, 1, 1, 5, 2, 0, 8, 14},         /* f8e5m2 */
};

size_t perfTypeSize(int type) { return type >= 0 && type < PERF_NUM_TYPES ? (size_t)types[type].size : 0; }

/* ---- small float formats (half, bf16, fp8): decode, round-to-nearest-even encode */

static double decodeSmall(uint32_t b, int e, int m, int e4m3) {
  int sign = (b >> (e + m)) & 1;
  int ex = (int)((b >> m) & ((1u << e) - 1));
  uint32_t man = b & ((1u << m) - 1);
  int bias = (1 << (e - 1)) - 1;
  double v;
  if (ex == (1 << e) - 1 && !e4m3) {
    v = man ? NAN : INFINITY;
  } else if (ex == (1 << e) - 1 && e4m3 && man == (1u << m) - 1) {
    v = NAN;
  } else if (ex == 0) {
    v = ldexp((double)man, 1 - bias - m);
  } else {
    v = ldexp((double)((1u << m) | man), ex - bias - m);
  }
  return sign ? -v : v;
}

static uint32_t encodeSmall(double v, int e, int m, int e4m3) {
  uint32_t sign = signbit(v) ? 1u << (e + m) : 0;
  uint32_t expMask = ((1u << e) - 1) << m;
  uint32_t nan = e4m3 ? 0x7fu : (expMask | (1u << (m - 1)));
  if (isnan(v)) return sign | nan;
  double a = fabs(v);
  int bias = (1 << (e - 1)) - 1, emin = 1 - bias;
  int emax = e4m3 ? (1 << e) - 1 - bias : (1 << e) - 2 - bias;
  if (a == 0) return sign;
  int ex;
  frexp(a, &ex);
  int E = ex - 1 < emin ? emin : ex - 1; /* a in [2^E, 2^(E+1)) or subnormal */
  double q = nearbyint(ldexp(a, m - E)); /* default rounding: to nearest even */
  uint64_t R = (uint64_t)q;
  if (R >= (2ull << m)) R >>= 1, E++; /* rounded up to the next binade */
  if (R < (1ull << m)) return sign | (uint32_t)R; /* subnormal (or rounded to zero) */
  uint32_t bits = ((uint32_t)(E + bias) << m) | (uint32_t)(R - (1ull << m));
  if (E > emax || (e4m3 && (bits & 0x7f) == 0x7f)) return e4m3 ? sign | nan : sign | expMask; /* overflow */
  return sign | bits;
}

/* Lookup tables: every 8/16-bit pattern decoded, small integers encoded. */
#define ENC_LIMIT 4096
static double* decodeTable[PERF_NUM_TYPES];
static uint16_t* encodeTable[PERF_NUM_TYPES];

void perfDataInit(void) {
  for (int t = 0; t < PERF_NUM_TYPES; t++) {
    const struct typeInfo* ti = &types[t];
    if (!ti->isFloat || ti->size > 2 || decodeTable[t]) continue;
    size_t n = (size_t)1 << (8 * ti->size);
    decodeTable[t] = malloc(n * sizeof(double));
    encodeTable[t] = malloc((2 * ENC_LIMIT + 1) * sizeof(uint16_t));
    for (size_t b = 0; b < n; b++) decodeTable[t][b] = decodeSmall((uint32_t)b, ti->ebits, ti->mbits, ti->e4m3);
    for (int i = -ENC_LIMIT; i <= ENC_LIMIT; i++)
      encodeTable[t][i + ENC_LIMIT] = (uint16_t)encodeSmall(i, ti->ebits, ti->mbits, ti->e4m3);
  }
}

static uint64_t encodeFloat(int t, double v) {
  uint64_t r = 0;
  if (t == ncclFloat32) {
    float f = (float)v;
    memcpy(&r, &f, 4);
  } else if (t == ncclFloat64) {
    memcpy(&r, &v, 8);
  } else if (v == (double)(int)v && fabs(v) <= ENC_LIMIT && !(v == 0 && signbit(v))) {
    r = encodeTable[t][(int)v + ENC_LIMIT];
  } else {
    r = encodeSmall(v, types[t].ebits, types[t].mbits, types[t].e4m3);
  }
  return r;
}

static double decodeFloat(int t, uint64_t r) {
  if (t == ncclFloat32) {
    float f;
    uint32_t u = (uint32_t)r;
    memcpy(&f, &u, 4);
    return f;
  }
  if (t == ncclFloat64) {
    double d;
    memcpy(&d, &r, 8);
    return d;
  }
  return decodeTable[t][r];
}

/* ---- inputs ------------------------------------------------------------- */

static inline uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
static inline uint64_t hashOf(uint64_t seed, int rank, size_t idx) {
  return mix64(seed * 0x9e3779b97f4a7c15ULL + ((uint64_t)(unsigned)rank << 44) + (uint64_t)idx + 1);
}

void perfModelInit(struct perfModel* m, int type, int op, int nranks) {
  const struct typeInfo* ti = &types[type];
  memset(m, 0, sizeof(*m));
  m->type = type, m->op = op, m->nranks = nranks;
  m->isFloat = ti->isFloat, m->isSigned = ti->isSigned;
  m->size = (size_t)ti->size;
  m->mask = ti->size == 8 ? ~0ULL : (1ULL << (8 * ti->size)) - 1;
  if (ti->isFloat) {
    m->ulp = ldexp(1.0, -ti->mbits);
    int bias = (1 << (ti->ebits - 1)) - 1;
    m->tiny = ldexp(1.0, 1 - bias - ti->mbits);
    double exact = ti->exact;
    int scale = op == PERF_OP_MULSUM ? 2 : 1; /* mulsum scalars are 1 or 2 */
    if (op == ncclProd) {
      m->window = nranks < ti->prodBudget ? nranks : ti->prodBudget;
    } else if (op == ncclSum || op == ncclAvg || op == PERF_OP_MULSUM) {
      double w = exact / scale;
      m->window = nranks < w ? nranks : (int)w;
      double r = exact / scale / m->window;
      m->range = r > 1000 ? 1000 : (int64_t)r;
    } else { /* max, min */
      m->window = nranks;
      m->range = exact > 1000 ? 1000 : (int64_t)exact;
    }
  } else if (op == ncclAvg) {
    uint64_t max = ti->isSigned ? (m->mask >> 1) : m->mask;
    m->intMax = max / (uint64_t)nranks;
  }
}

static inline int contributes(const struct perfModel* m, int rank, size_t idx) {
  unsigned n = (unsigned)m->nranks;
  return ((unsigned)rank + n - (unsigned)(idx % n)) % n < (unsigned)m->window;
}

/* A float input as a number (exactly representable in the type). */
static inline double floatInput(const struct perfModel* m, uint64_t h, int rank, size_t idx) {
  static const double prodValues[6] = {2.0, -2.0, 0.5, -0.5, 1.0, -1.0};
  if (m->op == ncclProd) return contributes(m, rank, idx) ? prodValues[h % 6] : 1.0;
  if (m->op != ncclMax && m->op != ncclMin && !contributes(m, rank, idx)) return 0.0;
  return (double)(int64_t)(h % (uint64_t)(2 * m->range + 1)) - (double)m->range;
}

/* An integer input as raw bits (two's complement in the element's width). */
static inline uint64_t intInput(const struct perfModel* m, uint64_t h) {
  if (m->op != ncclAvg) return h & m->mask;
  if (m->isSigned) {
    int64_t v = (int64_t)(h % (2 * m->intMax + 1)) - (int64_t)m->intMax;
    return (uint64_t)v & m->mask;
  }
  return m->intMax == ~0ULL ? h : h % (m->intMax + 1);
}

static inline uint64_t inputRaw(const struct perfModel* m, uint64_t seed, int rank, size_t idx) {
  uint64_t h = hashOf(seed, rank, idx);
  if (m->op == PERF_OP_COPY || !m->isFloat) return m->op == PERF_OP_COPY ? h & m->mask : intInput(m, h);
  return encodeFloat(m->type, floatInput(m, h, rank, idx));
}

static inline void storeRaw(void* p, size_t i, size_t size, uint64_t v) {
  switch (size) {
    case 1: ((uint8_t*)p)[i] = (uint8_t)v; break;
    case 2: ((uint16_t*)p)[i] = (uint16_t)v; break;
    case 4: ((uint32_t*)p)[i] = (uint32_t)v; break;
    default: ((uint64_t*)p)[i] = v; break;
  }
}
static inline uint64_t loadRaw(const void* p, size_t i, size_t size) {
  switch (size) {
    case 1: return ((const uint8_t*)p)[i];
    case 2: return ((const uint16_t*)p)[i];
    case 4: return ((const uint32_t*)p)[i];
    default: return ((const uint64_t*)p)[i];
  }
}

void perfFill(const struct perfModel* m, uint64_t seed, int rank, size_t count, void* host) {
  for (size_t j = 0; j < count; j++) storeRaw(host, j, m->size, inputRaw(m, seed, rank, j));
}

static uint64_t intScalar(int rank) { return 1 + (uint64_t)(rank % 3); }
static double floatScalar(int rank) { return (rank & 1) ? 2.0 : 1.0; }

uint64_t perfPremulScalar(int type, int rank) {
  if (!types[type].isFloat) return intScalar(rank);
  return encodeFloat(type, floatScalar(rank));
}

/* ---- expected outputs ---------------------------------------------------- */

static inline int64_t signExtend(uint64_t v, const struct perfModel* m) {
  int shift = 64 - 8 * (int)m->size;
  return shift ? (int64_t)(v << shift) >> shift : (int64_t)v;
}

static uint64_t intReduce(const struct perfModel* m, uint64_t seed, size_t idx) {
  int n = m->nranks;
  uint64_t acc = intInput(m, hashOf(seed, 0, idx));
  if (m->op == PERF_OP_MULSUM) acc *= intScalar(0);
  __int128 wide = m->isSigned ? (__int128)signExtend(acc, m) : (__int128)acc;
  for (int r = 1; r < n; r++) {
    uint64_t x = intInput(m, hashOf(seed, r, idx));
    switch (m->op) {
      case ncclSum: acc += x; break;
      case ncclProd: acc *= x; break;
      case ncclAvg: wide += m->isSigned ? (__int128)signExtend(x, m) : (__int128)x; break;
      case PERF_OP_MULSUM: acc += x * intScalar(r); break;
      default: /* max, min */
        if (m->isSigned) {
          int64_t a = signExtend(acc, m), b = signExtend(x, m);
          acc = (m->op == ncclMax ? b > a : b < a) ? x : acc;
        } else {
          uint64_t a = acc & m->mask, b = x;
          acc = (m->op == ncclMax ? b > a : b < a) ? x : acc;
        }
        break;
    }
  }
  if (m->op == ncclAvg) acc = (uint64_t)(wide / n); /* C: truncation toward zero */
  return acc & m->mask;
}

/* Float reduction: exact value, and for avg the tolerance. */
static double floatReduce(const struct perfModel* m, uint64_t seed, size_t idx, double* tol) {
  int n = m->nranks;
  *tol = 0;
  if (m->op == ncclMax || m->op == ncclMin) {
    double acc = floatInput(m, hashOf(seed, 0, idx), 0, idx);
    for (int r = 1; r < n; r++) {
      double x = floatInput(m, hashOf(seed, r, idx), r, idx);
      acc = m->op == ncclMax ? (x > acc ? x : acc) : (x < acc ? x : acc);
    }
    return acc;
  }
  /* Only the window of contributing ranks; the others hold 0 (or 1 for prod). */
  double acc = m->op == ncclProd ? 1.0 : 0.0, mag = 0;
  for (int k = 0; k < m->window; k++) {
    int r = (int)((idx + (size_t)k) % (size_t)n);
    double x = floatInput(m, hashOf(seed, r, idx), r, idx);
    switch (m->op) {
      case ncclProd: acc *= x; break;
      case PERF_OP_MULSUM: acc += floatScalar(r) * x; break;
      default: acc += x, mag += fabs(x); break;
    }
  }
  if (m->op == ncclAvg) {
    acc /= n;
    *tol = (2.0 * n + 2) * m->ulp * (mag / n) + 2.0 * n * m->tiny;
  }
  return acc;
}

int perfCheckReport; /* ANYCCL_PERF_DEBUG: print this many mismatches per check */

static void reportMismatch(const struct perfCheckArgs* a, int k, size_t j, int kind, uint64_t got, uint64_t want,
                           double gotV, double wantV, double tol) {
  static const char* kinds[] = {"keep", "copy", "reduce"};
  const char* where = a->inPlace ? "in-place" : "out-of-place";
  if (tol >= 0) {
    fprintf(stderr, "# rank %d %s elt %zu (%s): got %.17g want %.17g tol %g\n", a->rank + k, where, j, kinds[kind],
            gotV, wantV, tol);
  } else {
    fprintf(stderr, "# rank %d %s elt %zu (%s): got 0x%llx want 0x%llx\n", a->rank + k, where, j,
            kinds[kind], (unsigned long long)got, (unsigned long long)want);
  }
}

int64_t perfCheck(const struct perfCheckArgs* a, size_t j0, size_t n, const void* const* got, int ngot) {
  const struct perfModel* red = a->red;
  const struct perfModel* cp = a->copy;
  size_t size = cp->size;
  int approx = red && red->isFloat && red->op == ncclAvg;
  int64_t wrong = 0;
  for (size_t j = j0; j < j0 + n; j++) {
    int srcRank = 0;
    size_t srcIdx = 0;
    uint64_t want = 0;
    double x = 0, tol = 0;
    enum perfExpect e = a->coll->expect(a->rank, a->nranks, a->root, &a->c, j, &srcRank, &srcIdx);
    if (e == PERF_REDUCE && approx) {
      x = floatReduce(red, a->seed, srcIdx, &tol);
    } else if (e == PERF_REDUCE) {
      want = red->isFloat ? encodeFloat(red->type, floatReduce(red, a->seed, srcIdx, &tol))
                          : intReduce(red, a->seed, srcIdx);
    } else if (e == PERF_COPY) {
      want = inputRaw(cp, a->seed, srcRank, srcIdx);
    } else { /* untouched: zero, or this rank's own input where it was written in place */
      size_t pos = a->recvOff + j;
      if (a->inPlace && a->hasInput && pos >= a->sendOff && pos < a->sendOff + a->c.send) {
        want = inputRaw(red ? red : cp, a->seed, a->rank, pos - a->sendOff);
      }
    }
    for (int k = 0; k < ngot; k++) {
      uint64_t g = loadRaw(got[k], j - j0, size);
      if (e == PERF_REDUCE && approx) {
        double v = decodeFloat(red->type, g);
        int bad = !(fabs(v - x) <= tol);
        if (bad && wrong < perfCheckReport) reportMismatch(a, k, j, e, g, 0, v, x, tol);
        wrong += bad;
      } else {
        if (g != want && wrong < perfCheckReport) reportMismatch(a, k, j, e, g, want, 0, 0, -1);
        wrong += g != want;
      }
    }
  }
  return wrong;
}
