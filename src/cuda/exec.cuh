/* The cuda executor: one kernel launch per phase, one block per lane; each
 * block interprets its lane's step program (plan.h) exactly as the cpu
 * executor does, moving 16-byte vectors through FIFO slots in peers' device
 * memory (reached over NVLink/PCIe by direct pointers or CUDA IPC).
 *
 * Synchronisation per slot (as NCCL's simple protocol): the sender waits for
 * head (local memory, written by the receiver), writes the slot and its size
 * into the receiver's memory, fences at system scope and publishes tail; the
 * receiver polls tail (local), reads the slot bypassing L1 and publishes
 * head in the sender's memory. Thread 0 waits for the tail and thread 32 for
 * the head; the block meets at barriers around the data movement. The LL
 * protocol (below) needs neither fence nor tail.
 *
 * Kernel instantiations are kept few: an entry point per parameter size
 * class (below), and one element loop per (type, op) for reductions;
 * everything else dispatches at run time. This file is compiled once per
 * group of element types (exec_groups.h, exec_*.cu), each copy with only its
 * group's loops: ptxas' time grows faster than the code it is given (sm_90,
 * one CPU: the whole kernel in one file took 418 s, the six groups 133 s
 * together), and the files compile side by side. */
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <stdint.h>
#include <new>
#include <type_traits>
#include "cuda_exec.h"
#include "exec_groups.h"
#include "wait.cuh"

/* The element types this file's kernels reduce, a bit per type (all of them
 * unless an exec_*.cu file picks a group); ACU_LAUNCH: the name of its
 * launcher (exec_groups.h). */
#ifndef ACU_TYPES
#define ACU_TYPES ACU_TYPES_ALL
#endif

/* A kernel's parameters are copied into its constant bank before it starts,
 * all of the declared size, at about 1 us per KB of GPU time (H200: 3.6 us a
 * kernel for 16 B, 5.9 for 4 KB, 10 for 8 KB, 35 for 32 KB, stream or graph;
 * tests/gpu/micro/graphparams.cu). So there is a kernel per size class, each
 * launch takes the smallest that holds its blob, and the interpreter
 * (runBlob) is compiled once, not per class. */
template <int N> struct BlobN {
  alignas(16) unsigned char b[N];
};

enum { BUF_NONE = 0, BUF_IN, BUF_OUT, BUF_SCRATCH }; /* as plan.h */
enum { OP_SUM = 0, OP_PROD, OP_MAX, OP_MIN, OP_PREMULSUM, OP_SUMPOSTDIV }; /* anycclDevRedOp */

/* ---- element types: raw storage R, compute type C ------------------------ */
template <int TY> struct Ty;
#define INT_TY(id, T, U)                                          \
  template <> struct Ty<id> {                                     \
    typedef T R;                                                  \
    typedef T C;                                                  \
    typedef U Uns;                                                \
    static constexpr bool isInt = true;                           \
    static __device__ __forceinline__ C load(R r) { return r; }   \
    static __device__ __forceinline__ R store(C c) { return c; }  \
  };
INT_TY(0, int8_t, uint8_t)
INT_TY(1, uint8_t, uint8_t)
INT_TY(2, int32_t, uint32_t)
INT_TY(3, uint32_t, uint32_t)
INT_TY(4, int64_t, uint64_t)
INT_TY(5, uint64_t, uint64_t)
#undef INT_TY
/* fp8 conversions are instructions from sm_89 on and long software
 * sequences before (cuda_fp8.hpp): there they are calls, not inlined into
 * every element of every fp8 loop (ptxas for sm_80: the e4m3 group took 113
 * CPU seconds inlined, 17 called; results are the same bits). */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 890
#define ACU_FP8_CVT __noinline__
#else
#define ACU_FP8_CVT __forceinline__
#endif
template <__nv_fp8_interpretation_t K>
static __device__ ACU_FP8_CVT float fp8Load(uint8_t r) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)r, K)));
}
template <__nv_fp8_interpretation_t K>
static __device__ ACU_FP8_CVT uint8_t fp8Store(float c) {
  return (uint8_t)__nv_cvt_float_to_fp8(c, __NV_SATFINITE, K);
}
#define FLT_TY(id, RT, CT, LOAD, STORE)                              \
  template <> struct Ty<id> {                                        \
    typedef RT R;                                                    \
    typedef CT C;                                                    \
    typedef RT Uns;                                                  \
    static constexpr bool isInt = false;                             \
    static __device__ __forceinline__ C load(R r) { return LOAD; }   \
    static __device__ __forceinline__ R store(C c) { return STORE; } \
  };
FLT_TY(6, uint16_t, float, __half2float(__ushort_as_half(r)), __half_as_ushort(__float2half_rn(c)))
FLT_TY(7, float, float, r, c)
FLT_TY(8, double, double, r, c)
FLT_TY(9, uint16_t, float, __bfloat162float(__ushort_as_bfloat16(r)), __bfloat16_as_ushort(__float2bfloat16_rn(c)))
FLT_TY(10, uint8_t, float, fp8Load<__NV_E4M3>(r), fp8Store<__NV_E4M3>(c))
FLT_TY(11, uint8_t, float, fp8Load<__NV_E5M2>(r), fp8Store<__NV_E5M2>(c))
#undef FLT_TY

template <int TY, int OP>
static __device__ __forceinline__ typename Ty<TY>::C apply(typename Ty<TY>::C a, typename Ty<TY>::C b) {
  typedef typename Ty<TY>::C C;
  typedef typename Ty<TY>::Uns U;
  if constexpr (Ty<TY>::isInt) {
    if (OP == OP_SUM) return (C)((U)a + (U)b);
    if (OP == OP_PROD) return (C)((U)a * (U)b);
    if (OP == OP_MAX) return a > b ? a : b;
    return a < b ? a : b;
  } else {
    if (OP == OP_SUM) return a + b;
    if (OP == OP_PROD) return a * b;
    if (OP == OP_MAX) return a != a ? b : (b != b ? a : (a > b ? a : (b > a ? b : (signbit(a) ? b : a))));
    return a != a ? b : (b != b ? a : (a < b ? a : (b < a ? b : (signbit(a) ? a : b))));
  }
}

struct RedArgs {
  uint64_t n;           /* elements */
  const void* in0;
  const void* in1;      /* or NULL */
  void* out0;           /* or NULL */
  void* out1;           /* or NULL (send slot) */
  bool slot0;           /* in0 is a FIFO slot: read around L1 */
  bool pm0, pm1, pd;    /* premultiply in0 / in1, post-divide out0 */
  uint64_t scalar;      /* bits */
  uint64_t divisor;
};

/* Loads of FIFO slots go around L1 (the peer wrote them since we last looked). */
static __device__ __forceinline__ uint4 ldIn(const uint4* p, bool slot) { return slot ? __ldcg(p) : *p; }
template <typename R>
static __device__ __forceinline__ R ldElem(const R* p, bool slot) {
  if (!slot) return *p;
  R r;
  if (sizeof(R) == 1) {
    unsigned char v = __ldcg((const unsigned char*)p);
    memcpy(&r, &v, 1);
  } else if (sizeof(R) == 2) {
    unsigned short v = __ldcg((const unsigned short*)p);
    memcpy(&r, &v, 2);
  } else if (sizeof(R) == 4) {
    unsigned int v = __ldcg((const unsigned int*)p);
    memcpy(&r, &v, 4);
  } else {
    unsigned long long v = __ldcg((const unsigned long long*)p);
    memcpy(&r, &v, 8);
  }
  return r;
}

/* What elemOp needs besides the operands, by value (kept in registers). */
struct ElemFlags {
  bool pm0, pm1, pd;
  uint64_t divisor;
};
static __device__ __forceinline__ ElemFlags flagsOf(const RedArgs& a) { return ElemFlags{a.pm0, a.pm1, a.pd, a.divisor}; }

/* One element: v = in0 (premultiplied) [OP in1 (premultiplied)]; *o1 = v,
 * *o0 = v (post-divided). PreMulSum and SumPostDiv run as OP_SUM with the
 * ElemFlags. */
template <int TY, int OP>
static __device__ __forceinline__ void elemOp(const ElemFlags a, typename Ty<TY>::C s, typename Ty<TY>::R r0,
                                              typename Ty<TY>::R r1, bool has1, typename Ty<TY>::R* o0,
                                              typename Ty<TY>::R* o1) {
  typedef typename Ty<TY>::R R;
  typedef typename Ty<TY>::C C;
  C v = Ty<TY>::load(r0);
  if (OP == OP_SUM && a.pm0) v = apply<TY, OP_PROD>(v, s);
  if (has1) {
    C w = Ty<TY>::load(r1);
    if (OP == OP_SUM && a.pm1) w = apply<TY, OP_PROD>(w, s);
    v = apply<TY, OP>(v, w);
  }
  R rv = Ty<TY>::store(v);
  if (o1) *o1 = rv;
  if (o0) {
    if (OP == OP_SUM && a.pd) {
      uint64_t d = a.divisor ? a.divisor : 1;
      if constexpr (Ty<TY>::isInt) {
        if ((C)-1 < (C)0) rv = (R)((int64_t)v / (int64_t)d);
        else rv = (R)((uint64_t)v / d);
      } else {
        rv = Ty<TY>::store(Ty<TY>::load(rv) / (C)d);
      }
    }
    *o0 = rv;
  }
}

template <int TY>
static __device__ __forceinline__ typename Ty<TY>::C scalarOf(uint64_t bits) {
  typename Ty<TY>::R sbits;
  memcpy(&sbits, &bits, sizeof(sbits));
  return Ty<TY>::load(sbits);
}

/* Plain sums a vector at a time: 8-bit integers four to an instruction,
 * binary16/bfloat16 two (instead of a conversion, an add and a conversion
 * back per element), the wider types straight (without elemOp's flag tests
 * and second output per element). Measured on 4 x H200: reduce-scatter of
 * int8 ran at 0.55x its float speed through elemOp, of float at 0.9x its
 * int8 speed once int8 was packed. Bitwise the same as the element path:
 * integer sums wrap either way, and a binary16/bfloat16 sum rounded once
 * equals the float sum rounded back (float carries more than twice their
 * precision). Not for fp8 (element by element, as products, min and max). */
template <int TY>
static __device__ __forceinline__ void packedSum(const uint4& x, const uint4& y, uint4& z) {
  if constexpr (TY == 2 || TY == 3) {
    z = make_uint4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
  } else if constexpr (TY == 4 || TY == 5 || TY == 8) {
    typedef typename std::conditional<TY == 8, double, uint64_t>::type W;
    W a[2], b[2];
    memcpy(a, &x, 16);
    memcpy(b, &y, 16);
    a[0] += b[0];
    a[1] += b[1];
    memcpy(&z, a, 16);
  } else if constexpr (TY == 7) {
    z = make_uint4(__float_as_uint(__uint_as_float(x.x) + __uint_as_float(y.x)),
                   __float_as_uint(__uint_as_float(x.y) + __uint_as_float(y.y)),
                   __float_as_uint(__uint_as_float(x.z) + __uint_as_float(y.z)),
                   __float_as_uint(__uint_as_float(x.w) + __uint_as_float(y.w)));
  } else if constexpr (TY == 0 || TY == 1) {
    z = make_uint4(__vadd4(x.x, y.x), __vadd4(x.y, y.y), __vadd4(x.z, y.z), __vadd4(x.w, y.w));
  } else if constexpr (TY == 6 || TY == 9) {
    typedef typename std::conditional<TY == 6, __half2, __nv_bfloat162>::type V;
    V a[4], b[4];
    memcpy(a, &x, 16);
    memcpy(b, &y, 16);
#pragma unroll
    for (int k = 0; k < 4; k++) a[k] = __hadd2(a[k], b[k]);
    memcpy(&z, a, 16);
  } else {
    static_assert(TY < 0, "no packed sum for fp8");
  }
}

/* a OP b on one 16-byte vector: sums packed (packedSum), 8-bit integer
 * min/max four to an instruction, everything else element by element with
 * the element path's own apply() (so NaN and signed-zero rules are the
 * same bit for bit). */
template <int TY, int OP>
static __device__ __forceinline__ void vecOp(const uint4& x, const uint4& y, uint4& z) {
  typedef typename Ty<TY>::R R;
  constexpr int E = 16 / sizeof(R);
  if constexpr (OP == OP_SUM && TY != 10 && TY != 11) {
    packedSum<TY>(x, y, z);
  } else if constexpr ((TY == 0 || TY == 1) && (OP == OP_MAX || OP == OP_MIN)) {
    if constexpr (TY == 0 && OP == OP_MAX) z = make_uint4(__vmaxs4(x.x, y.x), __vmaxs4(x.y, y.y), __vmaxs4(x.z, y.z), __vmaxs4(x.w, y.w));
    if constexpr (TY == 0 && OP == OP_MIN) z = make_uint4(__vmins4(x.x, y.x), __vmins4(x.y, y.y), __vmins4(x.z, y.z), __vmins4(x.w, y.w));
    if constexpr (TY == 1 && OP == OP_MAX) z = make_uint4(__vmaxu4(x.x, y.x), __vmaxu4(x.y, y.y), __vmaxu4(x.z, y.z), __vmaxu4(x.w, y.w));
    if constexpr (TY == 1 && OP == OP_MIN) z = make_uint4(__vminu4(x.x, y.x), __vminu4(x.y, y.y), __vminu4(x.z, y.z), __vminu4(x.w, y.w));
  } else {
    R a[E], b[E];
    memcpy(a, &x, 16);
    memcpy(b, &y, 16);
#pragma unroll
    for (int e = 0; e < E; e++) a[e] = Ty<TY>::store(apply<TY, OP>(Ty<TY>::load(a[e]), Ty<TY>::load(b[e])));
    memcpy(&z, a, 16);
  }
}

/* Plain a OP b over 16-byte vectors (no PreMulSum or SumPostDiv flags),
 * the hot loop of every reduction step: U vectors of each input in flight
 * per thread, no per-element flags, bounds tested once per round. Apart
 * from redLoop's general element path because that path made the loop
 * slow: one block of 512 threads reduced floats from a FIFO slot and a
 * local input into a peer at 10-11 GB/s through it, against 37-42 GB/s for
 * a plain copy and 30-36 through this loop (H200, tests/gpu/micro/red.cu). */
template <int TY, int OP, int U, bool TWO>
static __device__ __forceinline__ void opVecs(const uint4* v0, const uint4* v1, uint4* w0, uint4* w1, uint64_t nv) {
  const uint64_t bd = blockDim.x;
  uint64_t i = threadIdx.x;
  for (; i + (U - 1) * bd < nv; i += U * bd) {
    uint4 x[U], y[U];
#pragma unroll
    for (int u = 0; u < U; u++) {
      x[u] = __ldcg(v0 + i + u * bd);
      y[u] = __ldcg(v1 + i + u * bd);
    }
#pragma unroll
    for (int u = 0; u < U; u++) {
      uint4 z;
      vecOp<TY, OP>(x[u], y[u], z);
      w0[i + u * bd] = z;
      if (TWO) w1[i + u * bd] = z;
    }
  }
  for (; i < nv; i += bd) {
    uint4 z;
    vecOp<TY, OP>(__ldcg(v0 + i), __ldcg(v1 + i), z);
    w0[i] = z;
    if (TWO) w1[i] = z;
  }
}
/* Vectors in flight per thread and input: 8 for packed sums; 4 where
 * each vector is taken apart element by element (twice the code per round,
 * and twice ptxas' time for the whole file at 8). */
template <int TY, int OP>
__host__ __device__ constexpr int opUnroll() { return OP == OP_SUM ? 8 : 4; }

template <int TY, int OP>
static __device__ __noinline__ void redLoop(const RedArgs& a) {
  typedef typename Ty<TY>::R R;
  typedef typename Ty<TY>::C C;
  constexpr int E = 16 / sizeof(R);
  constexpr int U = 4; /* 16-byte loads in flight per thread and input */
  const C s = scalarOf<TY>(a.scalar);
  const ElemFlags f = flagsOf(a);
  const bool slot0 = a.slot0;
  const R* in0 = (const R*)a.in0;
  const R* in1 = (const R*)a.in1;
  R* out0 = (R*)a.out0;
  R* out1 = (R*)a.out1;
  const bool has1 = in1 != nullptr;
  uint64_t n = a.n, done = 0;
  uintptr_t mis = (uintptr_t)in0 | (uintptr_t)in1 | (uintptr_t)out0 | (uintptr_t)out1;
  /* plain a OP b. fp8 keeps the element path. */
  constexpr bool lean = TY != 10 && TY != 11;
  if constexpr (lean) {
    if (has1 && !f.pm0 && !f.pm1 && !f.pd && (mis & 15) == 0) {
      uint64_t nv = n / E;
      if (out1) opVecs<TY, OP, opUnroll<TY, OP>(), true>((const uint4*)in0, (const uint4*)in1, (uint4*)out0, (uint4*)out1, nv);
      else opVecs<TY, OP, opUnroll<TY, OP>(), false>((const uint4*)in0, (const uint4*)in1, (uint4*)out0, nullptr, nv);
      done = nv * E;
    }
  }
  /* The vectors element by element: flags (PreMulSum, SumPostDiv: OP_SUM
   * only) or no lean loop. Where the lean loop takes every aligned case
   * (prod/max/min come with in1 and no flags) this path would only see
   * nv == 0, so it is left out (less for ptxas, the same results). */
  constexpr bool elemVecs = !lean || OP == OP_SUM;
  if (elemVecs && done == 0 && (mis & 15) == 0) {
    uint64_t nv = n / E;
    const uint4* v0 = (const uint4*)in0;
    const uint4* v1 = (const uint4*)in1;
    uint4* w0 = (uint4*)out0;
    uint4* w1 = (uint4*)out1;
    for (uint64_t i = threadIdx.x; i < nv; i += (uint64_t)blockDim.x * U) {
      uint4 x[U], y[U];
#pragma unroll
      for (int u = 0; u < U; u++) {
        uint64_t j = i + (uint64_t)u * blockDim.x;
        if (j < nv) {
          x[u] = ldIn(v0 + j, slot0);
          if (has1) y[u] = v1[j];
        }
      }
#pragma unroll
      for (int u = 0; u < U; u++) {
        uint64_t j = i + (uint64_t)u * blockDim.x;
        if (j >= nv) break;
        uint4 z0, z1;
        R r0[E], r1[E], o0[E], o1[E];
        memcpy(r0, &x[u], 16);
        if (has1) memcpy(r1, &y[u], 16);
#pragma unroll
        for (int e = 0; e < E; e++) elemOp<TY, OP>(f, s, r0[e], has1 ? r1[e] : r0[e], has1, o0 + e, o1 + e);
        memcpy(&z0, o0, 16);
        memcpy(&z1, o1, 16);
        if (w0) w0[j] = z0;
        if (w1) w1[j] = z1;
      }
    }
    done = nv * E;
  }
  for (uint64_t i = done + threadIdx.x; i < n; i += blockDim.x) {
    R r0 = ldElem(in0 + i, slot0);
    R r1 = has1 ? in1[i] : r0;
    R t0, t1;
    elemOp<TY, OP>(f, s, r0, r1, has1, out0 ? &t0 : nullptr, out1 ? &t1 : nullptr);
    if (out0) out0[i] = t0;
    if (out1) out1[i] = t1;
  }
}

/* ---- LL (low-latency) protocol ---------------------------------------------
 * A slot holds 16-byte lines {data0, flag, data1, flag}: 8 payload bytes and
 * the flag twice, stored with one 16-byte volatile store. The flag is the
 * connection step + 1, so a line left from an earlier use of the slot never
 * matches (LL slots hold nothing else); the receiver polls its lines, with no
 * fence and no tail.
 *
 * The steps of a slice run fused: thread t carries unit (8 bytes) u through
 * every step of the run before it takes the next unit, so a unit's data moves
 * from step to step in the same thread (scratch and output included) and the
 * block meets at two barriers per run instead of three per step. Every rank
 * walks each unit's steps in program order, so a unit's program is the
 * slice's program in miniature and cannot deadlock; units are independent. */
__shared__ int sLLStop;

static __device__ __forceinline__ bool keepWaiting(const acuPhase* h, uint64_t* start, int peer) {
  return acuKeepWaiting(h->shared, h->timeoutNs, start, peer);
}

/* Report a mismatch kind (ACU_ERR_SIZE/MISMATCH/POISONED) unless an error
 * is reported already. */
static __device__ void acuFail(const acuPhase* h, uint32_t err, int peer, uint64_t expected, uint64_t got) {
  if (h->shared->err != ACU_ERR_NONE) return;
  h->shared->expected = expected;
  h->shared->got = got;
  h->shared->errPeer = peer;
  h->shared->err = err;
  __threadfence_system();
}
/* Did the same-host peer at the other end of c start this collective (the
 * same collective number) with another tag? Its op word (cuda_exec.h). */
static __device__ __forceinline__ bool opDiffers(const acuPhase* h, const acuConn* c) {
  return c != nullptr && acuOpDiffers(h->collSeq, h->sig, c->mailbox);
}

/* Thread 0 of each lane of a collective phase: this rank runs collective
 * number collSeq with tag sig now (its op word, which peers' slow paths
 * compare; the host's copy for the network proxy). */
static __device__ __forceinline__ void publishOp(const acuPhase* h) {
  if (h->collSeq == 0) return;
  const uint64_t w = (uint64_t)h->collSeq << 32 | h->sig;
  stVolatile(h->opWord, w);
  if ((h->flags & ACU_FLAG_HOST_OPWORD) && blockIdx.x == 0) h->shared->opWord = w;
}

#define LL_MAX_RUN 32
#define ANYCCL_LANE_CONNS_MAX 64 /* ANYCCL_MAX_LANE_CONNS (plan.h) */
struct LLStep {
  const char* in0;
  const char* in1;  /* or NULL */
  char* out0;       /* or NULL */
  char* out1;       /* an LL send slot, or NULL */
  const acuConn* rc; /* the receive connection of in0 (inFlag), or NULL */
  uint32_t inFlag;  /* nonzero: in0 is an LL receive slot with this flag */
  uint32_t outFlag;
  uint32_t bytes;
  uint8_t pm0, pm1, pd, skip;
};
struct LLRun {
  int nsteps;
  uint32_t maxBytes;
  uint32_t sig;     /* the operation's tag: a line's second flag is flag ^ sig */
  uint64_t scalar, divisor;
  const acuPhase* h;
  LLStep s[LL_MAX_RUN];
};

/* Slow path of an LL wait on line v (expecting flags flag, flag2) of
 * connection rc: ACU_ERR_POISONED if the sender poisoned the tail,
 * ACU_ERR_MISMATCH if it started this collective with another tag (op word),
 * posted a simple slot for this step (tail), wrote
 * this step with another operation's tag, or a step a little ahead (counters
 * out of step: an earlier operation differed; a line left 2^31 steps ago
 * must not count); else 0. The step in 64 bits: the connection's counter at
 * the kernel's start (rc->step) plus what the 32-bit flag adds to it. */
static __device__ uint32_t llOdd(uint4 v, uint32_t flag, uint32_t flag2, const acuPhase* h, const acuConn* rc,
                                 uint64_t* tailOut) {
  const uint64_t tail = ldRelaxed(rc->tail);
  *tailOut = tail;
  if (tail & ACU_POISON) return ACU_ERR_POISONED;
  if (opDiffers(h, rc)) return ACU_ERR_MISMATCH;
  const uint64_t step = rc->step + (uint32_t)(flag - 1 - (uint32_t)rc->step);
  if (tail >= step + 1) return ACU_ERR_MISMATCH;
  if (v.y == flag ? v.w != flag2 : v.y - flag - 1 < (1u << 24)) return ACU_ERR_MISMATCH;
  return 0;
}

/* Poll one line until both flags match; stops on abort, timeout, error of
 * another lane, poison or mismatch (reported), after which every reader of
 * the block gives up at once. A line whose flags disagree counts as another
 * operation's only when two slow-path looks see it (a torn read passes). */
static __device__ uint2 llRead(const uint4* p, uint32_t flag, uint32_t flag2, const acuPhase* h, const acuConn* rc) {
  uint4 v;
  uint64_t start = 0;
  uint32_t odd = 0;
  for (uint32_t spins = 0;; spins++) {
    asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p)
                 : "memory");
    if (v.y == flag && v.w == flag2) break;
    if ((spins & 4095) == 4095) {
      uint64_t tail = 0;
      const uint32_t e = sLLStop ? 0 : llOdd(v, flag, flag2, h, rc, &tail);
      if (e == ACU_ERR_POISONED || (e && odd == e)) {
        acuFail(h, e, e == ACU_ERR_POISONED ? (int)(uint32_t)tail : rc->peer, flag, v.y);
        sLLStop = 1;
      }
      odd = e;
      if (sLLStop || !keepWaiting(h, &start, rc->peer)) {
        sLLStop = 1;
        break;
      }
    }
  }
  return make_uint2(v.x, v.z);
}
static __device__ __forceinline__ void llWrite(uint4* p, uint2 d, uint32_t flag, uint32_t flag2) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(d.x), "r"(flag), "r"(d.y), "r"(flag2)
               : "memory");
}

/* The block runs the fused steps of `run` (in shared memory). */
template <int TY, int OP>
static __device__ __noinline__ void llLoop(const LLRun& run) {
  typedef typename Ty<TY>::R R;
  constexpr int E = 8 / sizeof(R);
  const typename Ty<TY>::C sc = scalarOf<TY>(run.scalar);
  const uint32_t units = (run.maxBytes + 7) / 8;
  const int nsteps = run.nsteps;
  for (uint32_t u = threadIdx.x; u < units; u += blockDim.x) {
    for (int i = 0; i < nsteps; i++) {
      const LLStep& st = run.s[i];
      if (st.skip || u * 8 >= st.bytes) continue;
      int len = st.bytes - u * 8 < 8 ? (int)(st.bytes - u * 8) : 8;
      uint2 x = st.inFlag ? llRead((const uint4*)st.in0 + u, st.inFlag, st.inFlag ^ run.sig, run.h, st.rc)
                          : ld8(st.in0 + u * 8, len);
      uint2 o0 = x, o1 = x;
      if (st.in1 || st.pm0 || st.pd) {
        uint2 y = st.in1 ? ld8(st.in1 + u * 8, len) : x;
        const ElemFlags f{(bool)st.pm0, (bool)st.pm1, (bool)st.pd, run.divisor};
        R r0[E], r1[E], w0[E], w1[E];
        memcpy(r0, &x, 8);
        memcpy(r1, &y, 8);
#pragma unroll
        for (int e = 0; e < E; e++) elemOp<TY, OP>(f, sc, r0[e], r1[e], st.in1 != nullptr, w0 + e, w1 + e);
        memcpy(&o0, w0, 8);
        memcpy(&o1, w1, 8);
      }
      if (st.out0) st8(st.out0 + u * 8, o0, len);
      if (st.out1) llWrite((uint4*)st.out1 + u, o1, st.outFlag, st.outFlag ^ run.sig);
    }
  }
}

/* Run-time dispatch to the (type, op family) instantiations of a loop. */
struct RedK {
  template <int TY, int OP>
  static __device__ void run(const RedArgs& a) { redLoop<TY, OP>(a); }
};
struct LLK {
  template <int TY, int OP>
  static __device__ void run(const LLRun& a) { llLoop<TY, OP>(a); }
};
template <class K, int TY, class A>
static __device__ void byOp(int op, const A& a) {
  switch (op) {
    case OP_PROD: K::template run<TY, OP_PROD>(a); break;
    case OP_MAX: K::template run<TY, OP_MAX>(a); break;
    case OP_MIN: K::template run<TY, OP_MIN>(a); break;
    default: K::template run<TY, OP_SUM>(a); break; /* Sum, PreMulSum, SumPostDiv */
  }
}
/* Only the types of this file's group (ACU_TYPES) are compiled in: the host
 * launches a phase on its type's group (exec.cu), so the others never come. */
template <class K, int TY, class A>
static __device__ void byOpIn(int op, const A& a) {
  if constexpr ((ACU_TYPES >> TY & 1) != 0) byOp<K, TY>(op, a);
  else __trap();
}
template <class K, class A>
static __device__ void byType(int type, int op, const A& a) {
  switch (type) {
    case 0: byOpIn<K, 0>(op, a); break;
    case 1: byOpIn<K, 1>(op, a); break;
    case 2: byOpIn<K, 2>(op, a); break;
    case 3: byOpIn<K, 3>(op, a); break;
    case 4: byOpIn<K, 4>(op, a); break;
    case 5: byOpIn<K, 5>(op, a); break;
    case 6: byOpIn<K, 6>(op, a); break;
    case 7: byOpIn<K, 7>(op, a); break;
    case 8: byOpIn<K, 8>(op, a); break;
    case 9: byOpIn<K, 9>(op, a); break;
    case 10: byOpIn<K, 10>(op, a); break;
    default: byOpIn<K, 11>(op, a); break; /* acuTypeGroup maps the same */
  }
}

/* Plain copy of `bytes` to one or two destinations (type-agnostic). */
static __device__ __noinline__ void copyBytes(uint64_t bytes, const char* src, bool slot, char* dst0, char* dst1) {
  uintptr_t mis = (uintptr_t)src | (uintptr_t)dst0 | (uintptr_t)dst1;
  uint64_t done = 0;
  if ((mis & 15) == 0) {
    constexpr int U = 8; /* 16-byte loads in flight per thread */
    uint64_t nv = bytes / 16;
    const uint4* s = (const uint4*)src;
    uint4* d0 = (uint4*)dst0;
    uint4* d1 = (uint4*)dst1;
    for (uint64_t i = threadIdx.x; i < nv; i += (uint64_t)blockDim.x * U) {
      uint4 x[U];
#pragma unroll
      for (int u = 0; u < U; u++) {
        uint64_t j = i + (uint64_t)u * blockDim.x;
        if (j < nv) x[u] = slot ? __ldcg(s + j) : s[j];
      }
#pragma unroll
      for (int u = 0; u < U; u++) {
        uint64_t j = i + (uint64_t)u * blockDim.x;
        if (j < nv) {
          if (d0) d0[j] = x[u];
          if (d1) d1[j] = x[u];
        }
      }
    }
    done = nv * 16;
  }
  for (uint64_t i = done + threadIdx.x; i < bytes; i += blockDim.x) {
    char c = slot ? (char)__ldcg((const unsigned char*)src + i) : src[i];
    if (dst0) dst0[i] = c;
    if (dst1) dst1[i] = c;
  }
}

/* ---- waiting --------------------------------------------------------------- */
/* A counter that passed the wait: false (reported) if a peer poisoned it
 * (ACU_POISON | the rank that found the mismatch). */
static __device__ __forceinline__ bool notPoisoned(uint64_t x, const acuPhase* h) {
  if (!(x & ACU_POISON)) return true;
  acuFail(h, ACU_ERR_POISONED, (int)(uint32_t)x, 0, 0);
  return false;
}

/* A simple receive of step st waits: did the sender write LL lines for it
 * (its first line carries flag st + 1)? Same-host connections only (network
 * ends have no LL area). */
static __device__ bool llPosted(const acuConn* c, uint64_t st) {
  if (c->net) return false;
  const uint32_t* line = (const uint32_t*)(c->llbuf + acuRem(st, c->nslots) * (uint64_t)c->llSlotBytes);
  return *(volatile const uint32_t*)(line + 1) == (uint32_t)(st + 1);
}

/* One thread: wait until *p >= v. Tails are read with acquire (the slot's
 * data follows); heads relaxed (they only free a slot for writing). Returns
 * false on abort, timeout, poison or an error of another lane (reported in
 * shared). oc: the connection waited on, whose peer's op word the slow path
 * compares; llCheck: oc is a simple receive, checked for LL lines of step
 * llStep (the sender ran the other protocol). */
static __device__ bool waitAtLeast(const uint64_t* p, uint64_t v, const acuPhase* h, int peer, bool acquire = false,
                                   const acuConn* oc = nullptr, bool llCheck = false, uint64_t llStep = 0) {
  uint64_t x = acquire ? ldAcquire(p) : ldRelaxed(p);
  if (x >= v) return notPoisoned(x, h);
  uint64_t start = 0;
  for (uint32_t spins = 1;; spins++) {
    x = acquire ? ldAcquire(p) : ldRelaxed(p);
    if (x >= v) return notPoisoned(x, h);
    if ((spins & 1023) == 0) {
      if (oc && ((llCheck && llPosted(oc, llStep)) || opDiffers(h, oc))) {
        acuFail(h, ACU_ERR_MISMATCH, peer, 0, 0);
        return false;
      }
      if (!keepWaiting(h, &start, peer)) return false;
    }
  }
}

/* ---- lanes -------------------------------------------------------------------- */
/* The PreMulSum scalar's bits: from the blob, or from device memory when the
 * caller's op keeps it there (read when the phase runs). */
static __device__ __forceinline__ uint64_t phaseScalar(const acuPhase* h) {
  uint64_t bits = h->scalar;
  if (h->scalarPtr) {
    bits = 0;
    memcpy(&bits, (const void*)h->scalarPtr, h->elemSize);
  }
  return bits;
}

struct Blob {
  const acuPhase* h;
  const acuLaneWire* lanes;
  const acuShape* shapes;
  const acuStep* steps;
  const uint16_t* conns;
  const acuOp* ops;
};

static __device__ __forceinline__ size_t pad8(size_t x) { return (x + 7) & ~(size_t)7; }

static __device__ Blob parse(const unsigned char* b) {
  Blob o;
  o.h = (const acuPhase*)b;
  size_t off = sizeof(acuPhase);
  o.lanes = (const acuLaneWire*)(b + off);
  off += sizeof(acuLaneWire) * o.h->nlanes;
  o.shapes = (const acuShape*)(b + off);
  off += sizeof(acuShape) * o.h->nshapes;
  o.steps = (const acuStep*)(b + off);
  off += pad8(sizeof(acuStep) * o.h->nsteps);
  o.conns = (const uint16_t*)(b + off);
  off += pad8(sizeof(uint16_t) * o.h->nconns);
  o.ops = (const acuOp*)(b + off);
  return o;
}

static __device__ __forceinline__ uint64_t blockLen(uint64_t total, uint64_t stride, uint64_t chunk) {
  uint64_t start = chunk * stride;
  if (start >= total) return 0;
  return total - start < stride ? total - start : stride;
}

__shared__ int sStop, sStopSend;

/* One timeline record (thread 0 only; nothing when the timeline is off). */
static __device__ __forceinline__ void tmark(const acuPhase* h, int step, int what) {
  acuTimeline* tl = h->timeline;
  if (tl == nullptr || threadIdx.x != 0) return;
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  unsigned long long i = atomicAdd(&tl->next, 1ull);
  if (i >= tl->cap) return;
  acuTimeRec* r = (acuTimeRec*)(tl + 1) + i;
  *r = acuTimeRec{t, h->seq, (uint16_t)blockIdx.x, (uint8_t)step, (uint8_t)what};
}

/* Thread 0 waits for the receive slot (tail, then its size), thread 32 for
 * the send slot (head), side by side; the block learns the outcome. */
static __device__ bool stepWait(const acuPhase* h, acuConn* rc, uint64_t rstep, acuConn* sc, uint64_t sstep,
                                uint64_t bytes, uint32_t tag) {
  if (threadIdx.x == 0) {
    bool ok = true;
    if (rc) {
      ok = waitAtLeast(rc->tail, rstep + 1, h, rc->peer, true, rc, true, rstep);
      if (ok) {
        /* the size word: bytes | the sender's operation tag << 32 */
        uint64_t got = *(volatile uint64_t*)&rc->sizes[acuRem(rstep, rc->nslots)];
        if (got != (bytes | (uint64_t)tag << 32)) {
          if ((uint32_t)(got >> 32) == ACU_TAG_POISON) acuFail(h, ACU_ERR_POISONED, rc->peer, 0, 0);
          else if ((uint32_t)got != bytes) acuFail(h, ACU_ERR_SIZE, rc->peer, bytes, (uint32_t)got);
          else acuFail(h, ACU_ERR_MISMATCH, rc->peer, bytes, (uint32_t)got);
          ok = false;
        }
      }
    }
    sStop = !ok;
  } else if (threadIdx.x == 32) {
    sStopSend =
        sc && !waitAtLeast(sc->head, sstep + 1 > sc->nslots ? sstep + 1 - sc->nslots : 0, h, sc->peer, false, sc);
  }
  __syncthreads();
  return !(sStop | sStopSend);
}

/* Release at system scope: the block's stores (ordered before thread 0 by
 * the barrier) are visible to the peer before the tail that follows. */
static __device__ __forceinline__ void fenceRelease(const acuPhase* h) {
  if (h->flags & ACU_FLAG_FENCE_SC) __threadfence_system();
  else asm volatile("fence.acq_rel.sys;" ::: "memory");
}

/* Threads 0 and 32 publish what the step did (after the block's barrier). */
static __device__ void stepPost(const acuPhase* h, acuConn* rc, uint64_t rstep, acuConn* sc, uint64_t sstep,
                                uint64_t bytes, uint32_t tag) {
  __syncthreads();
  if (threadIdx.x == 0 && sc) {
    stVolatile(&sc->sizes[acuRem(sstep, sc->nslots)], bytes | (uint64_t)tag << 32);
    fenceRelease(h);
    stVolatile(sc->tail, sstep + 1);
  } else if (threadIdx.x == 32 && rc) {
    stVolatile(rc->head, rstep + 1); /* the block's reads are done: no fence needed */
  }
}

static __device__ char* bufPtr(const acuPhase* h, const acuLane* l, int buf, const acuStep* s, uint64_t pos,
                               char* scratch) {
  switch (buf) {
    case BUF_IN: return (char*)h->in + (s->inChunk * l->inStride + pos) * h->elemSize;
    case BUF_OUT: return (char*)h->out + (s->outChunk * l->outStride + pos) * h->elemSize;
    case BUF_SCRATCH: return scratch;
    default: return nullptr;
  }
}

/* Elements a step moves in the slice at `pos` (geometry of plan.h). */
static __device__ __forceinline__ uint64_t stepElems(const acuLane* l, const acuStep* s, uint64_t pos) {
  uint64_t len = blockLen(l->lenTotal, l->lenStride, s->chunk);
  if (len > l->end) len = l->end;
  uint64_t n = len > pos ? len - pos : 0;
  return n > l->slice ? l->slice : n;
}

__shared__ LLRun sRun;

/* ---- mismatch poison --------------------------------------------------------
 * A lane that stops on a mismatch (its own find, a poisoned counter, or
 * another lane's report) poisons every connection it uses, so that its peers
 * stop in the wait they are in (their counters' loads see it) and poison
 * theirs: same-host connections get ACU_POISON | finder in the tail (send)
 * or head (receive) the peer polls; a network send connection gets a 0-byte
 * slot tagged ACU_TAG_POISON when it has a free slot (the proxy forwards it,
 * the peer's proxy reports it to its host). Thread 0 only. */
static __device__ bool mismatchStop(const acuPhase* h, int* finder) {
  const uint32_t e = h->shared->err;
  *finder = e == ACU_ERR_POISONED ? h->shared->errPeer : h->rank;
  return e == ACU_ERR_SIZE || e == ACU_ERR_MISMATCH || e == ACU_ERR_POISONED;
}
static __device__ void poisonConn(const acuPhase* h, const acuConn* c, uint64_t step, bool send, int finder) {
  if (!c->net) {
    stVolatile(send ? c->tail : c->head, ACU_POISON | (uint32_t)finder);
    if (c->mailbox) stVolatile(c->mailbox, ACU_POISON | (uint32_t)finder);
    return;
  }
  if (!send || ldRelaxed(c->head) + c->nslots < step + 1) return;
  stVolatile(&c->sizes[acuRem(step, c->nslots)], (uint64_t)ACU_TAG_POISON << 32);
  fenceRelease(h);
  stVolatile(c->tail, step + 1);
}
static __device__ void poisonLane(const Blob& B, const acuLane* l, const acuConn* conns, const uint64_t* steps,
                                  const uint16_t* ci) {
  int finder;
  if (threadIdx.x != 0 || !mismatchStop(B.h, &finder)) return;
  uint64_t recv = 0, send = 0;
  for (int i = 0; i < l->nsteps; i++) {
    const acuStep* s = &B.steps[l->stepOff + i];
    if (s->recv >= 0) recv |= 1ull << s->recv;
    if (s->send >= 0) send |= 1ull << s->send;
  }
  for (int c = 0; c < ANYCCL_LANE_CONNS_MAX; c++)
    if (((recv | send) >> c & 1) && ci[c] != 0xffff) poisonConn(B.h, &conns[c], steps[c], send >> c & 1, finder);
  __threadfence_system();
}

/* The lines of LL slot `st` of a connection. */
static __device__ __forceinline__ char* llSlot(const acuConn* c, uint64_t st) {
  return c->llbuf + acuRem(st, c->nslots) * (uint64_t)c->llSlotBytes;
}

/* One slice of an LL lane: its steps in fused runs (a run ends where a
 * connection would need more slots than it has). Thread 0 lays out the run
 * and waits for the send slots to be free; the block moves the units; thread
 * 0 then frees the receive slots. steps[] holds the connections' counters. */
static __device__ bool llSlice(const Blob& B, const acuLane* l, acuConn* conns, uint64_t* steps, uint64_t pos,
                               char* scratch) {
  const acuPhase* h = B.h;
  const unsigned all = 0xffffffffu;
  const int lane = threadIdx.x & 31;
  uint64_t recvMask = 0; /* warp 0 */
  for (int i = 0; i < l->nsteps;) {
    /* Warp 0 lays out the run, lane j taking step i + j: its slot on each
     * connection is the counter plus the uses of that connection by earlier
     * steps of the run; the run ends before the first step that would need
     * more slots than the connection has. */
    if (threadIdx.x < 32) {
      const int idx = i + lane;
      const bool valid = idx < l->nsteps;
      const acuStep* s = &B.steps[l->stepOff + (valid ? idx : i)];
      const int rv = valid ? s->recv : -1, sd = valid ? s->send : -1;
      uint32_t ru = 0, su = 0;
      for (int j = 0; j < lane; j++) { /* the same j across the warp: broadcast reads */
        const acuStep* t = &B.steps[l->stepOff + i + j];
        ru += rv >= 0 && t->recv == rv;
        su += sd >= 0 && t->send == sd;
      }
      const bool full = !valid || (rv >= 0 && ru >= conns[rv].nslots) || (sd >= 0 && su >= conns[sd].nslots);
      const unsigned fullMask = __ballot_sync(all, full);
      const int k = fullMask ? __ffs(fullMask) - 1 : 32; /* >= 1: step i always fits */
      uint32_t bytes = 0;
      uint64_t rbit = 0, sbit = 0, rnext = 0, snext = 0;
      if (lane < k) {
        LLStep& d = sRun.s[lane];
        bytes = (uint32_t)(stepElems(l, s, pos) * h->elemSize);
        d.bytes = bytes;
        /* slot st of a connection carries flag st + 1 */
        rnext = rv >= 0 ? steps[rv] + ru + 1 : 0;
        snext = sd >= 0 ? steps[sd] + su + 1 : 0;
        d.in0 = rv >= 0 ? llSlot(&conns[rv], rnext - 1) : bufPtr(h, l, s->in0, s, pos, scratch);
        d.rc = rv >= 0 ? &conns[rv] : nullptr;
        d.inFlag = (uint32_t)rnext;
        d.out1 = sd >= 0 ? llSlot(&conns[sd], snext - 1) : nullptr;
        d.outFlag = (uint32_t)snext;
        rbit = rv >= 0 ? 1ull << rv : 0;
        sbit = sd >= 0 ? 1ull << sd : 0;
        d.in1 = s->in1 != BUF_NONE ? bufPtr(h, l, s->in1, s, pos, scratch) : nullptr;
        d.out0 = s->out != BUF_NONE ? bufPtr(h, l, s->out, s, pos, scratch) : nullptr;
        d.pm0 = h->reduce && h->op == OP_PREMULSUM && rv < 0 && s->in0 == BUF_IN;
        d.pm1 = h->reduce && h->op == OP_PREMULSUM && s->in1 == BUF_IN;
        d.pd = h->reduce && h->op == OP_SUMPOSTDIV && s->out == BUF_OUT;
        d.skip = bytes == 0 || (!d.out0 && !d.out1) ||
                 (d.out0 == d.in0 && !d.inFlag && !d.in1 && !d.out1 && !d.pm0 && !d.pd);
      }
      const uint32_t maxBytes = __reduce_max_sync(all, bytes);
      recvMask = (uint64_t)__reduce_or_sync(all, (uint32_t)rbit) | (uint64_t)__reduce_or_sync(all, (uint32_t)(rbit >> 32)) << 32;
      const uint64_t sendMask =
          (uint64_t)__reduce_or_sync(all, (uint32_t)sbit) | (uint64_t)__reduce_or_sync(all, (uint32_t)(sbit >> 32)) << 32;
      __syncwarp(); /* every lane has read the counters */
      if (rnext) atomicMax((unsigned long long*)&steps[rv], (unsigned long long)rnext);
      if (snext) atomicMax((unsigned long long*)&steps[sd], (unsigned long long)snext);
      if (lane == 0) {
        sRun.nsteps = k;
        sRun.maxBytes = maxBytes;
        sRun.sig = h->sig;
        sRun.h = h;
        sRun.scalar = phaseScalar(h);
        sRun.divisor = h->divisor;
      }
      __syncwarp();
      /* The last slot each send connection uses must be free. */
      for (int c = lane; c < ANYCCL_LANE_CONNS_MAX; c += 32) {
        if (!(sendMask >> c & 1)) continue;
        const acuConn* sc = &conns[c];
        uint64_t need = steps[c] > sc->nslots ? steps[c] - sc->nslots : 0;
        if (!waitAtLeast(sc->head, need, h, sc->peer, false, sc)) sStop = 1;
      }
    }
    __syncthreads();
    if (sStop) return false;
    const int k = sRun.nsteps;
    byType<LLK>(h->type, h->reduce ? h->op : OP_SUM, sRun);
    __syncthreads();
    if (sLLStop) return false;
    /* Free the receive slots (warp 0 again, before it lays out the next run). */
    if (threadIdx.x < 32)
      for (int c = lane; c < ANYCCL_LANE_CONNS_MAX; c += 32)
        if (recvMask >> c & 1) stVolatile(conns[c].head, steps[c]);
    i += k;
  }
  return true;
}

static __device__ void stepLane(const Blob& B, const acuLane* l) {
  const acuPhase* h = B.h;
  __shared__ uint64_t steps[ANYCCL_LANE_CONNS_MAX];
  const uint16_t* ci = B.conns + l->connOff;
  int nconn = 0;
  for (int i = 0; i < l->nsteps; i++) {
    const acuStep* s = &B.steps[l->stepOff + i];
    if (s->recv + 1 > nconn) nconn = s->recv + 1;
    if (s->send + 1 > nconn) nconn = s->send + 1;
  }
  /* The lane's connections, fetched once in parallel (the steps then read
   * them from shared memory, not through dependent global loads). */
  __shared__ acuConn conns[ANYCCL_LANE_CONNS_MAX];
  for (int i = threadIdx.x; i < nconn; i += blockDim.x) {
    if (ci[i] != 0xffff) conns[i] = h->conns[ci[i]];
    steps[i] = ci[i] == 0xffff ? 0 : conns[i].step;
  }
  if (threadIdx.x == 0) {
    sStop = sLLStop = 0; /* set once: a stop ends the kernel */
    publishOp(h);
  }
  __syncthreads();
  char* scratch = (char*)l->scratch;
  for (uint64_t pos = l->begin; pos < l->end; pos += l->slice) {
    if (l->ll) {
      if (!llSlice(B, l, conns, steps, pos, scratch)) {
        poisonLane(B, l, conns, steps, ci);
        return;
      }
      tmark(h, 254, ACU_T_POSTED); /* 254: a whole LL slice */
      continue;
    }
    for (int i = 0; i < l->nsteps; i++) {
      const acuStep* s = &B.steps[l->stepOff + i];
      acuConn* rc = s->recv >= 0 ? &conns[s->recv] : nullptr;
      acuConn* sc = s->send >= 0 ? &conns[s->send] : nullptr;
      uint64_t n = stepElems(l, s, pos);
      uint64_t bytes = n * h->elemSize;
      uint64_t rstep = rc ? steps[s->recv] : 0, sstep = sc ? steps[s->send] : 0;
      if (!stepWait(h, rc, rstep, sc, sstep, bytes, h->sig)) {
        poisonLane(B, l, conns, steps, ci);
        return;
      }
      tmark(h, i, ACU_T_WAITED);
      const char* in0 = rc ? rc->buf + acuRem(rstep, rc->nslots) * (uint64_t)rc->slotBytes
                           : bufPtr(h, l, s->in0, s, pos, scratch);
      const char* in1 = s->in1 != BUF_NONE ? bufPtr(h, l, s->in1, s, pos, scratch) : nullptr;
      char* out0 = s->out != BUF_NONE ? bufPtr(h, l, s->out, s, pos, scratch) : nullptr;
      char* out1 = sc ? sc->buf + acuRem(sstep, sc->nslots) * (uint64_t)sc->slotBytes : nullptr;
      bool pm0 = false, pm1 = false, pd = false;
      if (h->reduce && h->op == OP_PREMULSUM) {
        pm0 = !rc && s->in0 == BUF_IN;
        pm1 = s->in1 == BUF_IN;
      }
      if (h->reduce && h->op == OP_SUMPOSTDIV && s->out == BUF_OUT) pd = true;
      if (out0 == nullptr) {
        out0 = out1;
        out1 = nullptr;
        pd = false;
      }
      if (n > 0 && out0 != nullptr && !(out0 == in0 && in1 == nullptr && out1 == nullptr && !pm0 && !pd)) {
        if (in1 == nullptr && !pm0 && !pd) {
          copyBytes(bytes, in0, rc != nullptr, out0, out1);
        } else {
          RedArgs a;
          a.n = n;
          a.in0 = in0;
          a.in1 = in1;
          a.out0 = out0;
          a.out1 = out1;
          a.slot0 = rc != nullptr;
          a.pm0 = pm0;
          a.pm1 = pm1;
          a.pd = pd;
          a.scalar = phaseScalar(h);
          a.divisor = h->divisor;
          byType<RedK>(h->type, h->op, a);
        }
      }
      /* Every thread read steps[] for this step before stepWait's barrier and
       * reads it for the next one after stepPost's: thread 0 updates between. */
      if (threadIdx.x == 0) {
        if (rc) steps[s->recv] = rstep + 1;
        if (sc) steps[s->send] = sstep + 1;
      }
      stepPost(h, rc, rstep, sc, sstep, bytes, h->sig);
      tmark(h, i, ACU_T_POSTED);
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < nconn; i += blockDim.x)
    if (ci[i] != 0xffff) h->conns[ci[i]].step = steps[i];
}

static __device__ void p2pLane(const Blob& B, const acuLane* l) {
  const acuPhase* h = B.h;
  __shared__ acuConn conn;
  if (threadIdx.x == 0) {
    conn = h->conns[l->conn];
    sStop = sLLStop = 0; /* set once: a stop ends the kernel */
    publishOp(h);
  }
  __syncthreads();
  acuConn* c = &conn;
  uint64_t step = c->step;
  bool send = l->kind == ACU_LANE_SEND;
  const uint64_t chunk = l->ll ? c->llSlotBytes / 2 : (h->chunk && h->chunk < c->slotBytes ? h->chunk : c->slotBytes);
  int finder;
  for (int k = 0; k < l->nops; k++) {
    const acuOp* op = &B.ops[l->opOff + k];
    const uint64_t opBytes = op->bytes & ACU_OP_BYTES_MASK;
    const uint32_t tag = ACU_TAG_P2P | (uint32_t)(op->bytes >> 40); /* the whole send's size, hashed */
    for (uint64_t sub = 0; sub < opBytes; sub += chunk) {
      uint64_t n = opBytes - sub < chunk ? opBytes - sub : chunk;
      char* slot = l->ll ? llSlot(c, step) : c->buf + acuRem(step, c->nslots) * (uint64_t)c->slotBytes;
      if (l->ll) {
        if (threadIdx.x == 0) {
          LLStep& d = sRun.s[0];
          d.in0 = send ? (const char*)op->ptr + sub : slot;
          d.in1 = nullptr;
          d.rc = send ? nullptr : c;
          d.out0 = send ? nullptr : (char*)op->ptr + sub;
          d.out1 = send ? slot : nullptr;
          d.inFlag = send ? 0 : (uint32_t)(step + 1);
          d.outFlag = (uint32_t)(step + 1);
          d.bytes = (uint32_t)n;
          d.pm0 = d.pm1 = d.pd = d.skip = 0;
          sRun.nsteps = 1;
          sRun.maxBytes = (uint32_t)n;
          sRun.sig = tag;
          sRun.h = h;
          sRun.scalar = sRun.divisor = 0;
          sStop = send && !waitAtLeast(c->head, step + 1 > c->nslots ? step + 1 - c->nslots : 0, h, c->peer);
        }
        __syncthreads();
        if (sStop) {
          if (threadIdx.x == 0 && mismatchStop(h, &finder)) poisonConn(h, c, step, send, finder);
          return;
        }
        byType<LLK>(h->type, OP_SUM, sRun); /* bytes: no in1 and no flags, so any type copies the same */
        __syncthreads();
        if (sLLStop) {
          if (threadIdx.x == 0 && mismatchStop(h, &finder)) poisonConn(h, c, step, send, finder);
          return;
        }
        if (!send && threadIdx.x == 0) stVolatile(c->head, step + 1);
        step++;
        continue;
      }
      if (!(send ? stepWait(h, nullptr, 0, c, step, n, tag) : stepWait(h, c, step, nullptr, 0, n, tag))) {
        if (threadIdx.x == 0 && mismatchStop(h, &finder)) poisonConn(h, c, step, send, finder);
        return;
      }
      if (send) {
        copyBytes(n, (const char*)op->ptr + sub, false, slot, nullptr);
        stepPost(h, nullptr, 0, c, step, n, tag);
      } else {
        copyBytes(n, slot, true, (char*)op->ptr + sub, nullptr);
        stepPost(h, c, step, nullptr, 0, n, tag);
      }
      step++;
    }
  }
  if (threadIdx.x == 0) h->conns[l->conn].step = step;
}

static __device__ void copyLane(const Blob& B, const acuLane* l) {
  for (int k = 0; k + 1 < l->nops; k += 2) {
    const acuOp* s = &B.ops[l->opOff + k];
    const acuOp* d = &B.ops[l->opOff + k + 1];
    if (s->ptr != d->ptr) copyBytes(s->bytes, (const char*)s->ptr, false, (char*)d->ptr, nullptr);
  }
}

static __device__ __noinline__ void runBlob(const unsigned char* b) {
  Blob B = parse(b);
  if (blockIdx.x >= B.h->nlanes) return;
  /* The lane, whole, from its wire form and its shape. */
  __shared__ acuLane lane;
  if (threadIdx.x == 0) {
    const acuLaneWire* w = &B.lanes[blockIdx.x];
    const acuShape* sh = &B.shapes[w->shape];
    lane.kind = w->kind;
    lane.nsteps = w->nsteps;
    lane.nops = w->nops;
    lane.stepOff = w->stepOff;
    lane.connOff = w->connOff;
    lane.opOff = w->opOff;
    lane.conn = w->conn;
    lane.ll = w->ll;
    lane.begin = w->begin;
    lane.end = w->end;
    lane.scratch = w->scratch;
    lane.lenTotal = sh->lenTotal;
    lane.lenStride = sh->lenStride;
    lane.inStride = sh->inStride;
    lane.outStride = sh->outStride;
    lane.slice = sh->slice;
  }
  __syncthreads();
  const acuLane* l = &lane;
  tmark(B.h, 255, ACU_T_START);
  switch (l->kind) {
    case ACU_LANE_STEPS: stepLane(B, l); break;
    case ACU_LANE_SEND:
    case ACU_LANE_RECV: p2pLane(B, l); break;
    default: copyLane(B, l); break;
  }
  tmark(B.h, 255, ACU_T_END);
}

/* (ACU_THREADS, 1): one block per SM is all a lane needs, so ptxas may give
 * each thread up to 128 registers; without the 1 it kept the kernel at 40
 * and the copy and reduce loops spilled their in-flight vectors. G: the
 * group's types, so that each file's kernels have their own names. */
template <unsigned G, int N>
__global__ void __launch_bounds__(ACU_THREADS, 1) acuKernel(const __grid_constant__ BlobN<N> blob) {
  runBlob(blob.b);
}

#ifdef ACU_LAUNCH
/* buf: the launching thread's ACU_BLOB_LARGE bytes (exec.cu), 16-aligned,
 * where the parameters are put together (up to 32 KB: not on the caller's
 * stack, and one buffer for every class and group). */
template <int N>
static int launchClass(const struct acuPhase* blob, cudaStream_t s, void* buf) {
  static_assert(N <= ACU_BLOB_LARGE, "a class fits the launch buffer");
  BlobN<N>* b = new (buf) BlobN<N>;
  memcpy(b->b, blob, blob->bytes);
  acuKernel<ACU_TYPES, N><<<dim3(blob->nlanes), dim3(ACU_THREADS), 0, s>>>(*b);
  return cudaGetLastError();
}

extern "C" int ACU_LAUNCH(const struct acuPhase* blob, void* stream, void* buf) {
  cudaStream_t s = (cudaStream_t)stream;
  uint32_t n = blob->bytes;
  if (n <= ACU_BLOB_TINY) return launchClass<ACU_BLOB_TINY>(blob, s, buf);
  if (n <= 2048) return launchClass<2048>(blob, s, buf);
  if (n <= ACU_BLOB_SMALL) return launchClass<ACU_BLOB_SMALL>(blob, s, buf);
  if (n <= 8192) return launchClass<8192>(blob, s, buf);
  if (n <= 16384) return launchClass<16384>(blob, s, buf);
  return launchClass<ACU_BLOB_LARGE>(blob, s, buf);
}
#endif
