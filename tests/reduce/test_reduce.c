/* Differential test of anycclReduce() and the scalar conversions of reduce.h
 * against an independent reference written here:
 *   - narrow floats (fp16, bf16, fp8 e4m3/e5m2): values decoded from their
 *     bit fields with ldexpl; the exact result of the op kept as an unevaluated
 *     long double sum hi + lo (TwoSum), or as a quotient hi / d; rounded by a
 *     slow search over the sorted table of all representable values, with
 *     exact comparisons against midpoints (ties to even by code parity);
 *   - integers: exact arithmetic in 128 bits, then wrapped;
 *   - fp32: exact in double then rounded once; fp64: the IEEE double ops.
 * Results are compared bit for bit (any NaN equals any NaN).
 * A self-check feeds deliberately wrong implementations (ties away from
 * zero, truncation, double rounding through float, no saturation, flush to
 * zero, one flipped bit) through the same checker and requires that each is
 * caught. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "reduce.h"

#include <float.h>

/* The reference needs a long double with at least 64 significand bits
 * (x87 extended or IEEE quad): products of two narrow values and all
 * comparisons against midpoints must be exact. */
#if LDBL_MANT_DIG < 64
#error "test_reduce needs a long double with >= 64 significand bits"
#endif

static long g_fail;
static int g_quick; /* --quick: fewer random samples (the baseline-ISA build) */
static int g_verbose_left = 20;

/* ------------------------------------------------------------------------- */
/* Random numbers                                                            */

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void) {
  g_rng ^= g_rng >> 12;
  g_rng ^= g_rng << 25;
  g_rng ^= g_rng >> 27;
  return g_rng * 0x2545f4914f6cdd1dull;
}

/* ------------------------------------------------------------------------- */
/* Narrow float reference                                                    */

typedef struct {
  const char* name;
  ncclDataType_t type;
  int E, M, bias;
  int fn;  /* 1: e4m3 "finite" encoding (only S.1111.111 is NaN, no inf) */
  int sat; /* 1: overflow saturates to the largest finite value */
  int bytes;
  uint32_t maxcode; /* largest finite positive code */
  long double* vals; /* vals[c] = value of code c, c = 0..maxcode */
  long double* all;  /* all[c] = fdecode(c) for every code (a cache) */
} Fmt;

static Fmt FH = {"half", ncclFloat16, 5, 10, 15, 0, 0, 2, 0, NULL, NULL};
static Fmt FB = {"bfloat16", ncclBfloat16, 8, 7, 127, 0, 0, 2, 0, NULL, NULL};
static Fmt F4 = {"f8e4m3", ncclFloat8e4m3, 4, 3, 7, 1, 1, 1, 0, NULL, NULL};
static Fmt F5 = {"f8e5m2", ncclFloat8e5m2, 5, 2, 15, 0, 1, 1, 0, NULL, NULL};

static long double fdecode(const Fmt* f, uint32_t code) {
  int neg = (code >> (f->E + f->M)) & 1;
  uint32_t e = (code >> f->M) & ((1u << f->E) - 1);
  uint32_t m = code & ((1u << f->M) - 1);
  long double v;
  if (f->fn) {
    if (e == (1u << f->E) - 1 && m == (1u << f->M) - 1) return NAN;
  } else if (e == (1u << f->E) - 1) {
    if (m) return NAN;
    return neg ? -INFINITY : INFINITY;
  }
  if (e == 0)
    v = ldexpl((long double)m, 1 - f->bias - f->M);
  else
    v = ldexpl((long double)(m + (1u << f->M)), (int)e - f->bias - f->M);
  return neg ? -v : v;
}
static long double fval(const Fmt* f, uint32_t code) { return f->all[code]; }
static int fisnan(const Fmt* f, uint32_t code) { return isnan(fval(f, code)); }
static uint32_t fsign(const Fmt* f) { return 1u << (f->E + f->M); }
static uint32_t fnan(const Fmt* f) { return f->fn ? 0x7f : (((1u << f->E) - 1) << f->M) | (1u << (f->M - 1)); }
static uint32_t finf(const Fmt* f) { return ((1u << f->E) - 1) << f->M; }

static void fmt_init(Fmt* f) {
  uint32_t c = 0;
  while (isfinite(fdecode(f, c + 1)) && c + 1 < fsign(f)) c++;
  f->maxcode = c;
  f->vals = malloc((c + 1) * sizeof(long double));
  f->all = malloc((size_t)fsign(f) * 2 * sizeof(long double));
  for (uint32_t i = 0; i < fsign(f) * 2; i++) f->all[i] = fdecode(f, i);
  for (uint32_t i = 0; i <= c; i++) {
    f->vals[i] = fdecode(f, i);
    if (i && !(f->vals[i] > f->vals[i - 1])) {
      printf("FATAL: %s table not increasing at %u\n", f->name, i);
      exit(2);
    }
  }
}

/* sign of (c - X), X = (hi + lo) / d >= 0. With d == 1, hi = fl(hi + lo)
 * (|lo| at most half an ulp of hi); with d != 1, lo == 0 and c*d is exact. */
static int cmpX(long double c, long double hi, long double lo, long double d) {
  if (d != 1) {
    long double cd = c * d;
    return (cd > hi) - (cd < hi);
  }
  if (c != hi) return c > hi ? 1 : -1;
  return (lo < 0) - (lo > 0);
}

/* Round X = (hi + lo) / d to the format, ties to even. */
static uint32_t ref_round_mode(const Fmt* f, long double hi, long double lo, long double d, int tiesAway) {
  if (isnan(hi) || isnan(lo)) return fnan(f);
  uint32_t sign = signbit(hi) ? fsign(f) : 0;
  if (sign) {
    hi = -hi;
    lo = -lo;
  }
  if (isinf(hi)) return sign | (f->sat ? f->maxcode : finf(f));
  if (hi == 0) return sign;
  /* largest i with vals[i] <= X (vals[0] = 0 <= X) */
  uint32_t lo_i = 0, hi_i = f->maxcode + 1; /* invariant: vals[lo_i] <= X, vals[hi_i] > X (hi_i may be virtual) */
  while (hi_i - lo_i > 1) {
    uint32_t mid = (lo_i + hi_i) / 2;
    if (cmpX(f->vals[mid], hi, lo, d) <= 0)
      lo_i = mid;
    else
      hi_i = mid;
  }
  uint32_t i = lo_i;
  long double below = f->vals[i], above;
  if (i == f->maxcode) {
    if (cmpX(below, hi, lo, d) == 0) return sign | i;
    if (f->sat) return sign | i;
    /* the next value would be 2^(emax+1) */
    above = ldexpl(1.0L, (1 << f->E) - 2 - f->bias + 1);
  } else {
    above = f->vals[i + 1];
  }
  long double mid = (below + above) / 2;
  int c = cmpX(mid, hi, lo, d);
  uint32_t r;
  if (c > 0)
    r = i;
  else if (c < 0)
    r = i + 1;
  else if (tiesAway)
    r = i + 1;
  else
    r = (i & 1) ? i + 1 : i;
  return sign | r; /* r == maxcode + 1 is the infinity code */
}
static uint32_t ref_round(const Fmt* f, long double hi, long double lo, long double d) {
  return ref_round_mode(f, hi, lo, d, 0);
}

/* exact x + y as hi + lo */
static void two_sum(long double x, long double y, long double* hi, long double* lo) {
  volatile long double s = x + y;
  volatile long double bb = s - x;
  long double err = (x - (s - bb)) + (y - bb);
  *hi = s;
  *lo = isfinite(s) ? err : 0;
}

/* Max/Min reference on values: NaN ignored, -0 < +0. Returns 0 for a, 1 for b. */
static int ref_pick(long double x, long double y, int isMax) {
  if (isnan(x)) return 1;
  if (isnan(y)) return 0;
  if (x == y) {
    if (!!signbit(x) == !!signbit(y)) return 0;
    return isMax ? (signbit(x) ? 1 : 0) : (signbit(x) ? 0 : 1);
  }
  return isMax ? (x > y ? 0 : 1) : (x < y ? 0 : 1);
}

/* Expected results for one element: *v = out1, *o0 = out0. */
static void ref_narrow(const Fmt* f, const anycclRedOp* op, unsigned flags, int has1, uint32_t a, uint32_t b,
                       uint32_t* v, uint32_t* o0) {
  long double A = fval(f, a), B = has1 ? fval(f, b) : 0, S = 0, hi, lo;
  long double d = op->divisor ? (long double)op->divisor : 1;
  int pm0 = op->op == anycclDevPreMulSum && (flags & ANYCCL_RED_PREMUL_IN0);
  int pm1 = op->op == anycclDevPreMulSum && (flags & ANYCCL_RED_PREMUL_IN1);
  int pdiv = op->op == anycclDevSumPostDiv && (flags & ANYCCL_RED_POSTDIV_OUT0);
  if (op->op == anycclDevPreMulSum) S = fval(f, (uint32_t)op->scalar & ((fsign(f) << 1) - 1));
  if (!has1) {
    if (pm0)
      *v = ref_round(f, S * A, 0, 1);
    else
      *v = a;
    *o0 = pdiv ? ref_round(f, fval(f, *v), 0, d) : *v;
    return;
  }
  switch (op->op) {
    case anycclDevProd: *v = ref_round(f, A * B, 0, 1); break;
    case anycclDevMax:
    case anycclDevMin: {
      int p = ref_pick(A, B, op->op == anycclDevMax);
      uint32_t code = p ? b : a;
      long double val = p ? B : A;
      *v = isnan(val) ? code : ref_round(f, val, 0, 1);
      break;
    }
    case anycclDevPreMulSum:
      two_sum(pm0 ? S * A : A, pm1 ? S * B : B, &hi, &lo);
      *v = ref_round(f, hi, lo, 1);
      break;
    default: /* Sum, SumPostDiv */
      two_sum(A, B, &hi, &lo);
      *v = ref_round(f, hi, lo, 1);
      break;
  }
  *o0 = pdiv ? ref_round(f, fval(f, *v), 0, d) : *v;
}

/* ------------------------------------------------------------------------- */
/* fp32 / fp64 reference                                                     */

static float bf(uint32_t u) {
  float x;
  memcpy(&x, &u, 4);
  return x;
}
static uint32_t fb(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  return u;
}
static double bd(uint64_t u) {
  double x;
  memcpy(&x, &u, 8);
  return x;
}
static uint64_t db(double x) {
  uint64_t u;
  memcpy(&u, &x, 8);
  return u;
}

static void ref_f32(const anycclRedOp* op, unsigned flags, int has1, uint32_t a, uint32_t b, uint32_t* v,
                    uint32_t* o0) {
  float A = bf(a), B = bf(b), S = bf((uint32_t)op->scalar), r;
  double d = op->divisor ? (double)op->divisor : 1;
  int pm0 = op->op == anycclDevPreMulSum && (flags & ANYCCL_RED_PREMUL_IN0);
  int pm1 = op->op == anycclDevPreMulSum && (flags & ANYCCL_RED_PREMUL_IN1);
  int pdiv = op->op == anycclDevSumPostDiv && (flags & ANYCCL_RED_POSTDIV_OUT0);
  if (!has1) {
    *v = pm0 ? fb((float)((double)S * A)) : a;
  } else {
    switch (op->op) {
      case anycclDevProd: r = (float)((double)A * (double)B); break;
      case anycclDevMax:
      case anycclDevMin: r = ref_pick(A, B, op->op == anycclDevMax) ? B : A; break;
      case anycclDevPreMulSum: {
        float x = pm0 ? (float)((double)S * A) : A, y = pm1 ? (float)((double)S * B) : B;
        r = (float)((double)x + (double)y);
        break;
      }
      default: r = (float)((double)A + (double)B); break;
    }
    *v = fb(r);
  }
  *o0 = pdiv ? fb((float)((double)bf(*v) / d)) : *v;
}

static void ref_f64(const anycclRedOp* op, unsigned flags, int has1, uint64_t a, uint64_t b, uint64_t* v,
                    uint64_t* o0) {
  volatile double A = bd(a), B = bd(b), S = bd(op->scalar), r;
  double d = op->divisor ? (double)op->divisor : 1;
  int pm0 = op->op == anycclDevPreMulSum && (flags & ANYCCL_RED_PREMUL_IN0);
  int pm1 = op->op == anycclDevPreMulSum && (flags & ANYCCL_RED_PREMUL_IN1);
  int pdiv = op->op == anycclDevSumPostDiv && (flags & ANYCCL_RED_POSTDIV_OUT0);
  if (!has1) {
    *v = pm0 ? db(S * A) : a;
  } else {
    switch (op->op) {
      case anycclDevProd: r = A * B; break;
      case anycclDevMax:
      case anycclDevMin: r = ref_pick(A, B, op->op == anycclDevMax) ? B : A; break;
      case anycclDevPreMulSum: {
        volatile double x = pm0 ? S * A : A, y = pm1 ? S * B : B;
        r = x + y;
        break;
      }
      default: r = A + B; break;
    }
    *v = db(r);
  }
  *o0 = pdiv ? db(bd(*v) / d) : *v;
}

/* ------------------------------------------------------------------------- */
/* Integer reference: exact 128-bit arithmetic, then wrap                   */

typedef unsigned __int128 u128;
typedef __int128 i128;

static i128 sext(uint64_t x, int bits, int sgn) {
  if (!sgn || bits == 64) return sgn ? (i128)(int64_t)x : (i128)x;
  uint64_t m = 1ull << (bits - 1);
  x &= (m << 1) - 1;
  return (i128)(int64_t)((x ^ m) - m);
}

static void ref_int(int bits, int sgn, const anycclRedOp* op, unsigned flags, int has1, uint64_t a, uint64_t b,
                    uint64_t* v, uint64_t* o0) {
  uint64_t mask = bits == 64 ? ~0ull : (1ull << bits) - 1;
  u128 s = op->scalar & mask;
  int pm0 = op->op == anycclDevPreMulSum && (flags & ANYCCL_RED_PREMUL_IN0);
  int pm1 = op->op == anycclDevPreMulSum && (flags & ANYCCL_RED_PREMUL_IN1);
  int pdiv = op->op == anycclDevSumPostDiv && (flags & ANYCCL_RED_POSTDIV_OUT0);
  i128 A = sext(a, bits, sgn), B = sext(b, bits, sgn);
  u128 r;
  if (!has1) {
    r = pm0 ? s * (u128)(a & mask) : a;
  } else {
    switch (op->op) {
      case anycclDevProd: r = (u128)(a & mask) * (u128)(b & mask); break;
      case anycclDevMax: r = (A >= B) ? a : b; break;
      case anycclDevMin: r = (A <= B) ? a : b; break;
      case anycclDevPreMulSum: r = (pm0 ? s * (a & mask) : (a & mask)) + (pm1 ? s * (b & mask) : (b & mask)); break;
      default: r = (u128)(a & mask) + (u128)(b & mask); break;
    }
  }
  *v = (uint64_t)r & mask;
  if (pdiv) {
    u128 d = op->divisor ? op->divisor : 1;
    i128 V = sext(*v, bits, sgn);
    int neg = V < 0;
    u128 mag = neg ? (u128)(-V) : (u128)V;
    u128 q = mag / d; /* truncation toward zero */
    *o0 = (uint64_t)(neg ? (u128)0 - q : q) & mask;
  } else {
    *o0 = *v;
  }
}

/* ------------------------------------------------------------------------- */
/* Dispatch of the reference by type                                         */

static const Fmt* fmtOf(ncclDataType_t t) {
  switch (t) {
    case ncclFloat16: return &FH;
    case ncclBfloat16: return &FB;
    case ncclFloat8e4m3: return &F4;
    case ncclFloat8e5m2: return &F5;
    default: return NULL;
  }
}

static uint64_t load(const void* p, size_t i, size_t es) {
  uint64_t x = 0;
  memcpy(&x, (const char*)p + i * es, es); /* little endian */
  return x;
}
static void store(void* p, size_t i, size_t es, uint64_t x) { memcpy((char*)p + i * es, &x, es); }

static int isNanBits(ncclDataType_t t, uint64_t x) {
  const Fmt* f = fmtOf(t);
  if (f) return fisnan(f, (uint32_t)x);
  if (t == ncclFloat32) return isnan(bf((uint32_t)x));
  if (t == ncclFloat64) return isnan(bd(x));
  return 0;
}

static void ref_elem(ncclDataType_t t, const anycclRedOp* op, unsigned flags, int has1, uint64_t a, uint64_t b,
                     uint64_t* v, uint64_t* o0) {
  const Fmt* f = fmtOf(t);
  if (f) {
    uint32_t vv, oo;
    ref_narrow(f, op, flags, has1, (uint32_t)a, (uint32_t)b, &vv, &oo);
    *v = vv;
    *o0 = oo;
    return;
  }
  switch (t) {
    case ncclFloat32: {
      uint32_t vv, oo;
      ref_f32(op, flags, has1, (uint32_t)a, (uint32_t)b, &vv, &oo);
      *v = vv;
      *o0 = oo;
      return;
    }
    case ncclFloat64: ref_f64(op, flags, has1, a, b, v, o0); return;
    case ncclInt8: ref_int(8, 1, op, flags, has1, a, b, v, o0); return;
    case ncclUint8: ref_int(8, 0, op, flags, has1, a, b, v, o0); return;
    case ncclInt32: ref_int(32, 1, op, flags, has1, a, b, v, o0); return;
    case ncclUint32: ref_int(32, 0, op, flags, has1, a, b, v, o0); return;
    case ncclInt64: ref_int(64, 1, op, flags, has1, a, b, v, o0); return;
    default: ref_int(64, 0, op, flags, has1, a, b, v, o0); return;
  }
}

static int sameBits(ncclDataType_t t, uint64_t x, uint64_t y) {
  if (x == y) return 1;
  return isNanBits(t, x) && isNanBits(t, y);
}

/* ------------------------------------------------------------------------- */
/* The checker                                                               */

/* A deliberately wrong implementation for the self-check: overwrites out0. */
typedef void (*MutantFn)(const anycclRedOp* op, unsigned flags, size_t n, const void* a, const void* b, void* o0);
static MutantFn g_mutant;
static int g_quiet;

static const char* opName(anycclDevRedOp o) {
  static const char* n[] = {"Sum", "Prod", "Max", "Min", "PreMulSum", "SumPostDiv"};
  return (unsigned)o < 6 ? n[o] : "?";
}

enum { AL_NONE, AL_O0_IN0, AL_O0_IN1, AL_O1_IN0, AL_O1_IN1, AL_COUNT };
#define GUARD 64

/* Runs anycclReduce on copies of a[] and b[] (b may be NULL) laid out as
 * asked, checks every output element against the reference, and that no
 * byte outside the outputs changed. Returns the number of mismatches. */
static long check(const anycclRedOp* op, unsigned flags, size_t n, const void* a, const void* b, int useOut1,
                  int alias, size_t off, const char* tag) {
  ncclDataType_t t = op->type;
  size_t es = anycclTypeSize(t), bytes = n * es, tot = bytes + 2 * GUARD + 64;
  unsigned char *bufA = malloc(tot), *bufB = malloc(tot), *bufO0 = malloc(tot), *bufO1 = malloc(tot);
  memset(bufA, 0x5a, tot);
  memset(bufB, 0x5a, tot);
  memset(bufO0, 0xa5, tot);
  memset(bufO1, 0xa5, tot);
  unsigned char *pa = bufA + GUARD + off, *pb = bufB + GUARD + off, *p0 = bufO0 + GUARD + off,
                *p1 = bufO1 + GUARD + off;
  memcpy(pa, a, bytes);
  if (b) memcpy(pb, b, bytes);
  void *o0 = p0, *o1 = useOut1 ? p1 : NULL;
  const void* in1 = b ? pb : NULL;
  switch (alias) {
    case AL_O0_IN0: o0 = pa; break;
    case AL_O0_IN1: o0 = pb; break;
    case AL_O1_IN0: o1 = pa; break;
    case AL_O1_IN1: o1 = pb; break;
  }
  anycclReduce(op, n, pa, in1, o0, o1, flags);
  if (g_mutant) g_mutant(op, flags, n, a, b, o0);
  long bad = 0;
  for (size_t i = 0; i < n; i++) {
    uint64_t ai = load(a, i, es), bi = b ? load(b, i, es) : 0, v, e0;
    ref_elem(t, op, flags, b != NULL, ai, bi, &v, &e0);
    uint64_t g0 = load(o0, i, es);
    int ok0 = sameBits(t, g0, e0), ok1 = 1;
    uint64_t g1 = 0;
    if (o1) {
      g1 = load(o1, i, es);
      ok1 = sameBits(t, g1, v);
    }
    if (!ok0 || !ok1) {
      bad++;
      if (!g_quiet && g_verbose_left > 0) {
        g_verbose_left--;
        printf("  MISMATCH %s %s %s flags=%u n=%zu i=%zu out1=%d alias=%d off=%zu: a=%#llx b=%#llx scalar=%#llx "
               "div=%llu | out0 %#llx want %#llx | out1 %#llx want %#llx\n",
               tag, anycclTypeName(t), opName(op->op), flags, n, i, useOut1, alias, off, (unsigned long long)ai,
               (unsigned long long)bi, (unsigned long long)op->scalar, (unsigned long long)op->divisor,
               (unsigned long long)g0, (unsigned long long)e0, (unsigned long long)g1, (unsigned long long)v);
      }
    }
  }
  /* guards: nothing outside [p, p + bytes) of an output may change; inputs
   * that are not outputs must not change at all */
  unsigned char* bufs[4] = {bufA, bufB, bufO0, bufO1};
  for (int k = 0; k < 4; k++) {
    unsigned char* start = bufs[k] + GUARD + off;
    int isOut = (start == (unsigned char*)o0) || (o1 && start == (unsigned char*)o1);
    unsigned char fill = k < 2 ? 0x5a : 0xa5;
    for (size_t j = 0; j < tot; j++) {
      unsigned char* p = bufs[k] + j;
      int inside = p >= start && p < start + bytes;
      unsigned char want;
      if (inside && isOut) continue;
      if (inside && k == 0) want = ((const unsigned char*)a)[j - GUARD - off];
      else if (inside && k == 1 && b) want = ((const unsigned char*)b)[j - GUARD - off];
      else want = fill;
      if (*p != want) {
        bad++;
        if (!g_quiet && g_verbose_left > 0) {
          g_verbose_left--;
          printf("  CLOBBER %s %s %s buffer %d byte %zu (n=%zu alias=%d off=%zu)\n", tag, anycclTypeName(t),
                 opName(op->op), k, j, n, alias, off);
        }
        break;
      }
    }
  }
  free(bufA);
  free(bufB);
  free(bufO0);
  free(bufO1);
  return bad;
}

static long checkAligned(const anycclRedOp* op, unsigned flags, size_t n, const void* a, const void* b,
                         const char* tag) {
  return check(op, flags, n, a, b, 1, AL_NONE, 0, tag);
}

/* ------------------------------------------------------------------------- */
/* Test data                                                                 */

static uint32_t randNarrowNear(const Fmt* f, uint32_t a, int gapLo, int gapHi) {
  /* same-ish exponent as a, shifted by a gap in [gapLo, gapHi], random
   * mantissa and sign */
  int e = (int)((a >> f->M) & ((1u << f->E) - 1));
  int gap = gapLo + (int)(rnd() % (uint64_t)(gapHi - gapLo + 1));
  int ne = e - gap;
  int emaxField = (1 << f->E) - 1;
  if (ne < 0) ne = 0;
  if (ne > emaxField) ne = emaxField;
  uint32_t m = (uint32_t)rnd() & ((1u << f->M) - 1);
  uint32_t c = ((uint32_t)ne << f->M) | m;
  if (rnd() & 1) c |= fsign(f);
  return c;
}

/* n pairs: a third uniform codes, a third near exponents (ties, carries,
 * cancellation), a third far apart (sticky bits); plus edge values. */
static void genNarrowPairs(const Fmt* f, size_t n, uint16_t* a, uint16_t* b) {
  uint32_t full = (fsign(f) << 1) - 1;
  for (size_t i = 0; i < n; i++) {
    uint32_t x = (uint32_t)rnd() & full, y;
    switch (rnd() % 3) {
      case 0: y = (uint32_t)rnd() & full; break;
      case 1: y = randNarrowNear(f, x, -2, f->M + 3); break;
      default: y = randNarrowNear(f, x, f->M + 2, f->M + 40); break;
    }
    if (rnd() & 1) {
      a[i] = (uint16_t)x;
      b[i] = (uint16_t)y;
    } else {
      a[i] = (uint16_t)y;
      b[i] = (uint16_t)x;
    }
  }
}

/* Keep bf16 exponents within [2^-60, 2^61) (zeros, inf, NaN stay): the
 * range where the library takes its float PreMulSum path. */
static void tameBf16(size_t n, uint16_t* x) {
  for (size_t i = 0; i < n; i++) {
    uint32_t e = (x[i] >> 7) & 0xff;
    if (e != 0 && e != 255) x[i] = (uint16_t)((x[i] & 0x807f) | ((67 + e % 121) << 7));
    else if (e == 0 && (x[i] & 0x7f)) x[i] = (uint16_t)(x[i] | (67u << 7)); /* subnormal -> in range */
  }
}

static size_t narrowEdges(const Fmt* f, uint32_t* e) {
  uint32_t s = fsign(f), minNorm = 1u << f->M, mc = f->maxcode;
  uint32_t one = (uint32_t)f->bias << f->M;
  uint32_t list[] = {0,          1,       2,          minNorm - 1, minNorm,   minNorm + 1, mc,     mc - 1,
                     one,        one + 1, one - 1,    one | 1,     (one - (1u << f->M)), finf(f), fnan(f), 3,
                     minNorm * 2, mc >> 1};
  size_t k = 0;
  for (size_t i = 0; i < sizeof(list) / sizeof(list[0]); i++) {
    e[k++] = list[i];
    e[k++] = list[i] | s;
  }
  return k; /* (for e4m3, finf() is just another finite value: 256) */
}

/* ------------------------------------------------------------------------- */
/* Tests                                                                     */

static void report(const char* what, long bad) {
  if (bad) printf("FAIL %s: %ld mismatches\n", what, bad);
  g_fail += bad;
}

/* Scalar conversions against the reference rounding. */
static void testConversions(void) {
  const Fmt* fs[4] = {&FH, &FB, &F4, &F5};
  for (int k = 0; k < 4; k++) {
    const Fmt* f = fs[k];
    long bad = 0;
    uint32_t ncodes = fsign(f) << 1;
    /* narrow -> float: exact */
    for (uint32_t c = 0; c < ncodes; c++) {
      float g;
      switch (f->type) {
        case ncclFloat16: g = anycclHalfToFloat((uint16_t)c); break;
        case ncclBfloat16: g = anycclBf16ToFloat((uint16_t)c); break;
        case ncclFloat8e4m3: g = anycclFp8e4m3ToFloat((uint8_t)c); break;
        default: g = anycclFp8e5m2ToFloat((uint8_t)c); break;
      }
      long double w = fdecode(f, c);
      if (isnan(w) ? !isnan(g) : ((long double)g != w || !!signbit(g) != !!signbit(w))) {
        if (bad++ < 5) printf("  %s->float code %#x: got %a want %La\n", f->name, c, g, w);
      }
    }
    /* float/double -> narrow: every value, its midpoints with neighbours,
     * one float/double ulp either side of each, and random floats/doubles */
    for (int pass = 0; pass < 2; pass++) {
      for (uint32_t c = 0; c <= f->maxcode + 1; c++) {
        long double lo = f->vals[c ? c - 1 : 0], hi = c <= f->maxcode ? f->vals[c] : 2 * f->vals[f->maxcode];
        long double pts[3] = {hi, (lo + hi) / 2, hi * 1.5L};
        for (int p = 0; p < 3; p++) {
          for (int sgn = 0; sgn < 2; sgn++) {
            long double base = sgn ? -pts[p] : pts[p];
            if (pass == 0) {
              float x0 = (float)base;
              float xs[3] = {nextafterf(x0, -INFINITY), x0, nextafterf(x0, INFINITY)};
              for (int q = 0; q < 3; q++) {
                uint32_t g;
                switch (f->type) {
                  case ncclFloat16: g = anycclFloatToHalf(xs[q]); break;
                  case ncclBfloat16: g = anycclFloatToBf16(xs[q]); break;
                  case ncclFloat8e4m3: g = anycclFloatToFp8e4m3(xs[q]); break;
                  default: g = anycclFloatToFp8e5m2(xs[q]); break;
                }
                uint32_t w = ref_round(f, xs[q], 0, 1);
                if (!(g == w || (fisnan(f, g) && fisnan(f, w)))) {
                  if (bad++ < 5) printf("  float->%s %a: got %#x want %#x\n", f->name, xs[q], g, w);
                }
              }
            } else {
              double x0 = (double)base;
              double xs[3] = {nextafter(x0, -INFINITY), x0, nextafter(x0, INFINITY)};
              for (int q = 0; q < 3; q++) {
                uint32_t g;
                switch (f->type) {
                  case ncclFloat16: g = anycclDoubleToHalf(xs[q]); break;
                  case ncclBfloat16: g = anycclDoubleToBf16(xs[q]); break;
                  case ncclFloat8e4m3: g = anycclDoubleToFp8e4m3(xs[q]); break;
                  default: g = anycclDoubleToFp8e5m2(xs[q]); break;
                }
                uint32_t w = ref_round(f, xs[q], 0, 1);
                if (!(g == w || (fisnan(f, g) && fisnan(f, w)))) {
                  if (bad++ < 5) printf("  double->%s %a: got %#x want %#x\n", f->name, xs[q], g, w);
                }
              }
            }
          }
        }
      }
    }
    for (int i = 0; i < 300000; i++) {
      uint32_t u = (uint32_t)rnd();
      float x;
      memcpy(&x, &u, 4);
      uint64_t u64 = rnd();
      double y;
      memcpy(&y, &u64, 8);
      if (i & 1) y = ldexp((double)(int64_t)rnd(), -(int)(rnd() % 220)); /* finite, varied */
      uint32_t gx, gy;
      switch (f->type) {
        case ncclFloat16: gx = anycclFloatToHalf(x), gy = anycclDoubleToHalf(y); break;
        case ncclBfloat16: gx = anycclFloatToBf16(x), gy = anycclDoubleToBf16(y); break;
        case ncclFloat8e4m3: gx = anycclFloatToFp8e4m3(x), gy = anycclDoubleToFp8e4m3(y); break;
        default: gx = anycclFloatToFp8e5m2(x), gy = anycclDoubleToFp8e5m2(y); break;
      }
      uint32_t wx = ref_round(f, x, 0, 1), wy = ref_round(f, y, 0, 1);
      if (!(gx == wx || (fisnan(f, gx) && fisnan(f, wx)))) {
        if (bad++ < 5) printf("  float->%s %a: got %#x want %#x\n", f->name, x, gx, wx);
      }
      if (!(gy == wy || (fisnan(f, gy) && fisnan(f, wy)))) {
        if (bad++ < 5) printf("  double->%s %a: got %#x want %#x\n", f->name, y, gy, wy);
      }
    }
    char what[64];
    snprintf(what, sizeof what, "conversions %s", f->name);
    report(what, bad);
  }
}

/* A few PreMulSum scalars per format: 1, 1/2, ~1/3, ~1/7, a random value, a
 * large one (overflow), a tiny one (underflow), a negative one. */
static size_t narrowScalars(const Fmt* f, uint32_t* s) {
  size_t k = 0;
  s[k++] = ref_round(f, 1.0L, 0, 1);
  s[k++] = ref_round(f, 0.5L, 0, 1);
  s[k++] = ref_round(f, 1.0L / 3, 0, 1);
  s[k++] = ref_round(f, 1.0L / 7, 0, 1) | fsign(f);
  s[k++] = (uint32_t)rnd() % f->maxcode;
  s[k++] = f->maxcode - 3;
  s[k++] = 3;
  /* short significands: products land exactly on midpoints */
  s[k++] = ref_round(f, 1.5L, 0, 1);
  s[k++] = ref_round(f, -1.25L, 0, 1);
  return k;
}

enum { T_BASIC = 1, T_PMS = 2, T_DIV = 4, T_ALL = 7 };
static void testNarrowOps(const Fmt* f, const uint16_t* a16, const uint16_t* b16, size_t n, const char* tag,
                          int which) {
  size_t es = (size_t)f->bytes;
  unsigned char* a = malloc(n * es);
  unsigned char* b = malloc(n * es);
  for (size_t i = 0; i < n; i++) {
    store(a, i, es, a16[i]);
    store(b, i, es, b16[i]);
  }
  char what[128];
  anycclRedOp op = {f->type, anycclDevSum, 0, 1};
  for (int o = anycclDevSum; o <= anycclDevMin && (which & T_BASIC); o++) {
    op.op = (anycclDevRedOp)o;
    snprintf(what, sizeof what, "%s %s %s", tag, f->name, opName(op.op));
    report(what, checkAligned(&op, 0, n, a, b, what));
  }
  uint32_t sc[16];
  size_t nsc = (which & T_PMS) ? narrowScalars(f, sc) : 0;
  op.op = anycclDevPreMulSum;
  for (size_t k = 0; k < nsc; k++) {
    op.scalar = sc[k];
    for (unsigned fl = 1; fl <= 3; fl++) {
      /* in1-only premul is the same element function with the operands
       * swapped (the pairs hold both orders): once is enough */
      if (fl == 2 && k > 0) continue;
      snprintf(what, sizeof what, "%s %s PreMulSum s=%#x flags=%u", tag, f->name, sc[k], fl);
      report(what, checkAligned(&op, fl, n, a, b, what));
    }
    snprintf(what, sizeof what, "%s %s PreMulSum unary s=%#x", tag, f->name, sc[k]);
    report(what, checkAligned(&op, ANYCCL_RED_PREMUL_IN0, n, a, NULL, what));
  }
  op.op = anycclDevSumPostDiv;
  /* large divisors too: there a double quotient rounded again would be wrong
   * (c * d stays exact in the reference: midpoints have <= 12 bits) */
  static const uint64_t divs[] = {1, 3, 7, 10, 255, 65521, (1ull << 45) + 3, (1ull << 52) - 1, 0xb504f333f9dull};
  for (size_t k = 0; k < sizeof divs / sizeof divs[0] && (which & T_DIV); k++) {
    op.divisor = divs[k];
    snprintf(what, sizeof what, "%s %s SumPostDiv d=%llu", tag, f->name, (unsigned long long)divs[k]);
    report(what, checkAligned(&op, ANYCCL_RED_POSTDIV_OUT0, n, a, b, what));
    if (k % 3 == 1) report(what, checkAligned(&op, ANYCCL_RED_POSTDIV_OUT0, n, a, NULL, what));
  }
  free(a);
  free(b);
}

/* fp8: all 256 x 256 pairs, every op. fp16/bf16: random + edge pairs. */
static void testNarrow(void) {
  static uint16_t a[1 << 16], b[1 << 16];
  const Fmt* f8[2] = {&F4, &F5};
  for (int k = 0; k < 2; k++) {
    for (uint32_t i = 0; i < (1u << 16); i++) {
      a[i] = (uint16_t)(i >> 8);
      b[i] = (uint16_t)(i & 0xff);
    }
    testNarrowOps(f8[k], a, b, 1u << 16, "exhaustive", T_ALL);
  }
  const Fmt* f16[2] = {&FH, &FB};
  for (int k = 0; k < 2; k++) {
    const Fmt* f = f16[k];
    uint32_t e[64];
    size_t ne = narrowEdges(f, e), n = 0;
    for (size_t i = 0; i < ne; i++)
      for (size_t j = 0; j < ne; j++) {
        a[n] = (uint16_t)e[i];
        b[n] = (uint16_t)e[j];
        n++;
      }
    for (size_t i = 0; i < ne; i++)
      for (int r = 0; r < 64; r++) {
        a[n] = (uint16_t)e[i];
        b[n] = (uint16_t)rnd();
        n++;
      }
    testNarrowOps(f, a, b, n, "edges", T_ALL);
    size_t nr = g_quick ? (1u << 14) : (1u << 16);
    genNarrowPairs(f, nr, a, b);
    testNarrowOps(f, a, b, nr, "random", T_ALL);
    if (f == &FB) { /* values where the float path for PreMulSum applies */
      genNarrowPairs(f, nr, a, b);
      tameBf16(nr, a);
      tameBf16(nr, b);
      testNarrowOps(f, a, b, nr, "tame", T_PMS);
    }
    /* extra random pairs for the plain sum, the hot path */
    anycclRedOp op = {f->type, anycclDevSum, 0, 1};
    for (int rep = 0; rep < (g_quick ? 1 : 4); rep++) {
      genNarrowPairs(f, 1u << 16, a, b);
      report("random sum", checkAligned(&op, 0, 1u << 16, a, b, "random sum"));
    }
  }
}

/* bf16 SumPostDiv with divisors chosen so that v / d lies within 2^-60 of a
 * bf16 midpoint without being one: a double quotient rounded to bf16 again
 * would land on the midpoint and round to even, wrongly half of the time.
 * (fp16/fp8 cannot get there: huge divisors push their quotients below the
 * smallest subnormal.) */
static void testPostDivHard(void) {
  long bad = 0, cases = 0;
  while (cases < 3000) {
    uint64_t M = 257 + 2 * (rnd() % 128);  /* odd 9-bit: a midpoint significand */
    uint64_t vs = 128 + rnd() % 128;       /* 8-bit significand of v */
    int x = 46 + (int)(rnd() % 6);
    uint64_t num = vs << x;
    uint64_t d = (num + M / 2) / M;
    int64_t r = (int64_t)(M * d) - (int64_t)num;
    if (r == 0 || d >= (1ull << 53)) continue;
    /* |r| / (M d) below half a double ulp: the double quotient hits M exactly */
    if ((long double)llabs(r) / ((long double)M * d) >= 0x1p-54L) continue;
    int E = -20 + (int)(rnd() % 60); /* v = vs * 2^E, quotient ~ M * 2^(E - x) */
    uint32_t v = ref_round(&FB, ldexpl((long double)vs, E), 0, 1) | ((rnd() & 1) ? 0x8000 : 0);
    uint16_t in[3] = {(uint16_t)v, (uint16_t)v, (uint16_t)v}, zero[3] = {0, 0, 0};
    anycclRedOp op = {ncclBfloat16, anycclDevSumPostDiv, 0, d};
    bad += check(&op, ANYCCL_RED_POSTDIV_OUT0, 3, in, NULL, 1, AL_NONE, 0, "postdiv-hard");
    bad += check(&op, ANYCCL_RED_POSTDIV_OUT0, 3, in, zero, 0, AL_O0_IN0, 0, "postdiv-hard");
    cases++;
  }
  report("bf16 postdiv near midpoints", bad);
}

static uint64_t randIntEdge(int bits) {
  uint64_t mask = bits == 64 ? ~0ull : (1ull << bits) - 1, top = 1ull << (bits - 1);
  switch (rnd() % 8) {
    case 0: return 0;
    case 1: return top & mask;              /* INT_MIN */
    case 2: return (top - 1) & mask;        /* INT_MAX */
    case 3: return mask;                    /* -1 / UINT_MAX */
    case 4: return (rnd() % 9) & mask;      /* small positive */
    case 5: return (0 - (rnd() % 9)) & mask; /* small negative */
    default: return rnd() & mask;
  }
}

static void testIntsFloats(void) {
  enum { N = 20000 };
  static unsigned char a[N * 8], b[N * 8];
  const ncclDataType_t types[] = {ncclInt8, ncclUint8, ncclInt32, ncclUint32, ncclInt64, ncclUint64, ncclFloat32, ncclFloat64};
  for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
    ncclDataType_t t = types[ti];
    size_t es = anycclTypeSize(t);
    int bits = (int)es * 8;
    for (size_t i = 0; i < N; i++) {
      uint64_t x, y;
      if (t == ncclFloat32) {
        static const float ev[] = {0.f, -0.f, 1.f, -1.f, 1e-45f, -1e-45f, 1.17549435e-38f, 3.40282347e38f,
                                   -3.40282347e38f, INFINITY, -INFINITY, NAN, 0.5f, 3.f, 1e30f, 1e-30f};
        x = (rnd() % 4) ? (uint32_t)rnd() : fb(ev[rnd() % 16]);
        y = (rnd() % 4) ? (uint32_t)rnd() : fb(ev[rnd() % 16]);
        if (rnd() % 2) y = fb(bf((uint32_t)x) * (float)ldexp(1.0 + (double)(rnd() % 1000) / 999, -(int)(rnd() % 30)));
      } else if (t == ncclFloat64) {
        static const double ev[] = {0., -0., 1., -1., 4.9e-324, -4.9e-324, 2.2250738585072014e-308, 1.7976931348623157e308,
                                    -1.7976931348623157e308, INFINITY, -INFINITY, NAN, 0.5, 3., 1e300, 1e-300};
        x = (rnd() % 4) ? rnd() : db(ev[rnd() % 16]);
        y = (rnd() % 4) ? rnd() : db(ev[rnd() % 16]);
        if (rnd() % 2) y = db(bd(x) * ldexp(1.0 + (double)(rnd() % 1000) / 999, -(int)(rnd() % 60)));
      } else {
        x = randIntEdge(bits);
        y = randIntEdge(bits);
      }
      store(a, i, es, x);
      store(b, i, es, y);
    }
    char what[128];
    anycclRedOp op = {t, anycclDevSum, 0, 1};
    for (int o = anycclDevSum; o <= anycclDevMin; o++) {
      op.op = (anycclDevRedOp)o;
      snprintf(what, sizeof what, "%s %s", anycclTypeName(t), opName(op.op));
      report(what, checkAligned(&op, 0, N, a, b, what));
    }
    uint64_t scal[6];
    if (t == ncclFloat32) {
      float fsv[6] = {1.f, 0.5f, 1.f / 3, -1.f / 7, 3e38f, 1e-40f};
      for (int k = 0; k < 6; k++) scal[k] = fb(fsv[k]);
    } else if (t == ncclFloat64) {
      double dsv[6] = {1., 0.5, 1. / 3, -1. / 7, 1e308, 1e-310};
      for (int k = 0; k < 6; k++) scal[k] = db(dsv[k]);
    } else {
      uint64_t isv[6] = {1, 2, 3, (uint64_t)-1, 1ull << (bits - 1), rnd()};
      for (int k = 0; k < 6; k++) scal[k] = isv[k] & (bits == 64 ? ~0ull : (1ull << bits) - 1);
    }
    op.op = anycclDevPreMulSum;
    for (int k = 0; k < 6; k++) {
      op.scalar = scal[k];
      for (unsigned fl = 1; fl <= 3; fl++) {
        snprintf(what, sizeof what, "%s PreMulSum s=%#llx flags=%u", anycclTypeName(t), (unsigned long long)scal[k], fl);
        report(what, checkAligned(&op, fl, N, a, b, what));
      }
      report(what, checkAligned(&op, ANYCCL_RED_PREMUL_IN0, N, a, NULL, what));
    }
    op.op = anycclDevSumPostDiv;
    static const uint64_t divs[] = {0, 1, 2, 3, 7, 8, 100, 1000003, 0x7fffffffffffffffull};
    for (size_t k = 0; k < sizeof divs / sizeof divs[0]; k++) {
      op.divisor = divs[k];
      snprintf(what, sizeof what, "%s SumPostDiv d=%llu", anycclTypeName(t), (unsigned long long)divs[k]);
      report(what, checkAligned(&op, ANYCCL_RED_POSTDIV_OUT0, N, a, b, what));
      report(what, checkAligned(&op, ANYCCL_RED_POSTDIV_OUT0, N, a, NULL, what));
    }
  }
}

/* Every type x op x flag combination x in1/out1 presence x aliasing x
 * length x pointer offset (aligned, one element, one byte). */
static void testPlumbing(void) {
  static const size_t lens[] = {0, 1, 7, 33, 1003};
  enum { MAXN = 1003 };
  static unsigned char a[MAXN * 8], b[MAXN * 8];
  long runs = 0;
  for (int t = 0; t < ncclNumTypes; t++) {
    size_t es = anycclTypeSize((ncclDataType_t)t);
    for (size_t i = 0; i < MAXN * es; i++) {
      a[i] = (unsigned char)rnd();
      b[i] = (unsigned char)rnd();
    }
    for (int o = anycclDevSum; o <= anycclDevSumPostDiv; o++) {
      anycclRedOp op = {(ncclDataType_t)t, (anycclDevRedOp)o, 0, 3};
      /* scalar: a value like 1/3 in the type */
      switch (t) {
        case ncclFloat32: op.scalar = fb(1.f / 3); break;
        case ncclFloat64: op.scalar = db(1. / 3); break;
        case ncclFloat16: op.scalar = ref_round(&FH, 1.0L / 3, 0, 1); break;
        case ncclBfloat16: op.scalar = ref_round(&FB, 1.0L / 3, 0, 1); break;
        case ncclFloat8e4m3: op.scalar = ref_round(&F4, 1.0L / 3, 0, 1); break;
        case ncclFloat8e5m2: op.scalar = ref_round(&F5, 1.0L / 3, 0, 1); break;
        default: op.scalar = 3; break;
      }
      for (unsigned fl = 0; fl < 8; fl++)
        for (int has1 = 0; has1 < 2; has1++)
          for (int useOut1 = 0; useOut1 < 2; useOut1++)
            for (int al = 0; al < AL_COUNT; al++) {
              if (!has1 && (al == AL_O0_IN1 || al == AL_O1_IN1)) continue;
              if (!useOut1 && (al == AL_O1_IN0 || al == AL_O1_IN1)) continue;
              size_t offs[3] = {0, es, 1};
              for (int oi = 0; oi < 3; oi++) {
                if (offs[oi] == 1 && es == 1) continue;
                size_t n = lens[(runs++) % 5];
                char what[96];
                snprintf(what, sizeof what, "plumbing");
                report(what, check(&op, fl, n, a, has1 ? b : NULL, useOut1, al, offs[oi], what));
              }
            }
    }
  }
  /* every length with every type, sum and premulsum, aligned and not */
  for (int t = 0; t < ncclNumTypes; t++)
    for (size_t li = 0; li < 5; li++)
      for (int oi = 0; oi < 2; oi++) {
        anycclRedOp op = {(ncclDataType_t)t, anycclDevSum, 0, 1};
        size_t off = oi ? anycclTypeSize((ncclDataType_t)t) * 3 : 0;
        report("lengths", check(&op, 0, lens[li], a, b, 1, AL_O0_IN1, off, "lengths"));
        op.op = anycclDevPreMulSum;
        op.scalar = (t == ncclFloat32) ? fb(0.25f) : (t == ncclFloat64) ? db(0.25) : 1;
        report("lengths", check(&op, 3, lens[li], a, b, 0, AL_O0_IN0, off, "lengths"));
      }
}

static void testNames(void) {
  static const char* tn[] = {"int8", "uint8", "int32", "uint32", "int64", "uint64",
                             "half", "float", "double", "bfloat16", "f8e4m3", "f8e5m2"};
  static const size_t ts[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  long bad = 0;
  for (int t = 0; t < ncclNumTypes; t++) {
    if (strcmp(anycclTypeName((ncclDataType_t)t), tn[t]) != 0) bad++;
    if (anycclTypeSize((ncclDataType_t)t) != ts[t]) bad++;
  }
  if (anycclTypeSize((ncclDataType_t)ncclNumTypes) != 0) bad++;
  static const char* on[] = {"sum", "prod", "max", "min", "avg"};
  for (int o = 0; o < ncclNumOps; o++)
    if (strcmp(anycclOpName((ncclRedOp_t)o), on[o]) != 0) bad++;
  if (strcmp(anycclOpName((ncclRedOp_t)ncclNumOps), "premulsum") != 0) bad++;
  if (strcmp(anycclOpName((ncclRedOp_t)(ncclNumOps + 7)), "premulsum") != 0) bad++;
  report("names", bad);
}

/* ------------------------------------------------------------------------- */
/* Self-check: wrong implementations must be caught                         */

static void mut_f16_ties_away(const anycclRedOp* op, unsigned flags, size_t n, const void* a, const void* b, void* o0) {
  for (size_t i = 0; i < n; i++) {
    long double x = fdecode(&FH, (uint32_t)load(a, i, 2)), y = fdecode(&FH, (uint32_t)load(b, i, 2)), hi, lo;
    two_sum(x, y, &hi, &lo);
    store(o0, i, 2, ref_round_mode(&FH, hi, lo, 1, 1));
  }
}
static void mut_bf16_truncate(const anycclRedOp* op, unsigned flags, size_t n, const void* a, const void* b,
                              void* o0) {
  for (size_t i = 0; i < n; i++) {
    float s = anycclBf16ToFloat((uint16_t)load(a, i, 2)) + anycclBf16ToFloat((uint16_t)load(b, i, 2));
    uint32_t u = fb(s);
    store(o0, i, 2, isnan(s) ? 0x7fc0 : (u >> 16));
  }
}
/* PreMulSum with both products and the sum in float, then rounded again. */
static void mut_bf16_pms_float(const anycclRedOp* op, unsigned flags, size_t n, const void* a, const void* b,
                               void* o0) {
  float s = anycclBf16ToFloat((uint16_t)op->scalar);
  for (size_t i = 0; i < n; i++) {
    float x = anycclBf16ToFloat((uint16_t)load(a, i, 2)), y = anycclBf16ToFloat((uint16_t)load(b, i, 2));
    volatile float px = (flags & 1) ? s * x : x, py = (flags & 2) ? s * y : y;
    store(o0, i, 2, anycclFloatToBf16(px + py));
  }
}
static void mut_e4m3_nosat(const anycclRedOp* op, unsigned flags, size_t n, const void* a, const void* b, void* o0) {
  for (size_t i = 0; i < n; i++) {
    float s = anycclFp8e4m3ToFloat((uint8_t)load(a, i, 1)) + anycclFp8e4m3ToFloat((uint8_t)load(b, i, 1));
    store(o0, i, 1, fabsf(s) > 464.f ? 0x7f : anycclFloatToFp8e4m3(s));
  }
}
static void mut_f16_ftz(const anycclRedOp* op, unsigned flags, size_t n, const void* a, const void* b, void* o0) {
  for (size_t i = 0; i < n; i++) {
    uint16_t r = anycclFloatToHalf(anycclHalfToFloat((uint16_t)load(a, i, 2)) + anycclHalfToFloat((uint16_t)load(b, i, 2)));
    if ((r & 0x7c00) == 0) r &= 0x8000;
    store(o0, i, 2, r);
  }
}
static void mut_flip_one(const anycclRedOp* op, unsigned flags, size_t n, const void* a, const void* b, void* o0) {
  if (n > 12345) ((unsigned char*)o0)[12345 * anycclTypeSize(op->type)] ^= 1;
}

static void selfCheck(void) {
  static uint16_t a[1 << 16], b[1 << 16];
  struct {
    const char* name;
    MutantFn fn;
    const Fmt* f;
    anycclDevRedOp op;
    unsigned flags;
    int exhaustive; /* 1: all fp8 pairs, 2: tame bf16 values, 0: random */
  } muts[] = {
      {"fp16 sum, ties away from zero", mut_f16_ties_away, &FH, anycclDevSum, 0, 0},
      {"bf16 sum, truncation", mut_bf16_truncate, &FB, anycclDevSum, 0, 0},
      {"bf16 premulsum, double rounding via float", mut_bf16_pms_float, &FB, anycclDevPreMulSum, 3, 0},
      {"bf16 premulsum (in0 only), double rounding via float", mut_bf16_pms_float, &FB, anycclDevPreMulSum, 1, 0},
      {"bf16 premulsum, tame values, double rounding via float", mut_bf16_pms_float, &FB, anycclDevPreMulSum, 3, 2},
      {"e4m3 sum, overflow to NaN", mut_e4m3_nosat, &F4, anycclDevSum, 0, 1},
      {"fp16 sum, subnormals flushed", mut_f16_ftz, &FH, anycclDevSum, 0, 0},
      {"fp16 sum, one flipped bit", mut_flip_one, &FH, anycclDevSum, 0, 0},
  };
  g_quiet = 1;
  for (size_t m = 0; m < sizeof muts / sizeof muts[0]; m++) {
    const Fmt* f = muts[m].f;
    size_t n = 1u << 16, es = (size_t)f->bytes;
    unsigned char* pa = malloc(n * es);
    unsigned char* pb = malloc(n * es);
    if (muts[m].exhaustive == 1) {
      for (uint32_t i = 0; i < n; i++) {
        a[i] = (uint16_t)(i >> 8);
        b[i] = (uint16_t)(i & 0xff);
      }
    } else {
      genNarrowPairs(f, n, a, b);
      if (muts[m].exhaustive == 2) {
        tameBf16(n, a);
        tameBf16(n, b);
      }
    }
    for (size_t i = 0; i < n; i++) {
      store(pa, i, es, a[i]);
      store(pb, i, es, b[i]);
    }
    /* 1.5: products with short significands that can sit on a midpoint */
    anycclRedOp op = {f->type, muts[m].op, ref_round(f, 1.5L, 0, 1), 1};
    g_mutant = muts[m].fn;
    long bad = check(&op, muts[m].flags, n, pa, pb, 0, AL_NONE, 0, "selfcheck");
    g_mutant = NULL;
    printf("self-check: %-55s caught %ld mismatches%s\n", muts[m].name, bad, bad ? "" : "  <-- NOT CAUGHT");
    if (bad == 0) g_fail++;
    if (muts[m].fn == mut_flip_one && bad != 1) g_fail++;
    free(pa);
    free(pb);
  }
  g_quiet = 0;
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char** argv) {
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--quick") == 0)
      g_quick = 1;
    else
      g_rng = strtoull(argv[i], NULL, 0) | 1; /* a seed */
  }
  printf("seed %#llx\n", (unsigned long long)g_rng);
  fmt_init(&FH);
  fmt_init(&FB);
  fmt_init(&F4);
  fmt_init(&F5);
  struct {
    const char* name;
    void (*fn)(void);
  } parts[] = {{"self-check", selfCheck},   {"names", testNames},           {"conversions", testConversions},
               {"narrow", testNarrow}, {"postdiv-hard", testPostDivHard},       {"ints/fp32/fp64", testIntsFloats}, {"plumbing", testPlumbing}};
  for (size_t p = 0; p < sizeof parts / sizeof parts[0]; p++) {
    double t0 = now();
    long before = g_fail;
    parts[p].fn();
    printf("%-16s %s (%.2f s)\n", parts[p].name, g_fail == before ? "ok" : "FAILED", now() - t0);
  }
  if (g_fail) {
    printf("FAILED: %ld\n", g_fail);
    return 1;
  }
  printf("all passed\n");
  return 0;
}
