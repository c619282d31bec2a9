/* The cuda executor: one kernel launch per phase, one block per lane; each
 * block interprets its lane's step program (plan.h) exactly as the cpu
 * executor does, moving 16-byte vectors through FIFO slots in peers' device
 * memory (reached over NVLink/PCIe by direct pointers or CUDA IPC).
 *
 * Synchronisation per slot (as NCCL's simple protocol): the sender waits for
 * head (local memory, written by the receiver), writes the slot and its size
 * into the receiver's memory, fences at system scope and publishes tail; the
 * receiver polls tail (local), reads the slot bypassing L1 and publishes
 * head in the sender's memory. Thread 0 of the block waits; the block meets
 * at barriers around the data movement.
 *
 * Kernel instantiations are kept few: two entry points (small and large
 * parameter blobs), and one element loop per (type, op) for reductions;
 * everything else dispatches at run time. */
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <stdint.h>
#include "cuda_exec.h"

struct BlobTiny {
  alignas(16) unsigned char b[ACU_BLOB_TINY];
};
struct BlobSmall {
  alignas(16) unsigned char b[ACU_BLOB_SMALL];
};
struct BlobLarge {
  alignas(16) unsigned char b[ACU_BLOB_LARGE];
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
FLT_TY(10, uint8_t, float, __half2float(__half(__nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)r, __NV_E4M3))),
       (uint8_t)__nv_cvt_float_to_fp8(c, __NV_SATFINITE, __NV_E4M3))
FLT_TY(11, uint8_t, float, __half2float(__half(__nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)r, __NV_E5M2))),
       (uint8_t)__nv_cvt_float_to_fp8(c, __NV_SATFINITE, __NV_E5M2))
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

/* The whole block reduces args.n elements. */
/* One element: v = in0 (premultiplied) [OP in1 (premultiplied)]; *o1 = v,
 * *o0 = v (post-divided). PreMulSum and SumPostDiv run as OP_SUM with the
 * flags of RedArgs. */
template <int TY, int OP>
static __device__ __forceinline__ void elemOp(const RedArgs& a, typename Ty<TY>::C s, typename Ty<TY>::R r0,
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
static __device__ __forceinline__ typename Ty<TY>::C scalarOf(const RedArgs& a) {
  typename Ty<TY>::R sbits;
  memcpy(&sbits, &a.scalar, sizeof(sbits));
  return Ty<TY>::load(sbits);
}

template <int TY, int OP>
static __device__ __noinline__ void redLoop(const RedArgs& a) {
  typedef typename Ty<TY>::R R;
  typedef typename Ty<TY>::C C;
  constexpr int E = 16 / sizeof(R);
  constexpr int U = 4; /* 16-byte loads in flight per thread and input */
  const C s = scalarOf<TY>(a);
  const R* in0 = (const R*)a.in0;
  const R* in1 = (const R*)a.in1;
  R* out0 = (R*)a.out0;
  R* out1 = (R*)a.out1;
  const bool has1 = in1 != nullptr;
  uint64_t n = a.n, done = 0;
  uintptr_t mis = (uintptr_t)in0 | (uintptr_t)in1 | (uintptr_t)out0 | (uintptr_t)out1;
  if ((mis & 15) == 0) {
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
          x[u] = ldIn(v0 + j, a.slot0);
          if (has1) y[u] = v1[j];
        }
      }
#pragma unroll
      for (int u = 0; u < U; u++) {
        uint64_t j = i + (uint64_t)u * blockDim.x;
        if (j >= nv) break;
        R r0[E], r1[E], o0[E], o1[E];
        memcpy(r0, &x[u], 16);
        if (has1) memcpy(r1, &y[u], 16);
#pragma unroll
        for (int e = 0; e < E; e++) elemOp<TY, OP>(a, s, r0[e], has1 ? r1[e] : r0[e], has1, o0 + e, o1 + e);
        uint4 z0, z1;
        memcpy(&z0, o0, 16);
        memcpy(&z1, o1, 16);
        if (w0) w0[j] = z0;
        if (w1) w1[j] = z1;
      }
    }
    done = nv * E;
  }
  for (uint64_t i = done + threadIdx.x; i < n; i += blockDim.x) {
    R r0 = ldElem(in0 + i, a.slot0);
    R r1 = has1 ? in1[i] : r0;
    R t0, t1;
    elemOp<TY, OP>(a, s, r0, r1, has1, out0 ? &t0 : nullptr, out1 ? &t1 : nullptr);
    if (out0) out0[i] = t0;
    if (out1) out1[i] = t1;
  }
}

/* ---- LL (low-latency) protocol ---------------------------------------------
 * A slot holds 16-byte lines {data0, flag, data1, flag}: 8 payload bytes and
 * the flag twice, stored with one 16-byte volatile store. The flag is the
 * connection step + 1, so a line left from an earlier use of the slot never
 * matches; the receiver polls its lines, with no fence and no tail. */
__shared__ int sLLStop;

static __device__ __forceinline__ uint2 llRead(const uint4* p, uint32_t flag, volatile uint32_t* abortWord) {
  uint4 v;
  for (uint32_t spins = 0;; spins++) {
    asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p)
                 : "memory");
    if (v.y == flag && v.w == flag) break;
    if ((spins & 4095) == 4095 && (*abortWord || sLLStop)) {
      sLLStop = 1;
      break;
    }
  }
  return make_uint2(v.x, v.z);
}
static __device__ __forceinline__ void llWrite(uint4* p, uint2 d, uint32_t flag) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(d.x), "r"(flag), "r"(d.y), "r"(flag)
               : "memory");
}
/* 8 bytes (or the `len` < 8 left) from memory, any alignment. */
static __device__ __forceinline__ uint2 ld8(const char* p, int len) {
  uint2 v = make_uint2(0, 0);
  if (len == 8 && ((uintptr_t)p & 7) == 0) return *(const uint2*)p;
  memcpy(&v, p, len);
  return v;
}
static __device__ __forceinline__ void st8(char* p, uint2 v, int len) {
  if (len == 8 && ((uintptr_t)p & 7) == 0) *(uint2*)p = v;
  else memcpy(p, &v, len);
}

struct LLArgs {
  RedArgs r;
  bool in0LL, out1LL;     /* in0 is an LL slot / out1 is an LL slot */
  uint32_t inFlag, outFlag;
  volatile uint32_t* abortWord;
};

/* The block moves a.r.n elements through 8-byte units; in0 and out1 may be
 * LL slots (line u carries unit u). */
template <int TY, int OP>
static __device__ __noinline__ void llLoop(const LLArgs& a) {
  typedef typename Ty<TY>::R R;
  typedef typename Ty<TY>::C C;
  constexpr int E = 8 / sizeof(R);
  const C s = scalarOf<TY>(a.r);
  const uint64_t bytes = a.r.n * sizeof(R);
  const uint64_t units = (bytes + 7) / 8;
  const bool has1 = a.r.in1 != nullptr;
  for (uint64_t u = threadIdx.x; u < units; u += blockDim.x) {
    int len = bytes - u * 8 < 8 ? (int)(bytes - u * 8) : 8;
    uint2 x = a.in0LL ? llRead((const uint4*)a.r.in0 + u, a.inFlag, a.abortWord)
                      : ld8((const char*)a.r.in0 + u * 8, len);
    uint2 o0 = x, o1 = x;
    if (has1 || a.r.pm0 || a.r.pd) {
      uint2 y = has1 ? ld8((const char*)a.r.in1 + u * 8, len) : x;
      R r0[E], r1[E], w0[E], w1[E];
      memcpy(r0, &x, 8);
      memcpy(r1, &y, 8);
#pragma unroll
      for (int e = 0; e < E; e++) elemOp<TY, OP>(a.r, s, r0[e], r1[e], has1, w0 + e, w1 + e);
      memcpy(&o0, w0, 8);
      memcpy(&o1, w1, 8);
    }
    if (a.r.out0) st8((char*)a.r.out0 + u * 8, o0, len);
    if (a.r.out1) {
      if (a.out1LL) llWrite((uint4*)a.r.out1 + u, o1, a.outFlag);
      else st8((char*)a.r.out1 + u * 8, o1, len);
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
  static __device__ void run(const LLArgs& a) { llLoop<TY, OP>(a); }
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
template <class K, class A>
static __device__ void byType(int type, int op, const A& a) {
  switch (type) {
    case 0: byOp<K, 0>(op, a); break;
    case 1: byOp<K, 1>(op, a); break;
    case 2: byOp<K, 2>(op, a); break;
    case 3: byOp<K, 3>(op, a); break;
    case 4: byOp<K, 4>(op, a); break;
    case 5: byOp<K, 5>(op, a); break;
    case 6: byOp<K, 6>(op, a); break;
    case 7: byOp<K, 7>(op, a); break;
    case 8: byOp<K, 8>(op, a); break;
    case 9: byOp<K, 9>(op, a); break;
    case 10: byOp<K, 10>(op, a); break;
    default: byOp<K, 11>(op, a); break;
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
static __device__ __forceinline__ uint64_t ldAcquire(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
static __device__ __forceinline__ void stVolatile(uint64_t* p, uint64_t v) {
  asm volatile("st.volatile.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
static __device__ __forceinline__ uint64_t globalTimer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

/* Thread 0: wait until *p >= v (or *p > v - slack for heads). Returns false
 * on abort or timeout (reported in shared). */
static __device__ bool waitAtLeast(const uint64_t* p, uint64_t v, const acuPhase* h, int peer) {
  if (ldAcquire(p) >= v) return true;
  uint64_t start = 0;
  for (uint32_t spins = 1;; spins++) {
    if (ldAcquire(p) >= v) return true;
    if ((spins & 1023) == 0) {
      if (h->shared->abort) return false;
      if (h->timeoutNs) {
        uint64_t t = globalTimer();
        if (start == 0) start = t;
        else if (t - start > h->timeoutNs) {
          h->shared->errPeer = peer;
          h->shared->err = ACU_ERR_TIMEOUT;
          __threadfence_system();
          return false;
        }
      }
    }
  }
}

/* ---- lanes -------------------------------------------------------------------- */
struct Blob {
  const acuPhase* h;
  const acuLane* lanes;
  const acuStep* steps;
  const uint16_t* conns;
  const acuOp* ops;
};

static __device__ __forceinline__ size_t pad8(size_t x) { return (x + 7) & ~(size_t)7; }

static __device__ Blob parse(const unsigned char* b) {
  Blob o;
  o.h = (const acuPhase*)b;
  size_t off = sizeof(acuPhase);
  o.lanes = (const acuLane*)(b + off);
  off += sizeof(acuLane) * o.h->nlanes;
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

__shared__ int sStop;

/* Thread 0 waits for the step's connections; the block learns the outcome. */
static __device__ bool stepWait(const acuPhase* h, acuConn* rc, uint64_t rstep, acuConn* sc, uint64_t sstep,
                                uint64_t bytes) {
  if (threadIdx.x == 0) {
    bool ok = true;
    if (rc) {
      ok = waitAtLeast(rc->tail, rstep + 1, h, rc->peer);
      if (ok) {
        uint64_t got = *(volatile uint64_t*)&rc->sizes[rstep % rc->nslots];
        if (got != bytes) {
          h->shared->expected = bytes;
          h->shared->got = got;
          h->shared->errPeer = rc->peer;
          h->shared->err = ACU_ERR_SIZE;
          __threadfence_system();
          ok = false;
        }
      }
    }
    if (ok && sc) ok = waitAtLeast(sc->head, sstep + 1 > sc->nslots ? sstep + 1 - sc->nslots : 0, h, sc->peer);
    sStop = !ok;
  }
  __syncthreads();
  return !sStop;
}

/* Thread 0 publishes what the step did (after the block's barrier). */
static __device__ void stepPost(acuConn* rc, uint64_t rstep, acuConn* sc, uint64_t sstep, uint64_t bytes) {
  __syncthreads();
  if (threadIdx.x == 0) {
    if (sc) {
      stVolatile(&sc->sizes[sstep % sc->nslots], bytes);
      __threadfence_system();
      stVolatile(sc->tail, sstep + 1);
    }
    if (rc) stVolatile(rc->head, rstep + 1);
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

/* One step in the LL protocol: wait for the send slot to be free (head), move
 * the data (receivers poll their lines), free the receive slot. */
static __device__ bool llStep(const acuPhase* h, const acuLane* l, const acuStep* s, acuConn* rc, uint64_t rstep,
                              acuConn* sc, uint64_t sstep, uint64_t n, uint64_t pos, char* scratch) {
  if (threadIdx.x == 0) sLLStop = 0;
  if (!stepWait(h, nullptr, 0, sc, sstep, 0)) return false;
  LLArgs a;
  a.r.n = n;
  a.r.in0 = rc ? rc->buf + (rstep % rc->nslots) * (uint64_t)rc->slotBytes : bufPtr(h, l, s->in0, s, pos, scratch);
  a.r.in1 = s->in1 != BUF_NONE ? bufPtr(h, l, s->in1, s, pos, scratch) : nullptr;
  a.r.out0 = s->out != BUF_NONE ? bufPtr(h, l, s->out, s, pos, scratch) : nullptr;
  a.r.out1 = sc ? sc->buf + (sstep % sc->nslots) * (uint64_t)sc->slotBytes : nullptr;
  a.r.slot0 = false;
  a.r.pm0 = h->reduce && h->op == OP_PREMULSUM && !rc && s->in0 == BUF_IN;
  a.r.pm1 = h->reduce && h->op == OP_PREMULSUM && s->in1 == BUF_IN;
  a.r.pd = h->reduce && h->op == OP_SUMPOSTDIV && s->out == BUF_OUT;
  a.r.scalar = h->scalar;
  if (h->scalarPtr) memcpy(&a.r.scalar, (const void*)h->scalarPtr, h->elemSize);
  a.r.divisor = h->divisor;
  a.in0LL = rc != nullptr;
  a.out1LL = sc != nullptr;
  a.inFlag = (uint32_t)(rstep + 1);
  a.outFlag = (uint32_t)(sstep + 1);
  a.abortWord = &h->shared->abort;
  bool noop = a.r.out0 == a.r.in0 && !a.r.in1 && !a.r.out1 && !a.r.pm0 && !a.r.pd;
  if (n > 0 && (a.r.out0 || a.r.out1) && !noop) byType<LLK>(h->type, h->reduce ? h->op : OP_SUM, a);
  __syncthreads();
  if (sLLStop) return false;
  if (threadIdx.x == 0 && rc) stVolatile(rc->head, rstep + 1);
  return true;
}

static __device__ void stepLane(const Blob& B, const acuLane* l) {
  const acuPhase* h = B.h;
  __shared__ uint64_t steps[64];
  const uint16_t* ci = B.conns + l->connOff;
  int nconn = 0;
  for (int i = 0; i < l->nsteps; i++) {
    const acuStep* s = &B.steps[l->stepOff + i];
    if (s->recv + 1 > nconn) nconn = s->recv + 1;
    if (s->send + 1 > nconn) nconn = s->send + 1;
  }
  for (int i = threadIdx.x; i < nconn; i += blockDim.x)
    steps[i] = ci[i] == 0xffff ? 0 : h->conns[ci[i]].step;
  __syncthreads();
  char* scratch = (char*)l->scratch;
  for (uint64_t pos = l->begin; pos < l->end; pos += l->slice) {
    for (int i = 0; i < l->nsteps; i++) {
      const acuStep* s = &B.steps[l->stepOff + i];
      acuConn* rc = s->recv >= 0 ? &h->conns[ci[s->recv]] : nullptr;
      acuConn* sc = s->send >= 0 ? &h->conns[ci[s->send]] : nullptr;
      uint64_t len = blockLen(l->lenTotal, l->lenStride, s->chunk);
      if (len > l->end) len = l->end;
      uint64_t n = len > pos ? len - pos : 0;
      if (n > l->slice) n = l->slice;
      uint64_t bytes = n * h->elemSize;
      uint64_t rstep = rc ? steps[s->recv] : 0, sstep = sc ? steps[s->send] : 0;
      if (l->ll) {
        if (!llStep(h, l, s, rc, rstep, sc, sstep, n, pos, scratch)) return;
        if (threadIdx.x == 0) {
          if (rc) steps[s->recv] = rstep + 1;
          if (sc) steps[s->send] = sstep + 1;
        }
        __syncthreads();
        continue;
      }
      if (!stepWait(h, rc, rstep, sc, sstep, bytes)) return;
      const char* in0 = rc ? rc->buf + (rstep % rc->nslots) * (uint64_t)rc->slotBytes
                           : bufPtr(h, l, s->in0, s, pos, scratch);
      const char* in1 = s->in1 != BUF_NONE ? bufPtr(h, l, s->in1, s, pos, scratch) : nullptr;
      char* out0 = s->out != BUF_NONE ? bufPtr(h, l, s->out, s, pos, scratch) : nullptr;
      char* out1 = sc ? sc->buf + (sstep % sc->nslots) * (uint64_t)sc->slotBytes : nullptr;
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
          a.scalar = h->scalarPtr ? 0 : h->scalar;
          if (h->scalarPtr) memcpy(&a.scalar, (const void*)h->scalarPtr, h->elemSize);
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
      stepPost(rc, rstep, sc, sstep, bytes);
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < nconn; i += blockDim.x)
    if (ci[i] != 0xffff) h->conns[ci[i]].step = steps[i];
}

static __device__ void p2pLane(const Blob& B, const acuLane* l) {
  const acuPhase* h = B.h;
  acuConn* c = &h->conns[l->conn];
  uint64_t step = c->step;
  bool send = l->kind == ACU_LANE_SEND;
  const uint64_t chunk = l->ll ? c->slotBytes / 2 : (h->chunk && h->chunk < c->slotBytes ? h->chunk : c->slotBytes);
  for (int k = 0; k < l->nops; k++) {
    const acuOp* op = &B.ops[l->opOff + k];
    for (uint64_t sub = 0; sub < op->bytes; sub += chunk) {
      uint64_t n = op->bytes - sub < chunk ? op->bytes - sub : chunk;
      char* slot = c->buf + (step % c->nslots) * (uint64_t)c->slotBytes;
      if (l->ll) {
        if (threadIdx.x == 0) sLLStop = 0;
        if (send && !stepWait(h, nullptr, 0, c, step, 0)) return;
        LLArgs a;
        memset(&a, 0, sizeof(a));
        a.r.n = n;
        a.r.in0 = send ? (const char*)op->ptr + sub : slot;
        a.r.out0 = send ? nullptr : (char*)op->ptr + sub;
        a.r.out1 = send ? slot : nullptr;
        a.in0LL = !send;
        a.out1LL = send;
        a.inFlag = a.outFlag = (uint32_t)(step + 1);
        a.abortWord = &h->shared->abort;
        if (!send) __syncthreads(); /* sLLStop reset seen by all */
        byType<LLK>(1, OP_SUM, a); /* bytes */
        __syncthreads();
        if (sLLStop) return;
        if (!send && threadIdx.x == 0) stVolatile(c->head, step + 1);
        step++;
        continue;
      }
      if (send) {
        if (!stepWait(h, nullptr, 0, c, step, n)) return;
        copyBytes(n, (const char*)op->ptr + sub, false, slot, nullptr);
        stepPost(nullptr, 0, c, step, n);
      } else {
        if (!stepWait(h, c, step, nullptr, 0, n)) return;
        copyBytes(n, slot, true, (char*)op->ptr + sub, nullptr);
        stepPost(c, step, nullptr, 0, n);
      }
      step++;
    }
  }
  if (threadIdx.x == 0) c->step = step;
}

static __device__ void copyLane(const Blob& B, const acuLane* l) {
  for (int k = 0; k + 1 < l->nops; k += 2) {
    const acuOp* s = &B.ops[l->opOff + k];
    const acuOp* d = &B.ops[l->opOff + k + 1];
    if (s->ptr != d->ptr) copyBytes(s->bytes, (const char*)s->ptr, false, (char*)d->ptr, nullptr);
  }
}

static __device__ void runBlob(const unsigned char* b) {
  Blob B = parse(b);
  if (blockIdx.x >= B.h->nlanes) return;
  const acuLane* l = &B.lanes[blockIdx.x];
  switch (l->kind) {
    case ACU_LANE_STEPS: stepLane(B, l); break;
    case ACU_LANE_SEND:
    case ACU_LANE_RECV: p2pLane(B, l); break;
    default: copyLane(B, l); break;
  }
}

__global__ void __launch_bounds__(ACU_THREADS) acuKernelTiny(const __grid_constant__ BlobTiny blob) {
  runBlob(blob.b);
}
__global__ void __launch_bounds__(ACU_THREADS) acuKernelSmall(const __grid_constant__ BlobSmall blob) {
  runBlob(blob.b);
}
__global__ void __launch_bounds__(ACU_THREADS) acuKernelLarge(const __grid_constant__ BlobLarge blob) {
  runBlob(blob.b);
}

extern "C" int acuLaunchPhase(const struct acuPhase* blob, void* stream) {
  cudaStream_t s = (cudaStream_t)stream;
  dim3 grid(blob->nlanes), block(ACU_THREADS);
  if (blob->bytes <= ACU_BLOB_TINY) {
    BlobTiny b;
    memcpy(b.b, blob, blob->bytes);
    acuKernelTiny<<<grid, block, 0, s>>>(b);
  } else if (blob->bytes <= ACU_BLOB_SMALL) {
    BlobSmall b;
    memcpy(b.b, blob, blob->bytes);
    acuKernelSmall<<<grid, block, 0, s>>>(b);
  } else {
    static thread_local BlobLarge b; /* 32 KB: not on the caller's stack, not per launch */
    memcpy(b.b, blob, blob->bytes);
    acuKernelLarge<<<grid, block, 0, s>>>(b);
  }
  return cudaGetLastError();
}
