/* Collectives over symmetric windows (NCCL_WIN_COLL_SYMMETRIC, nccl-tests
 * -R 2): when every rank's buffers sit at the same offset of a window that
 * every GPU of the host has mapped, all-reduce, all-gather and
 * reduce-scatter need no FIFO: each block reads its peers' inputs and
 * writes results straight into their outputs over NVLink, between two
 * barriers.
 *
 *   one-shot all-reduce  each rank reduces the whole vector from every
 *                        rank's input into its own output (small sizes:
 *                        one round trip of loads);
 *   two-shot all-reduce  rank r reduces its 1/n of the vector and stores the
 *                        result into every rank's output;
 *   reduce-scatter       rank r reduces its block from every rank's input;
 *   all-gather           rank r stores its input into every rank's output.
 *
 * Block b of every rank covers the same part of the data, so it meets only
 * the blocks b of its peers: the start barrier (a peer's kernel has started:
 * its input is ready and its output free), the end barrier (every store into
 * my output has landed and nobody reads my input any more). A barrier is a
 * 64-bit count per (block, source) in each rank's segment (cuda_exec.h); the
 * counts grow by one a barrier, from a per-block epoch the kernel keeps in
 * device memory, so CUDA graph replays stay in step. Waits are bounded and
 * compare the peers' op words like every other wait (wait.cuh).
 *
 * Sums of 16-bit floats accumulate in float; every rank adds the inputs in
 * rank order, so all ranks hold bit-identical results. Instantiations: three
 * element types for the reductions, one byte copy for all-gather. */
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <stdint.h>
#include "cuda_exec.h"
#include "wait.cuh"

namespace {

enum { T_F16 = 6, T_F32 = 7, T_BF16 = 9 }; /* ncclDataType_t values */

template <int TY> struct V; /* a 16-byte vector as up to 8 floats */
template <> struct V<T_F32> {
  static constexpr int N = 4;
  typedef float E;
  static __device__ __forceinline__ void add(float* a, uint4 x, bool first) {
    const float f[4] = {__uint_as_float(x.x), __uint_as_float(x.y), __uint_as_float(x.z), __uint_as_float(x.w)};
#pragma unroll
    for (int i = 0; i < 4; i++) a[i] = first ? f[i] : a[i] + f[i];
  }
  static __device__ __forceinline__ uint4 pack(const float* a) {
    return make_uint4(__float_as_uint(a[0]), __float_as_uint(a[1]), __float_as_uint(a[2]), __float_as_uint(a[3]));
  }
  static __device__ __forceinline__ float ld(const E* p) { return *p; }
  static __device__ __forceinline__ E st(float f) { return f; }
};
static __device__ __forceinline__ float2 toF2(__half2 h) { return __half22float2(h); }
static __device__ __forceinline__ float2 toF2(__nv_bfloat162 h) { return __bfloat1622float2(h); }
static __device__ __forceinline__ void fromF2(float x, float y, __half2* h) { *h = __floats2half2_rn(x, y); }
static __device__ __forceinline__ void fromF2(float x, float y, __nv_bfloat162* h) { *h = __floats2bfloat162_rn(x, y); }
template <typename H2, typename H> struct V16 {
  static constexpr int N = 8;
  typedef H E;
  static __device__ __forceinline__ float2 up(uint32_t w) {
    H2 h;
    memcpy(&h, &w, 4);
    return toF2(h);
  }
  static __device__ __forceinline__ uint32_t down(float x, float y) {
    H2 h;
    fromF2(x, y, &h);
    uint32_t w;
    memcpy(&w, &h, 4);
    return w;
  }
  static __device__ __forceinline__ void add(float* a, uint4 x, bool first) {
    const uint32_t w[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
      float2 f = up(w[i]);
      a[2 * i] = first ? f.x : a[2 * i] + f.x;
      a[2 * i + 1] = first ? f.y : a[2 * i + 1] + f.y;
    }
  }
  static __device__ __forceinline__ uint4 pack(const float* a) {
    return make_uint4(down(a[0], a[1]), down(a[2], a[3]), down(a[4], a[5]), down(a[6], a[7]));
  }
  static __device__ __forceinline__ float ld(const E* p) { return (float)*p; }
  static __device__ __forceinline__ E st(float f) { return (E)f; }
};
template <> struct V<T_F16> : V16<__half2, __half> {};
template <> struct V<T_BF16> : V16<__nv_bfloat162, __nv_bfloat16> {};

/* A wait's slow path: true (reported) once `peer` started this collective
 * number with another tag (its op word), or on abort or timeout. */
__device__ bool stalled(const acuSymm& a, int peer, uint64_t* start) {
  if (acuOpDiffers(a.collSeq, a.sig, a.mailboxes[peer])) {
    if (a.shared->err == ACU_ERR_NONE) {
      a.shared->errPeer = peer;
      a.shared->err = ACU_ERR_MISMATCH;
      __threadfence_system();
    }
    return true;
  }
  return !acuKeepWaiting(a.shared, a.timeoutNs, start, peer);
}

/* The barrier of block b: signal every peer's count for (b, me), then wait
 * until each peer's count for (b, peer) in my pad reaches e. False (after
 * the report) on abort, timeout or a peer that started another collective. */
__device__ bool barrier(const acuSymm& a, uint64_t e, bool release, bool check = false) {
  __syncthreads();
  const int p = threadIdx.x;
  bool ok = true;
  if (p < a.nranks && p != a.rank) {
    /* the block's loads and its stores into peers (ordered by the barrier)
     * before the count; the start barrier orders nothing */
    if (release) asm volatile("fence.acq_rel.sys;" ::: "memory");
    stVolatile(a.pads[p] + blockIdx.x * ACU_SYMM_MAX_RANKS + a.rank, e);
    const uint64_t* mine = a.pads[a.rank] + blockIdx.x * ACU_SYMM_MAX_RANKS + p;
    uint64_t start = 0;
    for (uint32_t spins = 0; ldAcquire(mine) < e; spins++)
      if ((spins & 1023) == 1023 && stalled(a, p, &start)) {
        ok = false;
        break;
      }
    /* past the first barrier the peer runs this collective (it cannot start
     * another before the second): a peer that called it with other
     * arguments shows in its op word even when neither had to wait */
    if (ok && check && acuOpDiffers(a.collSeq, a.sig, a.mailboxes[p])) ok = !stalled(a, p, &start);
  }
  return __syncthreads_and(ok);
}

/* The block's share [beg, end) of `total` units; shares start at multiples
 * of `al` (a vector's elements), so that only the last may end mid-vector. */
__device__ __forceinline__ void share(uint64_t total, uint64_t al, uint64_t* beg, uint64_t* end) {
  const uint64_t per = ((total + gridDim.x - 1) / gridDim.x + al - 1) / al * al;
  *beg = per * blockIdx.x < total ? per * blockIdx.x : total;
  *end = *beg + per < total ? *beg + per : total;
}

/* Element k of the sum over ranks of in[inOff + k], stored at outOff + k in
 * every rank's output (`all`) or mine. */
template <int TY>
__device__ __forceinline__ void reduceOne(const acuSymm& a, uint64_t inOff, uint64_t outOff, uint64_t k, bool all) {
  typedef typename V<TY>::E E;
  float s = 0;
  for (int q = 0; q < a.nranks; q++) s += V<TY>::ld((const E*)a.in[q] + inOff + k);
  for (int q = all ? 0 : a.rank; q < (all ? a.nranks : a.rank + 1); q++) ((E*)a.out[q])[outOff + k] = V<TY>::st(s);
}

/* Elements [beg, end) (beg a whole vector's start when a.vec). */
template <int TY>
__device__ void reduceRange(const acuSymm& a, uint64_t inOff, uint64_t outOff, uint64_t beg, uint64_t end, bool all) {
  typedef V<TY> W;
  typedef typename W::E E;
  constexpr int U = 2;
  const int n = a.nranks;
  uint64_t tail = beg;
  if (a.vec) {
    const uint64_t vb = beg / W::N, ve = end / W::N;
    const uint4* in[ACU_SYMM_MAX_RANKS];
#pragma unroll
    for (int q = 0; q < ACU_SYMM_MAX_RANKS; q++) in[q] = q < n ? (const uint4*)((const E*)a.in[q] + inOff) : nullptr;
    for (uint64_t v = vb + threadIdx.x; v < ve; v += (uint64_t)blockDim.x * U) {
      uint4 x[U][ACU_SYMM_MAX_RANKS];
#pragma unroll
      for (int u = 0; u < U; u++)
#pragma unroll
        for (int q = 0; q < ACU_SYMM_MAX_RANKS; q++)
          if (q < n && v + (uint64_t)u * blockDim.x < ve) x[u][q] = __ldcg(in[q] + v + (uint64_t)u * blockDim.x);
#pragma unroll
      for (int u = 0; u < U; u++) {
        const uint64_t j = v + (uint64_t)u * blockDim.x;
        if (j >= ve) continue;
        float acc[8];
#pragma unroll
        for (int q = 0; q < ACU_SYMM_MAX_RANKS; q++)
          if (q < n) W::add(acc, x[u][q], q == 0);
        const uint4 r = W::pack(acc);
#pragma unroll
        for (int q = 0; q < ACU_SYMM_MAX_RANKS; q++)
          if (q < n && (all || q == a.rank)) ((uint4*)((E*)a.out[q] + outOff))[j] = r;
      }
    }
    tail = ve * W::N > beg ? ve * W::N : beg;
  }
  for (uint64_t k = tail + threadIdx.x; k < end; k += blockDim.x) reduceOne<TY>(a, inOff, outOff, k, all);
}

/* Bytes [beg, end) of src to dst, 16 bytes a thread where the two share
 * their alignment. */
__device__ void copyBytes(char* dst, const char* src, uint64_t beg, uint64_t end) {
  uint64_t vb = end, ve = end;
  if ((((uintptr_t)dst ^ (uintptr_t)src) & 15) == 0) {
    vb = beg + ((16 - (((uintptr_t)dst + beg) & 15)) & 15);
    if (vb > end) vb = end;
    ve = vb + (end - vb) / 16 * 16;
    constexpr int U = 4;
    const uint64_t n16 = (ve - vb) / 16;
    const uint4* s4 = (const uint4*)(src + vb);
    uint4* d4 = (uint4*)(dst + vb);
    for (uint64_t v = threadIdx.x; v < n16; v += (uint64_t)blockDim.x * U) {
      uint4 x[U];
#pragma unroll
      for (int u = 0; u < U; u++)
        if (v + (uint64_t)u * blockDim.x < n16) x[u] = __ldcg(s4 + v + (uint64_t)u * blockDim.x);
#pragma unroll
      for (int u = 0; u < U; u++)
        if (v + (uint64_t)u * blockDim.x < n16) d4[v + (uint64_t)u * blockDim.x] = x[u];
    }
  }
  for (uint64_t k = beg + threadIdx.x; k < vb; k += blockDim.x) dst[k] = src[k];
  for (uint64_t k = ve + threadIdx.x; k < end; k += blockDim.x) dst[k] = src[k];
}

/* Staged collectives: block b of every rank handles the same share of the
 * data, so before the first barrier block b copies into my staging area
 * what blocks b of my peers will read (all-reduce: its share of every
 * rank's chunk; reduce-scatter: its share of every rank's block), and after
 * the second it copies out what they wrote. Units: elements of es bytes
 * (all-gather: bytes, es 1). */
__device__ void stageCopy(const acuSymm& a, uint64_t es, bool in) {
  uint64_t beg, end;
  const uint64_t al = a.vec ? 16 / es : 1;
  char* stage = a.in[a.rank];
  if (a.algo == ACU_SYMM_ST_AG) {
    share(a.count, a.vec ? 16 : 1, &beg, &end);
    copyBytes(stage, a.uin, beg, end);
    return;
  }
  for (int q = 0; q < a.nranks; q++) {
    uint64_t c0, len;
    if (a.algo == ACU_SYMM_ST_AR) {
      c0 = a.chunk * q < a.count ? a.chunk * q : a.count;
      len = (c0 + a.chunk < a.count ? c0 + a.chunk : a.count) - c0;
    } else { /* reduce-scatter: rank q's block of my input */
      c0 = a.count * q;
      len = a.count;
    }
    share(len, al, &beg, &end);
    if (in) copyBytes(stage, a.uin, (c0 + beg) * es, (c0 + end) * es);
    else copyBytes(a.uout, stage, (c0 + beg) * es, (c0 + end) * es);
  }
}

/* Staged all-gather: every rank's staged input into my output. */
__device__ void stagedGather(const acuSymm& a) {
  uint64_t beg, end;
  share(a.count, a.vec ? 16 : 1, &beg, &end);
  for (int i = 0; i < a.nranks; i++) {
    const int q = (a.rank + i) % a.nranks; /* start at my own: no two ranks read one peer at once */
    copyBytes(a.uout + a.count * q, q == a.rank ? a.uin : a.in[q], beg, end);
  }
}

template <int TY>
__device__ void reduceAlgo(const acuSymm& a) {
  uint64_t beg, end;
  const uint64_t al = a.vec ? V<TY>::N : 1;
  if (a.algo == ACU_SYMM_AR1) {
    share(a.count, al, &beg, &end);
    reduceRange<TY>(a, 0, 0, beg, end, false);
  } else if (a.algo == ACU_SYMM_AR2 || a.algo == ACU_SYMM_ST_AR) {
    const uint64_t c0 = a.chunk * a.rank < a.count ? a.chunk * a.rank : a.count;
    const uint64_t c1 = c0 + a.chunk < a.count ? c0 + a.chunk : a.count;
    share(c1 - c0, al, &beg, &end);
    reduceRange<TY>(a, c0, c0, beg, end, true);
  } else { /* reduce-scatter (ST_RS: out[rank] is my own output): my block of every input into my output */
    share(a.count, al, &beg, &end);
    reduceRange<TY>(a, a.count * a.rank, 0, beg, end, false);
  }
}

/* All-gather: my input's bytes into every rank's output at rank * count. */
__device__ void gatherPush(const acuSymm& a) {
  uint64_t beg, end;
  share(a.count, a.vec ? 16 : 1, &beg, &end); /* bytes */
  const int n = a.nranks;
  const uint64_t off = a.count * a.rank;
  const char* src = (const char*)a.in[a.rank];
  uint64_t tail = beg;
  if (a.vec) {
    constexpr int U = 4;
    const uint64_t vb = beg / 16, ve = end / 16;
    for (uint64_t v = vb + threadIdx.x; v < ve; v += (uint64_t)blockDim.x * U) {
      uint4 x[U];
#pragma unroll
      for (int u = 0; u < U; u++)
        if (v + (uint64_t)u * blockDim.x < ve) x[u] = ((const uint4*)src)[v + (uint64_t)u * blockDim.x];
#pragma unroll
      for (int u = 0; u < U; u++)
#pragma unroll
        for (int q = 0; q < ACU_SYMM_MAX_RANKS; q++)
          if (q < n && v + (uint64_t)u * blockDim.x < ve) ((uint4*)(a.out[q] + off))[v + (uint64_t)u * blockDim.x] = x[u];
    }
    tail = ve * 16 > beg ? ve * 16 : beg;
  }
  for (uint64_t k = tail + threadIdx.x; k < end; k += blockDim.x)
    for (int q = 0; q < n; q++) a.out[q][off + k] = src[k];
}

/* ---- LL: small collectives without barriers ------------------------------
 * Rank r stores each 8 bytes its peer p needs as a 16-byte line {data, flag,
 * data, flag} into p's LL area (block b, parity, source r), in one store,
 * and polls its own area for its peers' lines. The flag is the block's LL
 * count + 1, so lines of an earlier use never match. A parity is stored
 * into again only two uses later: by then this rank has read the peer's
 * lines of the use in between, which the peer stored after it had read the
 * older ones. Each thread reads what it stores, so no block ever waits at a
 * barrier, and there is no fence. */
__shared__ int sStop;

template <int TY> struct P; /* 8 bytes as floats */
template <> struct P<T_F32> {
  static __device__ __forceinline__ void add(float* a, uint2 x, bool first) {
    a[0] = first ? __uint_as_float(x.x) : a[0] + __uint_as_float(x.x);
    a[1] = first ? __uint_as_float(x.y) : a[1] + __uint_as_float(x.y);
  }
  static __device__ __forceinline__ uint2 pack(const float* a) {
    return make_uint2(__float_as_uint(a[0]), __float_as_uint(a[1]));
  }
};
template <class W> struct P16 {
  static __device__ __forceinline__ void add(float* a, uint2 x, bool first) {
    const float2 f = W::up(x.x), g = W::up(x.y);
    a[0] = first ? f.x : a[0] + f.x;
    a[1] = first ? f.y : a[1] + f.y;
    a[2] = first ? g.x : a[2] + g.x;
    a[3] = first ? g.y : a[3] + g.y;
  }
  static __device__ __forceinline__ uint2 pack(const float* a) { return make_uint2(W::down(a[0], a[1]), W::down(a[2], a[3])); }
};
template <> struct P<T_F16> : P16<V<T_F16>> {};
template <> struct P<T_BF16> : P16<V<T_BF16>> {};

/* Bytes of data line i carries (the last may carry fewer than 8). */
__device__ __forceinline__ int lineLen(uint64_t bytes, uint64_t i) {
  return bytes - i * 8 < 8 ? (int)(bytes - i * 8) : 8;
}
__device__ __forceinline__ uint2 ld8(const char* p, int len) {
  uint2 v = make_uint2(0, 0);
  if (len == 8 && ((uintptr_t)p & 7) == 0) return *(const uint2*)p;
  memcpy(&v, p, len);
  return v;
}
__device__ __forceinline__ void st8(char* p, uint2 v, int len) {
  if (len == 8 && ((uintptr_t)p & 7) == 0) *(uint2*)p = v;
  else memcpy(p, &v, len);
}
/* Line `i` of block b's area for (parity, source) in `owner`'s segment. */
__device__ __forceinline__ uint4* llLine(const acuSymm& a, int owner, uint32_t flag, int src, uint64_t i) {
  uint4* base = (uint4*)((char*)a.pads[owner] + ACU_SYMM_PAD_BYTES);
  return base + ((uint64_t)(blockIdx.x * 2 + (flag & 1)) * ACU_SYMM_MAX_RANKS + src) * ACU_SYMM_LL_LINES + i;
}
__device__ __forceinline__ void llPut(uint4* p, uint2 d, uint32_t flag) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(d.x), "r"(flag), "r"(d.y), "r"(flag)
               : "memory");
}
/* Poll line p until it carries `flag`. False on another thread's stop, or
 * once stall(&start) (its slow path, every 1024 spins) is true. */
template <class Stall>
__device__ bool llPoll(const uint4* p, uint32_t flag, uint2* d, Stall stall) {
  uint64_t start = 0;
  for (uint32_t spins = 0;; spins++) {
    uint4 v;
    asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p)
                 : "memory");
    if (v.y == flag && v.w == flag) {
      *d = make_uint2(v.x, v.z);
      return true;
    }
    if ((spins & 1023) != 1023) continue;
    if (*(volatile int*)&sStop) return false;
    if (stall(&start)) {
      sStop = 1;
      return false;
    }
  }
}
/* My line from `src`. False on abort, timeout, a peer in another
 * collective (reported) or another thread's stop. */
__device__ bool llGet(const acuSymm& a, uint32_t flag, int src, uint64_t i, uint2* d) {
  return llPoll(llLine(a, a.rank, flag, src, i), flag, d, [&](uint64_t* st) { return stalled(a, src, st); });
}

/* Rooted LL collectives send lines one way, so no wait of the sender shows
 * that a receiver read the lines of the use before last from the area
 * parity it is about to store into: the sender (block b) waits until each
 * receiver (`only`, or every peer when -1) started block b of the previous
 * LL collective (its LL epoch, in its segment), which it does only after it
 * finished the one before. Usually true at once; false (reported) on abort,
 * timeout or a peer in another collective. */
__device__ bool llReceiversFree(const acuSymm& a, uint32_t flag, int only) {
  bool ok = true;
  const int p = threadIdx.x;
  if (p < a.nranks && p != a.rank && (only < 0 || p == only)) {
    const volatile uint64_t* e = a.pads[p] + ACU_SYMM_MAX_BLOCKS * ACU_SYMM_MAX_RANKS + ACU_SYMM_MAX_BLOCKS + blockIdx.x;
    uint64_t start = 0;
    for (uint32_t spins = 0; (int32_t)((uint32_t)*e - (flag - 1)) < 0; spins++)
      if ((spins & 1023) == 1023 && stalled(a, p, &start)) {
        ok = false;
        break;
      }
  }
  return __syncthreads_and(ok);
}

/* Reductions: all-reduce and reduce-scatter (every rank stores its lines
 * into every peer's area, reduce-scatter block p to peer p, and adds what
 * arrives), reduce (the others store into the root's area; the root adds).
 * Every rank adds the inputs in rank order, so results are bit-identical. */
template <int TY>
__device__ void llReduce(const acuSymm& a, uint32_t flag, uint64_t lb, uint64_t le, uint64_t bytes) {
  const int n = a.nranks, r = a.rank;
  const bool rs = a.algo == ACU_SYMM_LL_RS, red = a.algo == ACU_SYMM_LL_RED;
  if (red && r != a.root && !llReceiversFree(a, flag, a.root)) return;
  const char* in = a.in[r];
  for (uint64_t i = lb + threadIdx.x; i < le; i += blockDim.x) {
    const int len = lineLen(bytes, i);
    for (int p = 0; p < n; p++)
      if (p != r && (!red || p == a.root))
        llPut(llLine(a, p, flag, r, i - lb), ld8(in + (rs ? bytes * p : 0) + i * 8, len), flag);
    if (red && r != a.root) continue;
    float acc[4];
    for (int q = 0; q < n; q++) {
      uint2 x;
      if (q == r) x = ld8(in + (rs ? bytes * r : 0) + i * 8, len);
      else if (!llGet(a, flag, q, i - lb, &x)) return;
      P<TY>::add(acc, x, q == 0);
    }
    st8(a.out[r] + i * 8, P<TY>::pack(acc), len);
  }
}

/* Two-shot all-reduce: the vector's lines fall into n chunks of C lines,
 * chunk q owned by rank q, and block b takes lines [ob, oe) of every chunk
 * (slot line j - ob). Phase 1 (flag): my lines of chunk p into p's area;
 * then my chunk's lines: the n inputs added in rank order (bit-identical
 * everywhere), stored, and the sum into every peer's area (flag + 1, the
 * other parity); then the peers' sums into my output. A block reads
 * phase-1 lines only for the lines whose sums it then sends, so a peer
 * that has every sum of this block has had every phase-1 line read: the
 * parity argument of the one-shot kernels holds with two flags a launch.
 * A thread reads every input line of its j before writing any output line
 * of it, so the input may be the output. */
template <int TY>
__device__ void llReduce2(const acuSymm& a, uint32_t flag, uint64_t bytes) {
  const int n = a.nranks, r = a.rank;
  const uint64_t L = (bytes + 7) / 8, C = (L + n - 1) / n, per = (C + gridDim.x - 1) / gridDim.x;
  const uint64_t ob = per * blockIdx.x < C ? per * blockIdx.x : C, oe = ob + per < C ? ob + per : C;
  const char* in = a.in[r];
  char* out = a.out[r];
  for (uint64_t j = ob + threadIdx.x; j < oe; j += blockDim.x)
    for (int p = 0; p < n; p++) {
      const uint64_t g = (uint64_t)p * C + j;
      if (p != r && g < L) llPut(llLine(a, p, flag, r, j - ob), ld8(in + g * 8, lineLen(bytes, g)), flag);
    }
  for (uint64_t j = ob + threadIdx.x; j < oe; j += blockDim.x) {
    const uint64_t g = (uint64_t)r * C + j;
    if (g >= L) break;
    const int len = lineLen(bytes, g);
    float acc[4];
    for (int q = 0; q < n; q++) {
      uint2 x;
      if (q == r) x = ld8(in + g * 8, len);
      else if (!llGet(a, flag, q, j - ob, &x)) return;
      P<TY>::add(acc, x, q == 0);
    }
    const uint2 sum = P<TY>::pack(acc);
    st8(out + g * 8, sum, len);
    for (int p = 0; p < n; p++)
      if (p != r) llPut(llLine(a, p, flag + 1, r, j - ob), sum, flag + 1);
  }
  for (uint64_t j = ob + threadIdx.x; j < oe; j += blockDim.x)
    for (int q = 0; q < n; q++) {
      const uint64_t g = (uint64_t)q * C + j;
      uint2 x;
      if (q == r || g >= L) continue;
      if (!llGet(a, flag + 1, q, j - ob, &x)) return;
      st8(out + g * 8, x, lineLen(bytes, g));
    }
}

__device__ void llGather(const acuSymm& a, uint32_t flag, uint64_t lb, uint64_t le, uint64_t bytes) {
  const int n = a.nranks, r = a.rank;
  char* out = a.out[r];
  for (uint64_t i = lb + threadIdx.x; i < le; i += blockDim.x) {
    const int len = lineLen(bytes, i);
    const uint2 mine = ld8(a.in[r] + i * 8, len);
    for (int p = 0; p < n; p++)
      if (p != r) llPut(llLine(a, p, flag, r, i - lb), mine, flag);
    st8(out + bytes * r + i * 8, mine, len);
    for (int q = 0; q < n; q++) {
      uint2 x;
      if (q == r) continue;
      if (!llGet(a, flag, q, i - lb, &x)) return;
      st8(out + bytes * q + i * 8, x, len);
    }
  }
}

/* All-to-all: block p of my input goes to peer p's area, block r (mine)
 * straight into my output, and what arrives from peer q into block q of my
 * output. A thread loads line i of every block before it stores line i of
 * any, so the same buffer may be input and output. Every rank stores into
 * and reads from every peer, as in all-gather: the parity argument above
 * holds without llReceiversFree. */
__device__ void llAlltoall(const acuSymm& a, uint32_t flag, uint64_t lb, uint64_t le, uint64_t bytes) {
  const int n = a.nranks, r = a.rank;
  const char* in = a.in[r];
  char* out = a.out[r];
  for (uint64_t i = lb + threadIdx.x; i < le; i += blockDim.x) {
    const int len = lineLen(bytes, i);
    for (int p = 0; p < n; p++)
      if (p != r) llPut(llLine(a, p, flag, r, i - lb), ld8(in + bytes * p + i * 8, len), flag);
    if (in != out) st8(out + bytes * r + i * 8, ld8(in + bytes * r + i * 8, len), len);
    for (int q = 0; q < n; q++) {
      uint2 x;
      if (q == r) continue;
      if (!llGet(a, flag, q, i - lb, &x)) return;
      st8(out + bytes * q + i * 8, x, len);
    }
  }
}

/* Broadcast: the root stores its lines into every peer's area (and its
 * output); the others poll theirs. */
__device__ void llBcast(const acuSymm& a, uint32_t flag, uint64_t lb, uint64_t le, uint64_t bytes) {
  const int n = a.nranks, r = a.rank, root = a.root;
  char* out = a.out[r];
  if (r == root && !llReceiversFree(a, flag, -1)) return;
  for (uint64_t i = lb + threadIdx.x; i < le; i += blockDim.x) {
    const int len = lineLen(bytes, i);
    uint2 x;
    if (r == root) {
      x = ld8(a.in[r] + i * 8, len);
      for (int p = 0; p < n; p++)
        if (p != r) llPut(llLine(a, p, flag, r, i - lb), x, flag);
      if (out == a.in[r]) continue;
    } else if (!llGet(a, flag, root, i - lb, &x)) {
      return;
    }
    st8(out + i * 8, x, len);
  }
}

/* a.count: the bytes each rank sends each peer (all-reduce: the vector; all-to-all: a block). */
__device__ void llAlgo(const acuSymm& a) {
  __shared__ uint32_t sFlag;
  uint64_t* epoch = a.epoch + ACU_SYMM_MAX_BLOCKS + blockIdx.x;
  if (threadIdx.x == 0) {
    sFlag = (uint32_t)*epoch + 1;
    *epoch = sFlag + (a.algo == ACU_SYMM_LL_AR2 ? 1 : 0); /* two-shot: two flags */
    sStop = 0;
  }
  __syncthreads();
  const uint64_t bytes = a.count, lines = (bytes + 7) / 8;
  if (a.algo == ACU_SYMM_LL_AR2) {
    if (a.type == T_F16) llReduce2<T_F16>(a, sFlag, bytes);
    else if (a.type == T_BF16) llReduce2<T_BF16>(a, sFlag, bytes);
    else llReduce2<T_F32>(a, sFlag, bytes);
    return;
  }
  const uint64_t per = (lines + gridDim.x - 1) / gridDim.x;
  const uint64_t lb = per * blockIdx.x < lines ? per * blockIdx.x : lines;
  const uint64_t le = lb + per < lines ? lb + per : lines;
  switch (a.algo == ACU_SYMM_LL_AG ? -1 : a.algo == ACU_SYMM_LL_BC ? -2 : a.algo == ACU_SYMM_LL_A2A ? -3 : (int)a.type) {
    case -1: llGather(a, sFlag, lb, le, bytes); break;
    case -2: llBcast(a, sFlag, lb, le, bytes); break;
    case -3: llAlltoall(a, sFlag, lb, le, bytes); break;
    case T_F16: llReduce<T_F16>(a, sFlag, lb, le, bytes); break;
    case T_BF16: llReduce<T_BF16>(a, sFlag, lb, le, bytes); break;
    default: llReduce<T_F32>(a, sFlag, lb, le, bytes); break;
  }
}

__global__ void __launch_bounds__(ACU_THREADS, 1) symmKernel(const __grid_constant__ acuSymm a) {
  if (threadIdx.x == 0 && a.collSeq) stVolatile(a.opWord, (uint64_t)a.collSeq << 32 | a.sig);
  if (a.algo >= ACU_SYMM_LL_AR) {
    llAlgo(a);
    return;
  }
  __shared__ uint64_t e0;
  if (threadIdx.x == 0) e0 = a.epoch[blockIdx.x];
  __syncthreads();
  const bool staged = a.algo >= ACU_SYMM_ST_AR && a.algo <= ACU_SYMM_ST_RS;
  const uint64_t es = a.algo == ACU_SYMM_ST_AG ? 1 : a.type == T_F32 ? 4 : 2;
  if (staged) stageCopy(a, es, true);
  /* (the staged copies must be visible to the peers: release) */
  if (!barrier(a, e0 + 1, staged, true)) return;
  switch (a.algo == ACU_SYMM_AG ? -1 : a.algo == ACU_SYMM_ST_AG ? -2 : (int)a.type) {
    case -1: gatherPush(a); break;
    case -2: stagedGather(a); break;
    case T_F16: reduceAlgo<T_F16>(a); break;
    case T_BF16: reduceAlgo<T_BF16>(a); break;
    default: reduceAlgo<T_F32>(a); break;
  }
  if (!barrier(a, e0 + 2, true)) return;
  if (a.algo == ACU_SYMM_ST_AR) stageCopy(a, es, false);
  if (threadIdx.x == 0) a.epoch[blockIdx.x] = e0 + 2;
}

/* ---- send/recv: LL lines into the receiver's p2p area ---------------------
 * (cuda_exec.h, "Send/recv on one host"). Each op has blocks of its own, so
 * that the group's transfers progress together as NCCL's do: a send block
 * waits only until the receiver freed the message two before on that pair
 * (an earlier group's, unless a group sends more than two to one peer); a
 * receive block polls its lines. The message numbers are read at the start
 * and advanced by the last block to finish (a ticket): all blocks read them
 * before, and the next kernel on the stream after. */
__shared__ uint64_t sUse;

__device__ void p2pReport(const acuP2p& a, uint32_t err, int peer) {
  if (a.shared->err == ACU_ERR_NONE) {
    a.shared->errPeer = peer;
    a.shared->err = err;
    __threadfence_system();
  }
}

/* A p2p wait's slow path: true (reported) on abort, timeout, or a peer's
 * poison in my mailbox (a rank that found a mismatch). */
__device__ bool p2pStalled(const acuP2p& a, int peer, uint64_t* start) {
  const uint64_t m = *(volatile const uint64_t*)a.mailbox;
  if (m & ACU_POISON) {
    p2pReport(a, ACU_ERR_POISONED, (int)(uint32_t)m);
    return true;
  }
  return !acuKeepWaiting(a.shared, a.timeoutNs, start, peer);
}

/* Poll line p until it carries `flag`; false on a stop (reported). `fifo`
 * (a header's wait, when the group receives nothing else from the peer):
 * the peer's FIFO to me; a slot posted there (simple: its tail, LL: the
 * first line's flag) while my header is still missing means the peer sent
 * this message through the FIFO: its size differs across
 * ANYCCL_CUDA_SYMM_P2P (a later message of the peer's is posted only after
 * this one's lines, so the header is read again first). The peer's head
 * is poisoned then, as a stopping FIFO lane does. */
__device__ bool p2pPoll(const acuP2p& a, const uint4* p, uint32_t flag, int peer, uint2* d, const acuConn* fifo) {
  return llPoll(p, flag, d, [&](uint64_t* st) {
    if (fifo) {
      const uint64_t step = fifo->step, tail = ldAcquire(fifo->tail);
      if (tail & ACU_POISON) {
        p2pReport(a, ACU_ERR_POISONED, (int)(uint32_t)tail);
        return true;
      }
      const volatile uint32_t* line = (const volatile uint32_t*)(fifo->llbuf + (step % fifo->nslots) * (uint64_t)fifo->llSlotBytes);
      const volatile uint32_t* hd = (const volatile uint32_t*)p;
      if ((tail > step || line[1] == (uint32_t)(step + 1)) && !(hd[1] == flag && hd[3] == flag)) {
        p2pReport(a, ACU_ERR_MISMATCH, peer);
        stVolatile(fifo->head, ACU_POISON | (uint32_t)a.rank); /* a sender waiting for room stops too */
        return true;
      }
    }
    return p2pStalled(a, peer, st);
  });
}

/* Lines [lb, le) of the op's data (line 0 of the area is the header). */
__device__ void p2pSend(const acuP2p& a, const acuP2pOp& o, uint64_t use, uint64_t lb, uint64_t le) {
  const uint32_t flag = (uint32_t)use;
  const int par = (int)(use & 1);
  if (threadIdx.x == 0) {
    /* the receiver freed message use - 2 of this parity (it stores it here) */
    const volatile uint64_t* freed = a.ctl + ACU_P2P_FREED + o.peer * 2 + par;
    uint64_t start = 0;
    for (uint32_t spins = 0; *freed + 2 < use; spins++)
      if ((spins & 1023) == 1023 && p2pStalled(a, o.peer, &start)) {
        sStop = 1;
        break;
      }
  }
  __syncthreads();
  if (sStop) return;
  uint4* area = (uint4*)(a.peerCtl[o.peer] + ACU_P2P_CTL_WORDS) + (uint64_t)(a.rank * 2 + par) * ACU_P2P_LINES;
  if (lb == 0 && threadIdx.x == 0) llPut(area, make_uint2(o.bytes, o.bytes), flag);
  const char* src = (const char*)o.src;
  for (uint64_t i = lb + threadIdx.x; i < le; i += blockDim.x) llPut(area + 1 + i, ld8(src + i * 8, lineLen(o.bytes, i)), flag);
}

__device__ void p2pRecv(const acuP2p& a, const acuP2pOp& o, uint64_t use, uint64_t lb, uint64_t le) {
  const uint32_t flag = (uint32_t)use;
  const int par = (int)(use & 1);
  const uint4* area = (const uint4*)(a.ctl + ACU_P2P_CTL_WORDS) + (uint64_t)(o.peer * 2 + par) * ACU_P2P_LINES;
  if (threadIdx.x == 0) {
    uint2 h;
    if (!p2pPoll(a, area, flag, o.peer, &h, (const acuConn*)o.src)) {
      sStop = 1;
    } else if (h.x != o.bytes) { /* the sender's message has another size */
      if (a.shared->err == ACU_ERR_NONE) {
        a.shared->expected = o.bytes;
        a.shared->got = h.x;
      }
      p2pReport(a, ACU_ERR_SIZE, o.peer);
      sStop = 1;
    }
  }
  __syncthreads();
  if (sStop) return;
  char* dst = (char*)o.dst;
  for (uint64_t i = lb + threadIdx.x; i < le; i += blockDim.x) {
    uint2 x;
    if (!p2pPoll(a, area + 1 + i, flag, o.peer, &x, nullptr)) break;
    st8(dst + i * 8, x, lineLen(o.bytes, i));
  }
  __syncthreads();
  if (sStop || threadIdx.x != 0) return;
  /* the last block of the message frees its parity: my loads before the store */
  uint32_t* done = (uint32_t*)(a.ctl + ACU_P2P_DONE) + o.peer * 2 + par;
  if (atomicInc(done, o.nb - 1) == (uint32_t)(o.nb - 1)) {
    asm volatile("fence.acq_rel.sys;" ::: "memory");
    stVolatile(a.peerCtl[o.peer] + ACU_P2P_FREED + a.rank * 2 + par, use);
  }
}

__global__ void __launch_bounds__(ACU_THREADS, 1) p2pKernel(const __grid_constant__ acuP2p a) {
  int j = 0;
  while (j + 1 < a.nops && a.ops[j + 1].b0 <= blockIdx.x) j++;
  const acuP2pOp& o = a.ops[j];
  const uint64_t k = blockIdx.x - o.b0;
  if (threadIdx.x == 0) {
    sStop = 0;
    if (o.kind != ACU_P2P_OP_COPY)
      sUse = *(volatile uint64_t*)(a.ctl + (o.kind == ACU_P2P_OP_SEND ? ACU_P2P_SENT : ACU_P2P_RECVD) + o.peer) + o.idx + 1;
  }
  __syncthreads();
  if (o.kind == ACU_P2P_OP_COPY) {
    const uint64_t per = ((o.bytes + o.nb - 1) / o.nb + 15) / 16 * 16;
    const uint64_t beg = per * k < o.bytes ? per * k : o.bytes, end = beg + per < o.bytes ? beg + per : o.bytes;
    copyBytes((char*)o.dst, (const char*)o.src, beg, end);
  } else {
    const uint64_t lines = (o.bytes + 7) / 8, per = (lines + o.nb - 1) / o.nb;
    const uint64_t lb = per * k < lines ? per * k : lines, le = lb + per < lines ? lb + per : lines;
    if (o.kind == ACU_P2P_OP_SEND) p2pSend(a, o, sUse, lb, le);
    else p2pRecv(a, o, sUse, lb, le);
  }
  /* every block, stopped or not: the last one advances the message numbers */
  __syncthreads();
  if (threadIdx.x != 0) return;
  __threadfence();
  uint32_t* ticket = (uint32_t*)(a.ctl + ACU_P2P_TICKET);
  if (atomicAdd(ticket, 1u) != gridDim.x - 1) return;
  *ticket = 0;
  for (int i = 0; i < a.nops; i++)
    if (a.ops[i].kind != ACU_P2P_OP_COPY)
      a.ctl[(a.ops[i].kind == ACU_P2P_OP_SEND ? ACU_P2P_SENT : ACU_P2P_RECVD) + a.ops[i].peer]++;
  __threadfence();
}

} // namespace

extern "C" int acuLaunchP2p(const struct acuP2p* a, int blocks, int threads, void* stream) {
  p2pKernel<<<dim3(blocks), dim3(threads), 0, (cudaStream_t)stream>>>(*a);
  return cudaGetLastError();
}

extern "C" int acuLaunchSymm(const struct acuSymm* a, int blocks, int threads, void* stream) {
  symmKernel<<<dim3(blocks), dim3(threads), 0, (cudaStream_t)stream>>>(*a);
  return cudaGetLastError();
}
