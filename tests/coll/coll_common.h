/* Differential collective tests: the shared part.
 *
 * Uses only the public API (nccl.h, cuda_runtime.h), so that the same
 * programs build against real CUDA + NCCL. Everything is `static` here; each
 * test program includes this header once.
 *
 *   1. helpers: failure reporting, RNG, element load/store
 *   2. the host reference's own number formats (fp16, bf16, fp8 e4m3/e5m2:
 *      decode and round-to-nearest-even encode), written independently of
 *      the library
 *   3. trials: one collective call on one communicator, with its inputs as a
 *      pure function of (trial seed, rank, index), so that every rank can
 *      compute every other rank's inputs and the reference locally
 *   4. the reference: expected value of every output element
 *   5. items: a trial on one rank (buffers with guards, poison, issue, check)
 *
 * Inputs are chosen so that results are exact where the type allows it:
 *   - integers: any bits for sum/prod/max/min/premulsum (overflow wraps, two's
 *     complement, so the result does not depend on the order of reduction);
 *     for avg the inputs lie in [min/n, max/n] of the type so that the sum
 *     does not overflow, and the reference is the exact sum divided by n with
 *     C's truncation toward zero;
 *   - floats, sum: small integers in [-K, K] with K*n <= the largest integer
 *     up to which the type is exact (2048 fp16, 256 bf16, 16 e4m3, 8 e5m2,
 *     2^24 float, 2^53 double): every partial sum in any order is exact, so
 *     the result must equal the reference exactly;
 *   - floats, prod: values in {1, -1, 2, 0.5}: every partial product is +-2^k,
 *     |k| <= n, exact in every type at the rank counts used (<= 8);
 *   - floats, max/min: any finite bit pattern (NaN and Inf excluded): exact;
 *   - floats, avg (NCCL: each input times s = 1/n rounded to the type, then
 *     summed) and premulsum (scalar times each input, summed): small integers
 *     as for sum, compared with a tolerance. With S = sum over ranks of
 *     |s * x_r| (the largest magnitude any partial result can have), the
 *     library performs at most n multiplications, n-1 additions and one final
 *     rounding to the type: 2n roundings, each erring by at most half an
 *     ulp of a value of magnitude <= S (1 + u)^2n, i.e. <= u*S/2 (slightly
 *     more), where u = 2^-mantissa_bits is the ulp of 1.0: n*u*S in all. A
 *     library that uses the exact 1/n instead of the rounded s errs by at
 *     most another u*S/2. We allow
 *         tol = (n + 2) * u * S + 2n * smallest_subnormal
 *     (the second term covers roundings in the subnormal range, whose error
 *     is absolute, half the smallest subnormal). For double, the reference
 *     sum itself is computed in double and errs by < n*u*S/2, inside tol.
 *   - copies (broadcast, gathers, scatter, all-to-all, send/recv): any bits,
 *     NaN patterns included; the result must be bit-exact.
 *
 * Poison: every buffer sits in an allocation with a guard region before and
 * after it (the data start is also shifted by 0..7 elements, so pointers are
 * element-aligned but not vector-aligned: odd byte offsets for 1-byte types).
 * The whole allocation is filled with random bytes; inputs are written into
 * the send view; output elements that do not already hold an input are set
 * to a value that cannot match: for bit-exact results the expected bits
 * XOR 0xA5..., for float reductions all-ones bytes (a NaN in every float
 * type, never an expected value). After the call every byte outside the
 * output range (guards, out-of-place send buffers, unused root-only buffers,
 * the other slots of an in-place reduce-scatter) must be unchanged.
 */
#ifndef COLL_COMMON_H
#define COLL_COMMON_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <cuda_runtime.h>
#include <nccl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* 1. helpers                                                               */

static pthread_mutex_t printLock = PTHREAD_MUTEX_INITIALIZER;

static void say(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  pthread_mutex_lock(&printLock);
  vprintf(fmt, ap);
  fflush(stdout);
  pthread_mutex_unlock(&printLock);
  va_end(ap);
}

static void die(const char* fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static void die(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  pthread_mutex_lock(&printLock);
  printf("FATAL [pid %d] ", (int)getpid());
  vprintf(fmt, ap);
  printf("\n");
  fflush(stdout);
  va_end(ap);
  _exit(2);
}

#define CUDAOK(call)                                                                                 \
  do {                                                                                               \
    cudaError_t e_ = (call);                                                                         \
    if (e_ != cudaSuccess) die("%s:%d: %s -> %s (%d)", __FILE__, __LINE__, #call, cudaGetErrorString(e_), (int)e_); \
  } while (0)

#define NCCLOK(call)                                                                                          \
  do {                                                                                                        \
    ncclResult_t r_ = (call);                                                                                 \
    if (r_ != ncclSuccess)                                                                                    \
      die("%s:%d: %s -> %s (%d); last error: %s", __FILE__, __LINE__, #call, ncclGetErrorString(r_), (int)r_, \
          ncclGetLastError(NULL));                                                                            \
  } while (0)

static double nowSec(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static inline uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

typedef struct {
  uint64_t s;
} rng_t;
static inline uint64_t rnext(rng_t* r) { return mix64(r->s += 0x9e3779b97f4a7c15ULL); }
static inline uint64_t rbelow(rng_t* r, uint64_t n) { return n ? rnext(r) % n : 0; }
static inline rng_t rseed(uint64_t a, uint64_t b) {
  rng_t r = {mix64(a ^ mix64(b + 0x632be59bd9b4e019ULL))};
  return r;
}

static inline uint64_t ld(const unsigned char* p, int es) {
  uint64_t v = 0;
  memcpy(&v, p, es); /* little-endian hosts */
  return v;
}
static inline void st(unsigned char* p, uint64_t v, int es) { memcpy(p, &v, es); }
static inline double absd(double x) { return x < 0 ? -x : x; }

/* Environment knobs of the tests (not of the library). */
static uint64_t envU64(const char* name, uint64_t dflt) {
  const char* v = getenv(name);
  if (v == NULL || *v == '\0') return dflt;
  return strtoull(v, NULL, 0);
}

/* ------------------------------------------------------------------------ */
/* 2. number formats                                                        */

#define NTYPES 12
enum { T_I8, T_U8, T_I32, T_U32, T_I64, T_U64, T_F16, T_F32, T_F64, T_BF16, T_E4M3, T_E5M2 };
static const char* typeName[NTYPES] = {"int8",   "uint8", "int32",    "uint32",  "int64",   "uint64",
                                       "half",   "float", "double",   "bfloat16", "fp8e4m3", "fp8e5m2"};
static const int typeSize[NTYPES] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
static inline int isFloatT(int t) { return t >= T_F16; }
static inline int isSignedT(int t) { return t == T_I8 || t == T_I32 || t == T_I64; }
static inline uint64_t typeMask(int t) { return typeSize[t] == 8 ? ~0ULL : (1ULL << (8 * typeSize[t])) - 1; }

struct ffmt {
  int E, M, B, noInf; /* exponent bits, mantissa bits, bias, e4m3-style (no Inf; S.1111.111 is NaN) */
};
static struct ffmt fmtOf(int t) {
  switch (t) {
    case T_F16: return (struct ffmt){5, 10, 15, 0};
    case T_F32: return (struct ffmt){8, 23, 127, 0};
    case T_F64: return (struct ffmt){11, 52, 1023, 0};
    case T_BF16: return (struct ffmt){8, 7, 127, 0};
    case T_E4M3: return (struct ffmt){4, 3, 7, 1};
    case T_E5M2: return (struct ffmt){5, 2, 15, 0};
    default: return (struct ffmt){0, 0, 0, 0};
  }
}
/* largest integer up to which every integer is exact */
static double maxExactInt(int t) { return (double)(1ULL << (fmtOf(t).M + 1)); }

/* exact 2^k for -1074 <= k <= 1023 */
static double pow2(int k) {
  if (k < -1022) return pow2(k + 64) / 18446744073709551616.0;
  uint64_t b = (uint64_t)(k + 1023) << 52;
  double d;
  memcpy(&d, &b, 8);
  return d;
}
static double ulpOne(int t) { return pow2(-fmtOf(t).M); }
static double minSubnormal(int t) {
  struct ffmt f = fmtOf(t);
  return t == T_F64 ? 0.0 : pow2(1 - f.B - f.M);
}

static double decodeSlow(uint64_t bits, int t) {
  if (t == T_F32) {
    uint32_t u = (uint32_t)bits;
    float f;
    memcpy(&f, &u, 4);
    return f;
  }
  if (t == T_F64) {
    double d;
    memcpy(&d, &bits, 8);
    return d;
  }
  struct ffmt f = fmtOf(t);
  int sign = (int)((bits >> (f.E + f.M)) & 1);
  int emax = (1 << f.E) - 1;
  int e = (int)((bits >> f.M) & (uint64_t)emax);
  uint64_t m = bits & ((1ULL << f.M) - 1);
  double v;
  if (f.noInf && e == emax && m == (1ULL << f.M) - 1) return __builtin_nan("");
  if (!f.noInf && e == emax) {
    if (m) return __builtin_nan("");
    v = __builtin_inf();
  } else if (e == 0) {
    v = (double)m * pow2(1 - f.B - f.M);
  } else {
    v = (double)((1ULL << f.M) | m) * pow2(e - f.B - f.M);
  }
  return sign ? -v : v;
}

/* double -> type, round to nearest even. Overflow: Inf where the type has
 * one, the largest finite value for e4m3 (never reached by the inputs). */
static uint64_t encodeBits(double x, int t) {
  if (t == T_F32) {
    float f = (float)x;
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
  }
  if (t == T_F64) {
    uint64_t u;
    memcpy(&u, &x, 8);
    return u;
  }
  struct ffmt f = fmtOf(t);
  uint64_t expAll = ((1ULL << f.E) - 1) << f.M;
  if (x != x) return f.noInf ? 0x7f : expAll | (1ULL << (f.M - 1));
  uint64_t sign = 0;
  if (x < 0 || (x == 0 && 1 / x < 0)) {
    sign = 1ULL << (f.E + f.M);
    x = -x;
  }
  if (x == 0) return sign;
  if (x > 1e300) return sign | (f.noInf ? 0x7e : expAll);
  uint64_t xb;
  memcpy(&xb, &x, 8);
  int ex = (int)((xb >> 52) & 0x7ff) - 1023;
  int emin = 1 - f.B;
  int q = (ex < emin ? emin : ex) - f.M; /* exponent of the quantum */
  double n = x / pow2(q);                /* exact; < 2^(M+1) */
  uint64_t fl = (uint64_t)n;
  double frac = n - (double)fl;
  if (frac > 0.5 || (frac == 0.5 && (fl & 1))) fl++;
  if (fl >= (1ULL << (f.M + 1))) {
    fl >>= 1;
    q++;
  }
  uint64_t eField, mant;
  if (fl < (1ULL << f.M)) {
    eField = 0;
    mant = fl;
  } else {
    eField = (uint64_t)(q + f.M + f.B);
    mant = fl - (1ULL << f.M);
  }
  uint64_t emaxField = (1ULL << f.E) - 1 - (f.noInf ? 0 : 1);
  if ((int64_t)eField > (int64_t)emaxField || (f.noInf && eField == emaxField && mant == (1ULL << f.M) - 1))
    return sign | (f.noInf ? 0x7e : expAll);
  return sign | (eField << f.M) | mant;
}

/* Tables: decode for the 8- and 16-bit types, encode of small integers. */
#define SMALL_MAX 2048
static double* decTab[NTYPES];
static uint64_t* encSmallTab[NTYPES]; /* index v + SMALL_MAX */
static uint64_t prodEnc[NTYPES][4];
static const double prodVals[4] = {1.0, -1.0, 2.0, 0.5};

static inline double decodeBits(uint64_t bits, int t) {
  if (t == T_F32 || t == T_F64) return decodeSlow(bits, t);
  return decTab[t][bits & typeMask(t)];
}

static int formatSelfTest(void) {
  static const struct {
    int t;
    double v;
    uint64_t bits;
  } known[] = {
      {T_F16, 1.0, 0x3c00},        {T_F16, 1.0 / 3, 0x3555},   {T_F16, 65504, 0x7bff},     {T_F16, -2.0, 0xc000},
      {T_F16, 5.9604644775390625e-08, 0x0001}, {T_F16, 0.1, 0x2e66}, {T_BF16, 1.0, 0x3f80}, {T_BF16, 1.0 / 3, 0x3eab},
      {T_BF16, -0.1, 0xbdcd},     {T_E4M3, 448, 0x7e},        {T_E4M3, 1.0, 0x38},        {T_E4M3, 0.001953125, 0x01},
      {T_E4M3, -0.3125, 0xaa},    {T_E4M3, 1.0 / 3, 0x2b},    {T_E5M2, 57344, 0x7b},      {T_E5M2, 1.0, 0x3c},
      {T_E5M2, 1.52587890625e-05, 0x01}, {T_E5M2, 1.0 / 3, 0x35}, {T_F32, 1.0 / 3, 0x3eaaaaab},
  };
  int bad = 0;
  for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++) {
    uint64_t b = encodeBits(known[i].v, known[i].t);
    if (b != known[i].bits) {
      say("reference self-test: encode(%g) as %s = 0x%llx, want 0x%llx\n", known[i].v, typeName[known[i].t],
          (unsigned long long)b, (unsigned long long)known[i].bits);
      bad++;
    }
  }
  /* round trip of every 8/16-bit pattern that is not NaN */
  for (int t = T_F16; t < NTYPES; t++) {
    if (t == T_F32 || t == T_F64) continue;
    for (uint64_t b = 0; b <= typeMask(t); b++) {
      double v = decodeSlow(b, t);
      if (v != v) continue;
      if (encodeBits(v, t) != b) {
        say("reference self-test: %s 0x%llx does not round-trip\n", typeName[t], (unsigned long long)b);
        bad++;
        break;
      }
    }
  }
  return bad;
}

static void refInit(void) {
  for (int t = T_F16; t < NTYPES; t++) {
    if (t != T_F32 && t != T_F64) {
      size_t n = (size_t)typeMask(t) + 1;
      decTab[t] = malloc(n * sizeof(double));
      for (size_t b = 0; b < n; b++) decTab[t][b] = decodeSlow(b, t);
    }
    encSmallTab[t] = malloc((2 * SMALL_MAX + 1) * sizeof(uint64_t));
    for (int v = -SMALL_MAX; v <= SMALL_MAX; v++) encSmallTab[t][v + SMALL_MAX] = encodeBits((double)v, t);
    for (int k = 0; k < 4; k++) prodEnc[t][k] = encodeBits(prodVals[k], t);
  }
  if (formatSelfTest() != 0) die("the host reference's number formats are wrong");
}

/* ------------------------------------------------------------------------ */
/* 3. trials                                                                */

enum {
  F_ALLREDUCE, F_BROADCAST, F_BCAST, F_REDUCE, F_ALLGATHER, F_REDUCESCATTER,
  F_ALLTOALL, F_GATHER, F_SCATTER, F_SENDRECV, F_PAIRS, NFUNCS
};
static const char* funcName[NFUNCS] = {"AllReduce", "Broadcast", "Bcast",  "Reduce",  "AllGather",    "ReduceScatter",
                                       "AlltoAll",  "Gather",    "Scatter", "SendRecvRing", "SendRecvAllPairs"};
enum { OP_SUM, OP_PROD, OP_MAX, OP_MIN, OP_AVG, OP_PREMUL_HOST, OP_PREMUL_DEV, NOPS };
static const char* opName[NOPS] = {"sum", "prod", "max", "min", "avg", "premulsum(host)", "premulsum(device)"};

static inline int isReduceF(int f) { return f == F_ALLREDUCE || f == F_REDUCE || f == F_REDUCESCATTER; }
static inline int rootedF(int f) {
  return f == F_BROADCAST || f == F_BCAST || f == F_REDUCE || f == F_GATHER || f == F_SCATTER;
}
static inline int sendMult(int f) { return f == F_REDUCESCATTER || f == F_ALLTOALL || f == F_SCATTER || f == F_PAIRS; }
static inline int recvMult(int f) { return f == F_ALLGATHER || f == F_ALLTOALL || f == F_GATHER || f == F_PAIRS; }
static inline int inPlaceOk(int f) { return f != F_ALLTOALL && f != F_SENDRECV && f != F_PAIRS; }

enum { CC_SMALL, CC_MEDIUM, CC_UNALIGNED, CC_LARGE };
enum { GEN_RAW, GEN_INTRANGE, GEN_SMALLINT, GEN_PROD, GEN_FINITE };

typedef struct {
  int id, n; /* trial number; size of the comm it was made for */
  int func, type, op;
  size_t count;
  int root;       /* root, or the shift of a send/recv ring (0 = to self) */
  int inPlace;
  int nullUnused; /* pass NULL for buffers a rank does not use (non-roots) */
  int misSend, misRecv; /* element offsets of the data in its allocation */
  int destroyEarly;     /* destroy a premulsum op right after the call returns */
  int orderSeed;        /* order of the send/recv calls */
  int streamSel;        /* 0: the rank's stream, 1: its second stream, 2: the NULL (default) stream */
  uint64_t seed;
  /* input generation */
  int gen;
  int64_t K, lo;
  uint64_t range;
  /* premulsum: each rank has its own scalar (NCCL multiplies each rank's
   * input by that rank's scalar): rank q uses entry (scalarIdx + q) % 8 */
  int scalarIdx;
  uint64_t scalarBits[8]; /* in the type */
  double scalarVal[8];
  double avgScalar; /* 1/n rounded to the float type */
} trial_t;

static void trialDesc(const trial_t* t, char* buf, size_t len) {
  snprintf(buf, len, "trial %d %s %s%s%s count %zu root/shift %d %s", t->id, funcName[t->func], typeName[t->type],
           isReduceF(t->func) ? " " : "", isReduceF(t->func) ? opName[t->op] : "", t->count, t->root,
           t->inPlace ? "in-place" : "out-of-place");
}

static const int smallCounts[] = {0, 1, 1, 2, 3, 7, 7, 8, 13, 17, 31, 64, 100, 255, 256, 1000, 1023};

static size_t pickCount(rng_t* r, int cls, int type, int mult, int n) {
  size_t es = typeSize[type], m = mult ? (size_t)n : 1, c;
  switch (cls) {
    case CC_SMALL: return smallCounts[rbelow(r, sizeof(smallCounts) / sizeof(smallCounts[0]))];
    case CC_MEDIUM: c = (4096 + rbelow(r, 300000)) / es / m; return c + rbelow(r, 3);
    case CC_UNALIGNED: c = 1000003 / es / m; return c | 1;
    default: c = (4u << 20) / es / m; return c - rbelow(r, 4);
  }
}

static void setupGen(trial_t* t) {
  int ty = t->type, n = t->n;
  t->gen = GEN_RAW;
  if (!isReduceF(t->func)) return;
  if (!isFloatT(ty)) {
    if (t->op == OP_AVG) {
      int bits = 8 * typeSize[ty];
      if (isSignedT(ty)) {
        int64_t mn = bits == 64 ? INT64_MIN : -(INT64_C(1) << (bits - 1));
        int64_t mx = bits == 64 ? INT64_MAX : (INT64_C(1) << (bits - 1)) - 1;
        t->lo = mn / n;
        t->range = (uint64_t)(mx / n) - (uint64_t)(mn / n) + 1; /* 0 means 2^64 */
      } else {
        uint64_t mx = typeMask(ty);
        t->lo = 0;
        t->range = mx / (uint64_t)n + 1;
      }
      t->gen = GEN_INTRANGE;
    }
    return;
  }
  switch (t->op) {
    case OP_PROD: t->gen = GEN_PROD; break;
    case OP_MAX:
    case OP_MIN: t->gen = GEN_FINITE; break;
    default: {
      double k = maxExactInt(ty) / n;
      if (k > SMALL_MAX && ty != T_F32 && ty != T_F64) k = SMALL_MAX;
      t->K = (int64_t)k < 1 ? 1 : (int64_t)k;
      t->gen = GEN_SMALLINT;
    }
  }
  t->avgScalar = decodeSlow(encodeBits(1.0 / n, ty), ty);
}

static void pickScalar(trial_t* t, rng_t* r) {
  static const int64_t intScalars[8] = {3, -2, 1, 5, 7, -1, 2, 0};
  static const double fltScalars[8] = {0.5, 2, -1, 0.25, 3, 1.5, -0.75, 1};
  t->scalarIdx = (int)rbelow(r, 8);
  for (int k = 0; k < 8; k++) {
    if (isFloatT(t->type)) {
      t->scalarBits[k] = encodeBits(fltScalars[k], t->type);
      t->scalarVal[k] = decodeSlow(t->scalarBits[k], t->type);
    } else {
      t->scalarBits[k] = (uint64_t)intScalars[k] & typeMask(t->type);
    }
  }
}

static trial_t makeTrial(uint64_t seed, int id, int n, int func, int type, int op, int cls) {
  trial_t t;
  memset(&t, 0, sizeof(t));
  rng_t r = rseed(seed, (uint64_t)id * 7919 + (uint64_t)n);
  t.id = id;
  t.n = n;
  t.func = func;
  t.type = type;
  t.op = isReduceF(func) ? op : OP_SUM;
  t.seed = rnext(&r);
  t.root = (int)rbelow(&r, n);
  t.inPlace = func == F_BCAST ? 1 : inPlaceOk(func) ? (int)(rnext(&r) & 1) : 0;
  t.nullUnused = rbelow(&r, 3) == 0;
  t.misSend = (rnext(&r) & 1) ? (int)rbelow(&r, 8) : 0;
  t.misRecv = (rnext(&r) & 1) ? (int)rbelow(&r, 8) : 0;
  t.destroyEarly = (int)(rnext(&r) & 1);
  t.orderSeed = (int)rbelow(&r, 1 << 30);
  t.streamSel = (int)rbelow(&r, 8);
  t.streamSel = t.streamSel < 6 ? 0 : t.streamSel - 5;
  t.count = pickCount(&r, cls, type, sendMult(func) || recvMult(func), n);
  pickScalar(&t, &r);
  setupGen(&t);
  return t;
}

/* Input element idx of rank q's send buffer. */
static inline uint64_t genBits(const trial_t* t, int q, size_t idx) {
  uint64_t h = mix64(t->seed ^ ((uint64_t)(q + 1) * 0x9e3779b97f4a7c15ULL) ^ ((uint64_t)idx * 0xd1b54a32d192ed03ULL));
  int ty = t->type;
  switch (t->gen) {
    case GEN_INTRANGE: return ((uint64_t)t->lo + (t->range ? h % t->range : h)) & typeMask(ty);
    case GEN_SMALLINT: {
      int64_t v = (int64_t)(h % (uint64_t)(2 * t->K + 1)) - t->K;
      if (ty == T_F32) return encodeBits((double)v, ty);
      if (ty == T_F64) return encodeBits((double)v, ty);
      return encSmallTab[ty][v + SMALL_MAX];
    }
    case GEN_PROD: return prodEnc[ty][h & 3];
    case GEN_FINITE: {
      struct ffmt f = fmtOf(ty);
      uint64_t b = h & typeMask(ty);
      uint64_t expAll = ((1ULL << f.E) - 1) << f.M;
      if (f.noInf) {
        if ((b & 0x7f) == 0x7f) b ^= 1;
      } else if ((b & expAll) == expAll) {
        b ^= 1ULL << (f.E + f.M - 1);
      }
      return b;
    }
    default: return h & typeMask(ty);
  }
}

/* ------------------------------------------------------------------------ */
/* 4. the reference                                                          */

typedef struct {
  int exact;     /* compare bits */
  uint64_t bits;
  double val, tol; /* else: |got - val| <= tol, got not NaN */
} ref_t;

static inline int64_t sext(uint64_t x, int es) {
  int sh = 64 - 8 * es;
  return (int64_t)(x << sh) >> sh;
}

static void refReduce(const trial_t* t, size_t idx, ref_t* out) {
  int ty = t->type, n = t->n, es = typeSize[ty];
  if (!isFloatT(ty)) {
    uint64_t acc = 0;
    int64_t sacc = 0;
    for (int q = 0; q < n; q++) {
      uint64_t x = genBits(t, q, idx);
      switch (t->op) {
        case OP_SUM: acc += x; break;
        case OP_PROD: acc = q ? acc * x : x; break;
        case OP_MAX:
          if (q == 0 || (isSignedT(ty) ? sext(x, es) > sext(acc, es) : x > acc)) acc = x;
          break;
        case OP_MIN:
          if (q == 0 || (isSignedT(ty) ? sext(x, es) < sext(acc, es) : x < acc)) acc = x;
          break;
        case OP_AVG:
          if (isSignedT(ty)) sacc += sext(x, es);
          else acc += x;
          break;
        default: acc += x * t->scalarBits[(t->scalarIdx + q) % 8]; break;
      }
    }
    if (t->op == OP_AVG) acc = isSignedT(ty) ? (uint64_t)(sacc / n) : acc / (uint64_t)n;
    out->exact = 1;
    out->bits = acc & typeMask(ty);
    return;
  }
  double acc = 0, mag = 0;
  for (int q = 0; q < n; q++) {
    double x = decodeBits(genBits(t, q, idx), ty), p;
    switch (t->op) {
      case OP_SUM: acc += x; break;
      case OP_PROD: acc = q ? acc * x : x; break;
      case OP_MAX: acc = (q == 0 || x > acc) ? x : acc; break;
      case OP_MIN: acc = (q == 0 || x < acc) ? x : acc; break;
      default:
        p = x * (t->op == OP_AVG ? t->avgScalar : t->scalarVal[(t->scalarIdx + q) % 8]);
        acc += p;
        mag += absd(p);
        break;
    }
  }
  out->exact = 0;
  out->val = acc;
  out->tol = 0;
  if (t->op == OP_AVG || t->op == OP_PREMUL_HOST || t->op == OP_PREMUL_DEV)
    out->tol = (n + 2.0) * ulpOne(ty) * mag + 2.0 * n * minSubnormal(ty);
}

/* Expected element j of rank r's receive buffer. */
static void refElem(const trial_t* t, int r, size_t j, ref_t* out) {
  int n = t->n;
  size_t c = t->count;
  out->exact = 1;
  switch (t->func) {
    case F_ALLREDUCE:
    case F_REDUCE: refReduce(t, j, out); return;
    case F_REDUCESCATTER: refReduce(t, (size_t)r * c + j, out); return;
    case F_BROADCAST:
    case F_BCAST: out->bits = genBits(t, t->root, j); return;
    case F_ALLGATHER:
    case F_GATHER: out->bits = genBits(t, (int)(j / c), j % c); return;
    case F_SCATTER: out->bits = genBits(t, t->root, (size_t)r * c + j); return;
    case F_ALLTOALL:
    case F_PAIRS: out->bits = genBits(t, (int)(j / c), (size_t)r * c + j % c); return;
    case F_SENDRECV: out->bits = genBits(t, ((r - t->root) % n + n) % n, j); return;
  }
}

static int refMatches(const ref_t* ref, uint64_t got, int ty) {
  if (ref->exact) return got == ref->bits;
  double g = decodeBits(got, ty);
  if (g != g) return 0;
  return absd(g - ref->val) <= ref->tol;
}

static void refFormat(const ref_t* ref, int ty, char* buf, size_t len) {
  if (ref->exact && isSignedT(ty))
    snprintf(buf, len, "0x%llx (%lld)", (unsigned long long)ref->bits, (long long)sext(ref->bits, typeSize[ty]));
  else if (ref->exact && !isFloatT(ty))
    snprintf(buf, len, "0x%llx (%llu)", (unsigned long long)ref->bits, (unsigned long long)ref->bits);
  else if (ref->exact)
    snprintf(buf, len, "0x%llx (%.9g)", (unsigned long long)ref->bits, decodeBits(ref->bits, ty));
  else
    snprintf(buf, len, "%.9g +- %.3g", ref->val, ref->tol);
}

/* ------------------------------------------------------------------------ */
/* 5. items: a trial on one rank                                            */

typedef struct {
  ncclComm_t comm;
  int rank, nranks, dev;
  cudaStream_t stream, stream2;
  int nonblocking;
  char name[32];     /* which communicator, for messages */
  long mismatches;   /* this rank's total */
  int printed;       /* mismatch lines printed */
  volatile int curTrial;
  const void* volatile curT; /* the trial_t being issued or waited for */
} ctx_t;

#define GUARD 64
#define POISON_REF_LIMIT 65536 /* int reductions: reference-derived poison up to this many elements */
#define MAX_PRINT 40     /* mismatch lines per rank */
#define MAX_PRINT_ITEM 3 /* ... per trial */

typedef struct {
  void* dev;
  unsigned char *init, *got;
  size_t bytes, data; /* allocation size; byte offset of the data area */
} region_t;

typedef struct {
  ctx_t* ctx;
  const trial_t* t;
  region_t reg[2];
  int nreg;
  int sendReg, recvReg; /* region index, or -1 for a NULL pointer */
  size_t sendOff, recvOff, sendElems, recvElems; /* in elements, within the data area */
  int hasIn, hasOut;
  ncclRedOp_t op;
  int opLive;
  ncclRedOp_t decoy; /* created right after `op` was destroyed early, with another scalar */
  int decoyLive;
  void* devScalar;
  long bad;
  int corrupted; /* this item's download was corrupted on purpose */
} item_t;

/* Corruption injection (to prove that the checker fails): ANYCCL_TEST_CORRUPT
 * = result | guard | send flips one byte of one downloaded buffer. */
static int corruptMode = -1;
static int corruptDone, corruptDetected;
static void corruptInit(void) {
  const char* v = getenv("ANYCCL_TEST_CORRUPT");
  corruptMode = 0;
  if (v == NULL || *v == '\0') return;
  if (strcmp(v, "result") == 0) corruptMode = 1;
  else if (strcmp(v, "guard") == 0) corruptMode = 2;
  else if (strcmp(v, "send") == 0) corruptMode = 3;
  else die("ANYCCL_TEST_CORRUPT=%s: use result, guard or send", v);
  say("ANYCCL_TEST_CORRUPT=%s: one byte will be corrupted on purpose; this run must fail\n", v);
}

/* Exit status: 1 for mismatches. With ANYCCL_TEST_CORRUPT, 1 only when the
 * injected corruption was caught, 0 when not (so that a WILL_FAIL test of it
 * fails when the checker misses it). */
static __attribute__((unused)) int exitStatus(long bad) {
  if (corruptMode > 0) {
    if (corruptDone && !corruptDetected) say("the injected corruption was NOT detected\n");
    return corruptDetected ? 1 : 0;
  }
  return bad ? 1 : 0;
}

static void regionAlloc(item_t* it, int k, size_t elems, int mis) {
  int es = typeSize[it->t->type];
  region_t* g = &it->reg[k];
  g->data = GUARD + (size_t)mis * es;
  g->bytes = g->data + elems * es + GUARD;
  CUDAOK(cudaMalloc(&g->dev, g->bytes));
  g->init = malloc(g->bytes);
  g->got = malloc(g->bytes);
  if (g->init == NULL || g->got == NULL) die("out of host memory (%zu bytes)", g->bytes);
  rng_t r = rseed(it->t->seed ^ 0x5a5aULL, (uint64_t)it->ctx->rank * 4 + k);
  for (size_t b = 0; b < g->bytes; b += 8) {
    uint64_t v = rnext(&r);
    memcpy(g->init + b, &v, g->bytes - b < 8 ? g->bytes - b : 8);
  }
}

static inline unsigned char* regElem(region_t* g, size_t idx, int es) { return g->init + g->data + idx * es; }

static uint64_t poisonFor(const trial_t* t, int r, size_t j, size_t recvElems) {
  int ty = t->type;
  uint64_t pat = 0xa5a5a5a5a5a5a5a5ULL & typeMask(ty);
  ref_t ref;
  if (isReduceF(t->func) && isFloatT(ty)) return typeMask(ty); /* all ones: NaN */
  if (isReduceF(t->func) && recvElems > POISON_REF_LIMIT) return mix64(t->seed + j) & typeMask(ty);
  refElem(t, r, j, &ref);
  return ref.bits ^ pat;
}

static void itemPrepare(item_t* it, ctx_t* ctx, const trial_t* t) {
  memset(it, 0, sizeof(*it));
  it->ctx = ctx;
  it->t = t;
  int r = ctx->rank, n = t->n, f = t->func, es = typeSize[t->type];
  size_t c = t->count;
  if (n != ctx->nranks) die("trial %d made for %d ranks, run on a comm of %d", t->id, n, ctx->nranks);
  CUDAOK(cudaSetDevice(ctx->dev));
  it->sendElems = c * (sendMult(f) ? n : 1);
  it->recvElems = c * (recvMult(f) ? n : 1);
  it->hasIn = !(f == F_BROADCAST || f == F_BCAST || f == F_SCATTER) || r == t->root;
  it->hasOut = !(f == F_REDUCE || f == F_GATHER) || r == t->root;
  it->sendReg = it->recvReg = -1;
  int single = t->inPlace && !((f == F_GATHER || f == F_SCATTER) && r != t->root);
  if (single) {
    size_t elems = it->sendElems > it->recvElems ? it->sendElems : it->recvElems;
    regionAlloc(it, 0, elems, t->misSend);
    it->nreg = 1;
    it->sendReg = it->recvReg = 0;
    if (f == F_ALLGATHER || f == F_GATHER) it->sendOff = (size_t)r * c;
    if (f == F_REDUCESCATTER || f == F_SCATTER) it->recvOff = (size_t)r * c;
  } else {
    int needSend = it->hasIn || !t->nullUnused;
    int needRecv = it->hasOut || !t->nullUnused;
    if (needSend) {
      it->sendReg = it->nreg;
      regionAlloc(it, it->nreg++, it->sendElems, t->misSend);
    }
    if (needRecv) {
      it->recvReg = it->nreg;
      regionAlloc(it, it->nreg++, it->recvElems, t->misRecv);
    }
  }
  if (it->hasIn)
    for (size_t k = 0; k < it->sendElems; k++)
      st(regElem(&it->reg[it->sendReg], it->sendOff + k, es), genBits(t, r, k), es);
  if (it->hasOut)
    for (size_t j = 0; j < it->recvElems; j++) {
      size_t pos = it->recvOff + j;
      if (it->sendReg == it->recvReg && it->hasIn && pos >= it->sendOff && pos < it->sendOff + it->sendElems) continue;
      st(regElem(&it->reg[it->recvReg], pos, es), poisonFor(t, r, j, it->recvElems), es);
    }
  for (int k = 0; k < it->nreg; k++)
    CUDAOK(cudaMemcpy(it->reg[k].dev, it->reg[k].init, it->reg[k].bytes, cudaMemcpyHostToDevice));

  /* the reduction op */
  static const ncclRedOp_t builtin[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};
  if (t->op < OP_PREMUL_HOST) {
    it->op = builtin[t->op];
  } else if (isReduceF(f)) {
    uint64_t scalar = t->scalarBits[(t->scalarIdx + r) % 8];
    void* ptr = &scalar;
    if (t->op == OP_PREMUL_DEV) {
      CUDAOK(cudaMalloc(&it->devScalar, 8));
      CUDAOK(cudaMemcpy(it->devScalar, &scalar, es, cudaMemcpyHostToDevice));
      ptr = it->devScalar;
    }
    ncclResult_t res = ncclRedOpCreatePreMulSum(&it->op, ptr, (ncclDataType_t)t->type,
                                                t->op == OP_PREMUL_DEV ? ncclScalarDevice : ncclScalarHostImmediate,
                                                ctx->comm);
    if (res != ncclSuccess) die("rank %d: ncclRedOpCreatePreMulSum -> %d (%s)", r, res, ncclGetLastError(ctx->comm));
    it->opLive = 1;
  }
  /* From pageable memory cudaMemcpy may return before its DMA has landed, and
   * a non-blocking stream does not wait for the legacy stream it ran on */
  CUDAOK(cudaStreamSynchronize(NULL));
}

static void* viewPtr(item_t* it, int reg, size_t off) {
  if (reg < 0) return NULL;
  return (char*)it->reg[reg].dev + it->reg[reg].data + off * typeSize[it->t->type];
}

static void ncclExpect(ncclResult_t res, ctx_t* ctx, const char* what, const trial_t* t) {
  if (res == ncclSuccess || (res == ncclInProgress && ctx->nonblocking)) return;
  char d[160];
  trialDesc(t, d, sizeof(d));
  die("%s rank %d: %s (%s) -> %s (%d); last error: %s", ctx->name, ctx->rank, what, d, ncclGetErrorString(res),
      (int)res, ncclGetLastError(ctx->comm));
}

static void itemIssue(item_t* it) {
  const trial_t* t = it->t;
  ctx_t* ctx = it->ctx;
  ncclComm_t comm = ctx->comm;
  cudaStream_t s = t->streamSel == 0 ? ctx->stream : t->streamSel == 1 ? ctx->stream2 : NULL;
  ncclDataType_t dt = (ncclDataType_t)t->type;
  const void* sp = viewPtr(it, it->sendReg, it->sendOff);
  void* rp = viewPtr(it, it->recvReg, it->recvOff);
  size_t c = t->count, es = typeSize[t->type];
  int n = t->n, r = ctx->rank;
  ncclResult_t res = ncclSuccess;
  ctx->curTrial = t->id;
  ctx->curT = t;
  switch (t->func) {
    case F_ALLREDUCE: res = ncclAllReduce(sp, rp, c, dt, it->op, comm, s); break;
    case F_BROADCAST: res = ncclBroadcast(sp, rp, c, dt, t->root, comm, s); break;
    case F_BCAST: res = ncclBcast(rp, c, dt, t->root, comm, s); break;
    case F_REDUCE: res = ncclReduce(sp, rp, c, dt, it->op, t->root, comm, s); break;
    case F_ALLGATHER: res = ncclAllGather(sp, rp, c, dt, comm, s); break;
    case F_REDUCESCATTER: res = ncclReduceScatter(sp, rp, c, dt, it->op, comm, s); break;
    case F_ALLTOALL: res = ncclAlltoAll(sp, rp, c, dt, comm, s); break;
    case F_GATHER: res = ncclGather(sp, rp, c, dt, t->root, comm, s); break;
    case F_SCATTER: res = ncclScatter(sp, rp, c, dt, t->root, comm, s); break;
    case F_SENDRECV: {
      int to = (r + t->root) % n, from = ((r - t->root) % n + n) % n;
      NCCLOK(ncclGroupStart());
      if ((t->orderSeed + r) & 1) {
        ncclExpect(ncclSend(sp, c, dt, to, comm, s), ctx, "ncclSend", t);
        ncclExpect(ncclRecv(rp, c, dt, from, comm, s), ctx, "ncclRecv", t);
      } else {
        ncclExpect(ncclRecv(rp, c, dt, from, comm, s), ctx, "ncclRecv", t);
        ncclExpect(ncclSend(sp, c, dt, to, comm, s), ctx, "ncclSend", t);
      }
      res = ncclGroupEnd();
      break;
    }
    case F_PAIRS: {
      /* every rank sends block p to rank p and receives block r from each p,
       * self included, in a per-rank random order of calls */
      int perm[2 * 64];
      for (int k = 0; k < 2 * n; k++) perm[k] = k;
      rng_t g = rseed((uint64_t)t->orderSeed, (uint64_t)r);
      for (int k = 2 * n - 1; k > 0; k--) {
        int j = (int)rbelow(&g, k + 1), tmp = perm[k];
        perm[k] = perm[j];
        perm[j] = tmp;
      }
      NCCLOK(ncclGroupStart());
      for (int k = 0; k < 2 * n; k++) {
        int p = perm[k] % n;
        if (perm[k] < n) ncclExpect(ncclSend((const char*)sp + p * c * es, c, dt, p, comm, s), ctx, "ncclSend", t);
        else ncclExpect(ncclRecv((char*)rp + p * c * es, c, dt, p, comm, s), ctx, "ncclRecv", t);
      }
      res = ncclGroupEnd();
      break;
    }
  }
  ncclExpect(res, ctx, funcName[t->func], t);
}

static void itemReleaseOp(item_t* it) {
  if (!it->opLive) return;
  ncclResult_t res = ncclRedOpDestroy(it->op, it->ctx->comm);
  ncclExpect(res, it->ctx, "ncclRedOpDestroy", it->t);
  it->opLive = 0;
}

static void reportMismatch(item_t* it, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static void reportMismatch(item_t* it, const char* fmt, ...) {
  ctx_t* ctx = it->ctx;
  ctx->mismatches++;
  if (++it->bad > MAX_PRINT_ITEM || ctx->printed >= MAX_PRINT) return;
  ctx->printed++;
  char d[160], msg[512];
  trialDesc(it->t, d, sizeof(d));
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  say("MISMATCH %s rank %d/%d: %s: %s\n", ctx->name, ctx->rank, ctx->nranks, d, msg);
}

static void maybeCorrupt(item_t* it) {
  if (corruptMode <= 0 || it->ctx->rank != 0) return;
  int es = typeSize[it->t->type];
  region_t* g = NULL;
  size_t byte = 0;
  if (corruptMode == 1 && it->hasOut && it->recvElems > 0) {
    g = &it->reg[it->recvReg];
    byte = g->data + (it->recvOff + it->recvElems / 2) * es + es - 1;
  } else if (corruptMode == 2 && it->nreg > 0) {
    g = &it->reg[0];
    byte = g->bytes - 1 - GUARD / 2;
  } else if (corruptMode == 3 && it->hasIn && it->sendElems > 0 && it->sendReg >= 0 && it->sendReg != it->recvReg) {
    g = &it->reg[it->sendReg];
    byte = g->data + (it->sendOff + it->sendElems / 3) * es;
  }
  if (g == NULL || __atomic_exchange_n(&corruptDone, 1, __ATOMIC_ACQ_REL)) return;
  g->got[byte] ^= 0x40;
  it->corrupted = 1;
  char d[160];
  trialDesc(it->t, d, sizeof(d));
  say("INJECTED corruption (%s) at byte %zu of a buffer of %s rank 0, %s\n", getenv("ANYCCL_TEST_CORRUPT"), byte,
      it->ctx->name, d);
}

/* Returns this item's mismatch count; frees its buffers. */
static long itemCheck(item_t* it) {
  const trial_t* t = it->t;
  ctx_t* ctx = it->ctx;
  int es = typeSize[t->type], ty = t->type;
  long before = ctx->mismatches;
  CUDAOK(cudaSetDevice(ctx->dev));
  for (int k = 0; k < it->nreg; k++)
    CUDAOK(cudaMemcpy(it->reg[k].got, it->reg[k].dev, it->reg[k].bytes, cudaMemcpyDeviceToHost));
  maybeCorrupt(it);
  for (int k = 0; k < it->nreg; k++) {
    region_t* g = &it->reg[k];
    size_t outB = g->bytes, outE = g->bytes; /* byte range holding results */
    if (k == it->recvReg && it->hasOut) {
      outB = g->data + it->recvOff * es;
      outE = outB + it->recvElems * es;
    }
    size_t ranges[2][2] = {{0, outB}, {outE, g->bytes}};
    for (int q = 0; q < 2; q++) {
      size_t b0 = ranges[q][0], b1 = ranges[q][1];
      if (b1 <= b0 || memcmp(g->init + b0, g->got + b0, b1 - b0) == 0) continue;
      for (size_t b = b0; b < b1; b++)
        if (g->init[b] != g->got[b]) {
          const char* where = b < g->data ? "guard before the buffer"
                              : b >= g->bytes - GUARD ? "guard after the buffer"
                              : (k == it->sendReg && k != it->recvReg) ? "send buffer (must not change)"
                              : !it->hasOut ? "buffer that this rank does not receive into"
                                            : "outside the result range";
          reportMismatch(it, "%s: byte %zd (relative to the data) changed from 0x%02x to 0x%02x", where,
                         (ssize_t)b - (ssize_t)g->data, g->init[b], g->got[b]);
        }
    }
    if (k == it->recvReg && it->hasOut) {
      ref_t ref;
      for (size_t j = 0; j < it->recvElems; j++) {
        uint64_t got = ld(g->got + outB + j * es, es);
        refElem(t, ctx->rank, j, &ref);
        if (!refMatches(&ref, got, ty)) {
          char e[96];
          refFormat(&ref, ty, e, sizeof(e));
          if (isFloatT(ty))
            reportMismatch(it, "element %zu: expected %s, got 0x%llx (%.9g)", j, e, (unsigned long long)got,
                           decodeBits(got, ty));
          else if (isSignedT(ty))
            reportMismatch(it, "element %zu: expected %s, got 0x%llx (%lld)", j, e, (unsigned long long)got,
                           (long long)sext(got, es));
          else
            reportMismatch(it, "element %zu: expected %s, got 0x%llx (%llu)", j, e, (unsigned long long)got,
                           (unsigned long long)got);
        }
      }
    }
  }
  if (it->corrupted && it->bad > 0) {
    say("DETECTED the injected corruption\n");
    __atomic_store_n(&corruptDetected, 1, __ATOMIC_RELEASE);
  }
  if (it->bad > MAX_PRINT_ITEM) {
    char d[160];
    trialDesc(t, d, sizeof(d));
    say("MISMATCH %s rank %d/%d: %s: %ld mismatches in all\n", ctx->name, ctx->rank, ctx->nranks, d, it->bad);
  }
  for (int k = 0; k < it->nreg; k++) {
    CUDAOK(cudaFree(it->reg[k].dev));
    free(it->reg[k].init);
    free(it->reg[k].got);
  }
  if (it->devScalar) CUDAOK(cudaFree(it->devScalar));
  it->nreg = 0;
  return ctx->mismatches - before;
}

/* Poll a nonblocking comm until its pending work is enqueued (bounded). */
static void waitComm(ctx_t* ctx, const char* what) {
  double t0 = nowSec();
  for (;;) {
    ncclResult_t st = ncclInProgress;
    ncclResult_t res = ncclCommGetAsyncError(ctx->comm, &st);
    if (res != ncclSuccess) die("%s rank %d: ncclCommGetAsyncError -> %d", ctx->name, ctx->rank, res);
    if (st == ncclSuccess) return;
    if (st != ncclInProgress)
      die("%s rank %d: %s: async error %s (%d): %s", ctx->name, ctx->rank, what, ncclGetErrorString(st), st,
          ncclGetLastError(ctx->comm));
    if (nowSec() - t0 > 60) die("%s rank %d: %s still in progress after 60 s", ctx->name, ctx->rank, what);
    usleep(200);
  }
}

/* Run items (one trial on one rank each) together: prepare all, issue all
 * (inside one group when grouped), wait, check all. Returns mismatches. */
static long runItems(item_t* items, int nitems, int grouped) {
  long bad = 0;
  static int verboseSetting = -1; /* read once; rank threads race to it, hence atomics */
  int verbose = __atomic_load_n(&verboseSetting, __ATOMIC_RELAXED);
  if (verbose < 0) {
    verbose = (int)envU64("ANYCCL_TEST_VERBOSE", 0);
    __atomic_store_n(&verboseSetting, verbose, __ATOMIC_RELAXED);
  }
  if (verbose)
    for (int i = 0; i < nitems; i++) {
      char d[160];
      trialDesc(items[i].t, d, sizeof(d));
      say("%s rank %d/%d: %s%s stream %d\n", items[i].ctx->name, items[i].ctx->rank, items[i].ctx->nranks, d,
          grouped ? " (grouped)" : "", items[i].t->streamSel);
    }
  if (grouped) NCCLOK(ncclGroupStart());
  for (int i = 0; i < nitems; i++) itemIssue(&items[i]);
  if (grouped) {
    ncclResult_t res = ncclGroupEnd();
    int nb = 0;
    for (int i = 0; i < nitems; i++) nb |= items[i].ctx->nonblocking;
    if (res != ncclSuccess && !(res == ncclInProgress && nb))
      die("ncclGroupEnd -> %s (%d): %s", ncclGetErrorString(res), res, ncclGetLastError(NULL));
  }
  for (int i = 0; i < nitems; i++)
    if (items[i].ctx->nonblocking) waitComm(items[i].ctx, "a group of collectives");
  for (int i = 0; i < nitems; i++) {
    item_t* it = &items[i];
    if (!it->t->destroyEarly || !it->opLive) continue;
    /* NCCL allows destroying an op as soon as the call using it returned;
     * a new op made right away (likely in the same slot) must not change
     * the result of the call still running */
    itemReleaseOp(it);
    const trial_t* t = it->t;
    uint64_t other = t->scalarBits[(t->scalarIdx + it->ctx->rank + 3) % 8];
    ncclResult_t res = ncclRedOpCreatePreMulSum(&it->decoy, &other, (ncclDataType_t)t->type, ncclScalarHostImmediate,
                                                it->ctx->comm);
    ncclExpect(res, it->ctx, "ncclRedOpCreatePreMulSum (decoy)", t);
    it->decoyLive = 1;
  }
  for (int i = 0; i < nitems; i++) {
    CUDAOK(cudaSetDevice(items[i].ctx->dev));
    CUDAOK(cudaStreamSynchronize(items[i].ctx->stream));
    CUDAOK(cudaStreamSynchronize(items[i].ctx->stream2));
    CUDAOK(cudaStreamSynchronize(NULL));
  }
  for (int i = 0; i < nitems; i++) {
    itemReleaseOp(&items[i]);
    if (items[i].decoyLive) ncclExpect(ncclRedOpDestroy(items[i].decoy, items[i].ctx->comm), items[i].ctx,
                                       "ncclRedOpDestroy (decoy)", items[i].t);
    bad += itemCheck(&items[i]);
  }
  return bad;
}

#endif /* COLL_COMMON_H */
