/* Element-wise reduction for every NCCL type and device op (see reduce.h).
 *
 * Layout of this file:
 *   1. scalar conversions between the narrow float formats and float/double
 *      (branch-free where they sit in hot loops, so that gcc vectorises them);
 *   2. one inline "element function" per (type, op): storage type in, storage
 *      type out;
 *   3. a macro that stamps out, per type, one loop per (op, flag) combination
 *      and a switch that picks the loop once per call (no per-element branch
 *      on flags or op);
 *   4. anycclReduce(): turns (op, flags, in1 == NULL) into a kernel kind,
 *      handles plain copies and misaligned pointers, and dispatches by type.
 *
 * Semantics chosen here (the tests in tests/reduce/ check them bit for bit):
 *   - Integers: two's complement wraparound (computed on unsigned types);
 *     PreMulSum is s*a + s*b wrapped; SumPostDiv divides the wrapped sum by
 *     the divisor with C truncation toward zero (a signed division for the
 *     signed types: -7 / 2 = -3), like NCCL's integer avg. Divisor 0 counts
 *     as 1; divisors must be below 2^63.
 *   - fp32/fp64: plain IEEE operations in the type, no FMA contraction:
 *     PreMulSum is (s*a) + (s*b), each operation rounded; SumPostDiv is
 *     (a+b) / (T)divisor.
 *   - fp16, bf16, fp8: one rounding (to nearest, ties to even) of the exact
 *     result of the op, including PreMulSum (s*a + s*b rounded once). For
 *     SumPostDiv, out1 gets round(a+b) and out0 gets round(round(a+b)/divisor)
 *     (the rounded result divided, as with the other types).
 *     fp16 and bf16 overflow to infinity; fp8 e4m3 and e5m2 saturate to the
 *     largest finite value (448, 57344) on overflow and for infinite results
 *     (e5m2 +-inf becomes +-57344, as __NV_SATFINITE); NaN stays NaN.
 *   - Max/Min on floats ignore a NaN operand (NaN only if both are NaN), like
 *     fmax/fmin, and order -0 below +0: max(-0,+0) = +0, min(-0,+0) = -0
 *     (IEEE 754-2019 maximumNumber/minimumNumber), so they are commutative.
 *   - Flags that do not belong to the op (PREMUL_* outside PreMulSum,
 *     POSTDIV_OUT0 outside SumPostDiv) are ignored. With in1 == NULL and no
 *     flag in effect, the data is copied bit for bit (no canonicalisation).
 *   - Pointers need not be aligned, not even to the element size (misaligned
 *     ones go through an aligned bounce buffer).
 *   - Subnormals assume the default floating-point environment (no FTZ/DAZ,
 *     round to nearest).
 *
 * Speed: the loops are plain C that gcc -O3 vectorises (checked with
 * -fopt-info-vec: all but the integer/narrow post-division ones); on x86-64
 * Linux each loop also gets an AVX2 clone picked at load time (ifunc), and
 * the fp16/bf16 sums have AVX2/F16C intrinsic versions picked at run time.
 * All variants give bitwise identical results; tests/reduce runs both the
 * dispatched build and a portable-only build. Build with
 * -DANYCCL_NO_MULTIVERSION / -DANYCCL_NO_X86_PATHS to turn them off.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "reduce.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(ANYCCL_NO_X86_PATHS)
#include <cpuid.h>
#include <immintrin.h>
#define HAVE_X86_PATHS 1
#endif

#if defined(__GNUC__) && !defined(__clang__)
/* gnu11 allows -ffp-contract=fast; the results must not depend on whether
 * the target has FMA. */
#pragma GCC optimize("fp-contract=off")
#define IVDEP _Pragma("GCC ivdep")
#elif defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#define IVDEP _Pragma("clang loop vectorize(assume_safety)")
#else
#define IVDEP
#endif

#define AI static inline __attribute__((always_inline))

/* Hot loops get an AVX2 clone next to the baseline one where the toolchain
 * and libc support ifuncs; the results are bitwise the same in both. */
#if defined(__x86_64__) && defined(__GNUC__) && defined(__linux__) && !defined(ANYCCL_NO_MULTIVERSION) && \
    !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define HOT __attribute__((target_clones("avx2", "default")))
#else
#define HOT __attribute__((noinline))
#endif

/* ------------------------------------------------------------------------- */
/* Bit casts                                                                 */

AI uint32_t f2u(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
AI float u2f(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
AI uint64_t d2u(double d) {
  uint64_t u;
  memcpy(&u, &d, 8);
  return u;
}
AI double u2d(uint64_t u) {
  double d;
  memcpy(&d, &u, 8);
  return d;
}

/* Branch-free select: c ? x : y. gcc sinks a float op that feeds only one
 * arm of a ?: into a branch and then cannot if-convert it (the op might trap),
 * which stops vectorisation; masks keep the loop straight-line. */
AI uint32_t sel32(int c, uint32_t x, uint32_t y) {
  uint32_t m = (uint32_t)0 - (uint32_t)(c != 0);
  return (x & m) | (y & ~m);
}

/* ------------------------------------------------------------------------- */
/* Narrow formats. E exponent bits, M mantissa bits, BIAS exponent bias.
 * fp16: 1-5-10 bias 15, inf/NaN at exponent 31.
 * bf16: 1-8-7 bias 127, inf/NaN at exponent 255.
 * e4m3 (OCP "FN"): 1-4-3 bias 7, no inf, S.1111.111 is NaN, max 448 (0x7e).
 * e5m2: 1-5-2 bias 15, IEEE-like inf (0x7c) and NaN, max 57344 (0x7b). */

/* narrow -> float, exact, branch-free. E4M3 selects the e4m3 special rule. */
AI float nar2f(uint32_t x, int E, int M, int BIAS, int E4M3) {
  uint32_t sign = (x >> (E + M)) << 31;
  uint32_t a = x & ((1u << (E + M)) - 1);
  uint32_t normal = (a << (23 - M)) + ((uint32_t)(127 - BIAS) << 23);
  /* subnormal: 2^(1-BIAS) * (1 + a/2^M) - 2^(1-BIAS) = a * 2^(1-BIAS-M) */
  uint32_t magic = (uint32_t)(128 - BIAS) << 23;
  uint32_t sub = f2u(u2f(magic | (a << (23 - M))) - u2f(magic));
  uint32_t r = sel32(a < (1u << M), sub, normal);
  if (E4M3)
    r = sel32(a == 0x7f, 0x7fc00000u, r);
  else
    r = sel32(a >= (((1u << E) - 1) << M), (a << (23 - M)) | 0x7f800000u, r);
  return u2f(sign | r);
}

/* float -> narrow, round to nearest even, branch-free. Codes above MAXC turn
 * into OVF (infinity, or MAXC itself when saturating); NaN into NANC. */
AI uint32_t f2nar(float f, int E, int M, int BIAS, uint32_t MAXC, uint32_t OVF, uint32_t NANC) {
  uint32_t u = f2u(f);
  uint32_t a = u & 0x7fffffffu;
  uint32_t sign = (u >> 31) << (E + M);
  /* normal: rebias the exponent, add the rounding increment, shift */
  uint32_t t = a - ((uint32_t)(127 - BIAS) << 23);
  t += ((1u << (22 - M)) - 1) + ((a >> (23 - M)) & 1);
  uint32_t cn = t >> (23 - M);
  /* subnormal: adding 2^(1-BIAS-M+23) makes the FPU round at the subnormal
   * unit 2^(1-BIAS-M); the low bits are then the code (may carry to the
   * smallest normal, which is the right code too). */
  uint32_t mb = (uint32_t)(128 - BIAS - M + 23) << 23;
  uint32_t cs = f2u(u2f(a) + u2f(mb)) - mb;
  uint32_t code = sel32(a < ((uint32_t)(128 - BIAS) << 23), cs, cn);
  code = sel32(code > MAXC, OVF, code);
  code = sel32(a > 0x7f800000u, NANC, code);
  return sign | code;
}

AI float h2f(uint16_t x) { return nar2f(x, 5, 10, 15, 0); }
AI uint16_t f2h(float f) { return (uint16_t)f2nar(f, 5, 10, 15, 0x7bff, 0x7c00, 0x7e00); }
AI float b2f(uint16_t x) { return u2f((uint32_t)x << 16); }
AI uint16_t f2b(float f) {
  uint32_t a = f2u(f);
  uint32_t r = (a + 0x7fffu + ((a >> 16) & 1)) >> 16; /* carries into exponent/inf correctly */
  r = sel32((a & 0x7fffffffu) > 0x7f800000u, (a >> 16) | 0x40u, r);
  return (uint16_t)r;
}
/* For results of + - * on bf16-exact floats: a NaN there keeps the low 16
 * bits zero (an input's payload or the default NaN), so the rounding
 * increment cannot carry out of it and no NaN test is needed. */
AI uint16_t f2b_arith(float f) {
  uint32_t a = f2u(f);
  return (uint16_t)((a + 0x7fffu + ((a >> 16) & 1)) >> 16);
}
AI float e4f(uint8_t x) { return nar2f(x, 4, 3, 7, 1); }
AI uint8_t f2e4(float f) { return (uint8_t)f2nar(f, 4, 3, 7, 0x7e, 0x7e, 0x7f); }
AI float e5f(uint8_t x) { return nar2f(x, 5, 2, 15, 0); }
AI uint8_t f2e5(float f) { return (uint8_t)f2nar(f, 5, 2, 15, 0x7b, 0x7b, 0x7f); }

/* double -> narrow, round to nearest even, for any double. */
AI uint32_t d2nar(double d, int E, int M, int BIAS, uint32_t MAXC, uint32_t OVF, uint32_t NANC) {
  uint64_t u = d2u(d);
  uint64_t a = u & 0x7fffffffffffffffull;
  uint32_t sign = (uint32_t)(u >> 63) << (E + M);
  if (a > 0x7ff0000000000000ull) return sign | NANC;
  int e = (int)(a >> 52) - 1023; /* double subnormals: -1023, far below any narrow subnormal */
  int emin = 1 - BIAS;
  if (e < emin - M - 1) return sign; /* below half the smallest subnormal: +-0 */
  if (e > 1000) return sign | OVF;   /* huge or inf; keeps the shifts below in range */
  uint64_t sig = (a & 0x000fffffffffffffull) | (1ull << 52);
  int shift = 52 - M + (e < emin ? emin - e : 0); /* <= 53 */
  uint64_t q = sig >> shift;
  uint64_t rem = sig & ((1ull << shift) - 1), half = 1ull << (shift - 1);
  q += (rem > half) | ((rem == half) & (q & 1));
  /* normal: exponent field (e+BIAS) on top of q, whose implicit bit adds one;
   * a carry out of the mantissa moves the exponent up, as it should */
  uint64_t code = (e < emin) ? q : ((uint64_t)(e + BIAS - 1) << M) + q;
  if (code > MAXC) code = OVF;
  return sign | (uint32_t)code;
}
AI uint16_t d2h(double d) { return (uint16_t)d2nar(d, 5, 10, 15, 0x7bff, 0x7c00, 0x7e00); }
AI uint16_t d2b(double d) { return (uint16_t)d2nar(d, 8, 7, 127, 0x7f7f, 0x7f80, 0x7fc0); }
AI uint8_t d2e4(double d) { return (uint8_t)d2nar(d, 4, 3, 7, 0x7e, 0x7e, 0x7f); }
AI uint8_t d2e5(double d) { return (uint8_t)d2nar(d, 5, 2, 15, 0x7b, 0x7b, 0x7f); }

AI uint64_t sel64(int c, uint64_t x, uint64_t y) {
  uint64_t m = (uint64_t)0 - (uint64_t)(c != 0);
  return (x & m) | (y & ~m);
}

/* x + y (doubles) rounded to float with round-to-odd: truncate, and set the
 * last bit if anything was lost. Rounding that float once more to a format
 * with at most 22 significand bits gives the correctly rounded x + y, also
 * for subnormal targets (float has 16 more bits there) and on overflow
 * (beyond float's range the odd result is FLT_MAX or inf, which every
 * narrow format turns into its overflow value). Branch-free: vectorises. */
AI float sum_f_odd(double x, double y) {
  double s = x + y;
  double bb = s - x;
  double err = (x - (s - bb)) + (y - bb); /* s + err == x + y exactly (TwoSum) */
  float f = (float)s;
  double df = (double)f;
  /* Which way the exact value lies from f: s decides unless f == s, then
   * err does (|err| is at most half a double ulp; s != f means at least an
   * ulp). All in integer bit operations so that gcc vectorises it. */
  const uint64_t ABS = 0x7fffffffffffffffull, INF = 0x7ff0000000000000ull;
  uint64_t us = d2u(s), ud = d2u(df), ue = d2u(err);
  uint64_t moved = us != ud;
  uint64_t lost = moved | (((ue & ABS) - 1) < INF); /* err nonzero and not NaN */
  uint64_t upMoved = (us & ABS) > (ud & ABS);
  uint64_t upErr = ((ue ^ us) >> 63) ^ 1; /* err has the sign of s */
  uint64_t up = sel64((int)moved, upMoved, upErr);
  uint32_t u = f2u(f);
  uint32_t step = 1u - ((uint32_t)(up ^ 1) << 1); /* +1 or -1 on the magnitude */
  u += step & ((uint32_t)0 - (uint32_t)(lost & ~u & 1));
  return u2f(u);
}

/* The same with float throughout, for formats whose products of two values
 * are exact normal floats (fp16: 22 bits within 2^-48..2^32; fp8): then
 * TwoSum in float is exact too, and float has >= 13 bits more than they. */
AI float sumf_odd(float x, float y) {
  float s = x + y;
  float bb = s - x;
  float err = (x - (s - bb)) + (y - bb);
  uint32_t us = f2u(s), ue = f2u(err);
  uint32_t lost = ((ue & 0x7fffffffu) - 1) < 0x7f800000u; /* err nonzero and not NaN */
  uint32_t step = 1u - ((((ue ^ us) >> 31) & 1) << 1);   /* towards err: +1 or -1 on the magnitude */
  us += step & ((uint32_t)0 - (lost & ~us & 1));
  return u2f(us);
}

/* v / d rounded to odd (d > 0). */
static inline double div_odd(double v, double d) {
  double q = v / d;
  uint64_t u = d2u(q);
  if ((u & 0x7ff0000000000000ull) == 0x7ff0000000000000ull || q == 0) return q;
  double r = fma(-q, d, v); /* exact remainder */
  if (r != 0 && !(u & 1)) u += ((r > 0) == (q > 0)) ? 1 : (uint64_t)-1;
  return u2d(u);
}

/* ------------------------------------------------------------------------- */
/* Public scalar conversions                                                 */

float anycclHalfToFloat(uint16_t h) { return h2f(h); }
uint16_t anycclFloatToHalf(float f) { return f2h(f); }
float anycclBf16ToFloat(uint16_t b) { return b2f(b); }
uint16_t anycclFloatToBf16(float f) { return f2b(f); }
float anycclFp8e4m3ToFloat(uint8_t v) { return e4f(v); }
uint8_t anycclFloatToFp8e4m3(float f) { return f2e4(f); }
float anycclFp8e5m2ToFloat(uint8_t v) { return e5f(v); }
uint8_t anycclFloatToFp8e5m2(float f) { return f2e5(f); }
uint16_t anycclDoubleToHalf(double d) { return d2h(d); }
uint16_t anycclDoubleToBf16(double d) { return d2b(d); }
uint8_t anycclDoubleToFp8e4m3(double d) { return d2e4(d); }
uint8_t anycclDoubleToFp8e5m2(double d) { return d2e5(d); }

/* ------------------------------------------------------------------------- */
/* Names and sizes                                                           */

size_t anycclTypeSize(ncclDataType_t type) {
  switch (type) {
    case ncclInt8:
    case ncclUint8:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2: return 1;
    case ncclFloat16:
    case ncclBfloat16: return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32: return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64: return 8;
    default: return 0;
  }
}

const char* anycclTypeName(ncclDataType_t type) {
  static const char* const names[ncclNumTypes] = {"int8",   "uint8", "int32",  "uint32",   "int64",  "uint64",
                                                  "half",   "float", "double", "bfloat16", "f8e4m3", "f8e5m2"};
  if ((int)type < 0 || (int)type >= ncclNumTypes) return "unknown";
  return names[type];
}

const char* anycclOpName(ncclRedOp_t op) {
  static const char* const names[ncclNumOps] = {"sum", "prod", "max", "min", "avg"};
  if ((int)op < 0) return "unknown";
  if ((int)op >= ncclNumOps) return "premulsum";
  return names[op];
}

/* ------------------------------------------------------------------------- */
/* Element functions. Per type P: P_add, P_mul, P_max, P_min, P_pms11 (both
 * inputs premultiplied), P_pms10 (first only), P_scale (unary premul),
 * P_div (post-division of a result). */

typedef struct {
  float sf, df;     /* scalar and divisor as float (fp32) */
  double sd, dd;    /* scalar and divisor as double (fp64, narrow, small ints) */
  uint64_t su, du;  /* raw scalar bits and divisor (integers) */
} rctx;

/* Integers: storage is the unsigned type; signed types reinterpret for
 * comparison and division only. */
#define DEF_INT(P, U, S)                                                                              \
  AI U P##_add(U a, U b, const rctx* c) { return (U)(a + b); }                                        \
  AI U P##_mul(U a, U b, const rctx* c) { return (U)((U)a * (U)b); }                                  \
  AI U P##_max(U a, U b, const rctx* c) { return (S)a > (S)b ? a : b; }                               \
  AI U P##_min(U a, U b, const rctx* c) { return (S)a < (S)b ? a : b; }                               \
  AI U P##_pms11(U a, U b, const rctx* c) { return (U)((U)((U)c->su * a) + (U)((U)c->su * b)); }      \
  AI U P##_pms10(U a, U b, const rctx* c) { return (U)((U)((U)c->su * a) + b); }                      \
  AI U P##_scale(U a, const rctx* c) { return (U)((U)c->su * a); }

/* 8/32-bit: a double quotient truncates to the exact integer quotient
 * (|v| < 2^32 so v/d is at least 1/d away from the next integer, far more
 * than double's relative error); this vectorises, integer division does not. */
DEF_INT(i8, uint8_t, int8_t)
AI uint8_t i8_div(uint8_t v, const rctx* c) { return (uint8_t)(int32_t)((double)(int8_t)v / c->dd); }
DEF_INT(u8, uint8_t, uint8_t)
AI uint8_t u8_div(uint8_t v, const rctx* c) { return (uint8_t)(int32_t)((double)v / c->dd); }
DEF_INT(i32, uint32_t, int32_t)
AI uint32_t i32_div(uint32_t v, const rctx* c) { return (uint32_t)(int32_t)((double)(int32_t)v / c->dd); }
DEF_INT(u32, uint32_t, uint32_t)
AI uint32_t u32_div(uint32_t v, const rctx* c) { return (uint32_t)(int64_t)((double)v / c->dd); }
DEF_INT(i64, uint64_t, int64_t)
AI uint64_t i64_div(uint64_t v, const rctx* c) { return (uint64_t)((int64_t)v / (int64_t)c->du); }
DEF_INT(u64, uint64_t, uint64_t)
AI uint64_t u64_div(uint64_t v, const rctx* c) { return v / c->du; }

/* IEEE types. Max/Min: NaN-ignoring, -0 < +0 (equal operands: the AND of the
 * bit patterns is +0 if either zero is +0, the OR is -0 if either is -0). */
#define DEF_FLT(P, T, TOU, FROMU, S, D)                              \
  AI T P##_add(T a, T b, const rctx* c) { return a + b; }            \
  AI T P##_mul(T a, T b, const rctx* c) { return a * b; }            \
  AI T P##_max(T a, T b, const rctx* c) {                            \
    T r = a > b ? a : b;                                             \
    r = (b != b) ? a : r;                                            \
    return (a == b) ? FROMU(TOU(a) & TOU(b)) : r;                    \
  }                                                                  \
  AI T P##_min(T a, T b, const rctx* c) {                            \
    T r = a < b ? a : b;                                             \
    r = (b != b) ? a : r;                                            \
    return (a == b) ? FROMU(TOU(a) | TOU(b)) : r;                    \
  }                                                                  \
  AI T P##_pms11(T a, T b, const rctx* c) {                          \
    T x = c->S * a, y = c->S * b;                                    \
    return x + y;                                                    \
  }                                                                  \
  AI T P##_pms10(T a, T b, const rctx* c) {                          \
    T x = c->S * a;                                                  \
    return x + b;                                                    \
  }                                                                  \
  AI T P##_scale(T a, const rctx* c) { return c->S * a; }            \
  AI T P##_div(T v, const rctx* c) { return v / c->D; }

DEF_FLT(f32, float, f2u, u2f, sf, df)
DEF_FLT(f64, double, d2u, u2d, sd, dd)

/* Narrow floats. Sums go through float: a sum of two values of a format with
 * p <= 11 significand bits is either exact in float or its float rounding
 * error is far from any midpoint of the narrow format (the smaller operand
 * is then below 2^-13 of the result), so rounding the float once more is
 * correct. Products of two narrow values are exact in float (fp16, fp8) or
 * in double (bf16); a bf16 product rounded to float and then to bf16 is
 * still right: it has 16 significant bits, so below 2^-126 it is exact in
 * float down to 2^-134, and smaller ones round to 0 either way (65535 * 2^-150,
 * the one dangerous value, is no product of two 8-bit significands); beyond
 * float's range both overflow. PreMulSum sums products, which can sit exactly
 * on a midpoint: exact products in double, TwoSum, round to odd in float,
 * then the final rounding. Max/Min select one of the input codes. */
#define DEF_NARROW(P, T, TOF, FROMF, ADDF, FROMD, MULT, SATINF, PMS)                          \
  AI T P##_add(T a, T b, const rctx* c) { return ADDF(TOF(a) + TOF(b)); }                     \
  AI T P##_mul(T a, T b, const rctx* c) { return MULT(a, b); }                                \
  AI T P##_max(T a, T b, const rctx* c) {                                                     \
    float x = TOF(a), y = TOF(b);                                                             \
    T r = x > y ? a : b;                                                                      \
    r = (y != y) ? a : r;                                                                     \
    r = (x == y) ? (T)(a & b) : r;                                                            \
    return SATINF(r);                                                                         \
  }                                                                                           \
  AI T P##_min(T a, T b, const rctx* c) {                                                     \
    float x = TOF(a), y = TOF(b);                                                             \
    T r = x < y ? a : b;                                                                      \
    r = (y != y) ? a : r;                                                                     \
    r = (x == y) ? (T)(a | b) : r;                                                            \
    return SATINF(r);                                                                         \
  }                                                                                           \
  AI T P##_pms11(T a, T b, const rctx* c) { return FROMF(PMS(1, a, b)); }                    \
  AI T P##_pms10(T a, T b, const rctx* c) { return FROMF(PMS(0, a, b)); }                    \
  AI T P##_scale(T a, const rctx* c) { return FROMF((float)(c->sd * (double)TOF(a))); }     \
  AI T P##_div(T v, const rctx* c) { return FROMD(div_odd((double)TOF(v), c->dd)); }

#define NOSAT(r) (r)
#define SAT_E5(r) ((((r) & 0x7f) == 0x7c) ? (uint8_t)(((r) & 0x80) | 0x7b) : (r))
#define MUL_H(a, b) f2h(h2f(a) * h2f(b))
#define MUL_B(a, b) f2b((float)((double)b2f(a) * (double)b2f(b)))
#define MUL_E4(a, b) f2e4(e4f(a) * e4f(b))
#define MUL_E5(a, b) f2e5(e5f(a) * e5f(b))
/* PreMulSum: s*a + (s*)b rounded to odd in float; in float where the
 * products are exact there (fp16, fp8), else in double (bf16). */
#define PMS_F(TOF, both, a, b) \
  ((both) ? sumf_odd(c->sf * TOF(a), c->sf * TOF(b)) : sumf_odd(c->sf * TOF(a), TOF(b)))
#define PMS_H(both, a, b) PMS_F(h2f, both, a, b)
#define PMS_E4(both, a, b) PMS_F(e4f, both, a, b)
#define PMS_E5(both, a, b) PMS_F(e5f, both, a, b)
#define PMS_B(both, a, b)                                                       \
  ((both) ? sum_f_odd(c->sd * (double)b2f(a), c->sd * (double)b2f(b))          \
          : sum_f_odd(c->sd * (double)b2f(a), (double)b2f(b)))
DEF_NARROW(f16, uint16_t, h2f, f2h, f2h, d2h, MUL_H, NOSAT, PMS_H)
DEF_NARROW(bf16, uint16_t, b2f, f2b, f2b_arith, d2b, MUL_B, NOSAT, PMS_B)
DEF_NARROW(e4, uint8_t, e4f, f2e4, f2e4, d2e4, MUL_E4, NOSAT, PMS_E4)
DEF_NARROW(e5, uint8_t, e5f, f2e5, f2e5, d2e5, MUL_E5, SAT_E5, PMS_E5)

/* ------------------------------------------------------------------------- */
/* Loops                                                                     */

enum { K_COPY = 0, K_ADD, K_MUL, K_MAX, K_MIN, K_PMS11, K_PMS10, K_PMS01, K_SCALE, K_ADD_DIV, K_DIV };

/* v = EXPR(i); out0 = OUT0(v); out1 = v. Two loops so that neither tests out1. */
#define LOOP2(T, EXPR, OUT0)                                                 \
  do {                                                                       \
    if (o1) {                                                                \
      IVDEP for (size_t i = 0; i < n; i++) {                                 \
        T v = EXPR;                                                          \
        o0[i] = OUT0;                                                        \
        o1[i] = v;                                                           \
      }                                                                      \
    } else {                                                                 \
      IVDEP for (size_t i = 0; i < n; i++) {                                 \
        T v = EXPR;                                                          \
        o0[i] = OUT0;                                                        \
      }                                                                      \
    }                                                                        \
  } while (0)

/* One loop function per (type, kind): small functions keep the vectoriser's
 * work local and give each its own target clone. */
#define DEF_KERNEL(P, T, K, EXPR, OUT0)                                                        \
  static HOT void P##_k_##K(size_t n, const T* a, const T* b, T* o0, T* o1, const rctx* cp) { \
    const rctx cc = *cp;                                                                       \
    const rctx* c = &cc;                                                                       \
    (void)c;                                                                                   \
    (void)b;                                                                                   \
    LOOP2(T, EXPR, OUT0);                                                                      \
  }

#define DEF_TYPE(P, T)                                                                         \
  DEF_KERNEL(P, T, add, P##_add(a[i], b[i], c), v)                                             \
  DEF_KERNEL(P, T, mul, P##_mul(a[i], b[i], c), v)                                             \
  DEF_KERNEL(P, T, max, P##_max(a[i], b[i], c), v)                                             \
  DEF_KERNEL(P, T, min, P##_min(a[i], b[i], c), v)                                             \
  DEF_KERNEL(P, T, pms11, P##_pms11(a[i], b[i], c), v)                                         \
  DEF_KERNEL(P, T, pms10, P##_pms10(a[i], b[i], c), v)                                         \
  DEF_KERNEL(P, T, pms01, P##_pms10(b[i], a[i], c), v)                                         \
  DEF_KERNEL(P, T, scale, P##_scale(a[i], c), v)                                               \
  DEF_KERNEL(P, T, adddiv, P##_add(a[i], b[i], c), P##_div(v, c))                              \
  DEF_KERNEL(P, T, div, a[i], P##_div(v, c))                                                   \
  static void P##_run(int k, size_t n, const void* a, const void* b, void* o0, void* o1, const rctx* c) { \
    switch (k) {                                                                               \
      case K_ADD: P##_k_add(n, a, b, o0, o1, c); break;                                        \
      case K_MUL: P##_k_mul(n, a, b, o0, o1, c); break;                                        \
      case K_MAX: P##_k_max(n, a, b, o0, o1, c); break;                                        \
      case K_MIN: P##_k_min(n, a, b, o0, o1, c); break;                                        \
      case K_PMS11: P##_k_pms11(n, a, b, o0, o1, c); break;                                    \
      case K_PMS10: P##_k_pms10(n, a, b, o0, o1, c); break;                                    \
      case K_PMS01: P##_k_pms01(n, a, b, o0, o1, c); break;                                    \
      case K_SCALE: P##_k_scale(n, a, b, o0, o1, c); break;                                    \
      case K_ADD_DIV: P##_k_adddiv(n, a, b, o0, o1, c); break;                                 \
      case K_DIV: P##_k_div(n, a, b, o0, o1, c); break;                                        \
      default: break;                                                                          \
    }                                                                                          \
  }

DEF_TYPE(i8, uint8_t)
DEF_TYPE(u8, uint8_t)
DEF_TYPE(i32, uint32_t)
DEF_TYPE(u32, uint32_t)
DEF_TYPE(i64, uint64_t)
DEF_TYPE(u64, uint64_t)
DEF_TYPE(f16, uint16_t)
DEF_TYPE(f32, float)
DEF_TYPE(f64, double)
DEF_TYPE(bf16, uint16_t)
DEF_TYPE(e4, uint8_t)
DEF_TYPE(e5, uint8_t)

/* bf16 PreMulSum in float: when the scalar and the inputs have magnitudes in
 * [2^-60, 2^61) (or are 0, inf, NaN), the products are exact normal floats,
 * TwoSum in float is exact and nothing overflows, so float round-to-odd
 * gives the same result as the double path, at twice the vector width. The
 * common case (avg of ordinary gradients) takes it; chunks with any value
 * outside the range use the double path. */
AI uint16_t bf16_far(uint16_t x) { /* finite, nonzero, outside [2^-60, 2^61) */
  uint16_t ax = x & 0x7fff;
  uint16_t tiny = (uint16_t)(ax - 1) < (uint16_t)((67 << 7) - 1);          /* 0 < |x| < 2^-60 */
  uint16_t big = (uint16_t)(ax - (188 << 7)) < (uint16_t)((255 - 188) << 7); /* 2^61 <= |x| < inf */
  return tiny | big;
}
static HOT int bf16_any_far(size_t n, const uint16_t* a, const uint16_t* b) {
  uint16_t far = 0;
  if (b)
    for (size_t i = 0; i < n; i++) far |= bf16_far(a[i]) | bf16_far(b[i]);
  else
    for (size_t i = 0; i < n; i++) far |= bf16_far(a[i]);
  return far != 0;
}
#define PMS_BF(both, a, b) PMS_F(b2f, both, a, b)
DEF_KERNEL(bf16f, uint16_t, pms11, f2b(PMS_BF(1, a[i], b[i])), v)
DEF_KERNEL(bf16f, uint16_t, pms10, f2b(PMS_BF(0, a[i], b[i])), v)
DEF_KERNEL(bf16f, uint16_t, pms01, f2b(PMS_BF(0, b[i], a[i])), v)
static void bf16_pms(int k, size_t n, const uint16_t* a, const uint16_t* b, uint16_t* o0, uint16_t* o1,
                     const rctx* c) {
  int scalarOk = !bf16_far(f2b(c->sf));
  enum { CH = 2048 };
  for (size_t off = 0; off < n; off += CH) {
    size_t m = n - off < CH ? n - off : CH;
    const uint16_t *pa = a + off, *pb = b + off;
    uint16_t *p0 = o0 + off, *p1 = o1 ? o1 + off : NULL;
    int fast = scalarOk && !bf16_any_far(m, pa, pb);
    switch (k) {
      case K_PMS11: (fast ? bf16f_k_pms11 : bf16_k_pms11)(m, pa, pb, p0, p1, c); break;
      case K_PMS10: (fast ? bf16f_k_pms10 : bf16_k_pms10)(m, pa, pb, p0, p1, c); break;
      default: (fast ? bf16f_k_pms01 : bf16_k_pms01)(m, pa, pb, p0, p1, c); break;
    }
  }
}

/* The two hottest narrow loops, fp16 and bf16 sums, written with AVX2 (and
 * F16C) intrinsics where the CPU has them: the same float sum and the same
 * round-to-nearest-even as f16_add / bf16_add; about 2x (bf16) and 10x
 * (fp16, F16C converts in hardware) faster than the vectorised portable code. */
#ifdef HAVE_X86_PATHS
/* One loop per output arrangement, 16 elements a step, then a scalar tail. */
#define X86_LOOP(STEP, TAILFN)                                            \
  size_t i = 0;                                                           \
  if (o1) {                                                               \
    for (; i + 16 <= n; i += 16) {                                        \
      __m256i r = STEP(a + i, b + i);                                     \
      _mm256_storeu_si256((__m256i*)(o0 + i), r);                         \
      _mm256_storeu_si256((__m256i*)(o1 + i), r);                         \
    }                                                                     \
  } else {                                                                \
    for (; i + 16 <= n; i += 16) _mm256_storeu_si256((__m256i*)(o0 + i), STEP(a + i, b + i)); \
  }                                                                       \
  for (; i < n; i++) {                                                    \
    uint16_t v = TAILFN(a[i], b[i], NULL);                                \
    o0[i] = v;                                                            \
    if (o1) o1[i] = v;                                                    \
  }

__attribute__((target("avx2,f16c"))) static inline __m256i f16c_step(const uint16_t* a, const uint16_t* b) {
  __m256 x0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)a));
  __m256 y0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)b));
  __m256 x1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(a + 8)));
  __m256 y1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(b + 8)));
  __m128i r0 = _mm256_cvtps_ph(_mm256_add_ps(x0, y0), _MM_FROUND_TO_NEAREST_INT);
  __m128i r1 = _mm256_cvtps_ph(_mm256_add_ps(x1, y1), _MM_FROUND_TO_NEAREST_INT);
  return _mm256_set_m128i(r1, r0);
}
__attribute__((target("avx2,f16c"))) static void f16_add_f16c(size_t n, const uint16_t* a, const uint16_t* b,
                                                               uint16_t* o0, uint16_t* o1) {
  X86_LOOP(f16c_step, f16_add)
}

/* bf16: interleaving with zeros gives bf16 << 16 = the float; the in-lane
 * unpack and the in-lane pack undo each other's order. */
__attribute__((target("avx2"))) static inline __m256 bf16_half(__m256i v, int hi) {
  __m256i z = _mm256_setzero_si256();
  return _mm256_castsi256_ps(hi ? _mm256_unpackhi_epi16(z, v) : _mm256_unpacklo_epi16(z, v));
}
__attribute__((target("avx2"))) static inline __m256i bf16_round(__m256 f) {
  __m256i u = _mm256_castps_si256(f);
  __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  u = _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb);
  return _mm256_srli_epi32(u, 16);
}
__attribute__((target("avx2"))) static inline __m256i bf16_step(const uint16_t* a, const uint16_t* b) {
  __m256i va = _mm256_loadu_si256((const __m256i*)a), vb = _mm256_loadu_si256((const __m256i*)b);
  __m256i lo = bf16_round(_mm256_add_ps(bf16_half(va, 0), bf16_half(vb, 0)));
  __m256i hi = bf16_round(_mm256_add_ps(bf16_half(va, 1), bf16_half(vb, 1)));
  return _mm256_packus_epi32(lo, hi);
}
__attribute__((target("avx2"))) static void bf16_add_avx2(size_t n, const uint16_t* a, const uint16_t* b,
                                                          uint16_t* o0, uint16_t* o1) {
  X86_LOOP(bf16_step, bf16_add)
}
#undef X86_LOOP

/* bit 0: AVX2 usable, bit 1: F16C too */
static int cpuFeatures(void) {
  unsigned a, b, c, d, lo, hi;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
  if ((c & (3u << 27)) != (3u << 27)) return 0; /* OSXSAVE, AVX */
  int f16c = (c >> 29) & 1;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  if ((lo & 6) != 6) return 0; /* the OS saves XMM and YMM state */
  if (__get_cpuid_max(0, NULL) < 7) return 0;
  __cpuid_count(7, 0, a, b, c, d);
  if (!((b >> 5) & 1)) return 0; /* AVX2 */
  return 1 | (f16c << 1);
}
static int x86Features(void) {
  static int feat = -1; /* benign race: every thread computes the same value */
  int f = __atomic_load_n(&feat, __ATOMIC_RELAXED);
  if (f < 0) {
    f = cpuFeatures();
    __atomic_store_n(&feat, f, __ATOMIC_RELAXED);
  }
  return f;
}
#endif

/* ------------------------------------------------------------------------- */
/* Entry point                                                               */

static void makeCtx(const anycclRedOp* op, rctx* c) {
  uint64_t s = op->scalar, d = op->divisor ? op->divisor : 1;
  memset(c, 0, sizeof(*c));
  c->su = s;
  c->du = d;
  c->dd = (double)d;
  c->df = (float)d;
  switch (op->type) {
    case ncclFloat16: c->sf = h2f((uint16_t)s); break;
    case ncclBfloat16: c->sf = b2f((uint16_t)s); break;
    case ncclFloat8e4m3: c->sf = e4f((uint8_t)s); break;
    case ncclFloat8e5m2: c->sf = e5f((uint8_t)s); break;
    case ncclFloat32: c->sf = u2f((uint32_t)s); break;
    case ncclFloat64: c->sd = u2d(s); break;
    default: break;
  }
  if (op->type != ncclFloat64 && op->type != ncclFloat32) c->sd = c->sf; /* narrow: exact */
}

static void runType(ncclDataType_t type, int k, size_t n, const void* a, const void* b, void* o0, void* o1,
                    const rctx* c) {
  switch (type) {
    case ncclInt8: i8_run(k, n, a, b, o0, o1, c); break;
    case ncclUint8: u8_run(k, n, a, b, o0, o1, c); break;
    case ncclInt32: i32_run(k, n, a, b, o0, o1, c); break;
    case ncclUint32: u32_run(k, n, a, b, o0, o1, c); break;
    case ncclInt64: i64_run(k, n, a, b, o0, o1, c); break;
    case ncclUint64: u64_run(k, n, a, b, o0, o1, c); break;
    case ncclFloat16:
#ifdef HAVE_X86_PATHS
      if (k == K_ADD && (x86Features() & 2)) {
        f16_add_f16c(n, a, b, o0, o1);
        break;
      }
#endif
      f16_run(k, n, a, b, o0, o1, c);
      break;
    case ncclFloat32: f32_run(k, n, a, b, o0, o1, c); break;
    case ncclFloat64: f64_run(k, n, a, b, o0, o1, c); break;
    case ncclBfloat16:
#ifdef HAVE_X86_PATHS
      if (k == K_ADD && (x86Features() & 1)) {
        bf16_add_avx2(n, a, b, o0, o1);
        break;
      }
#endif
      if (k == K_PMS11 || k == K_PMS10 || k == K_PMS01) {
        bf16_pms(k, n, a, b, o0, o1, c);
        break;
      }
      bf16_run(k, n, a, b, o0, o1, c);
      break;
    case ncclFloat8e4m3: e4_run(k, n, a, b, o0, o1, c); break;
    case ncclFloat8e5m2: e5_run(k, n, a, b, o0, o1, c); break;
    default: break;
  }
}

void anycclReduce(const anycclRedOp* op, size_t n, const void* in0, const void* in1, void* out0, void* out1,
                  unsigned flags) {
  if (op == NULL || n == 0) return;
  size_t es = anycclTypeSize(op->type);
  if (es == 0) return;
  int k;
  switch (op->op) {
    case anycclDevSum: k = in1 ? K_ADD : K_COPY; break;
    case anycclDevProd: k = in1 ? K_MUL : K_COPY; break;
    case anycclDevMax: k = in1 ? K_MAX : K_COPY; break;
    case anycclDevMin: k = in1 ? K_MIN : K_COPY; break;
    case anycclDevPreMulSum:
      if (in1) {
        static const int pm[4] = {K_ADD, K_PMS10, K_PMS01, K_PMS11};
        k = pm[flags & (ANYCCL_RED_PREMUL_IN0 | ANYCCL_RED_PREMUL_IN1)];
      } else {
        k = (flags & ANYCCL_RED_PREMUL_IN0) ? K_SCALE : K_COPY;
      }
      break;
    case anycclDevSumPostDiv:
      if (in1)
        k = (flags & ANYCCL_RED_POSTDIV_OUT0) ? K_ADD_DIV : K_ADD;
      else
        k = (flags & ANYCCL_RED_POSTDIV_OUT0) ? K_DIV : K_COPY;
      break;
    default: return;
  }
  size_t bytes = n * es;
  if (k == K_COPY) {
    if (out0 != in0) memcpy(out0, in0, bytes);
    if (out1 && out1 != in0 && out1 != out0) memcpy(out1, in0, bytes);
    return;
  }
  rctx c;
  makeCtx(op, &c);
  uintptr_t mis = ((uintptr_t)in0 | (uintptr_t)in1 | (uintptr_t)out0 | (uintptr_t)out1) & (es - 1);
  if (mis == 0) {
    runType(op->type, k, n, in0, in1, out0, out1, &c);
    return;
  }
  /* Misaligned for the element type: bounce through aligned buffers. */
  enum { CHUNK = 2048 };
  _Alignas(64) unsigned char ta[CHUNK], tb[CHUNK], t0[CHUNK], t1[CHUNK];
  size_t per = CHUNK / es;
  for (size_t off = 0; off < n; off += per) {
    size_t m = n - off < per ? n - off : per;
    size_t bo = off * es, bl = m * es;
    memcpy(ta, (const char*)in0 + bo, bl);
    if (in1) memcpy(tb, (const char*)in1 + bo, bl);
    runType(op->type, k, m, ta, in1 ? tb : NULL, t0, out1 ? t1 : NULL, &c);
    memcpy((char*)out0 + bo, t0, bl);
    if (out1) memcpy((char*)out1 + bo, t1, bl);
  }
}
